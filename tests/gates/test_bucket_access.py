"""Gate: who may read and write the patch backups, and who may change the script and backup buckets' policies.

Evaluated on the synthesized example assembly (identity policies of the roles as
synthesized, bucket policies as synthesized) with mlcluster/analysis/bucket_access.py:

- a HyperPod worker or login role cannot read or write the controller's patch backups and their
  state, even holding AmazonS3FullAccess besides its own policies (an explicit deny); the
  controller's role can;
- a principal holding AmazonS3FullAccess cannot delete or replace the policy (or the ACL) of any
  node-script bucket or the patch backup bucket; the CloudFormation execution role can;
- the backup bucket is not the data bucket and no DRA links it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly, Resource
from mlcluster.analysis.bucket_access import S3_FULL_ACCESS, bucket_policy, decide
from mlcluster.analysis.iam_calls import role_statements
from tests.gates.gate_support import Templates

INTRUDER = "arn:${AWS::Partition}:iam::${AWS::AccountId}:user/has-s3-full-access"
DEPLOY = re.compile(r"arn:\$\{AWS::Partition\}:iam::(\d{12}|\$\{AWS::AccountId\}):role/cdk-hnb659fds-cfn-exec-role-")
STATE = "mlcluster/patch/{cluster}/state.json"


def backup_bucket(assembly: Assembly, environment: str) -> Resource:
    stack = f"{environment}/Cluster"
    output = assembly.templates[stack]["Outputs"]["PatchBackupBucketName"]["Value"]
    found = assembly.resource(assembly.text(stack, output))
    assert found is not None and found.type == "AWS::S3::Bucket"
    return found


def hyperpod_roles(assembly: Assembly, environment: str) -> tuple[str, dict[str, Resource]]:
    """The cluster's name and its execution roles by instance group (the controller's first)."""
    ((cluster,),) = [list(assembly.resources(environment, "AWS::SageMaker::Cluster"))]
    spec = assembly.render(cluster.stack, dict(cluster.properties))
    roles = {}
    for group in spec["InstanceGroups"]:
        role = assembly.resource(assembly.identity(str(group["ExecutionRole"])))
        assert role is not None
        roles[str(group["InstanceGroupName"])] = role
    return str(spec["ClusterName"]), roles


def object_arn(bucket: Resource, key: str) -> str:
    return f"arn:${{AWS::Partition}}:s3:::{bucket.name}/{key}"


def test_a_worker_role_cannot_read_or_write_the_patch_backups(examples: Assembly) -> None:
    bucket = backup_bucket(examples, "hyperpod")
    policy = bucket_policy(examples, bucket)
    cluster, roles = hyperpod_roles(examples, "hyperpod")
    state, archive = STATE.format(cluster=cluster), STATE.format(cluster=cluster).replace("state.json", "r/x.tar.gz")
    controller, *others = roles
    assert others, "the example has worker (and login) groups"
    for group in others:
        role = roles[group]
        arn = f"{role.name[:-1]}.Arn}}"
        for identity in (
            role_statements(examples, "hyperpod", role),
            [*role_statements(examples, "hyperpod", role), *S3_FULL_ACCESS],
        ):
            for action, key in (
                ("s3:GetObject", state),
                ("s3:PutObject", state),
                ("s3:GetObject", archive),
                ("s3:PutObject", archive),
            ):
                assert decide(identity, policy, arn, action, object_arn(bucket, key)) == "explicit deny", (
                    group,
                    action,
                    key,
                )
    role = roles[controller]
    mine = role_statements(examples, "hyperpod", role)
    arn = f"{role.name[:-1]}.Arn}}"
    right = {
        "s3:x-amz-server-side-encryption": "aws:kms",
        "s3:x-amz-server-side-encryption-aws-kms-key-id": _key_arn(examples, bucket),
    }
    assert decide(mine, policy, arn, "s3:GetObject", object_arn(bucket, archive)) == "allow"
    assert decide(mine, policy, arn, "s3:PutObject", object_arn(bucket, archive), right) == "allow"
    # The edge: the controller's grant is its own cluster's prefix, not the bucket.
    other = object_arn(bucket, "mlcluster/patch/other/x")
    assert decide(mine, policy, arn, "s3:PutObject", other, right) == "implicit deny"


def test_the_backup_bucket_is_not_the_data_bucket_and_no_dra_reaches_it(examples: Assembly) -> None:
    bucket = backup_bucket(examples, "hyperpod")
    text = str([r.properties for r in examples.resources("hyperpod", "AWS::FSx::DataRepositoryAssociation")])
    assert bucket.logical_id not in text
    storage = examples.templates["hyperpod/Storage"]["Outputs"]["DataBucketName"]["Value"]
    assert examples.identity(examples.text("hyperpod/Storage", storage)) != bucket.name
    properties = bucket.properties
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    rule = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert rule["SSEAlgorithm"] == "aws:kms"
    assert any(
        s.effect == "Deny" and s.conditions == {"Bool": {"aws:SecureTransport": "false"}}
        for s in bucket_policy(examples, bucket)
    )


def locked_buckets(assembly: Assembly) -> list[Resource]:
    """Every bucket whose policy protects what it holds: node-script buckets and patch backup buckets."""
    found = []
    for environment in assembly.environments:
        for bucket in assembly.resources(environment, "AWS::S3::Bucket"):
            sids = {s.sid for s in bucket_policy(assembly, bucket)}
            if {"OnlyTheDeployChangesObjects", "NoOtherNodeRole"} & sids:
                found.append(bucket)
    return found


def test_s3_full_access_cannot_remove_a_script_or_backup_bucket_policy(examples: Assembly) -> None:
    buckets = locked_buckets(examples)
    stacks = {b.stack for b in buckets}
    assert {"hyperpod/Cluster", "p5/Cluster"} <= stacks, stacks
    for bucket in buckets:
        policy = bucket_policy(examples, bucket)
        arn = f"arn:${{AWS::Partition}}:s3:::{bucket.name}"
        (lock,) = [s for s in policy if s.sid == "OnlyTheDeployChangesThePolicy"]
        (deploy,) = lock.conditions["ArnNotEquals"]["aws:PrincipalArn"]
        assert DEPLOY.match(deploy), deploy
        for action in ("s3:DeleteBucketPolicy", "s3:PutBucketPolicy", "s3:PutBucketAcl"):
            assert decide(S3_FULL_ACCESS, policy, INTRUDER, action, arn) == "explicit deny", (bucket.name, action)
            # The edge: the deploy itself still updates the policy with the stack.
            assert decide(S3_FULL_ACCESS, policy, deploy, action, arn) == "allow", (bucket.name, action)
        # And object writes stay the deploy's upload alone (script buckets).
        if any(s.sid == "OnlyTheDeployChangesObjects" for s in policy):
            assert decide(S3_FULL_ACCESS, policy, INTRUDER, "s3:PutObject", f"{arn}/on_create.sh") == "explicit deny"


def test_the_gate_sees_a_missing_lock(
    examples: Assembly, broken: Callable[[Callable[[Templates], object]], Assembly]
) -> None:
    """Taking the lock statement out of the backup bucket's policy lets AmazonS3FullAccess delete it."""
    bucket = backup_bucket(examples, "hyperpod")

    def unlock(templates: Templates) -> None:
        for body in templates[bucket.stack]["Resources"].values():
            if body["Type"] == "AWS::S3::BucketPolicy":
                statements: list[dict[str, Any]] = body["Properties"]["PolicyDocument"]["Statement"]
                statements[:] = [s for s in statements if s.get("Sid") != "OnlyTheDeployChangesThePolicy"]

    weak = broken(unlock)
    policy = bucket_policy(weak, bucket)
    assert (
        decide(S3_FULL_ACCESS, policy, INTRUDER, "s3:DeleteBucketPolicy", f"arn:${{AWS::Partition}}:s3:::{bucket.name}")
        == "allow"
    )


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({"ArnNotEquals": {"aws:PrincipalArn": ["arn:aws:iam::1:role/deploy"]}}, "explicit deny"),
        ({"ArnEquals": {"aws:PrincipalArn": ["arn:aws:iam::1:role/deploy"]}}, "allow"),
        ({"ArnEquals": {"aws:PrincipalArn": ["arn:aws:iam::1:user/intruder"]}}, "explicit deny"),
        (
            {"ForAnyValue:StringEquals": {"aws:PrincipalTag/x": ["y"]}},
            "allow",
        ),  # not understood: the Deny is not counted
    ],
)
def test_decide_reads_principal_conditions(conditions: dict[str, Any], expected: str) -> None:
    from mlcluster.analysis.bucket_access import ResourceStatement

    deny = ResourceStatement("Deny", ("*",), ("s3:DeleteBucketPolicy",), ("arn:aws:s3:::b",), conditions, "x")
    assert (
        decide(S3_FULL_ACCESS, [deny], "arn:aws:iam::1:user/intruder", "s3:DeleteBucketPolicy", "arn:aws:s3:::b")
        == expected
    )


