"""ScriptBucket (both backends' node scripts): only the deploy changes objects; no name AWS policies match."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk.assertions import Template

from mlcluster.constructs.script_bucket import OBJECT_CHANGE_ACTIONS, ScriptBucket


def deny_statement(stack: cdk.Stack) -> tuple[dict[str, Any], dict[str, Any]]:
    template = Template.from_stack(stack).to_json()
    resources = template["Resources"]
    (bucket_id,) = [
        k
        for k, v in resources.items()
        if v["Type"] == "AWS::S3::Bucket" and k.startswith("Scripts") and "AccessLogs" not in k
    ]
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::S3::BucketPolicy" and v["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    (deny,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "OnlyTheDeployChangesObjects"
    ]
    return deny, resources


def scripts(stack: cdk.Stack, **props: Any) -> ScriptBucket:
    return ScriptBucket(
        stack,
        "Scripts",
        prefix="pcluster/",
        sources=[s3deploy.Source.data("a.sh", "true")],
        purpose="test scripts",
        **props,
    )


@pytest.mark.parametrize("removal", [cdk.RemovalPolicy.RETAIN, cdk.RemovalPolicy.DESTROY])
def test_only_the_upload_and_the_emptying_roles_may_change_objects(removal: cdk.RemovalPolicy) -> None:
    stack = cdk.Stack(cdk.App(), "pc-Cluster")
    scripts(stack, removal_policy=removal)
    deny, resources = deny_statement(stack)
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert sorted(deny["Action"]) == sorted(OBJECT_CHANGE_ACTIONS)
    writers = [w["Fn::GetAtt"][0] for w in deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]]
    assert writers[0].startswith("CustomCDKBucketDeployment")
    if removal == cdk.RemovalPolicy.DESTROY:
        assert writers[1].startswith("CustomS3AutoDeleteObjectsCustomResourceProviderRole")
        assert resources[writers[1]]["Type"] == "AWS::IAM::Role"
    else:
        assert len(writers) == 1


@pytest.mark.parametrize(
    ("stack_name", "bucket_name", "message"),
    [
        ("SageMaker-dev-Cluster", None, "stack name 'SageMaker-dev-Cluster' contains 'sagemaker'"),
        ("dev-Cluster", "my-SAGEMAKER-scripts", "bucket_name 'my-SAGEMAKER-scripts' contains 'sagemaker'"),
    ],
)
def test_names_that_managed_policies_match_are_refused(stack_name: str, bucket_name: str | None, message: str) -> None:
    stack = cdk.Stack(cdk.App(), stack_name)
    with pytest.raises(ValueError, match=message):
        scripts(stack, bucket_name=bucket_name)


def test_a_name_near_the_word_is_accepted() -> None:
    scripts(cdk.Stack(cdk.App(), "sage-maker-dev-Cluster"), bucket_name="mlc-scripts-sage-maker")
