"""Gate: every service contract of the table holds in every example, conditions included.

Each contract (mlcluster/analysis/contracts.py) builds the request its
service principal makes for every instance in the examples and evaluates it
against the synthesized policy. The tests then take each grant away, or
spoil a condition, in a copy of the templates and expect the proof to fail,
so no contract is proven by a gate that cannot fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from mlcluster.analysis import contracts
from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.contracts import CONTRACTS, Proof, prove_all, render_table
from mlcluster.analysis.policy_eval import Request, UnknownConditionError, condition_holds, evaluate
from tests.gates.gate_support import Templates, resources
from tests.pcluster.pcluster_support import PCLUSTER_EXAMPLES
from tests.support import ROOT

Broken = Callable[[Callable[[Templates], object]], Assembly]


def failures(assembly: Assembly, contract: str) -> list[Proof]:
    return [p for p in prove_all(assembly) if p.contract == contract and not p.ok]


def test_every_contract_holds_in_every_example(examples: Assembly) -> None:
    proofs = prove_all(examples)
    assert [str(p) for p in proofs if not p.ok] == []
    # A row that meets no instance in any example proves nothing.
    assert {c.name for c in CONTRACTS} == {p.contract for p in proofs}


def _drop_statements(templates: Templates, kind: str, key: str, keep: Callable[[dict[str, object]], bool]) -> int:
    dropped = 0
    for stack in templates:
        for resource in resources(templates, stack, kind).values():
            document = resource["Properties"][key]
            before = len(document["Statement"])
            document["Statement"] = [s for s in document["Statement"] if keep(s)]
            dropped += before - len(document["Statement"])
    return dropped


def test_finding_1_reverted_fails_the_gate(broken: Broken) -> None:
    """Without the topic policy's CloudWatch allow, every alarm's notification would be refused."""
    counted: list[int] = []

    def revert(templates: Templates) -> None:
        cloudwatch = {"Service": "cloudwatch.amazonaws.com"}
        keep = lambda s: s.get("Principal") != cloudwatch  # noqa: E731
        counted.append(_drop_statements(templates, "AWS::SNS::TopicPolicy", "PolicyDocument", keep))

    found = failures(broken(revert), contracts.CLOUDWATCH_SNS)
    assert counted[0] >= 5 and found
    assert all("no statement allows it (implicit deny)" in p.detail for p in found)
    assert any("LustreFreeCapacityLow" in p.subject for p in found)


def test_a_condition_for_another_account_fails_the_gate(broken: Broken) -> None:
    """Conditions are evaluated: an allow scoped to another account admits nobody of ours."""

    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::SNS::TopicPolicy").values():
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    if statement.get("Sid") == "CloudWatchAlarms":
                        statement["Condition"]["StringEquals"]["aws:SourceAccount"] = "111122223333"

    assert failures(broken(spoil), contracts.CLOUDWATCH_SNS)


def test_the_topic_key_must_admit_cloudwatch(broken: Broken) -> None:
    def revert(templates: Templates) -> None:
        _drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: s.get("Sid") != "AlarmPublishers")

    found = failures(broken(revert), contracts.CLOUDWATCH_KMS)
    assert found and all("kms:" in p.detail for p in found)


def test_finding_2_reverted_fails_the_gate(broken: Broken) -> None:
    """Without the Identity Center reads, UpdatePermissions of the AWS_SSO workspace (p5) fails."""

    def revert(templates: Templates) -> None:
        _drop_statements(
            templates, "AWS::IAM::ManagedPolicy", "PolicyDocument", lambda s: s.get("Sid") != "ReadIdentityCenter"
        )

    found = failures(broken(revert), contracts.GRAFANA_SSO)
    assert {p.detail.split(" ")[1] for p in found} == set(contracts.IDENTITY_CENTER_NEEDS)
    assert all(p.subject.startswith("p5/Observability/") for p in found)


def test_the_amp_grant_must_name_the_workspace(broken: Broken) -> None:
    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::SNS::TopicPolicy").values():
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    if statement.get("Sid") == "PrometheusAlertManager":
                        statement["Condition"]["ArnEquals"]["aws:SourceArn"] = "arn:aws:aps:us-east-1:1:workspace/x"

    assert failures(broken(spoil), contracts.AMP_SNS)


def test_log_group_keys_need_the_encryption_context_grant(broken: Broken) -> None:
    def revert(templates: Templates) -> None:
        for stack in templates:
            for key in resources(templates, stack, "AWS::KMS::Key").values():
                for statement in key["Properties"]["KeyPolicy"]["Statement"]:
                    if "kms:EncryptionContext:aws:logs:arn" in str(statement.get("Condition")):
                        statement["Condition"] = {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:x"}}

    assert failures(broken(revert), contracts.LOGS_KMS)


def test_event_rules_need_the_topic_and_key_grants(broken: Broken) -> None:
    def revert_topic(templates: Templates) -> None:
        _drop_statements(
            templates, "AWS::SNS::TopicPolicy", "PolicyDocument", lambda s: s.get("Sid") != "EventBridgeRules"
        )

    found = failures(broken(revert_topic), contracts.EVENTBRIDGE_SNS)
    assert found and all("sns:Publish" in p.detail for p in found)

    def revert_key(templates: Templates) -> None:
        _drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: s.get("Sid") != "EventBridgeRules")

    found = failures(broken(revert_key), contracts.EVENTBRIDGE_SNS)
    assert found and all("kms:" in p.detail for p in found)


def test_docs_table_is_generated_from_the_contracts() -> None:
    page = (ROOT / "docs/reference/security.md").read_text(encoding="utf-8")
    assert render_table() in page, "docs/reference/security.md contract table is stale; expected:\n" + render_table()


# -- the evaluator -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "value", "context", "holds"),
    [
        ("StringEquals", "1", {"k": "1"}, True),
        ("StringEquals", "1", {"k": "2"}, False),
        ("StringEquals", "1", {}, False),  # a missing key fails a positive operator
        ("StringEqualsIfExists", "1", {}, True),
        ("StringNotEquals", "1", {}, True),  # and passes a negated one
        ("StringNotEquals", "1", {"k": "1"}, False),
        ("StringLike", "a*", {"k": "abc"}, True),
        ("ArnLike", "arn:aws:cloudwatch:r:1:alarm:*", {"k": "arn:${AWS::Partition}:cloudwatch:r:1:alarm:x"}, True),
        ("ArnEquals", "arn:aws:x:r:1:y", {"k": "arn:aws:x:r:1:z"}, False),
        ("Bool", "false", {"k": "true"}, False),
        ("Bool", "false", {}, False),
        ("Null", "true", {}, True),
        ("Null", "true", {"k": "x"}, False),
    ],
)
def test_condition_operators(operator: str, value: str, context: dict[str, str], holds: bool) -> None:
    assert condition_holds(operator, "k", value, context) is holds


def test_an_unknown_operator_is_never_guessed() -> None:
    with pytest.raises(UnknownConditionError, match="DateLessThan"):
        condition_holds("DateLessThan", "k", "2026-01-01T00:00:00Z", {"k": "2025-01-01T00:00:00Z"})


def test_explicit_deny_wins() -> None:
    request = Request(("Service", "cloudwatch.amazonaws.com"), "sns:Publish", "topic", {"aws:SecureTransport": "false"})
    allow = {
        "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"},
        "Action": "sns:*",
        "Resource": "*",
    }
    deny = {"Effect": "Deny", "Principal": "*", "Action": "sns:*", "Resource": "*"}
    deny["Condition"] = {"Bool": {"aws:SecureTransport": "false"}}
    assert evaluate([allow, deny], request).allowed is False
    assert evaluate([allow, deny], Request(request.principal, request.action, "topic", {})).allowed is True


# -- the rows added for the FSx association, AMP's and Backup's keys, and ParallelCluster's provider ----------


def _fsx_key_statement(statement: dict[str, object]) -> bool:
    return "aws:PrincipalArn" in str(statement.get("Condition"))


def test_the_dra_bucket_key_must_admit_the_fsx_role(broken: Broken) -> None:
    """Without the key statement for FSx's service-linked role, prod's SSE-KMS bucket cannot be linked."""
    counted: list[int] = []

    def revert(templates: Templates) -> None:
        counted.append(_drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: not _fsx_key_statement(s)))

    found = failures(broken(revert), contracts.FSX_DRA)
    assert counted[0] >= 1 and found
    assert {p.subject for p in found} == {"prod/DataRepository/LustreAssociationDataAB5FE929 (key)"}
    assert all("AWSServiceRoleForFSxS3Access_${prod/Storage|LustreF8935BA0}" in p.detail for p in found)


def _bucket_keys(templates: Templates, enabled: bool) -> None:
    bucket = templates["prod/Storage"]["Resources"]["DataBucketB1A7365C"]["Properties"]
    bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["BucketKeyEnabled"] = enabled


def _objects_only(templates: Templates) -> None:
    for key in resources(templates, "prod/Storage", "AWS::KMS::Key").values():
        for statement in key["Properties"]["KeyPolicy"]["Statement"]:
            if _fsx_key_statement(statement):
                like = statement["Condition"]["StringLike"]
                like["kms:EncryptionContext:aws:s3:arn"] = like["kms:EncryptionContext:aws:s3:arn"][1:]


def test_with_bucket_keys_the_encryption_context_is_the_bucket(broken: Broken) -> None:
    """A key statement for the objects only fails with S3 Bucket Keys on, and holds at the edge with them off."""
    assert failures(broken(_objects_only), contracts.FSX_DRA)

    def objects_without_bucket_keys(templates: Templates) -> None:
        _objects_only(templates)
        _bucket_keys(templates, False)

    assert failures(broken(objects_without_bucket_keys), contracts.FSX_DRA) == []


def test_a_bucket_policy_denying_the_fsx_role_fails_the_gate(broken: Broken, examples: Assembly) -> None:
    deny = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:PutObject",
        "Resource": "*",
        "Condition": {"StringLike": {"aws:PrincipalArn": "*AWSServiceRoleForFSxS3Access_*"}},
    }

    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::S3::BucketPolicy").values():
                policy["Properties"]["PolicyDocument"]["Statement"].append(deny)

    found = failures(broken(spoil), contracts.FSX_DRA)
    # Every example exports (NEW, CHANGED): each DRA's PutObject is refused, nothing else. One proof per DRA
    # exports in the examples, counted from the unspoiled proofs (six before the accounting example's DRA).
    exports = [p for p in prove_all(examples) if p.contract == contracts.FSX_DRA and "s3:PutObject" in p.detail]
    assert len(exports) >= 7
    assert len(found) == len(exports) and all("s3:PutObject" in p.detail and "denied" in p.detail for p in found)


def _drop_root(templates: Templates, stack_suffix: str) -> None:
    for stack in templates:
        if stack.endswith(stack_suffix):
            for key in resources(templates, stack, "AWS::KMS::Key").values():
                document = key["Properties"]["KeyPolicy"]
                document["Statement"] = [s for s in document["Statement"] if s.get("Action") != "kms:*"]


def test_amp_and_the_vault_need_a_key_that_delegates_to_iam(broken: Broken) -> None:
    """The environment key without its root statement: AMP (hyperpod, p5, trn1) and prod's vault cannot grant."""
    assembly = broken(lambda t: _drop_root(t, "/Network"))
    amp = failures(assembly, contracts.AMP_KMS)
    assert {p.subject.split("/", 1)[0] for p in amp} == {"hyperpod", "p5", "trn1"}
    assert {p.detail.split(" ")[1] for p in amp} == {
        "kms:CreateGrant",
        "kms:DescribeKey",
        "kms:GenerateDataKey",
        "kms:Decrypt",
    }
    vault = failures(assembly, contracts.BACKUP_KMS)
    assert vault and all(p.subject == "prod/Storage/DataBucketBackupVault1C2837B9" for p in vault)


