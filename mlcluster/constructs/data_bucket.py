"""The data bucket: datasets and checkpoints that outlive clusters, plus its access-log bucket.

FSx for Lustre links to this bucket through data repository associations
(see ``mlcluster.constructs.lustre``); ``grant_fsx_data_repository_access``
is what the bucket's side of that link needs.
"""

from __future__ import annotations

from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.config.storage import bucket_name_problem
from mlcluster.constructs.log_key import key_removal_policy
from mlcluster.constructs.nag import KMS_KEY, acknowledge, acknowledge_compliance, skip_checkov

#: Path and name prefix of the role FSx for Lustre creates for each file system it links to S3.
FSX_S3_ROLE_PREFIX = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_"
#: What the documented key-policy statement for FSx on SSE-KMS buckets allows.
FSX_KMS_ACTIONS = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
#: Noncurrent (deleted or overwritten) access-log objects are kept this long before they expire.
LOG_NONCURRENT_DAYS = 30
#: The CDK feature flag that makes S3 deliver access logs under a bucket policy instead of an ACL.
SERVER_ACCESS_LOGS_USE_BUCKET_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"
#: Where CDK puts the shared provider behind ``auto_delete_objects`` in a stack.
AUTO_DELETE_PROVIDER = "Custom::S3AutoDeleteObjectsCustomResourceProvider"
#: Why CDK's auto-delete-objects function (environments that destroy data on delete) keeps the Lambda defaults
#: the compliance packs and checkov flag, by the packs' rule name (checkov's counterparts get the same reason).
AUTO_DELETE_REASONS = {
    "LambdaConcurrency": "aws-cdk-lib's auto-delete-objects function runs once, when its bucket is deleted with the "
    "stack; reserving concurrency would take capacity from the account's unreserved pool for no protection.",
    "LambdaDLQ": "CloudFormation invokes aws-cdk-lib's auto-delete-objects function asynchronously, and it reports "
    "every failure to the custom resource's response URL itself, which fails the stack deletion; a dead-letter "
    "queue would only keep events CloudFormation has already failed, which nobody replays.",
    "LambdaInsideVPC": "aws-cdk-lib's auto-delete-objects function only lists and deletes objects through the S3 "
    "API; running it in the VPC would add interfaces and a dependency on the NAT without reaching anything there.",
}
#: The only removal policies a bucket (and the file systems) accept here.
#: RETAIN, RETAIN_ON_UPDATE_OR_DELETE (``RetainExceptOnCreate``: deleted when its create rolls back) or DESTROY.
REMOVAL_POLICIES = (cdk.RemovalPolicy.RETAIN, cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE, cdk.RemovalPolicy.DESTROY)


def grant_fsx_data_repository_access(
    bucket: s3.IBucket, file_system_id: str, *, bucket_name: str | None = None
) -> bool:
    """Let the FSx for Lustre file system ``file_system_id`` use ``bucket``'s KMS key through S3.

    FSx reaches a linked bucket with a service-linked role it creates per
    file system (``AWSServiceRoleForFSxS3Access_<file system id>``). That
    role's own policy covers S3, so an SSE-S3 bucket needs nothing. With
    SSE-KMS, the FSx for Lustre guide ("Working with server-side encrypted
    Amazon S3 buckets") requires a key-policy statement that lets the role
    encrypt and decrypt through S3 for this bucket's objects. It is added
    here with the role named in an ``aws:PrincipalArn`` condition rather
    than as the principal, because KMS rejects a key policy naming a role
    that does not exist yet, and FSx creates the role only when it links
    the bucket. The conditions keep the documented scope: this account,
    calls S3 makes in this region, and the bucket's objects (the bucket ARN
    too, for S3 Bucket Keys).

    The bucket is named by ``bucket_name`` or, if it is a literal,
    ``bucket.bucket_name``. A bucket whose name CloudFormation generates
    cannot be named in its own key's policy (the key would depend on the
    bucket and the bucket on the key), so then the statement covers any
    bucket; the principal is still one file system's role, which FSx uses
    only for buckets linked to that file system.

    Returns False when the key cannot be changed here (an imported key): its
    owner must add the statement. Returns True when nothing is needed or the
    statement was added.
    """
    key = bucket.encryption_key
    if key is None:
        return True
    name = bucket_name if bucket_name is not None else bucket.bucket_name
    if cdk.Token.is_unresolved(name):
        name = "*"
    bucket_arn = f"arn:{cdk.Aws.PARTITION}:s3:::{name}"
    role_arn = f"arn:{cdk.Aws.PARTITION}:iam::{cdk.Aws.ACCOUNT_ID}:{FSX_S3_ROLE_PREFIX}{file_system_id}"
    statement = iam.PolicyStatement(
        principals=[iam.AnyPrincipal()],
        actions=FSX_KMS_ACTIONS,
        resources=["*"],
        conditions={
            "StringEquals": {
                "kms:CallerAccount": cdk.Aws.ACCOUNT_ID,
                "kms:ViaService": f"s3.{cdk.Aws.REGION}.{cdk.Aws.URL_SUFFIX}",
            },
            "ArnLike": {"aws:PrincipalArn": role_arn},
            "StringLike": {"kms:EncryptionContext:aws:s3:arn": [bucket_arn, f"{bucket_arn}/*"]},
        },
    )
    added = bool(key.add_to_resource_policy(statement, allow_no_op=True).statement_added)
    if added:
        skip_checkov(
            key,
            "CKV_AWS_33",
            "The only statement with a wildcard principal is the one FSx for Lustre documents for SSE-KMS buckets: "
            "aws:PrincipalArn limits it to the FSx service-linked role of one file system (KMS refuses a key policy "
            "naming a role that does not exist yet), kms:ViaService to S3 in this region, kms:CallerAccount to this "
            "account, and the encryption context to the data bucket's objects.",
            KMS_KEY,
        )
    return added


