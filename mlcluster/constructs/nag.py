"""Acknowledging cdk-nag (and CloudFormation Validate) findings on one construct."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import IConstruct, IValidation

#: Prefixes of the compliance packs an environment may add (see ``EXTRA_PACKS``).
COMPLIANCE_PACK_PREFIXES = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")

LAMBDA = frozenset({"AWS::Lambda::Function"})
BUCKET = frozenset({"AWS::S3::Bucket"})
IAM_POLICY = frozenset({"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role"})
KMS_KEY = frozenset({"AWS::KMS::Key"})
RDS_CLUSTER = frozenset({"AWS::RDS::DBCluster"})
RDS_INSTANCE = frozenset({"AWS::RDS::DBInstance"})

#: checkov's counterparts of cdk-nag rules: the check id and the resource types it judges, by the
#: finding id or by the rule name the compliance packs share. An acknowledgement of such a finding
#: also skips the checkov check on those resources with the same reason, so the two cannot drift.
CHECKOV_COUNTERPARTS: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    "LambdaDLQ": (("CKV_AWS_116", LAMBDA),),
    # IAM database authentication on an Aurora cluster (the Slurm accounting database).
    "AwsSolutions-RDS6": (("CKV_AWS_162", RDS_CLUSTER),),
    "RDSEnhancedMonitoringEnabled": (("CKV_AWS_118", RDS_INSTANCE),),
    "LambdaConcurrency": (("CKV_AWS_115", LAMBDA),),
    "LambdaInsideVPC": (("CKV_AWS_117", LAMBDA),),
    "AwsSolutions-S1": (("CKV_AWS_18", BUCKET),),
    "AwsSolutions-IAM5[Resource::*]": (("CKV_AWS_111", IAM_POLICY),),
    # A statement allowing service:* actions is write access without constraints to checkov.
    "IAMPolicyNoStatementsWithFullAccess": (("CKV_AWS_111", IAM_POLICY),),
    # A statement allowing * on * fails each of checkov's IAM exposure and escalation checks.
    "IAMPolicyNoStatementsWithAdminAccess": tuple(
        (check, IAM_POLICY) for check in ("CKV_AWS_107", "CKV_AWS_108", "CKV_AWS_109", "CKV_AWS_110", "CKV_AWS_111")
    ),
}


#: Set while ``build_app(template_checks=False)`` composes its stages: no cdk-nag pack or checkov
#: judges those templates, so the helpers below record nothing (each record costs calls into jsii).
_SKIPPING: contextvars.ContextVar[bool] = contextvars.ContextVar("mlcluster_nag_skipping", default=False)


@contextlib.contextmanager
def acknowledgements_skipped() -> Iterator[None]:
    """While open, the helpers below check their reason and record nothing.

    Only ``mlcluster.app.build_app(template_checks=False)`` opens it, around
    the constructs of an app no check judges: the templates' resources and
    properties are the same, only the metadata the checks read is left out.
    """
    token = _SKIPPING.set(True)
    try:
        yield
    finally:
        _SKIPPING.reset(token)


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge ``finding`` on ``scope`` and its children with a specific ``reason``.

    ``finding`` is the exact id the validation report prints, e.g.
    ``AwsSolutions-IAM5[Action::s3:*]`` or ``CloudFormation-Validate::W3010``.
    When checkov has a counterpart (``CHECKOV_COUNTERPARTS``), its check is
    skipped with the same reason on the resources under ``scope`` it judges.
    """
    if not reason.strip():
        raise ValueError(f"acknowledging {finding} needs a reason specific to {scope.node.path}")
    if _SKIPPING.get():
        return
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=finding, reason=reason))
    rule = finding.split("-", 1)[1] if finding.startswith(COMPLIANCE_PACK_PREFIXES) else None
    for check_id, types in CHECKOV_COUNTERPARTS.get(finding, ()) + CHECKOV_COUNTERPARTS.get(rule or "", ()):
        skip_checkov(scope, check_id, reason, types)


def skip_checkov(scope: IConstruct, check_id: str, reason: str, resource_types: frozenset[str]) -> None:
    """Skip checkov's ``check_id`` with ``reason`` on every resource of ``resource_types`` under ``scope``.

    Writes ``Metadata.checkov.skip`` entries (``{id, comment}``), the form
    checkov reads from CloudFormation templates. Use it alone only for a
    checkov check no cdk-nag pack has; otherwise acknowledge the cdk-nag
    finding, which writes this too. The resources are found when the app
    is validated, so children made after this call are covered.
    """
    if not reason.strip():
        raise ValueError(f"skipping {check_id} needs a reason specific to {scope.node.path}")
    if _SKIPPING.get():
        return
    scope.node.add_validation(_CheckovSkip(scope, check_id, reason, resource_types))


@jsii.implements(IValidation)
class _CheckovSkip:
    """Writes one checkov skip while the tree is validated; it reports no errors itself."""

    def __init__(self, scope: IConstruct, check_id: str, reason: str, resource_types: frozenset[str]) -> None:
        self._scope = scope
        self._check_id = check_id
        self._reason = reason
        self._types = resource_types

    def validate(self) -> list[str]:
        for node in self._scope.node.find_all():
            if isinstance(node, cdk.CfnResource) and node.cfn_resource_type in self._types:
                skips = list(dict(node.get_metadata("checkov") or {}).get("skip", []))
                if all(entry["id"] != self._check_id for entry in skips):
                    skips.append({"id": self._check_id, "comment": self._reason})
                    node.add_metadata("checkov", {"skip": skips})
        return []