def test_backup_reads_the_source_bucket_through_its_key(broken: Broken) -> None:
    found = failures(broken(lambda t: _drop_root(t, "prod/Storage")), contracts.BACKUP_KMS)
    assert found and all("reads DataBucketB1A7365C" in p.subject for p in found)
    assert {p.detail.split(" ")[1] for p in found} == {"kms:Decrypt", "kms:DescribeKey"}


def _provider_statements(templates: Templates, keep: Callable[[dict[str, object]], bool]) -> None:
    for stack in templates:
        for role in resources(templates, stack, "AWS::IAM::Role").values():
            for policy in role["Properties"].get("Policies", []):
                if policy["PolicyName"] == "Provider":
                    document = policy["PolicyDocument"]
                    document["Statement"] = [s for s in document["Statement"] if keep(s)]


def test_the_provider_needs_its_cluster_table(broken: Broken) -> None:
    found = failures(
        broken(lambda t: _provider_statements(t, lambda s: s.get("Sid") != "ClusterTables")), contracts.PCLUSTER
    )
    assert {p.subject.split("/", 1)[0] for p in found} == set(PCLUSTER_EXAMPLES)
    assert all("dynamodb:" in p.detail and "table/parallelcluster-" in p.detail for p in found)


def test_the_provider_must_attach_every_configured_policy(broken: Broken) -> None:
    def narrow(templates: Templates) -> None:
        for stack in templates:
            for role in resources(templates, stack, "AWS::IAM::Role").values():
                for policy in role["Properties"].get("Policies", []):
                    for statement in policy["PolicyDocument"]["Statement"]:
                        if statement.get("Sid") == "AttachTheConfiguredPolicies":
                            statement["Condition"]["ArnEquals"]["iam:PolicyARN"] = statement["Condition"]["ArnEquals"][
                                "iam:PolicyARN"
                            ][1:]

    found = failures(broken(narrow), contracts.PCLUSTER)
    assert found and all("(AdditionalIamPolicies)" in p.subject for p in found)
    assert {p.detail.split(" ")[1] for p in found} == {"iam:AttachRolePolicy", "iam:DetachRolePolicy"}