def _key_arn(examples: Assembly, bucket: Resource) -> str:
    """The key ARN the backup bucket's policy requires, as the gate renders it."""
    (statement,) = [s for s in bucket_policy(examples, bucket) if s.sid == "OnlyThisKey"]
    (arn,) = statement.conditions["StringNotEquals"].values()
    return str(arn)


def test_only_sse_kms_with_the_bucket_key_is_written(examples: Assembly) -> None:
    """AmazonS3FullAccess cannot PUT with SSE-S3, without headers or with another key; the key's ARN can."""
    bucket = backup_bucket(examples, "hyperpod")
    policy = bucket_policy(examples, bucket)
    cluster, roles = hyperpod_roles(examples, "hyperpod")
    key = _key_arn(examples, bucket)
    archive = object_arn(bucket, STATE.format(cluster=cluster).replace("state.json", "r/x.tar.gz"))
    sse, key_id = "s3:x-amz-server-side-encryption", "s3:x-amz-server-side-encryption-aws-kms-key-id"
    other_key = "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"
    for request in ({}, {sse: "AES256"}, {sse: "aws:kms"}, {sse: "aws:kms", key_id: other_key}, {key_id: key}):
        assert decide(S3_FULL_ACCESS, policy, INTRUDER, "s3:PutObject", archive, request) == "explicit deny", request
    right = {sse: "aws:kms", key_id: key}
    # The edge: the right headers pass the bucket policy (the key's own policy then decides, see test below).
    assert decide(S3_FULL_ACCESS, policy, INTRUDER, "s3:PutObject", archive, right) == "allow"
    controller = roles[next(iter(roles))]
    mine = role_statements(examples, "hyperpod", controller)
    arn = f"{controller.name[:-1]}.Arn}}"
    assert decide(mine, policy, arn, "s3:PutObject", archive, right) == "allow"
    assert decide(mine, policy, arn, "s3:PutObject", archive, {sse: "AES256"}) == "explicit deny"


