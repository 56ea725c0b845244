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
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.nag import acknowledge_compliance
from mlcluster.constructs.script_bucket import deny_bucket_policy_changes


class PatchBackupBucket(Construct):
    """A private bucket for ``mlcluster patch``: KMS-encrypted, TLS only, versioned, policy locked.

    Built on ``DataBucket`` (public access blocked, TLS 1.2+ only, versioning,
    access logs) with its own KMS key, so that an identity policy that allows
    ``s3:*`` on ``*`` still needs a grant on the key. Its bucket policy denies
    every S3 action to the roles given to :meth:`deny_roles` (the instance
    groups other than the controller's), and denies changes to the bucket's
    policy, ACL and ownership to every principal but the deploy
    (:func:`deny_bucket_policy_changes`). No DRA links it: nothing on
    ``/fsx`` reaches it.

    Default settings: a CloudFormation-generated name; bucket, logs and key
    retained when the stack is deleted.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    ) -> None:
        """Create the bucket, its key and log bucket.

        :param removal_policy: RETAIN (default) or DESTROY the bucket, its key and its logs.
        """
        super().__init__(scope, construct_id)
        self.data_bucket = DataBucket(self, "Resource", encryption="kms", removal_policy=removal_policy)
        self.bucket: s3.IBucket = self.data_bucket.bucket
        self.policy_writers = deny_bucket_policy_changes(self.bucket)
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
