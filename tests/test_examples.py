"""Every example environment: synthesized once with cdk-nag on, then linted and snapshotted.

One synthesis serves the whole module (it takes seconds); the checks are:
cdk-nag passes with every acknowledgement carrying a reason, cfn-lint finds
nothing, and each stack matches its snapshot with volatile values masked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from syrupy.assertion import SnapshotAssertion

from mlcluster.app import build_app
from mlcluster.config import load_environment
from mlcluster.pcluster.placeholders import check_ready_config
from tests.pcluster.pcluster_support import run_schema_check
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL, cfn_lint, write_env

#: cfn-lint rules ignored everywhere, each with its reason. Empty: none needed.
CFN_LINT_IGNORES: dict[str, str] = {}


@pytest.fixture(scope="module")
def outdir(examples_outdir: Path) -> Path:
    return examples_outdir


@pytest.fixture(scope="module")
def templates(example_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return example_templates


def test_every_example_has_its_stacks(templates: dict[str, dict[str, Any]]) -> None:
    for name in EXAMPLES:
        assert f"{name}/Network" in templates


def test_acknowledgements_name_a_finding_and_a_reason(outdir: Path) -> None:
    seen = 0
    for metadata in outdir.glob("assembly-*/*.metadata.json"):
        for entries in json.loads(metadata.read_text()).values():
            for entry in entries:
                if entry["type"] != "aws:cdk:acknowledged-rules":
                    continue
                for finding, reason in entry["data"].items():
                    seen += 1
                    assert re.fullmatch(r"(Annotation::)?[A-Za-z0-9.:@/-]+(\[[^\]]+\])?", finding), finding
                    assert len(reason) > 40, f"{finding}: reason too short to be specific: {reason!r}"
    assert seen > 0


def test_unacknowledged_finding_fails_synth(tmp_path: Path) -> None:
    write_env(tmp_path / "envs", "nagged", MINIMAL)
    app, stages = build_app(tmp_path / "envs", outdir=str(tmp_path / "out"))
    s3.CfnBucket(stages[0].network_stack, "Leaky")  # no logs, no TLS-only policy
    with pytest.raises(RuntimeError, match=r"(?s)ValidationFailed: .*AwsSolutions-S1"):
        app.synth()


@pytest.mark.parametrize(("where", "fails"), [("plain", False), ("strict", True)])
def test_extra_pack_judges_only_its_own_environment(tmp_path: Path, where: str, fails: bool) -> None:
    write_env(tmp_path / "envs", "plain", MINIMAL)
    strict = {**MINIMAL, "compliance": {"packs": ["hipaa-security"]}, "storage": {"data_bucket": {"encryption": "kms"}}}
    write_env(tmp_path / "envs", "strict", strict)
    app, stages = build_app(tmp_path / "envs", outdir=str(tmp_path / "out"))
    stage = next(s for s in stages if s.environment.name == where)
    # A log group without retention breaks a HIPAA rule, not an AwsSolutions one (the stage encrypts it).
    logs.CfnLogGroup(stage.network_stack, "Unencrypted")
    if fails:
        with pytest.raises(RuntimeError, match=r"HIPAA.Security-CloudWatchLogGroupRetentionPeriod"):
            app.synth()
    else:
        app.synth()


@pytest.fixture(scope="module")
def cfn_lint_findings(outdir: Path) -> dict[str, list[str]]:
    """cfn-lint's findings per template file, from one run over every example's templates.

    One run lints them all, in this process (:func:`tests.support.cfn_lint`):
    cfn-lint loads its rules and the resource specifications once per test
    process instead of once per example (a second of CPU each).
    """
    files = sorted(str(p) for p in outdir.glob("assembly-*/*.template.json"))
    return cfn_lint(files, ignore=CFN_LINT_IGNORES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_cfn_lint_clean(outdir: Path, cfn_lint_findings: dict[str, list[str]], name: str) -> None:
    files = sorted(str(p) for p in (outdir / f"assembly-{name}").glob("*.template.json"))
    assert files
    assert {f: cfn_lint_findings[f] for f in files} == {f: [] for f in files}


VOLATILE = [
    (re.compile(r"[0-9a-f]{64}(\.zip|\.json)?"), "<asset-hash>"),
    (re.compile(r"cdk-hnb659fds-[a-z-]+-\$\{AWS::AccountId\}-\$\{AWS::Region\}"), "<bootstrap-resource>"),
]


def mask(template: dict[str, Any]) -> dict[str, Any]:
    """Drop CDK version data and the bootstrap rule; replace asset hashes."""
    clean = json.loads(json.dumps(template))
    clean.get("Resources", {}).pop("CDKMetadata", None)
    clean.get("Conditions", {}).pop("CDKMetadataAvailable", None)
    clean.get("Parameters", {}).pop("BootstrapVersion", None)
    clean.get("Rules", {}).pop("CheckBootstrapVersion", None)
    for key in ("Conditions", "Parameters", "Rules"):
        if key in clean and not clean[key]:
            del clean[key]
    text = json.dumps(clean, indent=1, sort_keys=True)
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return json.loads(text)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", EXAMPLES)
def test_snapshot(templates: dict[str, dict[str, Any]], name: str, snapshot: SnapshotAssertion) -> None:
    stacks = {path: mask(t) for path, t in sorted(templates.items()) if path.startswith(f"{name}/")}
    assert stacks == snapshot


def test_mask_removes_volatile_values() -> None:
    raw = {
        "Resources": {"CDKMetadata": {"Type": "AWS::CDK::Metadata"}, "A": {"Properties": {"Key": "ab" * 32 + ".zip"}}},
        "Parameters": {"BootstrapVersion": {}},
        "Rules": {"CheckBootstrapVersion": {}},
    }
    assert mask(raw) == {"Resources": {"A": {"Properties": {"Key": "<asset-hash>"}}}}


def test_stage_names_follow_files(outdir: Path) -> None:
    """The shared assembly is ``build_app(ENVIRONMENTS)``'s: one stage per file, named after it."""
    assert sorted(p.name.removeprefix("assembly-") for p in outdir.glob("assembly-*")) == EXAMPLES


