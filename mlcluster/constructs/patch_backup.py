"""The bucket of a HyperPod cluster's patch backups: only the controller and the operator use it.

``mlcluster patch`` backs up the controller's Slurm state (every pending job's
script and environment, the accounting database) and later restores it as
root. Those objects and the run's state object therefore live in a bucket of
their own rather than in the data bucket, which training jobs may write
(``data_bucket_access: read_write``), whose root the Lustre DRA exports
``/fsx/data`` to, and which every node role reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.nag import acknowledge_compliance
from mlcluster.constructs.script_bucket import deny_bucket_policy_changes, deploy_role_arn

#: What the account (its IAM policies, through the key policy's root statement) may do with the key:
#: administer it, never use it. No kms:Create* (it would include kms:CreateGrant, a way to hand oneself
#: Decrypt), no Encrypt, Decrypt, ReEncrypt*, GenerateDataKey*. kms:PutKeyPolicy stays, so the key is
#: never locked out: an administrator can always change who uses it (and that change is in CloudTrail).
KEY_ADMIN_ACTIONS = (
    "kms:CancelKeyDeletion",
    "kms:CreateAlias",
    "kms:DeleteAlias",
    "kms:DescribeKey",
    "kms:DisableKey",
    "kms:DisableKeyRotation",
    "kms:EnableKey",
    "kms:EnableKeyRotation",
    "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:ListAliases",
    "kms:ListGrants",
    "kms:ListKeyPolicies",
    "kms:ListResourceTags",
    "kms:PutKeyPolicy",
    "kms:RetireGrant",
    "kms:RevokeGrant",
    "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:UpdateAlias",
    "kms:UpdateKeyDescription",
)
#: What the key's users may do, only through S3 in this region: read and write the bucket's objects.
KEY_USE_ACTIONS = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")


class PatchBackupBucket(Construct):
    """A private bucket for ``mlcluster patch``: KMS-encrypted, TLS only, versioned, policy locked.

    Built on ``DataBucket`` (public access blocked, TLS 1.2+ only, versioning,
    access logs) with its own KMS key, so that an identity policy that allows
    ``s3:*`` on ``*`` still needs a grant on the key. Its bucket policy denies
    every ``s3:PutObject`` that does not name SSE-KMS with this bucket's key
    (:meth:`_require_the_key`: a writer with S3 rights but no grant on the key
    cannot slip in an SSE-S3 object), denies
    every S3 action to the roles given to :meth:`deny_roles` (the instance
    groups other than the controller's), and denies changes to the bucket's
    policy, ACL and ownership to every principal but the deploy
    (:func:`deny_bucket_policy_changes`). No DRA links it: nothing on
    ``/fsx`` reaches it.

    The key's policy does not delegate its use to IAM: the account root (that
    is, IAM policies of the account) gets :data:`KEY_ADMIN_ACTIONS` only, and
    :data:`KEY_USE_ACTIONS` go, through S3 in this region only, to the named
    principals alone: the CloudFormation execution role, ``operator_role_arns``
    and the roles given to :meth:`allow_key_use` (the controller's). Whoever
    else holds ``s3:*`` and ``kms:*`` reads nothing in this bucket, short of
    rewriting the key policy (an administrator action, kept so that the key
    cannot be locked out).

    Default settings: a CloudFormation-generated name; bucket, logs and key
    retained when the stack is deleted; no operator roles but the deploy's.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        operator_role_arns: Sequence[str] = (),
    ) -> None:
        """Create the bucket, its key and log bucket.

        :param removal_policy: RETAIN (default) or DESTROY the bucket, its key and its logs.
        :param operator_role_arns: IAM roles (full ARNs, existing: KMS refuses a key policy naming a
            principal that does not exist) whose sessions run ``mlcluster patch``; they may use the key
            through S3. Default: none besides the CloudFormation execution role.
        """
        super().__init__(scope, construct_id)
        self.data_bucket = DataBucket(self, "Resource", encryption="kms", removal_policy=removal_policy)
        key = self.data_bucket.encryption_key
        if not isinstance(key, kms.Key):
            raise TypeError(f"{self.node.path}: DataBucket(encryption='kms') made no key of its own")
        self.key: kms.Key = key
        # A key policy of our own in place of CDK's default, which gives the account root kms:* (use
        # included). The key keeps its construct path (no replacement of a deployed key); statements
        # go through :meth:`allow_key_use`, never key.add_to_resource_policy (that document is unused).
        self.key_policy = iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="AccountAdministersTheKeyOnly",
                    principals=[iam.AccountRootPrincipal()],
                    actions=list(KEY_ADMIN_ACTIONS),
                    resources=["*"],
                )
            ]
        )
        cfn_key = key.node.default_child
        if not isinstance(cfn_key, kms.CfnKey):
            raise TypeError(f"{key.node.path}: no CfnKey to set the policy of")
        cfn_key.key_policy = self.key_policy
        self.bucket: s3.IBucket = self.data_bucket.bucket
        self.policy_writers = deny_bucket_policy_changes(self.bucket)
        self._require_the_key()
        self.allow_key_use("Operators", [deploy_role_arn(self), *operator_role_arns])
        acknowledge_compliance(
            self.data_bucket,
            "S3BucketReplicationEnabled",
            "The bucket holds the controller's Slurm state between the two halves of one `mlcluster patch` run; "
            "a replica would be a second copy of other users' job environments to protect, for state that is "
            "only needed until the restore.",
        )

    def deny_roles(self, role_arns: Sequence[str]) -> None:
        """Deny every S3 action on the bucket and its objects to ``role_arns`` (an explicit deny wins)."""
        if not role_arns:
            return
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="NoOtherNodeRole",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:*"],
                resources=[self.bucket.bucket_arn, self.bucket.arn_for_objects("*")],
                conditions={"ArnEquals": {"aws:PrincipalArn": list(role_arns)}},
            )
        )

    def _require_the_key(self) -> None:
        """Deny ``s3:PutObject`` unless the request asks for SSE-KMS with this bucket's key, by header.

        Default encryption would encrypt an upload that sends no header with the bucket's key, but
        an upload may name SSE-S3 (``AES256``) or another key and then needs no grant on this key:
        AmazonS3FullAccess alone would do. So both headers are required and compared:

        ==========================================  ======================  ==================
        request                                     SSEAlgorithm statement  KeyId statement
        ==========================================  ======================  ==================
        no ``x-amz-server-side-encryption``         deny (key absent)       deny (key absent)
        ``AES256`` (SSE-S3)                         deny                    deny (key absent)
        ``aws:kms`` without a key id                allowed                 deny (key absent)
        ``aws:kms`` with another key                allowed                 deny
        ``aws:kms`` with this key's ARN             allowed                 allowed
        ==========================================  ======================  ==================

        IAM's negated string operators evaluate to true when the key is absent from the request
        (IAM User Guide, "Condition operators": "If the policy condition requires that the key is
        not matched, such as StringNotLike or ArnNotLike, and the right key is not present, the
        condition is true"); the ``...IfExists`` form gives the same answer for an absent key, so
        plain ``StringNotEquals`` is used. Two statements, because keys within one operator are
        ANDed. S3 compares the key id header as sent: writers must send the full key ARN
        (``mlcluster-backup`` and ``mlcluster patch`` do, from the ``PatchBackupKeyArn`` output).
        """
        objects = self.bucket.arn_for_objects("*")
        for sid, key, value in (
            ("OnlySseKms", "s3:x-amz-server-side-encryption", "aws:kms"),
            ("OnlyThisKey", "s3:x-amz-server-side-encryption-aws-kms-key-id", self.key.key_arn),
        ):
            self.bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["s3:PutObject"],
                    resources=[objects],
                    conditions={"StringNotEquals": {key: value}},
                )
            )

    def allow_key_use(self, sid: str, role_arns: Sequence[str]) -> None:
        """Let ``role_arns`` use the key (:data:`KEY_USE_ACTIONS`) through S3 in this region, nothing else."""
        stack = cdk.Stack.of(self)
        self.key_policy.add_statements(
            iam.PolicyStatement(
                sid=sid,
                principals=[iam.ArnPrincipal(arn) for arn in role_arns],
                actions=list(KEY_USE_ACTIONS),
                resources=["*"],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}"}},
            )
        )

    def protect_state(self, role_arn: str, state_key: str) -> None:
        """Deny ``role_arn`` (the controller's role) writing or deleting ``state_key``: the operator's alone.

        The controller writes its backups under its prefix, which holds the run state too; the
        state decides what ``mlcluster patch`` runs as root next, so only the operator writes it.
        Deleting a version would roll the object back to an older state: denied as well.
        """
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheOperatorWritesTheState",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"],
                resources=[self.bucket.arn_for_objects(state_key)],
                conditions={"ArnEquals": {"aws:PrincipalArn": [role_arn]}},
            )
        )
