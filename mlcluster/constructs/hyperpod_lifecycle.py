"""The HyperPod lifecycle bucket: node scripts plus the two generated input files, kept in sync by CDK.

HyperPod downloads ``LifeCycleConfig.SourceS3Uri`` to every node and runs
``OnCreate`` from it. Today people create a ``sagemaker-...`` bucket by hand,
copy the scripts and edit ``provisioning_parameters.json`` with the file
system's DNS and mount names. Here the bucket, the upload and both input
files are part of the stack: the files are generated from the cluster's
groups, the FSx attributes (deploy-time values of the storage stack) and the
lifecycle features, and uploaded again whenever any of them changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from mlcluster.config.hyperpod import GROUP_NAME, LifecycleConfig
from mlcluster.constructs.data_bucket import REMOVAL_POLICIES
from mlcluster.constructs.hyperpod_role import PREFIX
from mlcluster.constructs.script_bucket import ScriptBucket
from mlcluster.lifecycle import LIFECYCLE_DIR
from mlcluster.lifecycle.collector import COLLECTOR_DIR, COLLECTOR_EXCLUDE, COLLECTOR_SCRIPTS
from mlcluster.lifecycle.exporters import EXPORTER_SCRIPTS, EXPORTERS_DIR, EXPORTERS_EXCLUDE
from mlcluster.lifecycle.hyperpod import NOT_UPLOADED, base64_text, render_on_create

#: The lifecycle bucket's name starts with this. Not ``sagemaker-``: AWS managed policies grant object
#: writes on every bucket whose name contains "sagemaker" (any case), and HyperPod itself takes any bucket
#: its execution role can read (botocore's SourceS3Uri pattern is ``(https|s3)://([^/]+)/?(.*)``; the
#: API reference asks for ``s3://sagemaker-`` only because the managed instance-role policy reads just
#: those buckets, and our roles read this one by explicit grant).
BUCKET_PREFIX = "mlc-lifecycle"
#: What an environment name may hold: it becomes part of the bucket name.
ENVIRONMENT_NAME = re.compile(r"[a-z][a-z0-9-]*")
#: The lengths the bucket name is checked against when account or region are not known at synth time.
ACCOUNT_LENGTH = 12
#: The longest region code in use (``us-isof-south-1``).
MAX_REGION_LENGTH = 15
#: The script HyperPod runs on every node, at the root of the uploaded folder.
ON_CREATE = "on_create.sh"
PROVISIONING_FILE = "provisioning_parameters.json"
FEATURES_FILE = "mlcluster_features.json"
PROVISIONING_VERSION = "1.0.0"
PARTITION_NAME = r"[A-Za-z0-9_-]{1,64}"
#: Files of the scripts folder that are not uploaded as they are (on_create.sh is uploaded rendered).
EXCLUDE = [*NOT_UPLOADED, ON_CREATE]
#: The FSx for OpenZFS root volume's NFS export path.
OPENZFS_ROOT_VOLUME_PATH = "/fsx"


def lifecycle_bucket_name(environment_name: str) -> str:
    """``mlc-lifecycle-<environment>-<account>-<region>`` with the account and region of the deploying stack."""
    return cdk.Fn.join("-", [BUCKET_PREFIX, environment_name, cdk.Aws.ACCOUNT_ID, cdk.Aws.REGION])


def features_document(
    features: LifecycleConfig, collector: bool = False, scheduled_backup: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The content of ``mlcluster_features.json`` (see the lifecycle scripts' README).

    ``collector``: the controller runs the metrics collector (its step reads the collector files).
    ``scheduled_backup``: ``bucket``, ``key_arn``, ``prefix`` and ``cluster_name`` (its metric's dimension) of
    the controller's daily copy (the scheduled_backup step); none when ``features.scheduled_backup`` is false.
    """
    accounting: dict[str, str] = {"mode": features.accounting.mode}
    if features.accounting.endpoint is not None:
        accounting["endpoint"] = features.accounting.endpoint
    if features.accounting.secret_arn is not None:
        accounting["secret_arn"] = features.accounting.secret_arn
    document: dict[str, Any] = {
        "users": [{"name": u.name, "uid": u.uid} for u in features.users],
        "accounting": accounting,
        "docker": features.docker,
        "enroot_pyxis": features.enroot_pyxis,
        "home_on_fsx": features.home_on_fsx,
        "observability": features.observability,
        "docker_group": features.docker_group,
        "rootless_podman": features.rootless_podman,
        "collector": collector,
    }
    if features.controller_wait_minutes is not None:
        document["controller_wait_minutes"] = features.controller_wait_minutes
    if features.scheduled_backup and scheduled_backup is not None:
        document["scheduled_backup"] = dict(scheduled_backup)
    return document