PCLUSTER_EXAMPLES = [
    name for name in EXAMPLES if load_environment(ENVIRONMENTS / f"{name}.yaml").config.cluster.backend == "pcluster"
]


def test_pcluster_examples_exist() -> None:
    assert {"p5", "p4de", "trn1"} <= set(PCLUSTER_EXAMPLES)


@pytest.mark.parametrize("name", PCLUSTER_EXAMPLES)
def test_pcluster_example_loads_in_parallelclusters_own_schema(
    templates: dict[str, dict[str, Any]], name: str, tmp_path: Path
) -> None:
    """The configuration as deployed (tokens replaced by realistic ids) passes ParallelCluster 3.16.1's schema."""
    (cluster,) = [
        r for r in templates[f"{name}/Cluster"]["Resources"].values() if r["Type"] == "Custom::PclusterCluster"
    ]
    config = check_ready_config(cluster["Properties"]["ClusterConfiguration"])
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    result = run_schema_check([path], cluster_name=cluster["Properties"]["ClusterName"])
    assert result[str(path)] == ["OK"], result


def test_hyperpod_example_has_roles_bucket_scripts_and_native_cluster(templates: dict[str, dict[str, Any]]) -> None:
    resources = templates["hyperpod/Cluster"]["Resources"].values()
    types = {r["Type"] for r in resources}
    assert {"AWS::SageMaker::Cluster", "Custom::HyperPodPreflight", "Custom::HyperPodNodesReady"} <= types
    assert "Custom::CDKBucketDeployment" in types
    assert not {t for t in types if t.startswith(("AWS::CloudFormation::Wait", "AWS::StepFunctions"))}
    roles = [
        r
        for r in resources
        if r["Type"] == "AWS::IAM::Role"
        and r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        == {"Service": "sagemaker.amazonaws.com"}
    ]
    assert len(roles) == 3  # controller, login, one worker group


