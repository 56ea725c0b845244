"""The storage stack of an environment: data that outlives clusters."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlcluster.config import Environment
from mlcluster.constructs.accounting_database import AccountingDatabase
from mlcluster.constructs.accounting_database_user import AccountingDatabaseUser
from mlcluster.constructs.data_backup import DataBucketBackup
from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.lustre import DataRepositoryAssociationProps, LustreStorage
from mlcluster.constructs.nag import acknowledge_compliance
from mlcluster.constructs.network import NetworkRef
from mlcluster.constructs.openzfs import OpenZfsHome
from mlcluster.stacks.common import diagnostic_logs_removal_policy, export_output, log_retention, removal_policy


def nodes_in_public_subnet(environment: Environment) -> bool:
    """Whether the environment's cluster puts a head or login node in the public subnet (it mounts /home)."""
    cluster = environment.config.cluster
    pcluster = cluster.pcluster if cluster.backend == "pcluster" else None
    if pcluster is None:
        return False
    login = pcluster.login_nodes
    return pcluster.head_node.subnet == "public" or (login is not None and login.internet_facing)


class StorageStack(cdk.Stack):
    """The data bucket, FSx for Lustre linked to it by DRAs, and optional OpenZFS /home.

    Lives apart from the cluster stack: a cluster can be destroyed and
    recreated without touching anything here, and nothing here refers to the
    cluster. With ``retention.on_delete: retain`` every data-holding resource
    is retained when this stack is deleted or the resource is replaced.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        network: NetworkRef,
        environment_key: kms.IKey,
        association_scope: Construct | None = None,
        **kwargs: Any,
    ) -> None:
        """Build the storage of ``environment`` in ``network``; DRAs go to ``association_scope`` if given.

        ``environment_key`` encrypts the data bucket's backup vault.
        """
        super().__init__(scope, construct_id, **kwargs)
        cfg = environment.config.storage
        policy = removal_policy(environment)
        bucket_cfg = cfg.data_bucket
        bucket_key = (
            kms.Key.from_key_arn(self, "DataBucketKey", bucket_cfg.kms_key_arn) if bucket_cfg.kms_key_arn else None
        )
        self.data_bucket = DataBucket(
            self,
            "DataBucket",
            bucket_name=bucket_cfg.name,
            encryption=bucket_cfg.encryption,
            encryption_key=bucket_key,
            abort_incomplete_multipart_upload_days=bucket_cfg.abort_incomplete_multipart_upload_days,
            noncurrent_version_expiration_days=bucket_cfg.noncurrent_version_expiration_days,
            access_log_retention_days=bucket_cfg.access_log_retention_days,
            removal_policy=policy,
        )
        if bucket_cfg.encryption == "s3":
            acknowledge_compliance(
                self.data_bucket.bucket,
                "S3DefaultEncryptionKMS",
                f"{Path(environment.source).name} sets storage.data_bucket.encryption: s3, so S3 encrypts the data at "
                "rest with S3-managed keys (SSE-S3) and nodes and FSx read it without KMS requests or key grants; "
                "set encryption: kms for a KMS key whose use CloudTrail records.",
            )
        self.backup: DataBucketBackup | None = None
        if bucket_cfg.backup is not None:
            self.backup = DataBucketBackup(
                self,
                "DataBucketBackup",
                bucket=self.data_bucket.bucket,
                plan_name=f"mlcluster-{environment.name}-data-bucket",
                vault_key=environment_key,
                schedule=bucket_cfg.backup.schedule,
                retention_days=bucket_cfg.backup.retention_days,
                removal_policy=policy,
            )
        protection = (
            "an AWS Backup plan keeps recovery points of the data bucket in a vault under the environment's key"
            if self.backup is not None
            else f"{Path(environment.source).name} has no storage.data_bucket.backup, so versioning and the removal "
            "policy are the protection here"
        )
        for bucket in (self.data_bucket.bucket, self.data_bucket.log_bucket):
            acknowledge_compliance(
                bucket,
                "S3BucketReplicationEnabled",
                "Cross-region replication of training data and its access logs is a disaster-recovery choice "
                f"per environment (it doubles storage cost); {protection}.",
            )

        lustre = cfg.lustre
        subnet = network.private_subnets[0]
        self.lustre = LustreStorage(
            self,
            "Lustre",
            vpc=network.vpc,
            subnet=subnet,
            cluster_security_group=network.security_group,
            dedicated_security_group=lustre.security_group == "dedicated",
            deployment_type=lustre.deployment_type,
            storage_capacity_gib=lustre.storage_capacity_gib,
            throughput_mbps_per_tib=lustre.throughput_mbps_per_tib,
            data_compression=lustre.data_compression,
            lustre_version=lustre.lustre_version,
            metadata_mode=lustre.metadata.mode,
            metadata_iops=lustre.metadata.iops,
            efa_enabled=lustre.efa_enabled,
            kms_key=kms.Key.from_key_arn(self, "LustreKey", lustre.kms_key_arn) if lustre.kms_key_arn else None,
            automatic_backup_retention_days=lustre.automatic_backup_retention_days,
            daily_backup_start_time=lustre.daily_backup_start_time,
            weekly_maintenance_start_time=lustre.weekly_maintenance_start_time,
            log_level=lustre.log_level,
            log_retention=log_retention(environment),
            data_bucket=self.data_bucket.bucket,
            data_repository_associations=[
                DataRepositoryAssociationProps(**dataclasses.asdict(dra)) for dra in lustre.data_repository_associations
            ],
            association_scope=association_scope,
            removal_policy=policy,
        )

        self.openzfs: OpenZfsHome | None = None
        if cfg.openzfs is not None:
            zfs = cfg.openzfs
            multi_az = zfs.deployment_type == "MULTI_AZ_1"
            self.openzfs = OpenZfsHome(
                self,
                "OpenZfs",
                vpc=network.vpc,
                subnet=subnet,
                cluster_security_group=network.security_group,
                nfs_client_cidrs=network.node_subnet_cidrs(include_public=nodes_in_public_subnet(environment)),
                dedicated_security_group=zfs.security_group == "dedicated",
                deployment_type=zfs.deployment_type,
                standby_subnet=network.private_subnets[1] if multi_az and len(network.private_subnets) > 1 else None,
                route_table_ids=[s.route_table.route_table_id for s in network.private_subnets] if multi_az else None,
                storage_capacity_gib=zfs.storage_capacity_gib,
                throughput_capacity_mbps=zfs.throughput_capacity_mbps,
                data_compression=zfs.data_compression,
                kms_key=kms.Key.from_key_arn(self, "OpenZfsKey", zfs.kms_key_arn) if zfs.kms_key_arn else None,
                automatic_backup_retention_days=zfs.automatic_backup_retention_days,
                daily_backup_start_time=zfs.daily_backup_start_time,
                weekly_maintenance_start_time=zfs.weekly_maintenance_start_time,
                removal_policy=policy,
            )

        self.accounting: AccountingDatabase | None = None
        #: slurmdbd's own user and its bare-password secret (ParallelCluster only).
        self.accounting_user: AccountingDatabaseUser | None = None
        if cfg.accounting is not None:
            database = cfg.accounting
            self.accounting = AccountingDatabase(
                self,
                "AccountingDatabase",
                vpc=network.vpc,
                subnets=network.private_subnets,
                # No client group given: the database makes one, which the Cluster stack attaches to the
                # HyperPod controller alone (it runs slurmdbd and reads the secret); workers get no path, unless
                # admit_node_group keeps the old path from every node for a cluster created before that group.
                node_security_group=network.security_group if database.admit_node_group else None,
                encryption_key=environment_key,
                min_capacity_acu=database.min_capacity_acu,
                max_capacity_acu=database.max_capacity_acu,
                auto_pause_minutes=database.auto_pause_minutes,
                backup_retention_days=database.backup_retention_days,
                rotation_days=database.rotation_days,
                removal_policy=policy,
            )
            if environment.config.cluster.backend == "pcluster":
                # ParallelCluster's head node takes a secret holding the bare password (PasswordSecretArn): a user
                # of slurmdbd's own, made through the Data API, whose secret its role alone reads.
                self.accounting_user = AccountingDatabaseUser(
                    self.accounting,
                    "SlurmdbdUser",
                    cluster=self.accounting.cluster,
                    master_secret=self.accounting.secret,
                    encryption_key=environment_key,
                    database_name=database.database_name,
                    log_retention=log_retention(environment),
                    removal_policy=policy,
                    log_removal_policy=diagnostic_logs_removal_policy(environment),
                )

        outputs = {
            "DataBucketName": (self.data_bucket.bucket.bucket_name, "S3 data bucket (datasets, checkpoints)"),
            "LustreFileSystemId": (self.lustre.file_system_id, "FSx for Lustre file system, mounted at /fsx"),
            "LustreDnsName": (self.lustre.dns_name, "FSx for Lustre DNS name"),
            "LustreMountName": (self.lustre.mount_name, "FSx for Lustre mount name"),
        }
        if self.openzfs is not None:
            outputs["OpenZfsFileSystemId"] = (self.openzfs.file_system_id, "FSx for OpenZFS file system (/home)")
            outputs["OpenZfsDnsName"] = (self.openzfs.dns_name, "FSx for OpenZFS DNS name")
            outputs["OpenZfsRootVolumeId"] = (self.openzfs.root_volume_id, "FSx for OpenZFS root volume (NFS export)")
        if self.accounting is not None:
            outputs["AccountingDatabaseEndpoint"] = (self.accounting.endpoint, "Slurm accounting database (host:port)")
            outputs["AccountingDatabaseSecretArn"] = (
                self.accounting.secret.secret_arn,
                "Slurm accounting database master secret (rotated; "
                + (
                    "the Data API user function reads it)"
                    if self.accounting_user
                    else "the controller's role reads it)"
                ),
            )
        if self.accounting_user is not None:
            outputs["AccountingDatabaseUserSecretArn"] = (
                self.accounting_user.secret.secret_arn,
                f"Slurm accounting database password of {self.accounting_user.user_name} (the head node reads it)",
            )
        for name, (value, description) in outputs.items():
            export_output(self, environment, name, value, description)


class DataRepositoryStack(cdk.Stack):
    """The Lustre file system's data repository associations (DRAs), in a stack of their own.

    A DRA that batch-imports the metadata of a large bucket can take hours,
    and CloudFormation starts a stack only when every stack it depends on is
    complete. Here the cluster stack depends on the storage stack (the file
    system) alone, so the cluster is created while the imports run. The DRAs
    are made under the ``Lustre`` construct of this stack, keeping their ids
    (``Lustre/Association<Path>``).
    """

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        """An empty stack; ``StorageStack`` puts the DRAs into ``lustre_scope``."""
        super().__init__(scope, construct_id, **kwargs)
        self.lustre_scope = Construct(self, "Lustre")