def test_the_controller_cannot_write_the_run_state(examples: Assembly) -> None:
    """The state decides what runs as root next: the controller may read it but not write or delete it."""
    bucket = backup_bucket(examples, "hyperpod")
    policy = bucket_policy(examples, bucket)
    cluster, roles = hyperpod_roles(examples, "hyperpod")
    controller = roles[next(iter(roles))]
    mine = role_statements(examples, "hyperpod", controller)
    arn = f"{controller.name[:-1]}.Arn}}"
    right = {
        "s3:x-amz-server-side-encryption": "aws:kms",
        "s3:x-amz-server-side-encryption-aws-kms-key-id": _key_arn(examples, bucket),
    }
    state = object_arn(bucket, STATE.format(cluster=cluster))
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"):
        assert decide(mine, policy, arn, action, state, right) == "explicit deny", action
    assert decide(mine, policy, arn, "s3:GetObject", state) == "allow"
    # The edge: the operator (here AmazonS3FullAccess, the right headers) still writes it.
    assert decide(S3_FULL_ACCESS, policy, INTRUDER, "s3:PutObject", state, right) == "allow"


def backup_key(examples: Assembly, bucket: Resource) -> Resource:
    rule = bucket.properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    key = examples.resource(examples.text(bucket.stack, rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]))
    assert key is not None and key.type == "AWS::KMS::Key"
    return key


#: What decrypts, encrypts or hands out those rights: none of it may reach the account root (all of IAM).
KEY_USE = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom", "kms:CreateGrant")


