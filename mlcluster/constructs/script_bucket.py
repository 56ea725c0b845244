"""Node scripts in their own secured bucket, uploaded by CDK on every deploy that changes them.

Both cluster backends ship scripts that nodes fetch from S3 when they boot:
HyperPod's lifecycle scripts (with their generated inputs) and
ParallelCluster's OnNodeConfigured scripts. ``ScriptBucket`` is the bucket
and the upload they share, including the acknowledgements of the findings on
aws_s3_deployment's upload function, with reasons about that function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct, IConstruct, IValidation

from mlcluster.constructs.data_bucket import AUTO_DELETE_PROVIDER, DataBucket
from mlcluster.constructs.nag import (
    LAMBDA,
    acknowledge,
    acknowledge_compliance,
    acknowledge_wildcard_resource,
    flatten_resource,
    quiet_redundant_role_dependency,
    skip_checkov,
)

#: The id prefix of the Lambda function aws_s3_deployment shares between all deployments of a stack.
DEPLOYMENT_HANDLER_PREFIX = "Custom::CDKBucketDeployment"
#: What aws_s3_deployment grants its function on the CDK assets bucket (a read grant).
ASSET_READ_ACTIONS = frozenset({"s3:GetObject*", "s3:GetBucket*", "s3:List*"})
#: The objects of a CDK bootstrap assets bucket, ``cdk-<qualifier>-assets-<account>-<region>``, as
#: ``flatten_resource`` writes a statement's resource. The bootstrap template allows 1 to 10 of
#: ``[A-Za-z0-9_-]`` in a qualifier; a bucket name only lower-case letters, digits and hyphens.
ASSETS_OBJECTS = re.compile(
    r"arn:(?:<AWS::Partition>|aws|aws-[a-z-]+):s3:::cdk-[a-z0-9-]{1,10}-assets-(?P<where>[^/*]+)/\*"
)
#: Every action that writes, overwrites, deletes or re-labels an object (or one of its versions).
OBJECT_CHANGE_ACTIONS = (
    "s3:PutObject",
    "s3:PutObjectAcl",
    "s3:PutObjectVersionAcl",
    "s3:PutObjectTagging",
    "s3:PutObjectVersionTagging",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:DeleteObjectTagging",
    "s3:DeleteObjectVersionTagging",
    "s3:RestoreObject",
    "s3:PutObjectRetention",
    "s3:PutObjectLegalHold",
)
#: Every action that changes who may do what in a bucket: a Deny in its policy is only as strong as these.
POLICY_CHANGE_ACTIONS = (
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:PutBucketAcl",
    "s3:PutBucketOwnershipControls",
    "s3:PutBucketPublicAccessBlock",
)
#: AWS managed policies grant object writes on every bucket whose name contains this, in any case
#: (AmazonSageMakerFullAccess, AmazonSageMakerFeatureStoreAccess): a script bucket's name must not.
MANAGED_POLICY_BUCKET_WORD = "sagemaker"


class ScriptBucket(Construct):
    """A bucket of node scripts and the upload that keeps it in sync with the stack.

    Creates a bucket secured like the data bucket (``DataBucket``: public
    access blocked, TLS only, SSE-S3, versioned, server access logs) and an
    ``aws_s3_deployment.BucketDeployment`` that uploads ``sources`` under
    ``prefix`` whenever they change and removes files no longer in them.

    What is in the bucket runs as root on every node, so its policy denies
    every object write, delete and re-label (``OBJECT_CHANGE_ACTIONS``) to
    every principal but the upload function's role (and, when the bucket is
    destroyed with the stack, the role of CDK's function that empties it):
    an explicit deny beats any identity policy's allow, administrators' and
    AWS managed policies' included. That deny would be removable by anyone
    allowed ``s3:PutBucketPolicy`` (AmazonS3FullAccess), so the policy also
    denies changing the policy, ACL, ownership and public access block to all
    but the deploy (:func:`deny_bucket_policy_changes`). Nodes read it by explicit grants in
    their own roles. The bucket's name (given, or generated from the stack
    name) must not contain ``sagemaker`` in any case, which AWS managed
    policies match to grant writes; a given name is literal text, the
    account, region, partition and stack name only (a parameter or an
    import could hold the word).

    Default settings: a CloudFormation-generated bucket name; bucket, access
    logs and upload logs retained when the stack is deleted; upload logs kept
    one year.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        sources: Sequence[s3deploy.ISource],
        purpose: str,
        bucket_name: str | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        log_removal_policy: cdk.RemovalPolicy | None = None,
    ) -> None:
        """Create the bucket and the upload.

        :param prefix: key prefix of the upload, ending in ``/``.
        :param sources: what to upload (asset folders, generated JSON).
        :param purpose: what the scripts are, for the acknowledgement reasons.
        :param bucket_name: an explicit bucket name (literal text; the account, region, partition and stack
            name may be tokens). Default: generated.
        :param removal_policy: RETAIN (default) or DESTROY the bucket and logs.
        :param log_retention: how long the upload function's logs are kept. Default: one year.
        :param log_removal_policy: what happens to the upload function's log group (its history of
            uploads) on delete. Default: ``removal_policy``.
        """
        super().__init__(scope, construct_id)
        if not prefix.endswith("/") or prefix.startswith("/"):
            raise ValueError(f"prefix: {prefix!r} is not allowed; use a key prefix ending in '/', such as 'scripts/'")
        if not sources:
            raise ValueError("sources: give at least one source to upload")
        stack = cdk.Stack.of(self)
        # Every bucket name this construct makes: the script bucket's (bucket_name, else CloudFormation's
        # "<stack name>-<logical id>-<random>") and its access-log bucket's (always generated). A logical id begins
        # with this construct's path below the stack, its ids' letters and digits run together.
        names: list[tuple[str, object]] = [(f"stack name {stack.stack_name!r}", stack.stack_name)]
        below_stack = [scope.node.id for scope in self.node.scopes[self.node.scopes.index(stack) + 1 :]]
        path = "/".join(below_stack)
        path_ids = re.sub(r"[^A-Za-z0-9]", "", path)
        names.append((f"construct path {path!r} (the buckets' logical ids)", path_ids))
        if bucket_name is not None:
            # A name with a deploy-time part (``f"mlc-sagemaker-{cdk.Aws.ACCOUNT_ID}"``) still carries its
            # literal text.
            resolved = stack.resolve(bucket_name)
            names.insert(0, (f"bucket_name {flatten_resource(resolved)!r}", resolved))
            opaque: list[object] = []
            _literal_text(resolved, stack_name=stack.stack_name, opaque=opaque)
            if opaque:
                part = opaque[0] if isinstance(opaque[0], str) else json.dumps(opaque[0], sort_keys=True)
                raise ValueError(
                    f"bucket_name {flatten_resource(resolved)!r} has a part known only at deploy "
                    f"time ({part}), which could bring {MANAGED_POLICY_BUCKET_WORD!r} into the "
                    "name (AWS managed policies let their holders write to any bucket whose name contains it); "
                    "allowed: literal text with the account, region or partition, such as "
                    "f'mlc-scripts-{cdk.Aws.ACCOUNT_ID}', or no bucket_name"
                )
        for what, name in names:
            if MANAGED_POLICY_BUCKET_WORD in _literal_text(name, stack_name=stack.stack_name).lower():
                raise ValueError(
                    f"{what} contains {MANAGED_POLICY_BUCKET_WORD!r}: AWS managed policies (AmazonSageMakerFullAccess, "
                    "AmazonSageMakerFeatureStoreAccess) let their holders write to any bucket whose name contains "
                    "it, and this construct's buckets hold scripts that run as root on the nodes and their access "
                    "logs; choose a name without it"
                )
        glue = _glue_problem(
            prefix,
            # What a bucket's name begins with: bucket_name, and the stack name (generated names, the log bucket's).
            [(what, _literal_text(name, stack_name=stack.stack_name)) for what, name in names if name is not path_ids],
        )
        if glue is not None:
            raise ValueError(glue)
        self.prefix = prefix
        self.data_bucket = DataBucket(self, "Resource", bucket_name=bucket_name, removal_policy=removal_policy)
        self.bucket: s3.IBucket = self.data_bucket.bucket
        log_group = logs.LogGroup(
            self,
            "UploadLogs",
            retention=log_retention,
            removal_policy=removal_policy if log_removal_policy is None else log_removal_policy,
        )
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Upload",
            destination_bucket=self.bucket,
            destination_key_prefix=prefix,
            sources=list(sources),
            prune=True,
            log_group=log_group,
        )
        self._acknowledge_upload_handler(purpose)
        self._deny_object_changes(stack, removal_policy)
        self.policy_writers = deny_bucket_policy_changes(self.bucket)
        acknowledge_compliance(
            self.data_bucket,
            "S3BucketReplicationEnabled",
            f"This bucket and its access logs hold {purpose}, which every deployment uploads again from the "
            "stack; a replica would add a second bucket without protecting anything.",
        )
        acknowledge_compliance(
            self.bucket,
            "S3DefaultEncryptionKMS",
            f"The bucket holds {purpose} and no secrets (passwords stay in Secrets Manager); SSE-S3 lets nodes "
            "read them without a KMS grant to every node role.",
        )

    def _deny_object_changes(self, stack: cdk.Stack, removal_policy: cdk.RemovalPolicy) -> None:
        """Deny every object change to all principals but the roles of the deploy that upload and empty it."""
        writers = [self.deployment.handler_role.role_arn]
        if removal_policy == cdk.RemovalPolicy.DESTROY:
            provider = stack.node.try_find_child(AUTO_DELETE_PROVIDER)
            role = provider.node.try_find_child("Role") if provider is not None else None
            if role is None or not isinstance(role, cdk.CfnResource):
                raise RuntimeError(f"{self.node.path}: cannot find the role of {AUTO_DELETE_PROVIDER}")
            writers.append(role.get_att("Arn").to_string())
        self.writer_role_arns = writers
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheDeployChangesObjects",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(OBJECT_CHANGE_ACTIONS),
                resources=[self.bucket.arn_for_objects("*")],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": writers}},
            )
        )

    def _acknowledge_upload_handler(self, purpose: str) -> None:
        """Acknowledge the findings on aws_s3_deployment's upload function, with reasons about it.

        The function is a stack-level singleton (``Custom::CDKBucketDeployment...``)
        shared by the stack's deployments; it is found as the scope of this
        deployment's handler role.
        """
        handler = self.deployment.handler_role.node.scope
        if handler is None or not handler.node.id.startswith(DEPLOYMENT_HANDLER_PREFIX):
            raise RuntimeError(f"{self.node.path}: cannot find the {DEPLOYMENT_HANDLER_PREFIX}* upload function")
        acknowledge(
            handler,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "aws_s3_deployment creates the upload function's role with the basic execution policy, which only lets "
            "it write its own CloudWatch logs; the role is internal to that construct and not exposed to replace.",
        )
        acknowledge(
            handler,
            "AwsSolutions-L1",
            "The upload function's runtime is fixed by aws_s3_deployment in aws-cdk-lib, which moves it to newer "
            "Python versions with its releases; the function only copies files between buckets at deploy time.",
        )
        for action in ("s3:GetObject*", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*", "s3:Abort*"):
            acknowledge(
                handler,
                f"AwsSolutions-IAM5[Action::{action}]",
                f"aws_s3_deployment grants its upload function {action} from the read/write grants of the asset and "
                "script buckets: it reads the asset zip, lists and prunes the script prefix, and aborts failed "
                "multipart uploads; the grants are limited to those buckets.",
            )
        skip_checkov(
            handler,
            "CKV_AWS_173",
            "The upload function's only environment variable is AWS_CA_BUNDLE, the path of a certificate bundle "
            "inside aws_s3_deployment's layer; Lambda encrypts it at rest with its AWS managed key.",
            LAMBDA,
        )
        for rule, reason in (
            ("LambdaConcurrency", "it runs once per deployment that changes the files"),
            (
                "LambdaDLQ",
                "CloudFormation invokes it asynchronously as a custom resource, and it reports every failure to the "
                "custom resource's response URL itself, which fails the deployment; a dead-letter queue would only "
                "keep events CloudFormation has already failed, which nobody replays",
            ),
            ("LambdaInsideVPC", "it only copies objects between two S3 buckets through the S3 API"),
            ("IAMNoInlinePolicy", "aws_s3_deployment writes its bucket grants as the role's default policy"),
        ):
            acknowledge_compliance(handler, rule, f"The aws_s3_deployment upload function: {reason}.")
        acknowledge_wildcard_resource(
            handler,
            self.bucket.arn_for_objects("*"),
            f"The upload function writes and prunes {purpose} in this bucket; aws_s3_deployment grants it the "
            "bucket's objects, and it only touches keys under the upload prefix.",
        )
        handler.node.add_validation(_AssetsBucketAcknowledgement(handler))
        quiet_redundant_role_dependency(handler)


@jsii.implements(IValidation)
class _AssetsBucketAcknowledgement:
    """Acknowledges the upload function's read grant on the CDK assets bucket, once the app is validated.

    The grant's resource is the bootstrap bucket of the stack's synthesizer
    (``cdk-<qualifier>-assets-<account>-<region>``, with placeholders or
    concrete values); it is read from the function's policy when the tree is
    validated, so the acknowledged id is exactly what cdk-nag reports. A read
    grant on any other bucket (a library user's ``Source.bucket``) is not
    acknowledged here: its reason is the user's to give.
    """

    def __init__(self, handler: IConstruct) -> None:
        self._handler = handler

    def validate(self) -> list[str]:
        role = self._handler.node.try_find_child("ServiceRole")
        policy = role.node.try_find_child("DefaultPolicy") if role is not None else None
        if policy is None or not isinstance(policy.node.default_child, iam.CfnPolicy):
            return [f"{self._handler.node.path}: aws_s3_deployment's function has no ServiceRole/DefaultPolicy"]
        stack = cdk.Stack.of(policy)
        document = stack.resolve(policy.node.default_child.policy_document)
        # This stack's own account and region: another account's assets bucket is a user's source like any other.
        account = "<AWS::AccountId>" if cdk.Token.is_unresolved(stack.account) else stack.account
        where = f"{account}-{'<AWS::Region>' if cdk.Token.is_unresolved(stack.region) else stack.region}"
        for statement in document.get("Statement", []):
            actions = set(_as_list(statement.get("Action")))
            if statement.get("Effect") != "Allow" or not actions or not actions <= ASSET_READ_ACTIONS:
                continue
            for resource in _as_list(statement.get("Resource")):
                text = flatten_resource(resource)
                found = ASSETS_OBJECTS.fullmatch(text)
                if found is not None and found["where"] == where:
                    acknowledge(
                        self._handler,
                        f"AwsSolutions-IAM5[Resource::{text}]",
                        "The upload function reads the zipped scripts that `cdk deploy` publishes to the CDK "
                        "bootstrap assets bucket; asset keys are content hashes, so the read grant covers the "
                        "bucket's objects.",
                    )
        return []


def deploy_role_arn(scope: IConstruct) -> str:
    """The role CloudFormation deploys ``scope``'s stack with: the bootstrap's ``cfn-exec`` role.

    ``cdk deploy`` with the default synthesizer hands CloudFormation that role, and CloudFormation makes
    every bucket call of the stack (creating and updating the bucket policy included) as it. Another
    synthesizer (CLI credentials, legacy) would deploy as whoever runs the deploy, which a policy cannot
    name in advance: refused rather than lock the deploy out of its own bucket.
    """
    synthesizer = cdk.Stack.of(scope).synthesizer
    if not isinstance(synthesizer, cdk.DefaultStackSynthesizer):
        raise ValueError(
            f"{scope.node.path}: the stack's synthesizer is {type(synthesizer).__name__}; the bucket policy lock "
            "names the CloudFormation execution role of the DefaultStackSynthesizer (cdk bootstrap), so use it"
        )
    try:
        role_arn = synthesizer.cloud_formation_execution_role_arn
    except RuntimeError as err:
        # aws-cdk-lib 2 under jsii: a DefaultStackSynthesizer made in Python and passed to the Stack answers its
        # getters with "...can only be called after the synthesizer has been bound to a Stack", bound or not.
        raise ValueError(
            f"{scope.node.path}: the stack's DefaultStackSynthesizer was passed explicitly (to the Stack, or as the "
            "App's default_stack_synthesizer), and aws-cdk-lib cannot read its CloudFormation execution role back "
            f"from Python ({str(err).split(':', 1)[0]}); leave both unset and give a custom bootstrap qualifier as "
            "the context value '@aws-cdk/core:bootstrapQualifier' (cdk.json or --context), which the default "
            "synthesizer reads"
        ) from None
    # The synthesizer's ARN carries ${AWS::Partition} (and account, region) placeholders for CloudFormation.
    return cdk.Fn.sub(role_arn)


def deny_bucket_policy_changes(bucket: s3.IBucket) -> list[str]:
    """Deny ``POLICY_CHANGE_ACTIONS`` on ``bucket`` to every principal but the deploy; returns who may.

    The one principal left is CloudFormation's execution role (:func:`deploy_role_arn`), which
    creates, updates and deletes the policy with the stack. Nothing else needs to: the upload
    function writes objects, not the policy. If the deploy role were locked out too, the account's
    root user can still put or delete a bucket policy (S3 keeps that for recovery).
    """
    writers = [deploy_role_arn(bucket)]
    bucket.add_to_resource_policy(
        iam.PolicyStatement(
            sid="OnlyTheDeployChangesThePolicy",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=list(POLICY_CHANGE_ACTIONS),
            resources=[bucket.bucket_arn],
            conditions={"ArnNotEquals": {"aws:PrincipalArn": writers}},
        )
    )
    return writers


#: Stands for a part of a name known only at deploy time: no bucket name holds it, so no word spans it.
UNKNOWN = "\0"


#: AWSGlueServiceRole, an AWS managed policy, lets its holders put and delete objects in every bucket whose
#: name begins with this and under every key with a folder holding it ("arn:aws:s3:::aws-glue-*/*",
#: "arn:aws:s3:::*/*aws-glue-*/*"; AWS Managed Policy reference, AWSGlueServiceRole v5).
GLUE_WORD = "aws-glue-"


def _glue_problem(prefix: str, starts: list[tuple[str, str]]) -> str | None:
    """Why the upload's keys or a bucket name (``starts``: what begins one, and its text at synth) fall under
    AWSGlueServiceRole's object grants, or None."""
    why = (
        "AWSGlueServiceRole (an AWS managed policy) lets its holders write and delete objects there, and this "
        "construct's buckets hold scripts that run as root on the nodes"
    )
    if GLUE_WORD in prefix:
        return f"prefix {prefix!r} contains {GLUE_WORD!r}: {why}; choose a prefix without it"
    for what, text in starts:
        if text.lower().startswith(GLUE_WORD):
            return f"{what} begins with {GLUE_WORD!r}, and so would the bucket's name: {why}; choose a name without it"
    return None


#: Pseudo parameters whose values cannot hold the word (an account id, a region, a partition, a domain suffix).
HARMLESS_PSEUDO = frozenset({"AWS::AccountId", "AWS::Region", "AWS::Partition", "AWS::URLSuffix"})


def _literal_text(resolved: object, *, stack_name: str, opaque: list[object] | None = None) -> str:
    """The text of a resolved name as known at synth, each deploy-time part (a reference, a pseudo parameter
    such as the account id, a ``${...}`` of ``Fn::Sub``) standing as :data:`UNKNOWN`.

    ``Fn::Join`` parts are joined as CloudFormation joins them, so a word split across two literal parts
    (``["mlc-sage", "maker"]``) is read whole; ``Fn::Sub`` variables given as literals are put in; the stack's
    name (``AWS::StackName``) is known here when the stack's name is (``stack_name`` without a token).
    Each deploy-time part other than :data:`HARMLESS_PSEUDO` and a known stack name (a parameter, an import,
    an attribute: any text at all) is appended to ``opaque``.
    """
    known_stack = stack_name if not cdk.Token.is_unresolved(stack_name) else UNKNOWN
    found = opaque if opaque is not None else []
    if isinstance(resolved, str):
        return resolved
    if isinstance(resolved, dict) and resolved.get("Ref") == "AWS::StackName":
        if known_stack == UNKNOWN:
            found.append(resolved)
        return known_stack
    if isinstance(resolved, dict) and "Fn::Join" in resolved:
        delimiter, parts = resolved["Fn::Join"]
        return str(delimiter).join(_literal_text(part, stack_name=stack_name, opaque=found) for part in _as_list(parts))
    if isinstance(resolved, dict) and "Fn::Sub" in resolved:
        body = resolved["Fn::Sub"]
        template, variables = (body[0], body[1]) if isinstance(body, list) else (body, {})

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "AWS::StackName":
                return _literal_text({"Ref": name}, stack_name=stack_name, opaque=found)
            value = variables.get(name) if isinstance(variables, dict) else None
            if value is not None:
                return _literal_text(value, stack_name=stack_name, opaque=found)
            if name not in HARMLESS_PSEUDO:
                found.append("${" + name + "}")
            return UNKNOWN

        return re.sub(r"\$\{(?!!)([^}]*)\}", fill, str(template)).replace("${!", "${")
    if not (isinstance(resolved, dict) and resolved.get("Ref") in HARMLESS_PSEUDO):
        found.append(resolved)
    return UNKNOWN


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
