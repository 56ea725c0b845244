"""The ``cluster.hyperpod:`` section: a SageMaker HyperPod cluster with Slurm."""

from __future__ import annotations

from typing import Literal

from mlcluster.config.awsdata import HYPERPOD_INSTANCE_TYPES
from mlcluster.config.schema import Issues, section, setting

GROUP_NAME = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
GROUP_HELP = "allowed: 1-63 letters, digits and hyphens, starting and ending with a letter or digit"
ML_INSTANCE = r"ml\.[a-z0-9-]+\.[a-z0-9]+"
ML_HELP = "allowed: a SageMaker instance type such as 'ml.p5.48xlarge'"


@section
class InstanceGroupConfig:
    """One HyperPod instance group."""

    instance_group_name: str = setting(pattern=GROUP_NAME, allowed=GROUP_HELP)
    instance_type: str = setting(pattern=ML_INSTANCE, allowed=ML_HELP, choices=HYPERPOD_INSTANCE_TYPES)
    instance_count: int = setting(default=1, minimum=0, maximum=6758)
    threads_per_core: int = setting(default=1, one_of=(1, 2))
    ebs_volume_size_gib: int = setting(default=500, minimum=1, maximum=16384)
    deep_health_checks: tuple[Literal["InstanceStress", "InstanceConnectivity"], ...] = ()
    training_plan_arn: str | None = setting(
        default=None,
        pattern=r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/[a-z0-9-]+",
        allowed="allowed: a SageMaker training plan ARN",
    )


@section
class WorkerGroupConfig(InstanceGroupConfig):
    """A worker group and the Slurm partition its nodes join."""

    partition_name: str | None = setting(
        default=None,
        pattern=r"[A-Za-z0-9_-]{1,64}",
        allowed="allowed: letters, digits, '_' and '-' (default: the group name)",
    )


@section
class PosixUser:
    """A user created on every node with the same UID."""

    name: str = setting(pattern=r"[a-z_][a-z0-9_-]{0,31}", allowed="allowed: a POSIX user name such as 'alice'")
    uid: int = setting(minimum=1000, maximum=60000)


@section
class AccountingConfig:
    """Slurm accounting on the controller."""

    mode: Literal["none", "local", "remote"] = "local"
    endpoint: str | None = setting(
        default=None, pattern=r"[A-Za-z0-9.-]+(:\d{1,5})?", allowed="allowed: host or host:port of the database"
    )
    secret_arn: str | None = setting(
        default=None,
        pattern=r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+",
        allowed="allowed: a Secrets Manager secret ARN holding username and password",
    )

    def check(self, issues: Issues) -> None:
        if self.mode == "remote":
            if self.endpoint is None:
                issues.add("endpoint", None, "required with mode: remote")
            if self.secret_arn is None:
                issues.add("secret_arn", None, "required with mode: remote")
        elif self.endpoint is not None or self.secret_arn is not None:
            issues.add("mode", self.mode, "endpoint and secret_arn are only used with mode: remote")


@section
class LifecycleConfig:
    """Which lifecycle features the nodes run."""

    users: tuple[PosixUser, ...] = ()
    accounting: AccountingConfig = setting(default=AccountingConfig())
    docker: bool = True
    enroot_pyxis: bool = True
    home_on_fsx: bool = True
    observability: bool = False

    def check(self, issues: Issues) -> None:
        names = [u.name for u in self.users]
        uids = [u.uid for u in self.users]
        if len(set(names)) != len(names):
            issues.add("users", names, "user names must be unique")
        if len(set(uids)) != len(uids):
            issues.add("users", uids, "UIDs must be unique")
        if self.enroot_pyxis and not self.docker:
            issues.add("enroot_pyxis", True, "Enroot and Pyxis import images through Docker; set docker: true")


@section
class HyperPodConfig:
    """A HyperPod cluster: controller, optional login, worker groups."""

    controller: InstanceGroupConfig = setting(
        default=InstanceGroupConfig(instance_group_name="controller-machine", instance_type="ml.m5.12xlarge")
    )
    login: InstanceGroupConfig | None = None
    workers: tuple[WorkerGroupConfig, ...] = setting(allowed="at least one worker group")
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    data_bucket_access: Literal["none", "read", "read_write"] = "read_write"
    lifecycle: LifecycleConfig = setting(default=LifecycleConfig())
    create_timeout_hours: int = setting(default=12, minimum=1, maximum=12)

    def check(self, issues: Issues) -> None:
        if not self.workers:
            issues.add("workers", [], "give at least one worker group")
        if self.controller.instance_count != 1:
            issues.add("controller.instance_count", self.controller.instance_count, "allowed: 1 (one Slurm controller)")
        groups = [self.controller] + ([self.login] if self.login else []) + list(self.workers)
        names = [g.instance_group_name for g in groups]
        if len(set(names)) != len(names):
            issues.add("workers", names, "instance group names must be unique across controller, login and workers")
