"""The storage stack as composed per environment: data that outlives clusters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.app import build_app
from mlcluster.config import Environment
from mlcluster.stacks.storage import nodes_in_public_subnet
from tests.support import MINIMAL, stack_templates, write_env

DATA_TYPES = ("AWS::S3::Bucket", "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::KMS::Key")

KEEP: dict[str, Any] = {
    **MINIMAL,
    "storage": {
        "data_bucket": {"encryption": "kms"},
        "lustre": {
            "data_repository_associations": [
                {"file_system_path": "/data", "data_bucket_prefix": "datasets/"},
                {"file_system_path": "/checkpoints", "data_bucket_prefix": "checkpoints/", "auto_import_events": []},
            ]
        },
        "openzfs": {"deployment_type": "SINGLE_AZ_1", "throughput_capacity_mbps": 128},
    },
}
DESTROY: dict[str, Any] = {**MINIMAL, "retention": {"on_delete": "destroy"}}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("storage")
    write_env(tmp / "envs", "keep", KEEP)
    write_env(tmp / "envs", "scratch", DESTROY)
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


@pytest.fixture(scope="module")
def stages(outdir: Path) -> dict[str, dict[str, Any]]:
    return stack_templates(cx_api.CloudAssembly(str(outdir)))


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_bucket_and_lustre_in_the_storage_stack_dras_in_their_own(stages: dict[str, dict[str, Any]]) -> None:
    storage = stages["keep/Storage"]
    assert not of_type(storage, "AWS::FSx::DataRepositoryAssociation")
    assert len(of_type(stages["keep/DataRepository"], "AWS::FSx::DataRepositoryAssociation")) == 2
    (lustre,) = [
        r for r in of_type(storage, "AWS::FSx::FileSystem").values() if r["Properties"]["FileSystemType"] == "LUSTRE"
    ]
    assert lustre["Properties"]["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
    assert lustre["Properties"]["FileSystemTypeVersion"] == "2.15"
    zfs = [
        r for r in of_type(storage, "AWS::FSx::FileSystem").values() if r["Properties"]["FileSystemType"] == "OPENZFS"
    ]
    assert len(zfs) == 1
    assert not of_type(stages["keep/Network"], "AWS::FSx::FileSystem")


def test_file_systems_sit_in_the_network_stacks_private_subnet(stages: dict[str, dict[str, Any]]) -> None:
    for fs in of_type(stages["keep/Storage"], "AWS::FSx::FileSystem").values():
        (subnet,) = fs["Properties"]["SubnetIds"]
        assert subnet["Fn::GetStackOutput"]["StackName"] == "keep-Network"
        assert "Private1Subnet" in subnet["Fn::GetStackOutput"]["OutputName"]


def test_openzfs_exports_home_to_the_node_subnets_only(stages: dict[str, dict[str, Any]]) -> None:
    """Not the whole VPC: no cluster puts nodes in the public subnet here, so only the private subnet."""
    network = stages["keep/Network"]
    private = [
        r["Properties"]["CidrBlock"]
        for k, r in of_type(network, "AWS::EC2::Subnet").items()
        if k.startswith("NetworkPrivate")
    ]
    vpc = next(iter(of_type(network, "AWS::EC2::VPC").values()))["Properties"]["CidrBlock"]
    (zfs,) = [
        r
        for r in of_type(stages["keep/Storage"], "AWS::FSx::FileSystem").values()
        if r["Properties"]["FileSystemType"] == "OPENZFS"
    ]
    (export,) = zfs["Properties"]["OpenZFSConfiguration"]["RootVolumeConfiguration"]["NfsExports"]
    clients = [c["Clients"] for c in export["ClientConfigurations"]]
    assert clients == private
    assert vpc not in clients


def test_file_systems_have_their_own_security_groups(stages: dict[str, dict[str, Any]]) -> None:
    for fs in of_type(stages["keep/Storage"], "AWS::FSx::FileSystem").values():
        (group,) = fs["Properties"]["SecurityGroupIds"]
        assert "Fn::GetAtt" in group  # a group of the storage stack, not the nodes' imported one
    groups = of_type(stages["keep/Storage"], "AWS::EC2::SecurityGroup")
    assert len(groups) == 2


def test_dras_are_created_one_after_another(stages: dict[str, dict[str, Any]]) -> None:
    dras = of_type(stages["keep/DataRepository"], "AWS::FSx::DataRepositoryAssociation")
    ids = sorted(dras)
    # FSx takes one association at a time: one waits for the other, which waits for no association.
    waits = sorted((sorted(set(ids) & set(dras[i].get("DependsOn", []))) for i in ids), key=len)
    assert waits[0] == [] and len(waits[1]) == 1


@pytest.mark.parametrize("kind", DATA_TYPES)
def test_data_is_retained_on_delete_and_replace(stages: dict[str, dict[str, Any]], kind: str) -> None:
    found = of_type(stages["keep/Storage"], kind) | of_type(stages["keep/DataRepository"], kind)
    assert found, kind
    for logical_id, resource in found.items():
        # Kept on delete and replacement, deleted only when the create that made it rolls back; keys always kept
        # (issue 33: data written under a key in that window must stay readable).
        want = "Retain" if kind == "AWS::KMS::Key" else "RetainExceptOnCreate"
        assert resource.get("DeletionPolicy") == want, logical_id
        assert resource.get("UpdateReplacePolicy") == "Retain", logical_id


def test_destroy_only_when_the_environment_asks(stages: dict[str, dict[str, Any]]) -> None:
    for kind in ("AWS::S3::Bucket", "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation"):
        found = of_type(stages["scratch/Storage"], kind) | of_type(stages["scratch/DataRepository"], kind)
        for logical_id, resource in found.items():
            assert resource.get("DeletionPolicy") == "Delete", logical_id


def test_storage_depends_only_on_the_network(stages: dict[str, dict[str, Any]], outdir: Path) -> None:
    assembly = cx_api.CloudAssembly(str(outdir))
    (keep,) = [n.nested_assembly for n in assembly.nested_assemblies if n.nested_assembly.directory.endswith("keep")]
    storage = next(s for s in keep.stacks if s.hierarchical_id == "keep/Storage")
    ours = [d.id for d in storage.dependencies if d.id.startswith("keep") and not d.id.endswith(".assets")]
    assert ours and all("Network" in d for d in ours), ours
    reads = [v for v in _walk(stages["keep/Storage"]) if isinstance(v, dict) and "Fn::GetStackOutput" in v]
    assert reads
    assert all(r["Fn::GetStackOutput"]["StackName"] == "keep-Network" for r in reads)


def test_outputs_for_the_cluster_side(stages: dict[str, dict[str, Any]]) -> None:
    outputs = stages["keep/Storage"]["Outputs"]
    # Weak references add plain outputs (PublishOutput...) that the consumers read with Fn::GetStackOutput.
    exports = {o["Export"]["Name"] for o in outputs.values() if "Export" in o}
    assert {
        "keep-DataBucketName",
        "keep-LustreFileSystemId",
        "keep-LustreDnsName",
        "keep-LustreMountName",
        "keep-OpenZfsFileSystemId",
        "keep-OpenZfsRootVolumeId",
    } <= exports


def _walk(value: Any) -> list[Any]:
    out = [value]
    if isinstance(value, dict):
        for v in value.values():
            out += _walk(v)
    elif isinstance(value, list):
        for v in value:
            out += _walk(v)
    return out


def test_bad_storage_config_is_a_config_error(tmp_path: Path) -> None:
    from mlcluster.config import ConfigError, load_environment

    path = write_env(tmp_path, "bad", {**MINIMAL, "storage": {"lustre": {"storage_capacity_gib": 1000}}})
    with pytest.raises(ConfigError, match=r"bad.yaml: storage.lustre.storage_capacity_gib: 1000 is not valid"):
        load_environment(path)


PCLUSTER_GPU: dict[str, Any] = {
    "backend": "pcluster",
    "pcluster": {
        "queues": [{"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "efa": False}]}]
    },
}


@pytest.mark.parametrize(
    ("cluster", "public"),
    [
        ({}, False),
        (PCLUSTER_GPU, False),
        ({**PCLUSTER_GPU, "pcluster": {**PCLUSTER_GPU["pcluster"], "head_node": {"subnet": "public"}}}, True),
        ({**PCLUSTER_GPU, "pcluster": {**PCLUSTER_GPU["pcluster"], "login_nodes": {"internet_facing": True}}}, True),
        ({**PCLUSTER_GPU, "pcluster": {**PCLUSTER_GPU["pcluster"], "login_nodes": {}}}, False),
    ],
)
def test_public_subnet_is_exported_only_when_a_node_sits_there(
    make_env: Callable[..., Environment], cluster: dict[str, Any], public: bool
) -> None:
    env = make_env({**MINIMAL, **({"cluster": cluster} if cluster else {})})
    assert nodes_in_public_subnet(env) is public