def test_only_the_named_roles_can_use_the_backup_key(examples: Assembly) -> None:
    """The key policy: root administers (PutKeyPolicy kept, so no lock-out) but does not use; users are named."""
    from mlcluster.analysis.iam_calls import _wildcard

    bucket = backup_bucket(examples, "hyperpod")
    key = backup_key(examples, bucket)
    document = examples.render(key.stack, key.properties["KeyPolicy"])
    _, roles = hyperpod_roles(examples, "hyperpod")
    controller = roles[next(iter(roles))]
    users: set[str] = set()
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        principals = statement["Principal"]["AWS"]
        principals = principals if isinstance(principals, list) else [principals]
        if any(p.endswith(":root") or p.endswith(":root}") or ":root" in p for p in principals):
            for wanted in ("kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:EnableKeyRotation"):
                assert any(_wildcard(a, wanted) for a in actions), wanted
            for use in KEY_USE:
                assert not any(_wildcard(a, use) for a in actions), (use, actions)
            continue
        assert statement["Condition"] == {"StringEquals": {"kms:ViaService": "s3.${AWS::Region}.${AWS::URLSuffix}"}}, (
            statement
        )
        assert sorted(actions) == ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
        users.update(principals)
    assert users == {f"{controller.name[:-1]}.Arn}}", *[u for u in users if DEPLOY.match(u)]}, users
    assert any(DEPLOY.match(u) for u in users), users


def test_the_gate_sees_a_key_delegated_to_iam(
    examples: Assembly, broken: Callable[[Callable[[Templates], object]], Assembly]
) -> None:
    """The CDK default (root gets kms:*) would let any IAM policy with kms:* decrypt: the check above fails."""
    bucket = backup_bucket(examples, "hyperpod")
    key = backup_key(examples, bucket)

    def delegate(templates: Templates) -> None:
        body = templates[key.stack]["Resources"][key.logical_id]
        body["Properties"]["KeyPolicy"]["Statement"][0]["Action"] = "kms:*"

    with pytest.raises(AssertionError):
        test_only_the_named_roles_can_use_the_backup_key(broken(delegate))


def test_only_a_lambda_function_can_act_as_the_script_buckets_writer(examples: Assembly) -> None:
    """The precise trust-map row for the node-script and lifecycle buckets: their one object writer is the upload
    function's role (with a destroy policy also the auto-delete function's); each trusts only the Lambda service,
    so no principal can assume it, and no resource policy (AWS::Lambda::Permission) lets anyone invoke a function
    of these stacks. Whoever may act as a writer does so through Lambda with an identity policy of the account
    (lambda:InvokeFunction, UpdateFunctionCode, UpdateFunctionConfiguration, or iam:PassRole of the role to a new
    function): an operator right, which a Lambda resource policy cannot take away (it has no Deny, see
    test_a_lambda_resource_policy_cannot_deny)."""
    buckets = [
        b
        for b in locked_buckets(examples)
        if "OnlyTheDeployChangesObjects" in {s.sid for s in bucket_policy(examples, b)}
    ]
    assert {b.stack for b in buckets} >= {"hyperpod/Cluster", "p5/Cluster"}
    for bucket in buckets:
        (lock,) = [s for s in bucket_policy(examples, bucket) if s.sid == "OnlyTheDeployChangesObjects"]
        writers = lock.conditions["ArnNotEquals"]["aws:PrincipalArn"]
        assert 1 <= len(writers) <= 2, writers
        for writer in writers:
            role = examples.resource(writer.removesuffix(".Arn}") + "}") if writer.endswith(".Arn}") else None
            assert role is not None and role.type == "AWS::IAM::Role", writer
            trust = examples.render(role.stack, role.properties["AssumeRolePolicyDocument"])["Statement"]
            assert [s["Principal"] for s in trust] == [{"Service": "lambda.amazonaws.com"}], (writer, trust)
            assert all(s["Action"] == "sts:AssumeRole" and s["Effect"] == "Allow" for s in trust)
        assert not list(examples.resources(bucket.stack.split("/")[0], "AWS::Lambda::Permission")), bucket.stack


def test_a_lambda_resource_policy_cannot_deny() -> None:
    """The contract the row rests on, from botocore's Lambda model: AddPermission (the only way to write a
    function's resource policy) has no Effect, so it can only allow; an account's own principals with
    lambda:InvokeFunction in an identity policy are never refused by it."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("lambda")
    members = set(model.operation_model("AddPermission").input_shape.members)
    assert "Effect" not in members
    assert {"FunctionName", "StatementId", "Action", "Principal"} <= members
