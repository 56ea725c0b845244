"""What a node needs for AWS Systems Manager Session Manager, shared by both cluster backends."""

from __future__ import annotations

from aws_cdk import aws_iam as iam

#: The channel actions a Session Manager session opens. IAM gives them no resource scope.
SESSION_CHANNEL_ACTIONS = (
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)


def session_channels_statement() -> iam.PolicyStatement:
    """The ``SessionChannels`` statement: Session Manager's channel actions on ``*`` (they have no resource)."""
    return iam.PolicyStatement(sid="SessionChannels", actions=list(SESSION_CHANNEL_ACTIONS), resources=["*"])
