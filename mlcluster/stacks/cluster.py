"""The cluster stack of an environment: ParallelCluster or SageMaker HyperPod.

It only reads from the network and storage stacks (subnets, the security
group, file system and bucket attributes); nothing there refers back, so the
cluster can be destroyed and recreated without touching data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from mlcluster.collector import CollectorInputs, hyperpod_inputs, pcluster_inputs, render
from mlcluster.config import Environment
from mlcluster.config.hyperpod import AccountingConfig, HyperPodConfig
from mlcluster.config.observability import prometheus_enabled
from mlcluster.config.pcluster import PclusterConfig
from mlcluster.config.schema import ConfigError, Problem
from mlcluster.constructs.capacity_reservation_group import CapacityReservationGroup
from mlcluster.constructs.hyperpod_cluster import HyperPodCluster
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle
from mlcluster.constructs.hyperpod_role import HyperPodExecutionRole
from mlcluster.constructs.key_grants import decrypt_through_secrets_manager
from mlcluster.constructs.nag import acknowledge_wildcard_resource
from mlcluster.constructs.network import NetworkRef
from mlcluster.constructs.patch_backup import PatchBackupBucket
from mlcluster.constructs.pcluster_cluster import (
    PclusterCluster,
    PclusterProviderRole,
    permissions_boundary,
    session_manager_policy,
)
from mlcluster.constructs.prometheus_workspace import PrometheusEndpoints
from mlcluster.constructs.script_bucket import ScriptBucket
from mlcluster.lifecycle.collector import COLLECTOR_DIR, COLLECTOR_EXCLUDE
from mlcluster.lifecycle.exporters import EXPORTERS_DIR, EXPORTERS_EXCLUDE
from mlcluster.lifecycle.hyperpod import PATCH_BACKUP_PREFIX, SCHEDULED_BACKUP_FOLDER
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_NAMESPACE
from mlcluster.lifecycle.pcluster import HEALTH_TOOL, PCLUSTER_DIR
from mlcluster.pcluster.checks import network_zone_labels
from mlcluster.pcluster.provider_iam import NODE_POLICY_PATH
from mlcluster.pcluster.render import (
    DeployInputs,
    ManagedAccounting,
    ZoneSubnet,
    attached_policy_arns,
    render_cluster_config,
    user_script_objects,
)
from mlcluster.stacks.common import (
    diagnostic_logs_removal_policy,
    export_output,
    log_retention,
    removal_policy,
    scripts_removal_policy,
)
from mlcluster.stacks.storage import StorageStack

#: Where the ParallelCluster node scripts live in their bucket.
NODE_SCRIPT_PREFIX = "pcluster/"


class ClusterStack(cdk.Stack):
    """The environment's cluster, built by the backend its file names.

    ``pcluster``: node scripts uploaded to a secured bucket, capacity
    reservation groups, and the cluster launched through ParallelCluster's
    official custom resource with a configuration rendered from the file.
    ``hyperpod``: one execution role per instance group, the lifecycle
    bucket with scripts and generated inputs, and CloudFormation's native
    cluster resource between a pre-flight check and a node check.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        network: NetworkRef,
        storage: StorageStack,
        prometheus: PrometheusEndpoints | None = None,
        **kwargs: Any,
    ) -> None:
        """Build the cluster of ``environment`` on ``network`` and ``storage``.

        ``prometheus``: the environment's workspace, when it has one; the
        collector on the head node or controller writes to it. Default: none.
        """
        super().__init__(scope, construct_id, **kwargs)
        self.settings = environment
        self.prometheus = prometheus
        cluster = environment.config.cluster
        if cluster.backend == "pcluster" and cluster.pcluster is not None:
            self._pcluster(cluster.pcluster, network, storage)
        elif cluster.backend == "hyperpod" and cluster.hyperpod is not None:
            self._hyperpod(cluster.hyperpod, network, storage)
        else:  # pragma: no cover - the stage only builds this stack for a backend
            raise ValueError(f"cluster.backend: {cluster.backend!r} has no cluster to build")

    def _collector_common(self) -> dict[str, Any]:
        """The collector settings both backends share (``prometheus`` must be set)."""
        assert self.prometheus is not None
        env = self.settings
        return {
            "cluster_name": env.cluster_name,
            "environment": env.name,
            "region": self.region,
            "remote_write_url": self.prometheus.remote_write_url,
            "scrape_interval_seconds": env.config.observability.prometheus.scrape_interval_seconds,
        }

    # -- ParallelCluster --------------------------------------------------

    def _pcluster(self, cfg: PclusterConfig, network: NetworkRef, storage: StorageStack) -> None:
        env = self.settings
        keeps = env.config.retention.keeps_data
        collector: CollectorInputs | None = None
        collector_sources: list[s3deploy.ISource] = []
        if self.prometheus is not None:
            # The head node's collector: its scripts and rendered configuration (deploy-time values) next to the
            # node scripts. The head node fetches them without a manifest (it trusts the bucket): carrying them in
            # its arguments would change HeadNode.CustomActions, which ParallelCluster refuses to update.
            collector = pcluster_inputs(cfg, **self._collector_common())
            collector_sources = [
                s3deploy.Source.asset(str(COLLECTOR_DIR), exclude=COLLECTOR_EXCLUDE),
                *(s3deploy.Source.data(name, text) for name, text in render(collector).items()),
            ]
        scripts = ScriptBucket(
            self,
            "NodeScripts",
            prefix=NODE_SCRIPT_PREFIX,
            sources=[
                s3deploy.Source.asset(str(PCLUSTER_DIR), exclude=["__pycache__", "*.pyc", "__init__.py"]),
                # The exporters step's files, shared with HyperPod, at the top of the prefix too.
                s3deploy.Source.asset(str(EXPORTERS_DIR), exclude=EXPORTERS_EXCLUDE),
                # The node health tool (health_check step), shared with HyperPod, as run.sh's HEALTH_FILES.
                s3deploy.Source.data("health.sh", HEALTH_TOOL.read_text()),
                *collector_sources,
            ],
            purpose="ParallelCluster node scripts (Docker, Enroot/Pyxis, NCCL/EFA, Neuron)",
            removal_policy=removal_policy(env),
            log_retention=log_retention(env),
        )
        reservation_groups = {
            group.name: CapacityReservationGroup(
                self,
                f"Reservations-{group.name}",
                group_name=f"{env.cluster_name}-{group.name}",
                reservation_ids=group.reservation_ids,
            ).group_arn
            for group in cfg.capacity_reservation_groups
        }
        script_policy = None
        if cfg.login_nodes is not None:
            # ParallelCluster has no S3Access setting for login nodes: they read the scripts through this policy.
            # Under /parallelcluster/: ParallelCluster's provider may attach only such policies (provider_iam).
            script_policy = iam.ManagedPolicy(
                self,
                "NodeScriptRead",
                path=NODE_POLICY_PATH,
                description="Read the ParallelCluster node scripts (login nodes)",
                statements=[
                    iam.PolicyStatement(
                        actions=["s3:GetObject"], resources=[scripts.bucket.arn_for_objects(f"{NODE_SCRIPT_PREFIX}*")]
                    )
                ],
            )
            acknowledge_wildcard_resource(
                script_policy,
                scripts.bucket.arn_for_objects(f"{NODE_SCRIPT_PREFIX}*"),
                "Login nodes read every node script under the pcluster/ prefix of this bucket; the scripts are "
                "content the stack uploads, and the prefix holds nothing else.",
            )
        session_policy = None
        if cfg.head_node.ssm or any(q.ssm for q in cfg.queues):
            session_policy = session_manager_policy(self, "SessionManager")
        collector_policy = None
        if collector is not None and self.prometheus is not None:
            # Under /parallelcluster/: ParallelCluster's provider may attach only such policies (provider_iam).
            collector_policy = iam.ManagedPolicy(
                self,
                "CollectorRemoteWrite",
                path=NODE_POLICY_PATH,
                description="The head node's metrics collector writes samples to the Prometheus workspace",
                statements=[
                    iam.PolicyStatement(
                        sid="RemoteWrite", actions=["aps:RemoteWrite"], resources=[self.prometheus.workspace_arn]
                    )
                ],
            )
        managed = self._pcluster_accounting(storage)
        boundary = permissions_boundary(self, "NodeRoleBoundary", cluster_name=env.cluster_name)
        labels = network_zone_labels(env.config.network)
        inputs = DeployInputs(
            region=self.region,
            private_subnets=tuple(
                ZoneSubnet(zone=label, subnet_id=subnet.subnet_id)
                for label, subnet in zip(labels, network.private_subnets, strict=False)
            ),
            public_subnet_id=network.public_subnet.subnet_id if network.public_subnet is not None else None,
            security_group_ids=(network.security_group.security_group_id,),
            vpc_cidr=network.vpc_cidr_blocks[0],
            lustre_file_system_id=storage.lustre.file_system_id,
            openzfs_volume_id=storage.openzfs.root_volume_id if storage.openzfs is not None else None,
            node_script_bucket=scripts.bucket.bucket_name,
            node_script_prefix=NODE_SCRIPT_PREFIX,
            node_script_policy_arn=script_policy.managed_policy_arn if script_policy is not None else None,
            session_manager_policy_arn=session_policy.managed_policy_arn if session_policy is not None else None,
            collector_policy_arn=collector_policy.managed_policy_arn if collector_policy is not None else None,
            permissions_boundary_arn=boundary.managed_policy_arn,
            reservation_group_arns=reservation_groups,
            log_retention_days=env.config.retention.log_retention_days,
            retain_logs=keeps,
            retain_home=keeps,
            tags={"mlcluster:environment": env.name, **env.config.tags},
            exporters=prometheus_enabled(env.config),
            accounting=managed,
        )
        cluster_config = render_cluster_config(cfg, inputs)
        provider = PclusterProviderRole(
            self,
            "Provider",
            cluster_name=env.cluster_name,
            boundary=boundary,
            attachable_policy_arns=attached_policy_arns(cluster_config, self.partition),
            readable_objects=[
                scripts.bucket.arn_for_objects(f"{NODE_SCRIPT_PREFIX}*"),
                *user_script_objects(cfg, self.partition),
            ],
            secret_arns=[cfg.slurm.accounting.password_secret_arn]
            if cfg.slurm.accounting is not None
            else [managed.password_secret_arn]
            if managed is not None
            else [],
        )
        self.pcluster = PclusterCluster(
            self,
            "Cluster",
            cluster_name=env.cluster_name,
            provider_role=provider.role,
            cluster_configuration=cluster_config,
            version=cfg.version,
            deletion_policy="Retain" if keeps else "Delete",
            slurm_accounting=cfg.slurm.accounting is not None or managed is not None,
        )
        # The cluster's nodes run the scripts on their first boot: upload them first.
        self.pcluster.node.add_dependency(scripts.deployment)
        export_output(self, env, "ClusterName", env.cluster_name, "ParallelCluster cluster name")
        export_output(self, env, "HeadNodeInstanceId", self.pcluster.head_node_instance_id, "Head node EC2 instance")
        export_output(self, env, "HeadNodePrivateIp", self.pcluster.head_node_private_ip, "Head node private IP")
        export_output(
            self,
            env,
            "HeadNodeSsmCommand",
            self.pcluster.ssm_command,
            f"Open a shell on the head node: `mlcluster ssh {env.name}` (or this AWS CLI command)",
        )
        export_output(
            self, env, "ValidationMessages", self.pcluster.validation_messages, "ParallelCluster validation messages"
        )

    def _pcluster_accounting(self, storage: StorageStack) -> ManagedAccounting | None:
        """The managed accounting database as the head node uses it, with the head node's key policy; or None.

        ParallelCluster grants the head node ``secretsmanager:GetSecretValue`` on ``PasswordSecretArn`` itself
        (its head node policy, ``AllowGettingSlurmDbSecretValue``); the secret is under the environment key, so
        the head node also needs ``kms:Decrypt`` on that key, through Secrets Manager only: this policy, under
        /parallelcluster/ so the provider may attach it.
        """
        database, user = storage.accounting, storage.accounting_user
        if database is None or user is None:
            return None
        key_policy = iam.ManagedPolicy(
            self,
            "AccountingSecretKey",
            path=NODE_POLICY_PATH,
            description="The head node decrypts the Slurm accounting database password (Secrets Manager only)",
            statements=[
                decrypt_through_secrets_manager(
                    self,
                    sid="DecryptAccountingSecret",
                    key_arns=[database.encryption_key.key_arn],
                    secret_arn=user.secret.secret_arn,
                )
            ],
        )
        return ManagedAccounting(
            uri=database.endpoint,
            user_name=user.user_name,
            password_secret_arn=user.secret.secret_arn,
            database_name=user.database_name,
            client_security_group_id=database.client_security_group.security_group_id,
            policy_arn=key_policy.managed_policy_arn,
        )

    # -- SageMaker HyperPod -----------------------------------------------

    @staticmethod
    def _hyperpod_accounting(accounting: AccountingConfig, storage: StorageStack) -> AccountingConfig:
        """``managed`` is ``remote`` to the nodes, at the Storage stack's database and master secret."""
        if accounting.mode != "managed":
            return accounting
        if storage.accounting is None:  # pragma: no cover - the environment check requires storage.accounting
            raise ValueError("accounting.mode: managed needs storage.accounting")
        return AccountingConfig(
            mode="remote", endpoint=storage.accounting.endpoint, secret_arn=storage.accounting.secret.secret_arn
        )

    def _hyperpod(self, cfg: HyperPodConfig, network: NetworkRef, storage: StorageStack) -> None:
        env = self.settings
        workers = {w.instance_group_name: w.partition_name or w.instance_group_name for w in cfg.workers}
        # `mlcluster patch` keeps the controller's backups here, away from the data bucket (see patch_backup.py).
        backups = PatchBackupBucket(
            self,
            "PatchBackups",
            removal_policy=removal_policy(env),
            operator_role_arns=cfg.patch_operator_role_arns,
        )
        lifecycle = HyperPodLifecycle(
            self,
            "Lifecycle",
            environment_name=env.name,
            controller_group=cfg.controller.instance_group_name,
            login_group=cfg.login.instance_group_name if cfg.login is not None else None,
            worker_groups=workers,
            fsx_dns_name=storage.lustre.dns_name,
            fsx_mount_name=storage.lustre.mount_name,
            # With an EFA-enabled file system, the nodes of these groups set LNet up over EFA (lustre_efa step).
            fsx_efa_groups=cfg.lustre_efa_groups() if env.config.storage.lustre.efa_enabled else None,
            # Every node mounts the environment's OpenZFS volume (homes live there when it is declared).
            openzfs_dns_name=storage.openzfs.dns_name if storage.openzfs is not None else None,
            # The exporters step follows observability.prometheus.enabled (lifecycle.observability is refused).
            features=dataclasses.replace(
                cfg.lifecycle,
                observability=prometheus_enabled(env.config),
                accounting=self._hyperpod_accounting(cfg.lifecycle.accounting, storage),
            ),
            # The controller's metrics collector, when the environment has a Prometheus workspace.
            collector_files=(
                render(hyperpod_inputs(cfg, **self._collector_common())) if self.prometheus is not None else None
            ),
            # The controller's daily copy goes under its patch prefix, which its role may write (state.json aside).
            scheduled_backup={
                "bucket": backups.bucket.bucket_name,
                "key_arn": backups.key.key_arn,
                "prefix": f"{PATCH_BACKUP_PREFIX}{env.cluster_name}/{SCHEDULED_BACKUP_FOLDER}",
                # The dimension of the metric each copy publishes (the Observability stack's alarm).
                "cluster_name": env.cluster_name,
            },
            removal_policy=scripts_removal_policy(),
            log_retention=log_retention(env),
            # The upload history is kept as the environment keeps its logs.
            log_removal_policy=removal_policy(env),
        )
        accounting = self._hyperpod_accounting(cfg.lifecycle.accounting, storage)
        # The managed database's secret is under the environment key: the controller decrypts through Secrets Manager.
        secret_keys = [storage.accounting.encryption_key.key_arn] if storage.accounting is not None else []
        labels = network_zone_labels(env.config.network)
        subnet_of = dict(zip(labels, network.private_subnets, strict=False))
        groups = [group for _, group in cfg.groups()]
        group_subnets: dict[str, list[ec2.ISubnet]] = {}
        problems = []
        for path, group in cfg.groups():
            unknown = [zone for zone in group.zones if zone not in subnet_of]
            if unknown:
                problems.append(
                    Problem(f"cluster.hyperpod.{path}.zones", list(group.zones), f"allowed: zones of network: {labels}")
                )
            elif group.zones:
                group_subnets[group.instance_group_name] = [subnet_of[zone] for zone in group.zones]
        if problems:
            raise ConfigError(env.source, problems)
        override_subnets = [subnet for chosen in group_subnets.values() for subnet in chosen]
        node_subnets = list(dict.fromkeys([network.private_subnets[0], *override_subnets]))
        # With the managed accounting database, its client group on the controller alone (slurmdbd's node).
        controller_security_groups: list[ec2.ISecurityGroup] = (
            [storage.accounting.client_security_group]
            if storage.accounting is not None and cfg.lifecycle.accounting.mode == "managed"
            else []
        )
        roles: dict[str, iam.IRole] = {}
        for group in groups:
            is_controller = group is cfg.controller
            roles[group.instance_group_name] = HyperPodExecutionRole(
                self,
                f"Role-{group.instance_group_name}",
                vpc=network.vpc,
                subnets=node_subnets,
                # The controller's ENI also carries the accounting client group: its role may name it at creation.
                security_groups=[network.security_group, *(controller_security_groups if is_controller else [])],
                lifecycle_bucket=lifecycle.bucket,
                lifecycle_prefix=lifecycle.prefix,
                data_bucket=storage.data_bucket.bucket,
                data_bucket_access=cfg.data_bucket_access,
                # Only the controller runs slurmdbd, so only its role reads the accounting database's secret.
                secret_arns=[accounting.secret_arn] if accounting.secret_arn and is_controller else [],
                secret_key_arns=secret_keys if accounting.secret_arn and is_controller else [],
                # `mlcluster patch` runs mlcluster-backup on the controller (see mlcluster/cli/patch.py).
                backup_bucket=backups.bucket if is_controller else None,
                backup_prefix=f"{PATCH_BACKUP_PREFIX}{env.cluster_name}/" if is_controller else None,
                # Only the controller runs the metrics collector, so only its role may write to the workspace.
                remote_write_workspace_arn=(
                    self.prometheus.workspace_arn if is_controller and self.prometheus is not None else None
                ),
                # Only the controller runs the daily copy: no job on another node may publish its data point.
                copy_metric_namespace=(
                    SCHEDULED_COPY_NAMESPACE if is_controller and cfg.lifecycle.scheduled_backup else None
                ),
                description=f"SageMaker HyperPod instance group {group.instance_group_name} of {env.cluster_name}",
            ).role
        backups.deny_roles(
            [role.role_arn for name, role in roles.items() if name != cfg.controller.instance_group_name]
        )
        backups.protect_state(
            roles[cfg.controller.instance_group_name].role_arn, f"{PATCH_BACKUP_PREFIX}{env.cluster_name}/state.json"
        )
        backups.allow_key_use("Controller", [roles[cfg.controller.instance_group_name].role_arn])
        export_output(
            self,
            env,
            "PatchBackupBucketName",
            backups.bucket.bucket_name,
            "Where `mlcluster patch` keeps the controller's backups and run state (controller and operator only)",
        )
        export_output(
            self,
            env,
            "PatchBackupKeyArn",
            backups.key.key_arn,
            "The KMS key every upload to the patch backup bucket must name (its policy denies any other)",
        )
        self.hyperpod = HyperPodCluster(
            self,
            "Cluster",
            cluster_name=env.cluster_name,
            controller=cfg.controller,
            login=cfg.login,
            workers=cfg.workers,
            subnets=network.private_subnets[:1],
            security_groups=[network.security_group],
            execution_roles=roles,
            lifecycle=lifecycle,
            group_subnets=group_subnets,
            # With the managed accounting database, its client group on the controller alone (slurmdbd's node).
            controller_security_groups=controller_security_groups,
            node_recovery=cfg.node_recovery,
            slurm_config_strategy=cfg.slurm_config_strategy,
            tags={"mlcluster:environment": env.name, **env.config.tags},
            log_retention=log_retention(env),
            # The check function's and provider's logs say why a create failed: kept through its rollback.
            log_removal_policy=diagnostic_logs_removal_policy(env),
        )
        export_output(self, env, "ClusterName", self.hyperpod.cluster_name, "HyperPod cluster name")
        export_output(self, env, "ClusterArn", self.hyperpod.cluster_arn, "HyperPod cluster ARN")
        export_output(self, env, "ClusterStatus", self.hyperpod.cluster_status, "HyperPod cluster status")
        export_output(
            self,
            env,
            "ControllerSsmCommand",
            self.hyperpod.ssm_session_command(),
            f"Open a shell on the controller: `mlcluster ssh {env.name}` (or this AWS CLI command)",
        )