def test_the_provider_must_attach_a_policy_only_a_queue_names(broken: Broken) -> None:
    """``prove_pcluster_provider`` mutant 181: the queues' AdditionalIamPolicies are attached too (each queue's
    node role gets them), so a policy only a queue names must be one the provider may attach and detach."""
    other = "arn:aws:iam::111111111111:policy/queue-only"

    def queue_policy(templates: Templates) -> None:
        for stack in templates:
            for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
                queue = cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"][0]
                queue.setdefault("Iam", {}).setdefault("AdditionalIamPolicies", []).append({"Policy": other})

    found = failures(broken(queue_policy), contracts.PCLUSTER)
    assert {p.subject.split("/", 1)[0] for p in found} == set(PCLUSTER_EXAMPLES)
    assert {p.detail.split(" ")[1] for p in found} == {"iam:AttachRolePolicy", "iam:DetachRolePolicy"}
    assert all("(AdditionalIamPolicies)" in p.subject and f"iam:PolicyARN={other}" in p.detail for p in found)


def test_a_queue_without_iam_settings_needs_no_attach_rights(broken: Broken) -> None:
    """``prove_pcluster_provider`` mutant 213: ``Iam`` is optional on every group; a queue without it attaches
    nothing, and the provider contract still holds (the gate reads it as empty, not as an error)."""

    def no_iam(templates: Templates) -> None:
        for stack in templates:
            for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
                cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"][0].pop("Iam", None)

    assert failures(broken(no_iam), contracts.PCLUSTER) == []


