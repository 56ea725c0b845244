"""aws-cdk-lib's custom resource Provider with the acknowledgements its framework function needs, said once.

The Grafana provisioner and the accounting database user are both a function of ours behind a
``custom_resources.Provider``. The framework function the Provider adds draws the same findings
each time (the basic execution policy, its default inline policy, the ``:*`` invoke grant, its
environment, the compliance packs' Lambda rules); :func:`acknowledged_provider` makes the Provider
and answers each finding with the reason specific to the function it serves.
"""

from __future__ import annotations

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from mlcluster.constructs.nag import (
    acknowledge,
    acknowledge_compliance,
    acknowledge_custom_resource_lambdas,
    acknowledge_wildcard_resource,
    quiet_redundant_role_dependency,
    skip_checkov,
)

#: The managed policy aws-cdk-lib's Provider gives its framework function, as cdk-nag names it.
BASIC_EXECUTION_FINDING = (
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]"
)


def acknowledged_provider(
    scope: Construct,
    *,
    on_event: lambda_.Function,
    log_group: logs.ILogGroup,
    serves: str,
    changes: str,
    outside_vpc: str,
    no_secret_because: str,
) -> cr.Provider:
    """The ``Provider`` (construct id ``Provider``) invoking ``on_event``, logging to ``log_group``, acknowledged.

    :param serves: what the function does, as the reasons name it ("Grafana provisioning").
    :param changes: what a stack operation must change for it to run ("the dashboards").
    :param outside_vpc: why the function is not in the VPC (the endpoints it calls), a clause after its name.
    :param no_secret_because: why the framework's environment holds no secret of the function's.
    """
    provider = cr.Provider(scope, "Provider", on_event_handler=on_event, log_group=log_group)
    acknowledge(
        provider,
        BASIC_EXECUTION_FINDING,
        f"The custom resource framework's onEvent function of the {serves} gets the basic execution policy from "
        "aws-cdk-lib's Provider; it only lets it write its CloudWatch logs.",
    )
    quiet_redundant_role_dependency(provider)
    acknowledge_custom_resource_lambdas(
        provider,
        f"The {serves} framework function",
        synchronous=False,
        changes=changes,
        outside_vpc=outside_vpc,
    )
    skip_checkov(
        provider,
        "CKV_AWS_173",
        f"The framework function's environment holds only the ARN of the {serves} function, no secret "
        f"({no_secret_because}); Lambda encrypts it with its AWS key.",
        frozenset({"AWS::Lambda::Function"}),
    )
    acknowledge_compliance(
        provider,
        "IAMNoInlinePolicy",
        f"aws-cdk-lib's Provider writes its framework function's grant (invoke the {serves} function) as the "
        "default policy of a role that belongs to the framework alone.",
    )
    acknowledge_wildcard_resource(
        provider,
        f"{on_event.function_arn}:*",
        f"The provider framework invokes the {serves} function by ARN; the :* suffix only adds that one function's "
        "versions and aliases.",
    )
    return provider
