"""Compliance review: customer keys on every log group, a protected copy of prod data, every pack, checkov."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3

from mlcluster.app import build_app
from mlcluster.constructs.nag import LAMBDA, acknowledge, acknowledge_compliance, skip_checkov
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL, ROOT, write_env


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_every_log_group_of_every_example_uses_the_environment_key(
    example_templates: dict[str, dict[str, Any]],
) -> None:
    seen = 0
    for path, template in example_templates.items():
        env = path.split("/")[0]
        for logical_id, group in resources(template, "AWS::Logs::LogGroup").items():
            seen += 1
            key = group["Properties"].get("KmsKeyId")
            assert key is not None, f"{path} {logical_id} has no KmsKeyId"
            text = json.dumps(key)
            assert "EnvironmentKey" in text and (path.endswith("/Network") or f"{env}-Network" in text), text
        for logical_id, function in resources(template, "AWS::Lambda::Function").items():
            assert function["Properties"].get("LoggingConfig", {}).get("LogGroup"), f"{path} {logical_id}: implicit"
    assert seen >= 15


@pytest.mark.parametrize("name", EXAMPLES)
def test_environment_key_rotates_and_lets_logs_use_it_for_this_accounts_groups_only(
    example_templates: dict[str, dict[str, Any]], name: str
) -> None:
    keys = resources(example_templates[f"{name}/Network"], "AWS::KMS::Key")
    (key,) = [k for logical_id, k in keys.items() if logical_id.startswith("EnvironmentKey")]
    assert key["Properties"]["EnableKeyRotation"] is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    (logs_statement,) = [s for s in statements if s.get("Sid") == "CloudWatchLogsForThisAccountsLogGroups"]
    assert logs_statement["Principal"] == {
        "Service": {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]}
    }
    condition = logs_statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert condition == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":logs:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":log-group:*",
            ],
        ]
    }
    # Everything else is CDK's account-root statement: no other principal (no other account) gets the key.
    others = [s for s in statements if s is not logs_statement]
    assert others and all(
        s["Principal"]
        == {
            "AWS": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":root"]]}
        }
        for s in others
    )


def test_prod_backs_its_data_bucket_up_into_a_vault_under_the_environment_key(
    example_templates: dict[str, dict[str, Any]],
) -> None:
    storage = example_templates["prod/Storage"]
    (vault,) = resources(storage, "AWS::Backup::BackupVault").values()
    assert "EnvironmentKey" in json.dumps(vault["Properties"]["EncryptionKeyArn"])
    (plan,) = resources(storage, "AWS::Backup::BackupPlan").values()
    (rule,) = plan["Properties"]["BackupPlan"]["BackupPlanRule"]
    assert rule["ScheduleExpression"] == "cron(0 5 * * ? *)"
    assert rule["Lifecycle"] == {"DeleteAfterDays": 35}
    assert plan["Properties"]["BackupPlan"]["BackupPlanName"] == "mlcluster-prod-data-bucket"
    (selection,) = resources(storage, "AWS::Backup::BackupSelection").values()
    (bucket_id,) = [k for k in resources(storage, "AWS::S3::Bucket") if k.startswith("DataBucket") and "Logs" not in k]
    assert selection["Properties"]["BackupSelection"]["Resources"] == [{"Fn::GetAtt": [bucket_id, "Arn"]}]
    role_id = selection["Properties"]["BackupSelection"]["IamRoleArn"]["Fn::GetAtt"][0]
    role = storage["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "backup.amazonaws.com"}
    policies = json.dumps(role["ManagedPolicyArns"])
    assert "AWSBackupServiceRolePolicyForS3Backup" in policies and "AWSBackupServiceRolePolicyForS3Restore" in policies
    assert "AWSBackupServiceRolePolicyForBackup" not in policies


@pytest.mark.parametrize("name", [n for n in EXAMPLES if n != "prod"])
def test_backup_is_off_by_default(example_templates: dict[str, dict[str, Any]], name: str) -> None:
    assert not resources(example_templates[f"{name}/Storage"], "AWS::Backup::BackupPlan")


@pytest.mark.parametrize(
    ("backup", "error"),
    [
        ({"schedule": "daily"}, "storage.data_bucket.backup.schedule"),
        ({"retention_days": 0}, "storage.data_bucket.backup.retention_days"),
        ({"schedule": "cron(0 5 * * ? *)", "retention_days": 1}, None),
    ],
)
def test_backup_settings_are_checked(make_env: Any, backup: dict[str, object], error: str | None) -> None:
    from mlcluster.config import ConfigError

    data = {**MINIMAL, "storage": {"data_bucket": {"backup": backup}}}
    if error is None:
        env = make_env(data)
        assert env.config.storage.data_bucket.backup.retention_days == 1
    else:
        with pytest.raises(ConfigError, match=error.replace(".", r"\.")):
            make_env(data)


def test_each_backend_has_an_example_under_nist() -> None:
    from mlcluster.config import load_environment

    backends = {
        load_environment(ENVIRONMENTS / f"{n}.yaml").config.cluster.backend
        for n in EXAMPLES
        if "nist-800-53-r5" in load_environment(ENVIRONMENTS / f"{n}.yaml").config.compliance.packs
    }
    assert {"pcluster", "hyperpod"} <= backends


@pytest.fixture(scope="module")
def every_pack_outdir(examples_outdir: Path) -> Path:
    """All examples with all packs: the session's example synthesis is ``make compliance``'s own
    synthesis step (any unacknowledged finding fails it), so the report reads that assembly."""
    return examples_outdir


def test_every_example_passes_every_pack(every_pack_outdir: Path) -> None:
    """The synthesis with every pack finished, for every example (it raises on any unacknowledged finding)."""
    assert sorted(p.name for p in every_pack_outdir.glob("assembly-*")) == [f"assembly-{n}" for n in EXAMPLES]


def test_unknown_extra_pack_is_refused(tmp_path: Path) -> None:
    write_env(tmp_path / "envs", "one", MINIMAL)
    with pytest.raises(ValueError, match=r"extra_packs: \['sox'\] unknown"):
        build_app(tmp_path / "envs", outdir=str(tmp_path / "out"), extra_packs=["sox"])


def test_acknowledgement_writes_the_checkov_skip_with_the_same_reason(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "S")
    function = lambda_.Function(
        stack,
        "Fn",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
    )
    bucket = s3.CfnBucket(stack, "Bucket")
    reason = "A reason specific to this function, long enough to say why it has no dead-letter queue."
    acknowledge_compliance(function, "LambdaDLQ", reason)
    acknowledge(stack, "AwsSolutions-IAM4", "Unrelated to checkov: no counterpart is written for this one.")
    skip_checkov(function, "CKV_AWS_173", "Only resource ARNs in the environment, no secrets at all here.", LAMBDA)
    template = app.synth().get_stack_by_name("S").template
    (fn,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert fn["Metadata"]["checkov"]["skip"] == [
        {"id": "CKV_AWS_116", "comment": reason},
        {"id": "CKV_AWS_173", "comment": "Only resource ARNs in the environment, no secrets at all here."},
    ]
    assert "checkov" not in template["Resources"][stack.get_logical_id(bucket)].get("Metadata", {})
    with pytest.raises(ValueError, match="needs a reason"):
        skip_checkov(function, "CKV_AWS_115", "  ", LAMBDA)


#: checkov pins boto3 and packaging below ours, so `make test` installs it in a venv of its own.
CHECKOV_VENV = ROOT / ".venv-checkov" / "bin" / "checkov"
CHECKOV = str(CHECKOV_VENV) if CHECKOV_VENV.exists() else shutil.which("checkov")


@pytest.fixture(scope="module")
def every_pack_report(tmp_path_factory: pytest.TempPathFactory, every_pack_outdir: Path) -> tuple[Path, list[str]]:
    """``make compliance`` for every example, on the module's synthesis with every pack: one node
    process for the rules and one checkov process over every environment (the report's own design)."""
    from tools.compliance_report import generate

    out = tmp_path_factory.mktemp("compliance")
    return out, generate(None, out, every_pack_outdir)


@pytest.mark.skipif(
    CHECKOV is None and not os.environ.get("CI"), reason=".venv-checkov is not set up (make pytest does)"
)
def test_checkov_finds_nothing_unexplained(every_pack_outdir: Path, every_pack_report: tuple[Path, list[str]]) -> None:
    """checkov's verdict on every example's templates, read from the compliance report's checkov run
    over the session's synthesis (its templates are what ``cdk synth`` writes: tests/test_packaging.py)."""
    import csv

    assert CHECKOV is not None, "checkov is missing: `make pytest` installs it into .venv-checkov"
    deployed = sorted(p.relative_to(every_pack_outdir) for p in every_pack_outdir.glob("assembly-*/*.template.json"))
    out, written = every_pack_report
    assert written == list(EXAMPLES)
    for name in EXAMPLES:
        with (out / f"{name}-checkov.csv").open(encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        scanned = {row["resource"].split(":")[0] for row in rows}
        assert scanned and scanned <= {t.name for t in deployed if t.parts[0] == f"assembly-{name}"}, name
        assert [row for row in rows if row["status"] == "failed"] == [], name
        for skipped in (row for row in rows if row["status"] == "skipped"):
            assert len(skipped["reason"]) > 40, skipped


def test_compliance_report_lists_every_rule_of_every_pack_with_a_status(
    every_pack_outdir: Path, every_pack_report: tuple[Path, list[str]]
) -> None:
    """``make compliance``: every pack's rules, each with a status, acknowledgements with reasons.

    The report reads the module's synthesis with every pack (what ``make compliance`` synthesizes);
    ``ENV=dev`` picks the environments it writes.
    """
    import csv

    from tools.compliance_report import PACK_NAMES, STATUSES, chosen_assemblies

    assert chosen_assemblies(every_pack_outdir, ["dev"]) == {"dev": every_pack_outdir / "assembly-dev"}
    assert list(chosen_assemblies(every_pack_outdir, None)) == list(EXAMPLES)
    out, written = every_pack_report
    assert written == list(EXAMPLES)
    assert sorted(p.name for p in out.glob("*.md")) == sorted(f"{n}.md" for n in EXAMPLES)
    with (out / "dev.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    by_pack: dict[str, list[dict[str, str]]] = {pack: [] for pack in PACK_NAMES}
    for row in rows:
        by_pack[row["pack"]].append(row)
    # The packs' sizes in cdk-nag 3.0.2: every rule appears once, whether or not it found anything.
    assert {pack: len(rules) for pack, rules in by_pack.items()} == {
        "AwsSolutions": 131,
        "NIST.800.53.R5": 85,
        "HIPAA.Security": 90,
        "PCI.DSS.321": 69,
    }
    assert {row["status"] for row in rows} <= set(STATUSES)
    statuses = {(row["pack"], row["rule"].split("-", 1)[1]): row for row in rows}
    assert statuses[("NIST.800.53.R5", "CloudWatchLogGroupEncrypted")]["status"] == "fixed"
    replication = statuses[("NIST.800.53.R5", "S3BucketReplicationEnabled")]
    assert replication["status"] == "acknowledged"
    assert "Cross-region replication of training data" in replication["reason or how"]
    assert statuses[("NIST.800.53.R5", "APIGWAssociatedWithWAF")]["status"] == "not applicable"
    assert all(row["reason or how"] for row in rows if row["status"] != "compliant")
    report = (out / "dev.md").read_text(encoding="utf-8")
    for pack in PACK_NAMES:
        assert f"## {pack}" in report