def test_a_cluster_name_given_by_reference_is_read_in_the_clusters_own_stack(examples: Assembly) -> None:
    """``prove_pcluster_provider`` mutant 89: a library user's ClusterName may be a reference (a stack parameter);
    the node roles the provider attaches policies to are named from it as rendered in the cluster's stack."""
    templates = {name: json.loads(json.dumps(body)) for name, body in examples.templates.items()}
    (stack,) = [s for s in templates if s.startswith(f"{PCLUSTER_EXAMPLES[0]}/") and s.endswith("Cluster")]
    for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
        cluster["Properties"]["ClusterName"] = {"Ref": "NameParameter"}
    proofs = [
        p
        for p in prove_all(Assembly(templates, examples.assets))
        if p.contract == contracts.PCLUSTER and p.subject.startswith(f"{stack}/") and "iam:PolicyARN" in p.detail
    ]
    assert proofs
    assert all(f"role/parallelcluster/${{{stack}|NameParameter}}/" in p.detail for p in proofs)


@pytest.mark.parametrize(
    ("monitoring", "dashboards"),
    [
        ({}, True),  # ParallelCluster's defaults: dashboards and alarms on
        ({"Dashboards": {"CloudWatch": {"Enabled": False}}}, True),  # alarms still on by default
        ({"Alarms": {"Enabled": False}}, True),  # dashboards still on by default
        ({"Dashboards": {"CloudWatch": {"Enabled": False}}, "Alarms": {"Enabled": False}}, False),
    ],
)
def test_the_provider_needs_dashboard_rights_while_dashboards_or_alarms_are_on(
    monitoring: dict[str, Any], dashboards: bool
) -> None:
    """``_pcluster_features`` mutants 58 and 71: each of the two defaults to on when the configuration omits it."""
    features = contracts._pcluster_features({"Monitoring": monitoring})
    assert (contracts._DASHBOARDS in features) is dashboards
    assert contracts._LOGS in features and contracts._DNS in features