class DataBucket(Construct):
    """An S3 bucket for training data and checkpoints, secured by default.

    The bucket outlives clusters and, by default, the stack: it is retained
    when the stack is deleted or the bucket replaced.

    Default settings:
    - All public access blocked; objects owned by the bucket owner (ACLs off).
    - A bucket policy denies any request not made over TLS 1.2 or newer.
    - SSE-S3 encryption; ``encryption="kms"`` uses ``encryption_key`` or a new
      KMS key with yearly rotation, with S3 Bucket Keys on.
    - Versioning on; incomplete multipart uploads aborted after 7 days;
      noncurrent versions kept until ``noncurrent_version_expiration_days``
      is given.
    - Server access logs go to a dedicated log bucket that is itself private,
      TLS-only, SSE-S3 encrypted and versioned, whose logs expire after
      ``access_log_retention_days`` (365) and their old versions 30 days later.
    - Removal policy RETAIN (DeletionPolicy and UpdateReplacePolicy Retain)
      for both buckets and the key. DESTROY empties and deletes them.

    Attributes: ``bucket`` (the data bucket, id ``Resource``), ``log_bucket``
    (id ``AccessLogs``), ``encryption_key`` (None with SSE-S3; id ``Key``
    when created here).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket_name: str | None = None,
        encryption: Literal["s3", "kms"] = "s3",
        encryption_key: kms.IKey | None = None,
        abort_incomplete_multipart_upload_days: int = 7,
        noncurrent_version_expiration_days: int | None = None,
        access_log_retention_days: int = 365,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the data bucket, its log bucket and (with ``encryption="kms"``) a key if none is given.

        :param bucket_name: an explicit bucket name. Default: generated by CloudFormation.
        :param encryption: ``s3`` (SSE-S3) or ``kms`` (SSE-KMS). Default: ``s3``.
        :param encryption_key: the KMS key for ``kms``. Default: a new key with rotation on.
        :param abort_incomplete_multipart_upload_days: days before unfinished uploads are
            cleaned up. Default: 7.
        :param noncurrent_version_expiration_days: days before overwritten or deleted object
            versions expire. Default: never.
        :param access_log_retention_days: days access logs are kept. Default: 365.
        :param removal_policy: RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY. Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        _check_props(
            bucket_name=bucket_name,
            encryption=encryption,
            encryption_key=encryption_key,
            abort_incomplete_multipart_upload_days=abort_incomplete_multipart_upload_days,
            noncurrent_version_expiration_days=noncurrent_version_expiration_days,
            access_log_retention_days=access_log_retention_days,
            removal_policy=removal_policy,
        )
        destroy = removal_policy == cdk.RemovalPolicy.DESTROY
        self._bucket_name = bucket_name
        # Log delivery by bucket policy (not the legacy LogDeliveryWrite ACL), so the log bucket can keep
        # ACLs disabled; set on this subtree only, whatever the app's feature flags say.
        self.node.set_context(SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, True)

        self.log_bucket = s3.Bucket(
            self,
            "AccessLogs",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs",
                    expiration=cdk.Duration.days(access_log_retention_days),
                    noncurrent_version_expiration=cdk.Duration.days(LOG_NONCURRENT_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(abort_incomplete_multipart_upload_days),
                )
            ],
            removal_policy=removal_policy,
            auto_delete_objects=destroy,
        )
        acknowledge(
            self.log_bucket,
            "AwsSolutions-S1",
            "This bucket is the server access log destination of the data bucket; logging its own access would "
            "write a log record for every log record S3 delivers.",
        )
        acknowledge_compliance(
            self.log_bucket,
            "S3DefaultEncryptionKMS",
            "S3 server access logging only delivers to destination buckets encrypted with SSE-S3, so this log "
            "bucket cannot use a KMS key; the data bucket it logs can.",
        )

        self.encryption_key: kms.IKey | None = None
        if encryption == "kms":
            self.encryption_key = encryption_key or kms.Key(
                self,
                "Key",
                description=f"Encrypts the mlcluster data bucket {self.node.path}",
                enable_key_rotation=True,
                removal_policy=key_removal_policy(removal_policy),
            )

        lifecycle_rules = [
            s3.LifecycleRule(
                id="AbortIncompleteMultipartUploads",
                abort_incomplete_multipart_upload_after=cdk.Duration.days(abort_incomplete_multipart_upload_days),
            )
        ]
        if noncurrent_version_expiration_days is not None:
            lifecycle_rules.append(
                s3.LifecycleRule(
                    id="ExpireNoncurrentVersions",
                    noncurrent_version_expiration=cdk.Duration.days(noncurrent_version_expiration_days),
                )
            )
        self.bucket = s3.Bucket(
            self,
            "Resource",
            bucket_name=bucket_name,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            encryption=s3.BucketEncryption.KMS if self.encryption_key is not None else s3.BucketEncryption.S3_MANAGED,
            encryption_key=self.encryption_key,
            bucket_key_enabled=True if self.encryption_key is not None else None,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            server_access_logs_bucket=self.log_bucket,
            server_access_logs_prefix="data-bucket/",
            lifecycle_rules=lifecycle_rules,
            removal_policy=removal_policy,
            auto_delete_objects=destroy,
        )

        if destroy:
            _quiet_auto_delete_provider(cdk.Stack.of(self))

    @property
    def bucket_name(self) -> str:
        """The data bucket's name."""
        return self.bucket.bucket_name

    @property
    def bucket_arn(self) -> str:
        """The data bucket's ARN."""
        return self.bucket.bucket_arn

    def s3_uri(self, prefix: str = "") -> str:
        """The ``s3://`` URI of the bucket, or of ``prefix`` in it (as DRAs want it)."""
        return f"s3://{self.bucket.bucket_name}/{prefix}"

    def grant_fsx_data_repository_access(self, file_system_id: str) -> bool:
        """Let FSx for Lustre file system ``file_system_id`` link to this bucket.

        See the module function of the same name; ``LustreStorage`` calls it
        for its data bucket, so a caller only needs this for file systems
        built some other way.
        """
        return grant_fsx_data_repository_access(self.bucket, file_system_id, bucket_name=self._bucket_name)


