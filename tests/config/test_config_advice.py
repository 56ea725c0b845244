"""Warnings for legal but unwise settings: each rule fires on its file, not at the edge, and prints once."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlcluster.app
import mlcluster.stacks.stage
from mlcluster.config.project import check_environments
from tests.config.cases import NET, hyperpod, pcluster

WARN = [
    (
        "public vpc range",
        "network: {availability_zone: us-east-1a, cidr: 11.0.0.0/16}\n",
        "network.cidr: 11.0.0.0/16 is outside the private address space (10.0.0.0/8, 172.16.0.0/12, "
        "192.168.0.0/16); the VPC then hides the public addresses in it from every node",
    ),
    (
        "public secondary range",
        "network: {availability_zone: us-east-1a, secondary_cidr: 100.64.0.0/16}\n",
        "network.secondary_cidr: 100.64.0.0/16 is outside the private address space (10.0.0.0/8, 172.16.0.0/12, "
        "192.168.0.0/16); the VPC then hides the public addresses in it from every node",
    ),
    (
        "no way in",
        pcluster(head="{subnet: public, ssm: false}"),
        "cluster.pcluster.head_node: ssm is false and there is no key_name, so no operator can log in to the "
        "cluster from anywhere (no Session Manager, no SSH key); set ssm: true or give a key pair",
    ),
    (
        "destroy with a compliance pack",
        NET + "retention: {on_delete: destroy}\ncompliance: {packs: [hipaa-security]}\n",
        "retention.on_delete: destroy deletes the data bucket, file systems and logs with the stacks, while "
        "compliance.packs (hipaa-security) asks for an audited environment; use retain",
    ),
    (
        "sagemaker in the bucket name",
        NET + "storage: {data_bucket: {name: team-sagemaker-data}}\n",
        "storage.data_bucket.name: 'team-sagemaker-data' contains 'sagemaker'; AWS managed policies such as "
        "AmazonSageMakerFullAccess grant s3:PutObject on every such bucket, so roles outside this environment "
        "could write to it; choose a name without it",
    ),
    (
        "one nat gateway for two zones",
        "network: {availability_zone: us-east-1a, extra_zones: [{availability_zone: us-east-1b}]}\n",
        "network.nat_gateways: one NAT gateway serves private subnets in 2 zones; traffic from the others crosses "
        "zones (charged) and stops when the primary zone fails; use per_zone",
    ),
    (
        "cluster name without a cluster",
        NET + "cluster: {name: train}\n",
        "cluster.name: 'train' is set but cluster.backend is none, so nothing uses it",
    ),
    (
        "a DRA exporting deletions",
        NET + "storage: {lustre: {data_repository_associations: "
        "[{file_system_path: /data, auto_export_events: [NEW, CHANGED, DELETED]}]}}\n",
        "storage.lustre.data_repository_associations[0].auto_export_events: DELETED makes a file removed under "
        "/fsx/data ('rm -rf' included) delete its object in the bucket too; the bucket keeps the deleted version "
        "(versioning) until someone deletes it and it has no AWS Backup plan (storage.data_bucket.backup). Leave "
        "DELETED out if deletions on the file system must not reach the bucket",
    ),
    (
        "a DRA exporting deletions into an expiring, backed-up bucket",
        NET + "storage:\n  lustre: {data_repository_associations: [{auto_export_events: [DELETED]}]}\n"
        "  data_bucket: {noncurrent_version_expiration_days: 90, backup: {retention_days: 35}}\n",
        "storage.lustre.data_repository_associations[0].auto_export_events: DELETED makes a file removed under "
        "/fsx/data ('rm -rf' included) delete its object in the bucket too; the bucket keeps the deleted version "
        "90 days and its AWS Backup recovery points keep it 35 days. Leave DELETED out if deletions on the file "
        "system must not reach the bucket",
    ),
    (
        "/home on the ParallelCluster head node (its own volume switched off)",
        pcluster().replace("    queues:", "    shared_storage: {home_volume: {enabled: false}}\n    queues:"),
        "cluster.pcluster.shared_storage.home_volume.enabled: false and home_on_openzfs: false, so /home lives on "
        "the head node's root volume: 'npx cdk destroy dev/Cluster', a new cluster (a new cluster.name, a "
        "ParallelCluster version or head node change) or a lost head node deletes every user's home, and nothing "
        "copies it. Remove home_volume.enabled: false (a retained EBS volume at /home), or add storage.openzfs and "
        "set home_on_openzfs: true",
    ),
    (
        "HyperPod accounting on the controller",
        hyperpod(),
        "cluster.hyperpod.lifecycle.accounting.mode: local keeps the Slurm accounting database and slurmctld's "
        "state on the controller's own volume: replacing the controller or deleting the cluster destroys the job "
        "history, and its only copy is the one 'mlcluster patch' takes around a patch. A scheduled second copy is "
        "a database outside the cluster (mode: remote)",
    ),
]

QUIET = {
    "private ranges at the edge": "network: {availability_zone: us-east-1a, cidr: 172.31.0.0/16, "
    "secondary_cidr: 192.168.0.0/16}\n",
    # /home on OpenZFS: no head-node warning either.
    "ssm off with a key pair": pcluster(
        head="{subnet: public, ssm: false, key_name: ops, ssh_allowed_cidr: 203.0.113.0/24}"
    ).replace("    queues:", "    shared_storage: {home_on_openzfs: true}\n    queues:")
    + "storage: {openzfs: {deployment_type: SINGLE_AZ_HA_2}}\n",
    # The default: /home on a retained EBS volume of its own.
    "/home on its own volume": pcluster(),
    "destroy without packs": NET + "retention: {on_delete: destroy}\n",
    "retain with packs": NET + "compliance: {packs: [hipaa-security]}\n",
    "per-zone nat gateways": "network: {availability_zone: us-east-1a, nat_gateways: per_zone, "
    "extra_zones: [{availability_zone: us-east-1b}]}\n",
    "bucket name without the word": NET + "storage: {data_bucket: {name: team-sage-data}}\n",
    "a DRA exporting all but deletions": NET + "storage: {lustre: {data_repository_associations: "
    "[{auto_export_events: [NEW, CHANGED]}]}}\n",
    "HyperPod without accounting": hyperpod() + "    lifecycle: {accounting: {mode: none}}\n",
}


def write(tmp_path: Path, text: str, name: str = "dev") -> Path:
    directory = tmp_path / "environments"
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.yaml").write_text(text, encoding="utf-8")
    return directory


@pytest.mark.parametrize(("text", "message"), [w[1:] for w in WARN], ids=[w[0] for w in WARN])
def test_warning(tmp_path: Path, text: str, message: str) -> None:
    directory = write(tmp_path, text)
    warnings = check_environments(directory).warnings
    assert f"{directory}/dev.yaml: {message}" in warnings


@pytest.mark.parametrize("text", list(QUIET.values()), ids=list(QUIET))
def test_no_warning_at_the_edge(tmp_path: Path, text: str) -> None:
    assert check_environments(write(tmp_path, text)).warnings == []


def test_examples_warn_only_where_data_lives_on_a_node() -> None:
    """The examples are quiet but for the two places where data has no second copy by default."""
    root = Path(__file__).resolve().parents[2]
    found = sorted(
        w.split(": ", 2)[:2][0].rsplit("/", 1)[-1] + " " + w.split(": ", 2)[1]
        for w in check_environments(root / "environments").warnings
    )
    assert found == [
        "hyperpod.yaml cluster.hyperpod.lifecycle.accounting.mode",
    ]


def test_synth_prints_each_warning_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = write(tmp_path, WARN[0][1], "a")
    write(tmp_path, WARN[4][1], "b")
    built: list[str] = []
    # build_app imports the stage class once the files are valid, so the module's attribute is replaced.
    monkeypatch.setattr(mlcluster.stacks.stage, "EnvironmentStage", lambda app, env, **_: built.append(env.name))
    mlcluster.app.build_app(directory, outdir=str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert built == ["a", "b"]
    for name, message in (("a", WARN[0][2]), ("b", WARN[4][2])):
        assert err.count(f"mlcluster: warning: {directory}/{name}.yaml: {message}\n") == 1
    assert err.count("mlcluster: warning:") == 2