def test_the_provider_role_must_require_the_boundary_the_config_names(broken: Broken) -> None:
    def other_boundary(templates: Templates) -> None:
        for stack in templates:
            for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
                cluster["Properties"]["ClusterConfiguration"]["Iam"]["PermissionsBoundary"] = "arn:aws:iam::1:policy/x"

    found = failures(broken(other_boundary), contracts.PCLUSTER)
    assert {p.detail.split(" ")[1] for p in found} >= {"iam:CreateRole", "iam:PutRolePolicy", "iam:AttachRolePolicy"}


def test_without_managed_dns_the_provider_needs_no_hosted_zones(broken: Broken) -> None:
    """At the edge: drop Route 53 from the role; it fails unless the configuration turns managed DNS off."""
    drop = lambda s: s.get("Sid") != "HostedZones"  # noqa: E731
    found = failures(broken(lambda t: _provider_statements(t, drop)), contracts.PCLUSTER)
    assert found and all("route53:" in p.detail for p in found)

    def dns_off(templates: Templates) -> None:
        _provider_statements(templates, drop)
        for stack in templates:
            for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
                slurm = cluster["Properties"]["ClusterConfiguration"]["Scheduling"].setdefault("SlurmSettings", {})
                slurm["Dns"] = {"DisableManagedDns": True}

    assert failures(broken(dns_off), contracts.PCLUSTER) == []


def test_numeric_operators() -> None:
    assert condition_holds("NumericLessThan", "s3:TlsVersion", "1.2", {"s3:TlsVersion": "1.1"}) is True
    assert condition_holds("NumericLessThan", "s3:TlsVersion", "1.2", {"s3:TlsVersion": "1.2"}) is False
    assert condition_holds("NumericNotEquals", "k", "3", {"k": "3"}) is False
    assert condition_holds("NumericGreaterThanEquals", "k", "3", {"k": "x"}) is False


def _groups(templates: Templates) -> list[dict[str, Any]]:
    out = []
    for stack in templates:
        for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
            config = cluster["Properties"]["ClusterConfiguration"]
            out += [config["HeadNode"], *config["Scheduling"]["SlurmQueues"]]
    return out


def test_node_scripts_need_the_groups_s3_access(broken: Broken) -> None:
    def other_prefix(templates: Templates) -> None:
        for group in _groups(templates):
            for access in group["Iam"]["S3Access"]:
                access["KeyName"] = "other/*"

    found = failures(broken(other_prefix), contracts.PCLUSTER_NODES)
    assert found and all("S3Access grants no s3:GetObject" in p.detail for p in found)
    assert {p.subject.split("/", 1)[0] for p in found} == set(PCLUSTER_EXAMPLES)

    def exact_key(templates: Templates) -> None:  # at the edge: the script's own key, no wildcard
        for group in _groups(templates):
            for access in group["Iam"]["S3Access"]:
                access["KeyName"] = "pcluster/run.sh"

    assert failures(broken(exact_key), contracts.PCLUSTER_NODES) == []


def test_node_scripts_bucket_must_not_deny_the_node_roles_or_be_sse_kms(broken: Broken) -> None:
    deny = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:GetObject",
        "Resource": "*",
        "Condition": {"StringLike": {"aws:PrincipalArn": "arn:*:iam::*:role/parallelcluster/*"}},
    }

    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::S3::BucketPolicy").values():
                policy["Properties"]["PolicyDocument"]["Statement"].append(deny)

    found = failures(broken(spoil), contracts.PCLUSTER_NODES)
    assert found and all("denied" in p.detail for p in found)

    def sse_kms(templates: Templates) -> None:
        for stack in templates:
            for logical_id, bucket in resources(templates, stack, "AWS::S3::Bucket").items():
                if logical_id.startswith("NodeScripts") and "AccessLogs" not in logical_id:
                    default = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
                    default["ServerSideEncryptionByDefault"] = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "k"}

    found = failures(broken(sse_kms), contracts.PCLUSTER_NODES)
    assert found and all("grants no kms:Decrypt" in p.detail for p in found)


