"""Which role the script bucket's policy lock lets change the policy (``deploy_role_arn``), by synthesizer.

The lock denies policy changes to everyone but CloudFormation's execution role of the default synthesizer's
bootstrap (``cdk-<qualifier>-cfn-exec-role-<account>-<region>``); a deploy as anyone else would lock itself out
of its own bucket, so every other synthesizer is refused with the reason.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.constructs.test_script_bucket_kills import scripts


def _lock_exemption(stack: cdk.Stack) -> object:
    policies = Template.from_stack(stack).find_resources("AWS::S3::BucketPolicy")
    (statement,) = [
        s
        for policy in policies.values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == "OnlyTheDeployChangesThePolicy"
    ]
    return statement["Condition"]


def test_the_context_qualifier_names_its_execution_role() -> None:
    app = cdk.App(context={"@aws-cdk/core:bootstrapQualifier": "team1"})
    stack = cdk.Stack(app, "dev-Cluster")
    scripts(stack)
    assert "cdk-team1-cfn-exec-role-" in json.dumps(_lock_exemption(stack))


def test_another_synthesizer_is_refused_with_its_name() -> None:
    stack = cdk.Stack(cdk.App(), "dev-Cluster", synthesizer=cdk.LegacyStackSynthesizer())
    with pytest.raises(ValueError, match=r"^dev-Cluster/Scripts/Resource.*synthesizer is LegacyStackSynthesizer"):
        scripts(stack)


@pytest.mark.parametrize("where", ["stack", "app"])
def test_an_explicit_default_synthesizer_is_refused_with_the_way_that_works(where: str) -> None:
    """aws-cdk-lib cannot read a Python-made DefaultStackSynthesizer's role back (its getter raises under jsii):
    a clear refusal with the context key, not jsii's traceback (found by the AWS review), whether it was given to
    the Stack or as the App's default (the user review)."""
    synthesizer = cdk.DefaultStackSynthesizer(qualifier="team1")
    if where == "stack":
        stack = cdk.Stack(cdk.App(), "dev-Cluster", synthesizer=synthesizer)
    else:
        stack = cdk.Stack(cdk.App(default_stack_synthesizer=synthesizer), "dev-Cluster")
    with pytest.raises(ValueError) as caught:
        scripts(stack)
    message = str(caught.value)
    assert "the stack's DefaultStackSynthesizer was passed explicitly (to the Stack, or as the App's" in message
    assert "'@aws-cdk/core:bootstrapQualifier'" in message
    assert "CloudFormationExecutionRoleArnGetterOnlyCalled" in message
