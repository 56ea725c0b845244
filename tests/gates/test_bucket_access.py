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
    for action in ("s3:GetObject", "s3:PutObject"):
        assert decide(mine, policy, arn, action, object_arn(bucket, archive)) == "allow"
    # The edge: the controller's grant is its own cluster's prefix, not the bucket.
    assert decide(mine, policy, arn, "s3:PutObject", object_arn(bucket, "mlcluster/patch/other/x")) == "implicit deny"


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
