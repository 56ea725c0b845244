"""ScriptBucket's refusal of a name AWS managed policies match, for a name with a deploy-time part (issue 27).

AmazonSageMakerFullAccess and AmazonSageMakerFeatureStoreAccess let their holders write to any bucket whose
name contains ``sagemaker``; the script bucket holds what runs as root on the nodes. The check used to skip
every name with a token in it, so ``f"mlc-sagemaker-scripts-{cdk.Aws.ACCOUNT_ID}"`` passed although its literal
text carries the word (found from the second mutation sample's ``ScriptBucket.__init__`` mutant 24). The
literal parts of such a name are checked now; the parts only known at deploy time cannot be, and are not
(tests/constructs/test_script_bucket_kills.py accepts those).
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from tests.constructs.test_script_bucket_kills import scripts


def test_a_name_with_the_word_beside_a_deploy_time_part_is_refused_as_the_template_shows_it() -> None:
    """A bucket name built with the account id still carries ``sagemaker`` in its literal text, so AWS managed
    policies would let their holders write the root scripts: refused, the name shown as the template has it
    (``<AWS::AccountId>``, not CDK's token text) (``ScriptBucket.__init__`` mutant 24 of the second sample:
    before this, a name with any deploy-time part was never checked)."""
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    with pytest.raises(ValueError) as caught:
        scripts(stack, bucket_name=f"mlc-SageMaker-scripts-{cdk.Aws.ACCOUNT_ID}")
    assert str(caught.value) == (
        "bucket_name 'mlc-SageMaker-scripts-<AWS::AccountId>' contains 'sagemaker': AWS managed policies "
        "(AmazonSageMakerFullAccess, AmazonSageMakerFeatureStoreAccess) let their holders write to any bucket whose "
        "name contains it, and this construct's buckets hold scripts that run as root on the nodes and their access logs; "
        "choose a name without it"
    )


@pytest.mark.parametrize(
    "name",
    [
        cdk.Fn.sub("mlc-sagemaker-${AWS::AccountId}"),  # Fn::Sub's literal text
        cdk.Fn.sub("mlc-${Word}-${AWS::AccountId}", {"Word": "SageMaker"}),  # a variable given as a literal
        cdk.Fn.join("", ["mlc-sage", "maker-", cdk.Aws.ACCOUNT_ID]),  # the word across two joined parts
        cdk.Fn.join("sage", ["mlc-", "maker"]),  # ... or made by the delimiter
    ],
    ids=["sub", "sub-variable", "join-parts", "join-delimiter"],
)
def test_a_name_that_deploys_with_the_word_is_refused_however_the_template_builds_it(name: str) -> None:
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    with pytest.raises(ValueError, match=r"^bucket_name .* contains 'sagemaker': AWS managed policies"):
        scripts(stack, bucket_name=name)


@pytest.mark.parametrize(
    "name",
    [
        cdk.Fn.sub("mlc-${SageMakerRun}-scripts", {"SageMakerRun": cdk.Aws.ACCOUNT_ID}),  # only a variable's name
        cdk.Fn.sub("mlc-sage${AWS::AccountId}maker"),  # a deploy-time part between: the word cannot be formed here
        f"mlc-sagemake-r-{cdk.Aws.ACCOUNT_ID}",  # next to the word, not it
    ],
    ids=["variable-name", "split-by-deploy-time-part", "near-miss"],
)
def test_a_name_whose_known_text_lacks_the_word_is_accepted(name: str) -> None:
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    scripts(stack, bucket_name=name)


@pytest.mark.parametrize(
    ("stack_name", "construct_id", "bucket_name", "refused"),
    [
        # No bucket_name: CloudFormation names both buckets "<stack name>-<logical id>-<random>", lower-cased.
        ("dev-Cluster", "SageMakerScripts", None, "construct path 'SageMakerScripts' (the buckets' logical ids)"),
        ("dev-Cluster", "Sage-Maker", None, "construct path 'Sage-Maker' (the buckets' logical ids)"),
        # A bucket_name leaves the access-log bucket's name generated: the stack name still counts.
        ("SageMakerHyperPod", "Scripts", "mlc-scripts", "stack name 'SageMakerHyperPod'"),
        # The stack's name stands for AWS::StackName.
        ("mlc-sagemaker-dev", "Scripts", f"{cdk.Aws.STACK_NAME}-scripts", "bucket_name '<AWS::StackName>-scripts'"),
        # At the edge: a hyphen breaks the word in a stack name (kept in the bucket name), and a name without it.
        ("sage-maker-dev", "Scripts", None, None),
        ("dev-Cluster", "Scripts", f"{cdk.Aws.STACK_NAME}-scripts", None),
    ],
    # (explicit ids: a token's text differs between pytest-xdist workers)
    ids=["logical-id", "logical-id-split", "stack-name-beside-bucket-name", "stack-name-token", "hyphen", "token"],
)
def test_every_bucket_name_the_construct_makes_is_checked(
    stack_name: str, construct_id: str, bucket_name: str | None, refused: str | None
) -> None:
    """The outside attacker review: a generated name carries the logical id (the construct path) and the stack
    name, and the access-log bucket's name is generated even when the script bucket's is given."""
    stack = cdk.Stack(cdk.App(), stack_name)
    props = {} if bucket_name is None else {"bucket_name": bucket_name}
    if refused is None:
        scripts(stack, construct_id, **props)
        return
    with pytest.raises(ValueError) as caught:
        scripts(stack, construct_id, **props)
    assert str(caught.value).startswith(f"{refused} contains 'sagemaker': AWS managed policies")


def _opaque_names(stack: cdk.Stack) -> list[tuple[str, str]]:
    parameter = cdk.CfnParameter(stack, "BucketName")
    return [
        (parameter.value_as_string, "BucketName"),
        (cdk.Fn.import_value("shared-scripts-bucket"), "Fn::ImportValue"),
        (cdk.Fn.sub("mlc-${Suffix}"), "${Suffix}"),
        (cdk.Fn.join("-", ["mlc", cdk.Fn.select(0, cdk.Fn.split(",", parameter.value_as_string))]), "Fn::Select"),
    ]


@pytest.mark.parametrize("index", range(4), ids=["parameter", "import", "sub-variable", "select"])
def test_a_name_with_a_part_nobody_can_read_at_synth_is_refused(index: int) -> None:
    """A parameter, an import or any other deploy-time value could carry ``sagemaker`` (the attacker review: a
    name from a CfnParameter passed the word check, its text being unknown)."""
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    name, part = _opaque_names(stack)[index]
    with pytest.raises(ValueError) as caught:
        scripts(stack, bucket_name=name)
    message = str(caught.value)
    assert message.startswith("bucket_name ") and " has a part known only at deploy time (" in message
    assert part in message.split(" has a part known only at deploy time (", 1)[1].split("), which", 1)[0]
    assert message.endswith(
        "which could bring 'sagemaker' into the name (AWS managed policies let their holders write to any bucket "
        "whose name contains it); allowed: literal text with the account, region or partition, such as "
        "f'mlc-scripts-{cdk.Aws.ACCOUNT_ID}', or no bucket_name"
    )


def test_the_pseudo_parameters_that_cannot_hold_the_word_are_accepted() -> None:
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    scripts(
        stack,
        bucket_name=f"mlc-{cdk.Aws.ACCOUNT_ID}-{cdk.Aws.REGION}-{cdk.Aws.PARTITION}-{cdk.Aws.URL_SUFFIX}-"
        f"{cdk.Aws.STACK_NAME}",
    )


GLUE_WHY = (
    "AWSGlueServiceRole (an AWS managed policy) lets its holders write and delete objects there, and this "
    "construct's buckets hold scripts that run as root on the nodes"
)


NAME = ", and so would the bucket's name: " + GLUE_WHY + "; choose a name without it"
PREFIX = ": " + GLUE_WHY + "; choose a prefix without it"


@pytest.mark.parametrize(
    ("stack_name", "props", "refused"),
    [
        ("aws-glue-dev-Cluster", {}, "stack name 'aws-glue-dev-Cluster' begins with 'aws-glue-'" + NAME),
        (
            "dev-Cluster",
            {"bucket_name": "aws-glue-scripts"},
            "bucket_name 'aws-glue-scripts' begins with 'aws-glue-'" + NAME,
        ),
        ("dev-Cluster", {"prefix": "aws-glue-jobs/"}, "prefix 'aws-glue-jobs/' contains 'aws-glue-'" + PREFIX),
        ("dev-Cluster", {"prefix": "jobs/aws-glue-x/"}, "prefix 'jobs/aws-glue-x/' contains 'aws-glue-'" + PREFIX),
    ],
    ids=["stack-name", "bucket-name", "prefix", "prefix-folder"],
)
def test_names_and_keys_an_aws_glue_policy_grants_writes_to_are_refused(
    stack_name: str, props: dict[str, str], refused: str
) -> None:
    """AWSGlueServiceRole grants s3:PutObject and s3:DeleteObject on "aws-glue-*/*" and "*/*aws-glue-*/*"
    (attacker review)."""
    stack = cdk.Stack(cdk.App(), stack_name)
    with pytest.raises(ValueError) as caught:
        scripts(stack, **props)
    assert str(caught.value) == refused


@pytest.mark.parametrize(
    ("stack_name", "props"),
    [
        ("dev-aws-glue-Cluster", {}),  # inside a stack name: the bucket's name does not begin with it
        ("dev-Cluster", {"bucket_name": "mlc-aws-glue-scripts"}),
        ("dev-Cluster", {"prefix": "aws-glue/"}),  # without the hyphen
    ],
    ids=["stack-name-inside", "bucket-name-inside", "prefix-no-hyphen"],
)
def test_names_next_to_the_glue_patterns_are_accepted(stack_name: str, props: dict[str, str]) -> None:
    scripts(cdk.Stack(cdk.App(), stack_name), **props)