def _provider_documents(templates: Templates) -> list[dict[str, Any]]:
    out = []
    for stack in templates:
        for role in resources(templates, stack, "AWS::IAM::Role").values():
            out += [
                p["PolicyDocument"] for p in role["Properties"].get("Policies", []) if p["PolicyName"] == "Provider"
            ]
    return out


@pytest.mark.parametrize(
    "action",
    [
        "iam:TagRole",
        "iam:DeleteInstanceProfile",
        "iam:DetachRolePolicy",
        "iam:CreateServiceLinkedRole",
        "iam:GetInstanceProfile",
        "iam:SimulatePrincipalPolicy",
        "lambda:TagResource",
        "dynamodb:TagResource",
        "route53:GetHostedZone",
        "route53:ListResourceRecordSets",
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:DeleteVolume",
        "logs:DeleteLogGroup",
        "autoscaling:CreateAutoScalingGroup",
    ],
)
def test_every_action_of_parallelclusters_policy_is_proven(broken: Broken, action: str) -> None:
    """The outside review's list: each action of ParallelCluster's policy taken from the ProviderRole fails."""

    def drop(templates: Templates) -> None:
        for document in _provider_documents(templates):
            for statement in document["Statement"]:
                if isinstance(statement["Action"], list) and action in statement["Action"]:
                    statement["Action"].remove(action)
                elif statement["Action"] == action:
                    statement["Action"] = "none:none"

    found = failures(broken(drop), contracts.PCLUSTER)
    assert found and all(f" {action} " in p.detail for p in found)
    assert {p.subject.split("/", 1)[0] for p in found} <= set(PCLUSTER_EXAMPLES)


def test_the_lambda_roles_must_be_passable_to_lambda(broken: Broken) -> None:
    def only_ec2(templates: Templates) -> None:
        for document in _provider_documents(templates):
            for statement in document["Statement"]:
                if statement.get("Sid") == "PassClusterRoles":
                    passed = statement["Condition"]["StringEqualsIfExists"]
                    passed["iam:PassedToService"] = [s for s in passed["iam:PassedToService"] if "lambda" not in str(s)]

    found = failures(broken(only_ec2), contracts.PCLUSTER)
    assert found and all("iam:PassRole" in p.detail and "CleanupResources" in p.detail for p in found)

    def no_lambda_roles(templates: Templates) -> None:  # role/parallelcluster/<cluster>-* taken away
        lambda_roles = re.compile(r'role/parallelcluster/[a-z0-9-]+-\*"')
        for document in _provider_documents(templates):
            for statement in document["Statement"]:
                if isinstance(statement.get("Resource"), list):
                    keep = [r for r in statement["Resource"] if not lambda_roles.search(json.dumps(r))]
                    statement["Resource"] = keep

    found = failures(broken(no_lambda_roles), contracts.PCLUSTER)
    assert found and all("CleanupResourcesFunctionExecutionRole" in p.detail for p in found)
    assert {p.detail.split(" ")[1] for p in found} >= {"iam:PassRole", "iam:CreateRole", "iam:DeleteRole"}


def test_a_statement_of_parallelclusters_policy_without_a_decision_fails(
    broken: Broken, monkeypatch: pytest.MonkeyPatch
) -> None:
    uses = dict(contracts.PCLUSTER_PROVIDER_USES)
    del uses["ResourceGroupRead"]
    monkeypatch.setattr(contracts, "PCLUSTER_PROVIDER_USES", uses)
    found = failures(broken(lambda t: None), contracts.PCLUSTER)
    assert found and all("no decision" in p.detail and "ResourceGroupRead" in p.detail for p in found)


