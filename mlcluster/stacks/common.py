"""Small helpers the environment stacks share."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs

from mlcluster.config import Environment
from mlcluster.config.environment import LOG_RETENTION_DAYS


def removal_policy(environment: Environment) -> cdk.RemovalPolicy:
    """RETAIN unless the environment explicitly asks to destroy data on delete."""
    return cdk.RemovalPolicy.RETAIN if environment.config.retention.keeps_data else cdk.RemovalPolicy.DESTROY


def removal_policy_except_on_create(environment: Environment) -> cdk.RemovalPolicy:
    """As :func:`removal_policy`, but a resource whose stack's first create fails is deleted, not kept.

    ``DeletionPolicy: RetainExceptOnCreate``: a rolled-back create of a stack
    holding only rebuildable data (workspaces, dashboards) would otherwise
    leave one more retained, billed copy behind on every attempt.
    """
    return (
        cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        if environment.config.retention.keeps_data
        else (cdk.RemovalPolicy.DESTROY)
    )


def export_output(stack: cdk.Stack, environment: Environment, name: str, value: str, description: str) -> None:
    """An output of ``stack`` exported as ``<environment>-<name>`` for tools outside CDK."""
    cdk.CfnOutput(stack, name, value=value, description=description, export_name=f"{environment.name}-{name}")


def log_retention(environment: Environment) -> logs.RetentionDays:
    """The environment's log retention as the CDK enum (the config holds days)."""
    days = environment.config.retention.log_retention_days
    by_days = dict(zip(LOG_RETENTION_DAYS, [m for m in logs.RetentionDays if m.name != "INFINITE"], strict=True))
    return by_days[days]
