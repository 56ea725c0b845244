"""Small helpers the environment stacks share."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs

from mlcluster.config import Environment
from mlcluster.config.environment import LOG_RETENTION_DAYS


def removal_policy(environment: Environment) -> cdk.RemovalPolicy:
    """Retain on update or delete unless the environment explicitly asks to destroy data on delete.

    ``RETAIN_ON_UPDATE_OR_DELETE`` renders ``DeletionPolicy: RetainExceptOnCreate`` (and
    ``UpdateReplacePolicy: Retain``): a resource is kept when its stack is deleted or it leaves the
    template, but deleted when the create that made it rolls back (a failed first deploy, or a
    replacement whose update fails), so a failed create leaves no empty file system billing.
    """
    return (
        cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        if environment.config.retention.keeps_data
        else cdk.RemovalPolicy.DESTROY
    )


def scripts_removal_policy() -> cdk.RemovalPolicy:
    """Script buckets hold only what every deploy uploads again: they go with their stack.

    A retained bucket with a fixed name (the HyperPod lifecycle bucket) would make the next
    deploy of the stack fail with "already exists"; emptied and deleted, it is made again.
    """
    return cdk.RemovalPolicy.DESTROY


def export_output(stack: cdk.Stack, environment: Environment, name: str, value: str, description: str) -> None:
    """An output of ``stack`` exported as ``<environment>-<name>`` for tools outside CDK."""
    cdk.CfnOutput(stack, name, value=value, description=description, export_name=f"{environment.name}-{name}")


def log_retention(environment: Environment) -> logs.RetentionDays:
    """The environment's log retention as the CDK enum (the config holds days)."""
    days = environment.config.retention.log_retention_days
    by_days = dict(zip(LOG_RETENTION_DAYS, [m for m in logs.RetentionDays if m.name != "INFINITE"], strict=True))
    return by_days[days]