def test_an_edit_that_drops_a_policy_can_detach_it(broken: Broken) -> None:
    """Item 2: observability off drops CollectorRemoteWrite; the provider must detach it, or the update rolls back."""

    def configured_only(templates: Templates) -> None:
        _provider_statements(templates, lambda s: s.get("Sid") != "DetachTheAppsPolicies")

    found = failures(broken(configured_only), contracts.PCLUSTER)
    assert found and all("(an edit drops a policy)" in p.subject for p in found)
    assert all("iam:DetachRolePolicy" in p.detail and "-Cluster-CollectorRemoteWrite" in p.detail for p in found)
    assert {p.subject.split("/", 1)[0] for p in found} == set(PCLUSTER_EXAMPLES)


def _root_spelled(spelling: Callable[[Any], Any]) -> Callable[[Templates], None]:
    """Drop the FSx key statement and write the root's principal another way (the outside review's variants)."""

    def change(templates: Templates) -> None:
        _drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: not _fsx_key_statement(s))
        for stack in templates:
            for key in resources(templates, stack, "AWS::KMS::Key").values():
                for statement in key["Properties"]["KeyPolicy"]["Statement"]:
                    principal = statement.get("Principal")
                    if isinstance(principal, dict) and ":root" in json.dumps(principal.get("AWS")):
                        principal["AWS"] = spelling(principal["AWS"])

    return change


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param(lambda root: [root], id="one-item list"),
        pytest.param(lambda root: {"Ref": "AWS::AccountId"}, id="bare account id"),
        pytest.param(lambda root: [{"Ref": "AWS::AccountId"}], id="bare account id in a list"),
    ],
)
def test_the_roots_delegation_never_stands_in_for_the_fsx_statement(broken: Broken, spelling: Any) -> None:
    found = failures(broken(_root_spelled(spelling)), contracts.FSX_DRA)
    assert {p.subject for p in found} == {"prod/DataRepository/LustreAssociationDataAB5FE929 (key)"}
    assert {p.detail.split(" ")[1] for p in found} == set(contracts.FSX_KEY_ACTIONS)


def test_the_fsx_key_proof_sends_only_the_calls_that_carry_the_encryption_context(examples: Assembly) -> None:
    """kms:DescribeKey carries no encryption context, and FSx's documented statement allows it only under one."""
    proofs = [p for p in prove_all(examples) if p.contract == contracts.FSX_DRA and p.subject.endswith("(key)")]
    assert {p.detail.split(" ")[1] for p in proofs} == {
        "kms:Encrypt",
        "kms:Decrypt",
        "kms:ReEncryptFrom",
        "kms:GenerateDataKey",
    }
    assert all("kms:EncryptionContext:aws:s3:arn=" in p.detail for p in proofs)


def _login_pools(templates: Templates) -> list[dict[str, Any]]:
    out = []
    for stack in templates:
        for cluster in resources(templates, stack, "Custom::PclusterCluster").values():
            out += cluster["Properties"]["ClusterConfiguration"].get("LoginNodes", {}).get("Pools", [])
    return out


def test_login_pool_scripts_need_a_policy_that_reads_them(broken: Broken, examples: Assembly) -> None:
    """p4de's login pool runs the node scripts: removing NodeScriptRead from the pool fails the gate."""
    proofs = [p for p in prove_all(examples) if p.contract == contracts.PCLUSTER_NODES and " LoginNodes " in p.subject]
    assert proofs and all(p.ok for p in proofs)
    assert any("attached policies: allowed" in p.detail for p in proofs)

    def no_script_read(templates: Templates) -> None:
        for pool in _login_pools(templates):
            policies = pool["Iam"]["AdditionalIamPolicies"]
            pool["Iam"]["AdditionalIamPolicies"] = [p for p in policies if "NodeScriptRead" not in json.dumps(p)]

    found = failures(broken(no_script_read), contracts.PCLUSTER_NODES)
    assert found and all(" LoginNodes login " in p.subject and p.subject.startswith("p4de/") for p in found)
    assert all("S3Access grants no s3:GetObject" in p.detail and "implicit deny" in p.detail for p in found)

    def s3_access_instead(templates: Templates) -> None:  # at the edge: an S3Access entry for the script suffices
        no_script_read(templates)
        for pool in _login_pools(templates):
            script = pool["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Script"]
            bucket = script["Fn::Join"][1][1]
            pool["Iam"]["S3Access"] = [{"BucketName": bucket, "KeyName": "pcluster/*"}]

    assert failures(broken(s3_access_instead), contracts.PCLUSTER_NODES) == []