def _quiet_auto_delete_provider(stack: cdk.Stack) -> None:
    """Tell cfn-lint to skip W3005 on CDK's auto-delete-objects handler, and give the scanners its reasons.

    CDK's shared provider (made once per stack for ``auto_delete_objects``)
    lists its role in DependsOn and also reads the role's ARN, which cfn-lint
    reports as a redundant dependency. The template is CDK's, not ours.
    """
    provider = stack.node.try_find_child(AUTO_DELETE_PROVIDER)
    handler = provider.node.try_find_child("Handler") if provider is not None else None
    if isinstance(handler, cdk.CfnResource):
        config = dict(handler.get_metadata("cfn-lint") or {}).get("config", {})
        ignored = sorted({*config.get("ignore_checks", []), "W3005"})
        handler.add_metadata("cfn-lint", {"config": {**config, "ignore_checks": ignored}})
    if provider is not None:
        # cdk-nag's packs pass over the provider's raw CfnResources at synthesis, but checkov and the
        # compliance report judge them as template resources; these acknowledgements give the reasons there.
        for rule, reason in AUTO_DELETE_REASONS.items():
            acknowledge_compliance(provider, rule, reason)
        acknowledge(
            provider,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "aws-cdk-lib gives its auto-delete-objects function's role the basic execution policy, which only lets "
            "it write its CloudWatch logs; the role is internal to aws-cdk-lib and belongs to that function alone.",
        )


def _check_props(
    *,
    bucket_name: str | None,
    encryption: str,
    encryption_key: kms.IKey | None,
    abort_incomplete_multipart_upload_days: int,
    noncurrent_version_expiration_days: int | None,
    access_log_retention_days: int,
    removal_policy: cdk.RemovalPolicy,
) -> None:
    """Check every prop at once and raise one ValueError listing all problems."""
    problems: list[str] = []
    if bucket_name is not None and not cdk.Token.is_unresolved(bucket_name):
        problem = bucket_name_problem(bucket_name)
        if problem is not None:
            problems.append(f"bucket_name: {bucket_name!r} is not a valid S3 bucket name; {problem}")
    if encryption not in ("s3", "kms"):
        problems.append(f"encryption: {encryption!r} is not allowed; use 's3' (SSE-S3) or 'kms' (SSE-KMS)")
    if encryption_key is not None and encryption != "kms":
        problems.append("encryption_key: only used with encryption='kms'; set encryption='kms' or drop the key")
    for name, value, low, high in (
        ("abort_incomplete_multipart_upload_days", abort_incomplete_multipart_upload_days, 1, 365),
        ("noncurrent_version_expiration_days", noncurrent_version_expiration_days, 1, 36500),
        ("access_log_retention_days", access_log_retention_days, 1, 36500),
    ):
        if value is not None and not low <= value <= high:
            problems.append(f"{name}: {value} is not allowed; use a whole number of days from {low} to {high}")
    if removal_policy not in REMOVAL_POLICIES:
        problems.append(
            f"removal_policy: {removal_policy} is not allowed; use RemovalPolicy.RETAIN, "
            "RETAIN_ON_UPDATE_OR_DELETE or DESTROY"
        )
    if problems:
        raise ValueError("DataBucket: " + "; ".join(problems))
