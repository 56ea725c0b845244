"""Acknowledging cdk-nag (and CloudFormation Validate) findings on one construct."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge ``finding`` on ``scope`` and its children with a specific ``reason``.

    ``finding`` is the exact id the validation report prints, e.g.
    ``AwsSolutions-IAM5[Action::s3:*]`` or ``CloudFormation-Validate::W3010``.
    """
    if not reason.strip():
        raise ValueError(f"acknowledging {finding} needs a reason specific to {scope.node.path}")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=finding, reason=reason))


#: Prefixes of the compliance packs an environment may add (see ``EXTRA_PACKS``).
COMPLIANCE_PACK_PREFIXES = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")


def acknowledge_compliance(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge the same rule in every compliance pack that has it.

    ``rule`` is the suffix the packs share, e.g. ``CloudWatchLogGroupEncrypted``;
    packs that lack the rule never report it, so the extra ids are inert.
    """
    for prefix in COMPLIANCE_PACK_PREFIXES:
        acknowledge(scope, f"{prefix}-{rule}", reason)