class HyperPodLifecycle(Construct):
    """The lifecycle scripts of a HyperPod Slurm cluster in their own S3 bucket.

    Creates a ``ScriptBucket`` named ``mlc-lifecycle-<environment>-<account>-<region>``
    (no ``sagemaker`` in it, so no AWS managed policy grants writes to it;
    its policy denies object changes to all but the upload), secured like
    the data bucket (public access blocked, TLS only, SSE-S3, versioned,
    server access logs to a log bucket), and uploads under ``prefix``:

    - every file of ``scripts_dir`` (``on_create.sh`` and what it runs);
    - ``provisioning_parameters.json``: Slurm, the controller, login and
      worker groups with their partitions, and the FSx for Lustre DNS and
      mount names (deploy-time values are filled in at deployment); with an
      EFA-enabled file system, ``fsx_efa_enabled`` and the groups whose nodes
      set LNet up over EFA (``fsx_efa_groups``);
    - ``mlcluster_features.json``: users, accounting, Docker, Enroot/Pyxis,
      homes on FSx, observability, the collector;
    - the metrics exporters' textfile collectors and DCGM fields
      (``mlcluster.lifecycle.exporters``, shared with ParallelCluster; in the
      checksum manifest like the scripts);
    - the metrics collector's install script and target refresher (in the
      checksum manifest like the scripts) and, with ``collector_files``, its
      configuration rendered at synth time (``collector.yml``,
      ``collector_targets.json``).

    A change to any of them uploads the folder again; files no longer in it
    are removed (prune). Nodes read the files when they are created, so a
    running cluster is not touched; replaced and added nodes get the new ones.

    Default settings: prefix ``lifecycle/``; the scripts shipped with
    mlcluster; the default features; bucket and logs retained when the stack
    is deleted; upload logs kept one year.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        controller_group: str,
        worker_groups: Mapping[str, str],
        fsx_dns_name: str,
        fsx_mount_name: str,
        login_group: str | None = None,
        fsx_efa_groups: Sequence[str] | None = None,
        openzfs_dns_name: str | None = None,
        openzfs_volume_path: str = OPENZFS_ROOT_VOLUME_PATH,
        openzfs_mount_point: str = "/home",
        features: LifecycleConfig | None = None,
        collector_files: Mapping[str, str] | None = None,
        scheduled_backup: Mapping[str, str] | None = None,
        prefix: str = "lifecycle/",
        scripts_dir: Path | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        log_removal_policy: cdk.RemovalPolicy | None = None,
    ) -> None:
        """Create the bucket and the upload.

        :param environment_name: names the bucket: lowercase letters, digits and
            ``-``, starting with a letter, short enough for a 63-character bucket
            name (20 characters always fit).
        :param controller_group: the controller's instance group name.
        :param worker_groups: worker instance group name -> Slurm partition name, in order.
        :param fsx_dns_name: the FSx for Lustre file system's DNS name.
        :param fsx_mount_name: the FSx for Lustre file system's mount name.
        :param login_group: the login nodes' instance group name. Default: none.
        :param fsx_efa_groups: set when the FSx for Lustre file system is EFA-enabled: the instance
            groups whose nodes reach it over EFA (their instance type supports it; see
            ``mlcluster.config.hyperpod.LUSTRE_EFA_INSTANCE_TYPES``); the other nodes mount it over
            TCP. Default: none (the file system is not EFA-enabled).
        :param openzfs_dns_name: the FSx for OpenZFS file system's DNS name; every node mounts it
            (NFS) at ``openzfs_mount_point`` and the users' homes live there. Default: none.
        :param openzfs_volume_path: the OpenZFS volume's export path. Default: the root volume, ``/fsx``.
        :param openzfs_mount_point: where nodes mount the OpenZFS volume. Default: ``/home``.
        :param features: what the scripts set up. Default: ``LifecycleConfig()``.
        :param collector_files: the metrics collector's rendered files (``mlcluster.collector.render``); the
            controller then runs the collector step. Default: none (no collector).
        :param scheduled_backup: ``bucket`` (name), ``key_arn``, ``prefix`` (ending in ``/``) of the
            patch backup bucket where the controller puts its daily copy of the Slurm state, and
            ``cluster_name`` (the HyperPod cluster, the dimension of the metric each copy publishes), when
            ``features.scheduled_backup`` is true. Default: none (no daily copy).
        :param prefix: the key prefix of the upload, ending in ``/``. Default: ``lifecycle/``.
        :param scripts_dir: the folder to upload; must hold ``on_create.sh``.
            Default: mlcluster's HyperPod scripts.
        :param removal_policy: RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY the bucket (and its logs). Default: RETAIN.
        :param log_retention: how long the upload function's logs are kept. Default: one year.
        :param log_removal_policy: the upload function's log group on delete. Default: ``removal_policy``.
        """
        super().__init__(scope, construct_id)
        folder = scripts_dir if scripts_dir is not None else LIFECYCLE_DIR / "hyperpod"
        stack = cdk.Stack.of(self)
        _check_props(
            stack=stack,
            environment_name=environment_name,
            controller_group=controller_group,
            worker_groups=worker_groups,
            login_group=login_group,
            fsx_dns_name=fsx_dns_name,
            fsx_mount_name=fsx_mount_name,
            fsx_efa_groups=fsx_efa_groups,
            prefix=prefix,
            scripts_dir=folder,
            removal_policy=removal_policy,
        )
        self.prefix = prefix
        self.controller_group = controller_group
        self.login_group = login_group
        self.worker_groups = dict(worker_groups)
        self.features = features if features is not None else LifecycleConfig()
        if self.features.docker_group:
            cdk.Annotations.of(self).add_warning_v2(
                "mlcluster:hyperpod:dockerGroup",
                "cluster.hyperpod.lifecycle.docker_group is true: every cluster user joins the docker group, "
                "which is root-equivalent on every node (a member can mount / into a container). Leave it false "
                "and use rootless Podman (rootless_podman) to build images.",
            )

        provisioning: dict[str, Any] = {
            "version": PROVISIONING_VERSION,
            "workload_manager": "slurm",
            "controller_group": controller_group,
        }
        if login_group is not None:
            provisioning["login_group"] = login_group
        provisioning["worker_groups"] = [
            {"instance_group_name": name, "partition_name": partition} for name, partition in worker_groups.items()
        ]
        provisioning["fsx_dns_name"] = fsx_dns_name
        provisioning["fsx_mountname"] = fsx_mount_name
        if fsx_efa_groups is not None:
            provisioning["fsx_efa_enabled"] = True
            provisioning["fsx_efa_groups"] = list(fsx_efa_groups)
        if openzfs_dns_name is not None:
            provisioning["fsx_openzfs_dns_name"] = openzfs_dns_name
            provisioning["fsx_openzfs_volume_path"] = openzfs_volume_path
            provisioning["fsx_openzfs_mount_point"] = openzfs_mount_point
        # The generated inputs, as exact texts: uploaded as they are and copied into on_create.sh, whose
        # node-side check refuses any that differs (they hold deploy-time values, so there is no digest).
        self.generated_files = {
            PROVISIONING_FILE: json.dumps(provisioning, indent=2) + "\n",
            FEATURES_FILE: json.dumps(
                features_document(
                    self.features, collector=collector_files is not None, scheduled_backup=scheduled_backup
                ),
                indent=2,
            )
            + "\n",
            **(collector_files or {}),
        }
        # on_create.sh carries the SHA-256 of every other uploaded file and refuses to run on a mismatch.
        # Their copies are base64 in on_create.sh's data section: with deploy-time values, CloudFormation's
        # Fn::Base64 of the same text, so no value the upload fills in is ever shell text.
        self.on_create_script = render_on_create(
            folder, (*COLLECTOR_SCRIPTS, *EXPORTER_SCRIPTS), self.generated_files, encode=_base64_at_deploy
        )
        self.scripts = ScriptBucket(
            self,
            "Resource",
            bucket_name=lifecycle_bucket_name(environment_name),
            prefix=prefix,
            sources=[
                s3deploy.Source.asset(str(folder), exclude=EXCLUDE),
                s3deploy.Source.data(ON_CREATE, self.on_create_script),
                s3deploy.Source.asset(str(COLLECTOR_DIR), exclude=COLLECTOR_EXCLUDE),
                s3deploy.Source.asset(str(EXPORTERS_DIR), exclude=EXPORTERS_EXCLUDE),
                *(s3deploy.Source.data(name, text) for name, text in self.generated_files.items()),
            ],
            purpose="HyperPod lifecycle scripts and their generated inputs",
            removal_policy=removal_policy,
            log_retention=log_retention,
            log_removal_policy=log_removal_policy,
        )
        self.bucket: s3.IBucket = self.scripts.bucket
        self.deployment = self.scripts.deployment

    @property
    def bucket_name(self) -> str:
        """The lifecycle bucket's name."""
        return self.bucket.bucket_name

    @property
    def source_s3_uri(self) -> str:
        """``s3://<bucket>/<prefix>``: the instance groups' ``LifeCycleConfig.SourceS3Uri``."""
        return f"s3://{self.bucket.bucket_name}/{self.prefix}"

    @property
    def on_create(self) -> str:
        """The script HyperPod runs on every node (``LifeCycleConfig.OnCreate``)."""
        return ON_CREATE

    @property
    def provisioning_parameters_key(self) -> str:
        """The full S3 key of ``provisioning_parameters.json``."""
        return f"{self.prefix}{PROVISIONING_FILE}"

    @property
    def features_key(self) -> str:
        """The full S3 key of ``mlcluster_features.json``."""
        return f"{self.prefix}{FEATURES_FILE}"