def acknowledge_compliance(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge the same rule in every compliance pack that has it.

    ``rule`` is the suffix the packs share, e.g. ``CloudWatchLogGroupEncrypted``;
    packs that lack the rule never report it, so the extra ids are inert.
    """
    for prefix in COMPLIANCE_PACK_PREFIXES:
        acknowledge(scope, f"{prefix}-{rule}", reason)


def acknowledge_custom_resource_lambdas(
    scope: IConstruct, what: str, *, synchronous: bool, changes: str, outside_vpc: str
) -> None:
    """The compliance packs' Lambda rules for a custom resource's function (``synchronous``: the user function the
    provider framework invokes) or the framework's own (invoked by CloudFormation).

    ``what`` names the function ("The Grafana provisioning function"), ``changes`` what a stack operation must
    change for it to run ("the dashboards"), ``outside_vpc`` why it is not in the VPC (the endpoints it calls).
    """
    acknowledge_compliance(
        scope,
        "LambdaConcurrency",
        f"{what} runs once per stack operation that changes {changes}; reserving concurrency would take capacity "
        "from the account's unreserved pool for no protection.",
    )
    dlq = (
        f"{what} is invoked synchronously by aws-cdk-lib's provider framework, which reports its failures to the "
        "stack; a dead-letter queue only receives events of asynchronous invocations."
        if synchronous
        else f"{what} is invoked asynchronously by CloudFormation and reports every failure to the custom "
        "resource's response URL itself, failing the stack operation; a dead-letter queue would keep events "
        "nobody replays."
    )
    acknowledge_compliance(scope, "LambdaDLQ", dlq)
    acknowledge_compliance(scope, "LambdaInsideVPC", f"{what} {outside_vpc}")


def acknowledge_wildcard_resource(scope: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge cdk-nag's ``AwsSolutions-IAM5[Resource::...]`` finding for ``resource`` on ``scope``.

    The finding id holds the resource as cdk-nag prints it after synthesis,
    which depends on where the resource lives: a bucket of another stack
    shows as its export name, a stack with a concrete environment shows its
    account and region. The id is therefore worked out when the app is
    validated (after cross-stack references are resolved), not here.
    """
    if not reason.strip():
        raise ValueError(f"acknowledging a wildcard resource needs a reason specific to {scope.node.path}")
    if _SKIPPING.get():
        return
    scope.node.add_validation(_WildcardAcknowledgement(scope, resource, reason))


@jsii.implements(IValidation)
class _WildcardAcknowledgement:
    """Adds the acknowledgement while the tree is validated; it reports no errors itself."""

    def __init__(self, scope: IConstruct, resource: str, reason: str) -> None:
        self._scope = scope
        self._resource = resource
        self._reason = reason

    def validate(self) -> list[str]:
        finding = f"AwsSolutions-IAM5[Resource::{nag_resource_id(self._scope, self._resource)}]"
        acknowledge(self._scope, finding, self._reason)
        return []


#: The resources aws-cdk-lib makes depend on the role whose ARN they also read.
ROLE_USERS = (lambda_.CfnFunction, sfn.CfnStateMachine)


def quiet_redundant_role_dependency(scope: IConstruct) -> None:
    """Tell cfn-lint to skip W3005 on the functions and state machines under ``scope``.

    aws-cdk-lib makes a Lambda function or state machine depend on its role
    (so the role exists first) and also reads the role's ARN, which cfn-lint
    reports as a redundant dependency. The dependency is aws-cdk-lib's, so the
    check is switched off on those resources only, by resource metadata.
    """
    for resource in scope.node.find_all():
        if isinstance(resource, ROLE_USERS):
            config = dict(resource.get_metadata("cfn-lint") or {}).get("config", {})
            ignored = sorted({*config.get("ignore_checks", []), "W3005"})
            resource.add_metadata("cfn-lint", {"config": {**config, "ignore_checks": ignored}})


def nag_resource_id(scope: IConstruct, value: str) -> str:
    """The text cdk-nag shows for the policy resource ``value`` in a finding id such as ``Resource::<text>``.

    Mirrors cdk-nag's flattening of the resolved value: ``Ref`` becomes
    ``<LogicalId>``, ``Fn::GetAtt`` ``<LogicalId.Attr>``, ``Fn::Join`` joins
    its parts, ``Fn::ImportValue`` and ``Fn::Sub`` show their argument, and
    ``${...}`` turns into ``<...>``. Acknowledging by this text keeps the id
    exact when logical ids change.
    """
    return flatten_resource(cdk.Stack.of(scope).resolve(value))


def flatten_resource(node: object) -> str:
    """A resolved CloudFormation value as cdk-nag flattens it (see ``nag_resource_id``)."""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return str(separator).join(flatten_resource(p) for p in parts)
        if "Fn::Sub" in node:
            return flatten_resource(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_resource(resource)}.{flatten_resource(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_resource(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_resource(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))
