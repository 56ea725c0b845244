"""Small helpers the environment stacks share."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm

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


#: The config sections whose values decide what each producer stack outputs (its resources' ids and names).
PRODUCER_SECTIONS = {"Network": ("network",), "Storage": ("network", "storage"), "Observability": ("observability",)}


#: Optional sections added to a producer's config after environments were deployed: left out of the
#: digest while unset, so adding the setting to mlcluster does not change every environment's digest
#: (and make every consumer stack update) when the environment does not use it.
LATER_OPTIONAL_SECTIONS: dict[str, tuple[str, ...]] = {"storage": ("accounting",)}


def _section_inputs(name: str, section: Any) -> dict[str, Any]:
    """``section`` as a mapping for the digest, without the later optional sections it leaves unset."""
    values = dataclasses.asdict(section)
    for key in LATER_OPTIONAL_SECTIONS.get(name, ()):
        if values.get(key) is None:
            values.pop(key, None)
    return values


def producer_digest(environment: Environment, producer: str) -> str:
    """A digest of everything that decides ``producer``'s outputs: the environment, its place, its sections.

    Also ``retention.allow_replacement`` and ``retention.on_delete``, every
    producer's: an allowed replacement (for example of ``Storage/Lustre`` after
    a change of mlcluster's code, with the storage section as it was) gives
    the producer new ids, and ``on_delete`` decides its removal policies. All
    entries count for every producer (a replaced network can change what the
    storage stack outputs); a needless change only makes the consumer re-read
    outputs that did not change.
    """
    cfg = environment.config
    inputs = {
        "environment": environment.name,
        "account": cfg.account,
        "region": cfg.region,
        "retention": {
            "allow_replacement": sorted(cfg.retention.allow_replacement),
            "on_delete": cfg.retention.on_delete,
        },
        **{name: _section_inputs(name, getattr(cfg, name)) for name in PRODUCER_SECTIONS[producer]},
    }
    text = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record_producer_values(stack: cdk.Stack, environment: Environment, producers: tuple[str, ...]) -> ssm.CfnParameter:
    """A parameter in ``stack`` whose value changes whenever an output it reads from ``producers`` can.

    Weak references (``Fn::GetStackOutput``) are re-read only when the
    consumer's stack is updated, and ``cdk deploy`` skips a stack whose
    template did not change. A replaced file system changes the storage
    section, so this parameter's value, so the consumer's template: its
    deploy updates the stack and CloudFormation reads the new outputs.
    """
    value = json.dumps({p: producer_digest(environment, p) for p in producers}, sort_keys=True)
    return ssm.CfnParameter(
        stack,
        "ProducerValues",
        type="String",
        value=value,
        description=f"mlcluster {environment.name}: digests of what {', '.join(producers)} output; changes make "
        "this stack's deploy re-read their outputs",
    )