def _check_props(
    *,
    stack: cdk.Stack,
    environment_name: str,
    controller_group: str,
    worker_groups: Mapping[str, str],
    login_group: str | None,
    fsx_dns_name: str,
    fsx_mount_name: str,
    fsx_efa_groups: Sequence[str] | None,
    prefix: str,
    scripts_dir: Path,
    removal_policy: cdk.RemovalPolicy,
) -> None:
    """Check every prop at once and raise one ValueError listing all problems."""
    problems: list[str] = []
    # The pattern keeps the name within S3's rules (lowercase, digits, '-', no dots); only its length can fail.
    if not ENVIRONMENT_NAME.fullmatch(environment_name) or "sagemaker" in environment_name:
        problems.append(
            f"environment_name: {environment_name!r} is not allowed; use lowercase letters, digits and '-', "
            "starting with a letter, without 'sagemaker' (it becomes part of the S3 bucket name, and AWS managed "
            "policies grant writes to buckets whose name contains 'sagemaker')"
        )
    else:
        known_account = not cdk.Token.is_unresolved(stack.account)
        known_region = not cdk.Token.is_unresolved(stack.region)
        account = stack.account if known_account else "<account>"
        region = stack.region if known_region else "<region>"
        length = sum(
            (
                len(BUCKET_PREFIX) + 1 + len(environment_name) + 1,
                len(stack.account) if known_account else ACCOUNT_LENGTH,
                1,
                len(stack.region) if known_region else MAX_REGION_LENGTH,
            )
        )
        if length > 63:
            problems.append(
                f"environment_name: {environment_name!r} makes the lifecycle bucket name "
                f"'{BUCKET_PREFIX}-{environment_name}-{account}-{region}' up to {length} characters long; S3 allows "
                "63, so use a shorter environment name"
            )
    names = [controller_group, *([login_group] if login_group is not None else []), *worker_groups]
    for label, name in (
        ("controller_group", controller_group),
        ("login_group", login_group),
        *(("worker_groups", n) for n in worker_groups),
    ):
        if name is not None and not re.fullmatch(GROUP_NAME, name):
            problems.append(
                f"{label}: {name!r} is not an instance group name; use 1-63 letters, digits and hyphens, starting and "
                "ending with a letter or digit"
            )
    if not worker_groups:
        problems.append("worker_groups: {} is not allowed; give at least one worker group and its partition")
    for name, partition in worker_groups.items():
        if not re.fullmatch(PARTITION_NAME, partition):
            problems.append(
                f"worker_groups[{name!r}]: partition {partition!r} is not allowed; use 1-64 letters, digits, '_' or '-'"
            )
    if len(set(names)) != len(names):
        problems.append(f"worker_groups: group names {names} repeat; controller, login and worker groups must differ")
    unknown = [name for name in fsx_efa_groups or () if name not in names]
    if unknown:
        problems.append(f"fsx_efa_groups: {unknown} are not instance groups of this cluster; allowed: {names}")
    for label, value in (("fsx_dns_name", fsx_dns_name), ("fsx_mount_name", fsx_mount_name)):
        if not cdk.Token.is_unresolved(value) and not value.strip():
            problems.append(f"{label}: {value!r} is empty; give the FSx for Lustre file system's {label[4:]}")
    if not PREFIX.fullmatch(prefix):
        problems.append(
            f"prefix: {prefix!r} is not allowed; use a key prefix such as 'lifecycle/' (letters, digits, !_.*'()- "
            "and '/', ending in '/', not starting with '/')"
        )
    if not (scripts_dir / ON_CREATE).is_file():
        problems.append(f"scripts_dir: {str(scripts_dir)!r} has no {ON_CREATE}; HyperPod runs it on every node")
    if removal_policy not in REMOVAL_POLICIES:
        problems.append(
            f"removal_policy: {removal_policy} is not allowed; use RemovalPolicy.RETAIN, "
            "RETAIN_ON_UPDATE_OR_DELETE or DESTROY"
        )
    if problems:
        raise ValueError("HyperPodLifecycle: " + "; ".join(problems))


def _base64_at_deploy(text: str) -> str:
    """``text`` in base64: now for a literal, by CloudFormation (``Fn::Base64``) when it holds deploy-time values."""
    return cdk.Fn.base64(text) if cdk.Token.is_unresolved(text) else base64_text(text)