#: The types that hold an environment's data in its data and observability stacks.
DATA_TYPES = (
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::S3::Bucket",
    "AWS::Backup::BackupVault",
    "AWS::APS::Workspace",
)


def test_retained_data_is_deleted_when_its_create_rolls_back(templates: dict[str, dict[str, Any]]) -> None:
    """Issue 33, finding 8: RetainExceptOnCreate on data an environment retains; scripts go with their stack.

    A failed first deploy (or a replacement whose update rolls back) leaves no empty file system
    billing; the HyperPod lifecycle bucket, whose name is fixed, is emptied and deleted with its
    stack, so the next deploy can make it again instead of failing with "already exists".
    """
    for name in ("p5/Storage", "p5/DataRepository", "prod/Storage", "hyperpod/Observability"):
        kept = [r["DeletionPolicy"] for r in templates[name]["Resources"].values() if r["Type"] in DATA_TYPES]
        assert kept and set(kept) == {"RetainExceptOnCreate"}, name
    cluster = templates["hyperpod/Cluster"]["Resources"]
    buckets = {lid: r for lid, r in cluster.items() if r["Type"] == "AWS::S3::Bucket"}
    lifecycle = [r for lid, r in buckets.items() if lid.startswith("Lifecycle")]
    assert any("BucketName" in r["Properties"] for r in lifecycle)  # the fixed name: mlc-lifecycle-...
    assert {r["DeletionPolicy"] for r in lifecycle} == {"Delete"}
    # The patch backups (issue 24) hold the controller's state and accounting during a patch: data, kept.
    backups = [r for lid, r in buckets.items() if lid.startswith("PatchBackups")]
    assert len(backups) == 2 and {r["DeletionPolicy"] for r in backups} == {"RetainExceptOnCreate"}
    assert "Custom::S3AutoDeleteObjects" in {r["Type"] for r in cluster.values()}
    # The upload function's history stays, as the environment keeps its logs.
    (upload_logs,) = [
        r for lid, r in cluster.items() if r["Type"] == "AWS::Logs::LogGroup" and lid.startswith("LifecycleUploadLogs")
    ]
    assert upload_logs["DeletionPolicy"] == "RetainExceptOnCreate"


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_stack_carries_the_environment_tag(outdir: Path, templates: dict[str, dict[str, Any]], name: str) -> None:
    """cdk.json sets @aws-cdk/core:explicitStackTags: only a Stack's own tags reach CloudFormation (the manifest's
    ``tags``, which 'cdk deploy' passes to CreateStack), and 'mlcluster status' finds orphans by this tag."""
    manifest = json.loads((outdir / f"assembly-{name}" / "manifest.json").read_text(encoding="utf-8"))
    stacks = {
        key: artifact
        for key, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }
    assert stacks
    for key, artifact in stacks.items():
        assert artifact["properties"].get("tags", {}).get("mlcluster:environment") == name, key
    clusters = [
        r
        for r in templates.get(f"{name}/Cluster", {}).get("Resources", {}).values()
        if r["Type"] == "Custom::PclusterCluster"
    ]
    for cluster in clusters:
        tags = cluster["Properties"]["ClusterConfiguration"]["Tags"]
        assert {"Key": "mlcluster:environment", "Value": name} in tags


def test_kms_keys_are_plainly_retained(templates: dict[str, dict[str, Any]]) -> None:
    """A key is never RetainExceptOnCreate: a rolled-back create would schedule deletion of a key that
    retained data may already be encrypted under (the file systems, buckets and workspaces may be)."""
    keys = {
        f"{stack}/{lid}": resource.get("DeletionPolicy")
        for stack, template in templates.items()
        for lid, resource in template.get("Resources", {}).items()
        if resource["Type"] == "AWS::KMS::Key"
    }
    assert keys and "Retain" in keys.values()
    assert {key: policy for key, policy in keys.items() if policy not in ("Retain", "Delete")} == {}
