"""Decisions for the HyperPod lifecycle scripts: which node this is, what it runs, how config files change.

HyperPod runs ``on_create.sh`` as root on every node. The shell scripts do the system work
(mounts, packages, services); everything that reads JSON or decides something lives here so
it can be unit-tested: the input files are validated with errors that name the file, key, bad
value and what is allowed, the node's role comes from HyperPod's ``resource_config.json``, the
ordered step list comes from :data:`STEPS`, and config-file edits are pure text functions.

On a node it runs with the system ``python3`` (standard library only) as
``python3 plan.py <command> ...``; Python code imports it as ``mlcluster.lifecycle.hyperpod.plan``.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shlex
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

Role = Literal["controller", "login", "worker"]
ROLES: tuple[Role, ...] = ("controller", "login", "worker")
AccountingMode = Literal["none", "local", "remote"]
ACCOUNTING_MODES: tuple[AccountingMode, ...] = ("none", "local", "remote")

#: The generated feature switches, shipped next to the scripts.
FEATURES_FILE = "mlcluster_features.json"
#: The standard HyperPod provisioning parameters, shipped next to the scripts.
PROVISIONING_FILE = "provisioning_parameters.json"
#: Where HyperPod writes the cluster's instance groups and addresses on every node.
RESOURCE_CONFIG = "/opt/ml/config/resource_config.json"
#: Local volumes for container data, best first: instance-store NVMe, then HyperPod's secondary EBS volume.
LOCAL_VOLUMES = ("/opt/dlami/nvme", "/opt/sagemaker")
#: The step on_create.sh always runs first: it writes node.env, which the step plan needs.
IDENTIFY_STEP = "identify_node"

USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
ENDPOINT = re.compile(r"(?P<host>[A-Za-z0-9.-]+)(:(?P<port>\d{1,5}))?")
SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):\d{12}:secret:.+")
DEFAULT_DB_PORT = 3306
#: How long workers and login nodes wait for slurmctld: as long as CloudFormation waits for an
#: ``AWS::SageMaker::Cluster`` to be created (720 minutes), so a worker never gives up before the stack does.
DEFAULT_CONTROLLER_WAIT_MINUTES = 720
MAX_CONTROLLER_WAIT_MINUTES = 720
PASSWORD_CHARS = string.ascii_letters + string.digits


class LifecycleInputError(ValueError):
    """An input file or value is missing or wrong; the message says which, and what is allowed."""


def _missing(source: str, key: str, allowed: str) -> LifecycleInputError:
    return LifecycleInputError(f"{source}: {key} is missing; {allowed}")


def _bad(source: str, key: str, value: object, allowed: str) -> LifecycleInputError:
    return LifecycleInputError(f"{source}: {key} = {value!r} is not valid; {allowed}")


def _mapping(source: str, key: str, value: object) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise _bad(source, key, value, "allowed: a JSON object")
    return cast("Mapping[str, object]", value)


def _list(source: str, key: str, value: object) -> list[object]:
    if not isinstance(value, list):
        raise _bad(source, key, value, "allowed: a JSON list")
    return cast("list[object]", value)


def _text(source: str, key: str, value: object, allowed: str = "allowed: a non-empty string") -> str:
    if not isinstance(value, str) or not value:
        raise _bad(source, key, value, allowed)
    return value


def _flag(source: str, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad(source, key, value, "allowed: true or false")
    return value


def _check_keys(source: str, where: str, data: Mapping[str, object], allowed: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            raise _bad(source, f"{where}{key}", data[key], "unknown key; allowed keys: " + ", ".join(allowed))


@dataclass(frozen=True)
class User:
    """A POSIX user created on every node with the same UID (and a group with GID = UID)."""

    name: str
    uid: int


@dataclass(frozen=True)
class Accounting:
    """Slurm accounting on the controller: a local MariaDB, a remote database, or none."""

    mode: AccountingMode = "local"
    endpoint: str | None = None
    secret_arn: str | None = None

    @property
    def host(self) -> str:
        """The database host: ``localhost`` for a local MariaDB, else the endpoint's host."""
        if self.endpoint is None:
            return "localhost"
        match = ENDPOINT.fullmatch(self.endpoint)
        return match["host"] if match else self.endpoint

    @property
    def port(self) -> int:
        """The database port (3306 unless the endpoint names one)."""
        match = ENDPOINT.fullmatch(self.endpoint or "")
        return int(match["port"]) if match and match["port"] else DEFAULT_DB_PORT

    @property
    def secret_region(self) -> str:
        """The secret's region, so the AWS CLI works on nodes with no default region configured."""
        match = SECRET_ARN.fullmatch(self.secret_arn or "")
        return match["region"] if match else ""


#: What a scheduled copy's bucket, key and prefix may be (the bucket's name rules; a KMS key ARN; a key prefix).
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}")
KEY_PREFIX = re.compile(r"([A-Za-z0-9._-]+/)+")
#: The metric each daily copy that reached S3 publishes (value 1, dimension ``ClusterName``; the scheduled_backup
#: step publishes one more at node creation to start the clock), which the Observability stack's alarm reads.
#: The namespace is mlcluster's own, which only the controller group's role may put metrics in
#: (``copy_metric_namespace`` of ``mlcluster.constructs.hyperpod_role``): every node's role may write HyperPod's
#: ``/aws/sagemaker/Clusters``, and jobs on workers can use their node's role.
SCHEDULED_COPY_NAMESPACE = "mlcluster/ScheduledCopy"
SCHEDULED_COPY_METRIC = "MlclusterScheduledCopy"
#: A HyperPod cluster name (SageMaker's ClusterName pattern, 1-63 characters).
CLUSTER_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
SCHEDULED_BACKUP_KEYS = ("bucket", "key_arn", "prefix", "cluster_name")


@dataclass(frozen=True)
class ScheduledBackup:
    """Where the controller's daily copy goes: the patch backup bucket, its key, and a prefix ending in ``/``.

    ``cluster_name``: the HyperPod cluster's name, the dimension of the metric each copy publishes.
    """

    bucket: str
    key_arn: str
    prefix: str
    cluster_name: str

    @property
    def uri(self) -> str:
        """``s3://<bucket>/<prefix>`` without the trailing ``/`` (``mlcluster-backup``'s argument)."""
        return f"s3://{self.bucket}/{self.prefix.rstrip('/')}"

    @property
    def region(self) -> str:
        """The key's region, the bucket's and the metric's: the AWS CLI on a node has no default region."""
        return self.key_arn.split(":")[3]


def _parse_scheduled_backup(source: str, value: object) -> ScheduledBackup | None:
    if value is None:
        return None
    data = _mapping(source, "scheduled_backup", value)
    _check_keys(source, "scheduled_backup.", data, SCHEDULED_BACKUP_KEYS)
    checks = (
        ("bucket", BUCKET_NAME, "an S3 bucket name"),
        ("key_arn", KMS_KEY_ARN, "a KMS key ARN"),
        ("prefix", KEY_PREFIX, "a key prefix of letters, digits, '.', '_', '-' ending in '/'"),
        ("cluster_name", CLUSTER_NAME, "a HyperPod cluster name (letters, digits, '-'; 1-63 characters)"),
    )
    found: dict[str, str] = {}
    for key, shape, allowed in checks:
        item = data.get(key)
        if item is None:
            raise _missing(source, f"scheduled_backup.{key}", f"allowed: {allowed}")
        if not isinstance(item, str) or not shape.fullmatch(item) or "/../" in f"/{item}":
            raise _bad(source, f"scheduled_backup.{key}", item, f"allowed: {allowed}")
        found[key] = item
    return ScheduledBackup(
        bucket=found["bucket"], key_arn=found["key_arn"], prefix=found["prefix"], cluster_name=found["cluster_name"]
    )


@dataclass(frozen=True)
class Features:
    """The switches in ``mlcluster_features.json``; defaults match the environment YAML's defaults."""

    users: tuple[User, ...] = ()
    accounting: Accounting = field(default_factory=Accounting)
    docker: bool = True
    enroot_pyxis: bool = True
    home_on_fsx: bool = True
    observability: bool = False
    docker_group: bool = False
    rootless_podman: bool = True
    controller_wait_minutes: int = DEFAULT_CONTROLLER_WAIT_MINUTES
    collector: bool = False
    scheduled_backup: ScheduledBackup | None = None


FEATURE_KEYS = (
    "users",
    "accounting",
    "docker",
    "enroot_pyxis",
    "home_on_fsx",
    "observability",
    "docker_group",
    "rootless_podman",
    "controller_wait_minutes",
    "collector",
    "scheduled_backup",
)
ACCOUNTING_KEYS = ("mode", "endpoint", "secret_arn")


def _parse_user(source: str, index: int, value: object) -> User:
    where = f"users[{index}]"
    data = _mapping(source, where, value)
    _check_keys(source, f"{where}.", data, ("name", "uid"))
    if "name" not in data:
        raise _missing(source, f"{where}.name", "allowed: a POSIX user name such as 'alice'")
    name = data["name"]
    if not isinstance(name, str) or not USER_NAME.fullmatch(name):
        raise _bad(source, f"{where}.name", name, "allowed: a POSIX user name such as 'alice'")
    uid = data.get("uid")
    if isinstance(uid, bool) or not isinstance(uid, int) or not 1000 <= uid <= 60000:
        raise _bad(source, f"{where}.uid", uid, "allowed: an integer UID from 1000 to 60000")
    return User(name=name, uid=uid)


def _parse_accounting(source: str, value: object) -> Accounting:
    data = _mapping(source, "accounting", value)
    _check_keys(source, "accounting.", data, ACCOUNTING_KEYS)
    mode = data.get("mode", "local")
    if mode not in ACCOUNTING_MODES:
        raise _bad(source, "accounting.mode", mode, "allowed: " + ", ".join(ACCOUNTING_MODES))
    endpoint = data.get("endpoint")
    secret_arn = data.get("secret_arn")
    if endpoint is not None and (not isinstance(endpoint, str) or not ENDPOINT.fullmatch(endpoint)):
        raise _bad(source, "accounting.endpoint", endpoint, "allowed: null or 'host' or 'host:port'")
    if secret_arn is not None and (not isinstance(secret_arn, str) or not SECRET_ARN.fullmatch(secret_arn)):
        raise _bad(source, "accounting.secret_arn", secret_arn, "allowed: null or a Secrets Manager secret ARN")
    if mode == "remote":
        if endpoint is None:
            raise _missing(source, "accounting.endpoint", "required with mode 'remote'")
        if secret_arn is None:
            raise _missing(source, "accounting.secret_arn", "required with mode 'remote'")
    elif endpoint is not None or secret_arn is not None:
        raise _bad(source, "accounting.mode", mode, "endpoint and secret_arn are only used with mode 'remote'")
    return Accounting(mode=mode, endpoint=endpoint, secret_arn=secret_arn)


def _wait_minutes(source: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONTROLLER_WAIT_MINUTES:
        raise _bad(
            source, "controller_wait_minutes", value, f"allowed: an integer from 1 to {MAX_CONTROLLER_WAIT_MINUTES}"
        )
    return value


def parse_features(data: object, source: str = FEATURES_FILE) -> Features:
    """Validate the features file's content; unknown keys are errors, so generator typos fail early."""
    top = _mapping(source, "(top level)", data)
    _check_keys(source, "", top, FEATURE_KEYS)
    users = tuple(_parse_user(source, i, u) for i, u in enumerate(_list(source, "users", top.get("users", []))))
    names = [u.name for u in users]
    uids = [u.uid for u in users]
    if len(set(names)) != len(names):
        raise _bad(source, "users", names, "user names must be unique")
    if len(set(uids)) != len(uids):
        raise _bad(source, "users", uids, "UIDs must be unique")
    defaults = Features()
    features = Features(
        users=users,
        accounting=_parse_accounting(source, top.get("accounting", {})),
        docker=_flag(source, "docker", top.get("docker", defaults.docker)),
        enroot_pyxis=_flag(source, "enroot_pyxis", top.get("enroot_pyxis", defaults.enroot_pyxis)),
        home_on_fsx=_flag(source, "home_on_fsx", top.get("home_on_fsx", defaults.home_on_fsx)),
        observability=_flag(source, "observability", top.get("observability", defaults.observability)),
        docker_group=_flag(source, "docker_group", top.get("docker_group", defaults.docker_group)),
        rootless_podman=_flag(source, "rootless_podman", top.get("rootless_podman", defaults.rootless_podman)),
        controller_wait_minutes=_wait_minutes(
            source, top.get("controller_wait_minutes", defaults.controller_wait_minutes)
        ),
        collector=_flag(source, "collector", top.get("collector", defaults.collector)),
        scheduled_backup=_parse_scheduled_backup(source, top.get("scheduled_backup")),
    )
    if features.docker_group and not features.docker:
        raise _bad(source, "docker_group", True, "the docker group needs docker: true")
    if features.enroot_pyxis and not features.docker:
        raise _bad(source, "enroot_pyxis", True, "Enroot and Pyxis import images through Docker; set docker to true")
    return features


@dataclass(frozen=True)
class WorkerGroup:
    """A worker instance group and the Slurm partition its nodes join."""

    instance_group_name: str
    partition_name: str


@dataclass(frozen=True)
class OpenZfs:
    """An FSx for OpenZFS volume every node mounts over NFS (mlcluster's ``fsx_openzfs_*`` keys)."""

    dns_name: str
    volume_path: str = "/fsx"
    mount_point: str = "/home"


ABSOLUTE_PATH = re.compile(r"(/[A-Za-z0-9._-]+)+")


def _parse_openzfs(source: str, top: Mapping[str, object]) -> OpenZfs | None:
    dns = top.get("fsx_openzfs_dns_name")
    if dns is None:
        for key in ("fsx_openzfs_volume_path", "fsx_openzfs_mount_point"):
            if key in top:
                raise _bad(source, key, top[key], "only used together with fsx_openzfs_dns_name")
        return None
    dns = _text(source, "fsx_openzfs_dns_name", dns, "allowed: the FSx for OpenZFS DNS name")
    paths: dict[str, str] = {}
    for key, default in (("fsx_openzfs_volume_path", "/fsx"), ("fsx_openzfs_mount_point", "/home")):
        value = top.get(key, default)
        if not isinstance(value, str) or not ABSOLUTE_PATH.fullmatch(value):
            raise _bad(source, key, value, "allowed: an absolute path such as '/fsx' (letters, digits, '.', '_', '-')")
        paths[key] = value
    if paths["fsx_openzfs_mount_point"] in ("/fsx", "/proc", "/sys", "/dev", "/etc", "/usr", "/opt", "/var"):
        raise _bad(
            source,
            "fsx_openzfs_mount_point",
            paths["fsx_openzfs_mount_point"],
            "allowed: a folder of its own such as '/home' (not /fsx or a system folder)",
        )
    return OpenZfs(
        dns_name=dns, volume_path=paths["fsx_openzfs_volume_path"], mount_point=paths["fsx_openzfs_mount_point"]
    )


@dataclass(frozen=True)
class ProvisioningParameters:
    """The parts of ``provisioning_parameters.json`` the scripts use (other keys are left to HyperPod).

    ``fsx_efa_enabled`` says the FSx for Lustre file system is EFA-enabled; ``fsx_efa_groups`` names
    the instance groups whose instance type reaches it over EFA (mlcluster decides that at synth).
    """

    version: str
    controller_group: str
    worker_groups: tuple[WorkerGroup, ...]
    fsx_dns_name: str
    fsx_mountname: str
    login_group: str | None = None
    openzfs: OpenZfs | None = None
    fsx_efa_enabled: bool = False
    fsx_efa_groups: tuple[str, ...] = ()


def _parse_efa(source: str, top: Mapping[str, object]) -> tuple[bool, tuple[str, ...]]:
    enabled = _flag(source, "fsx_efa_enabled", top.get("fsx_efa_enabled", False))
    groups = tuple(
        _text(source, f"fsx_efa_groups[{i}]", g, "allowed: an instance group name")
        for i, g in enumerate(_list(source, "fsx_efa_groups", top.get("fsx_efa_groups", [])))
    )
    if groups and not enabled:
        raise _bad(source, "fsx_efa_groups", list(groups), "only used with fsx_efa_enabled: true")
    return enabled, groups


def parse_provisioning(data: object, source: str = PROVISIONING_FILE) -> ProvisioningParameters:
    """Validate the provisioning parameters the scripts rely on."""
    top = _mapping(source, "(top level)", data)
    for key in ("version", "workload_manager", "controller_group", "worker_groups", "fsx_dns_name", "fsx_mountname"):
        if key not in top:
            raise _missing(source, key, "see README.md for the file format")
    if top["workload_manager"] != "slurm":
        raise _bad(source, "workload_manager", top["workload_manager"], "allowed: 'slurm'")
    groups: list[WorkerGroup] = []
    for index, value in enumerate(_list(source, "worker_groups", top["worker_groups"])):
        entry = _mapping(source, f"worker_groups[{index}]", value)
        if "instance_group_name" not in entry:
            raise _missing(source, f"worker_groups[{index}].instance_group_name", "allowed: an instance group name")
        name = _text(source, f"worker_groups[{index}].instance_group_name", entry["instance_group_name"])
        partition = _text(source, f"worker_groups[{index}].partition_name", entry.get("partition_name", name))
        groups.append(WorkerGroup(instance_group_name=name, partition_name=partition))
    if not groups:
        raise _bad(source, "worker_groups", [], "allowed: at least one worker group")
    login = top.get("login_group")
    efa_enabled, efa_groups = _parse_efa(source, top)
    params = ProvisioningParameters(
        version=_text(source, "version", top["version"]),
        controller_group=_text(source, "controller_group", top["controller_group"]),
        worker_groups=tuple(groups),
        fsx_dns_name=_text(source, "fsx_dns_name", top["fsx_dns_name"], "allowed: the FSx for Lustre DNS name"),
        fsx_mountname=_text(source, "fsx_mountname", top["fsx_mountname"], "allowed: the FSx for Lustre mount name"),
        login_group=None if login is None else _text(source, "login_group", login),
        openzfs=_parse_openzfs(source, top),
        fsx_efa_enabled=efa_enabled,
        fsx_efa_groups=efa_groups,
    )
    names = [params.controller_group, *([login] if login else []), *(g.instance_group_name for g in groups)]
    if len(set(names)) != len(names):
        raise _bad(source, "worker_groups", names, "controller, login and worker group names must all differ")
    unknown = [g for g in efa_groups if g not in names]
    if unknown:
        raise _bad(source, "fsx_efa_groups", unknown, f"allowed: the cluster's instance groups {names}")
    return params


@dataclass(frozen=True)
class Node:
    """This node as the scripts see it: its role, group, address and the Slurm controller's address."""

    role: Role
    group: str
    instance_name: str
    address: str
    controller_address: str
    partition: str | None = None
    instance_type: str = ""


def _instances(source: str, group: Mapping[str, object], index: int) -> list[Mapping[str, object]]:
    key = f"InstanceGroups[{index}].Instances"
    return [_mapping(source, f"{key}[]", i) for i in _list(source, key, group.get("Instances", []))]


def identify_node(
    resource_config: object, params: ProvisioningParameters, addresses: Sequence[str], source: str = RESOURCE_CONFIG
) -> Node:
    """Find this node (the instance whose CustomerIpAddress is one of ``addresses``) and its role."""
    top = _mapping(source, "(top level)", resource_config)
    if "InstanceGroups" not in top:
        raise _missing(source, "InstanceGroups", "HyperPod writes this file; is this a HyperPod node?")
    groups = [
        _mapping(source, f"InstanceGroups[{i}]", g)
        for i, g in enumerate(_list(source, "InstanceGroups", top["InstanceGroups"]))
    ]
    controllers = [g for g in groups if g.get("Name") == params.controller_group]
    if not controllers:
        found = [g.get("Name") for g in groups]
        raise _bad(
            source, "InstanceGroups[].Name", found, f"no group named '{params.controller_group}' (controller_group)"
        )
    controller_instances = _instances(source, controllers[0], groups.index(controllers[0]))
    if not controller_instances or not isinstance(controller_instances[0].get("CustomerIpAddress"), str):
        raise _missing(source, f"{params.controller_group}.Instances[0].CustomerIpAddress", "the controller's address")
    controller_address = cast(str, controller_instances[0]["CustomerIpAddress"])
    partitions = {g.instance_group_name: g.partition_name for g in params.worker_groups}
    for index, group in enumerate(groups):
        for instance in _instances(source, group, index):
            if instance.get("CustomerIpAddress") not in addresses:
                continue
            name = str(group.get("Name"))
            role: Role
            if name == params.controller_group:
                role = "controller"
            elif name == params.login_group:
                role = "login"
            elif name in partitions:
                role = "worker"
            else:
                known = [params.controller_group, *([params.login_group] if params.login_group else []), *partitions]
                raise _bad(source, "InstanceGroups[].Name", name, f"not in {PROVISIONING_FILE}; known groups: {known}")
            return Node(
                role=role,
                group=name,
                instance_name=str(instance.get("InstanceName", "")),
                address=cast(str, instance["CustomerIpAddress"]),
                controller_address=controller_address,
                partition=partitions.get(name),
                instance_type=str(group.get("InstanceType") or ""),
            )
    raise _bad("this node", "addresses", list(addresses), f"none of them is a CustomerIpAddress in {source}")


def _always(_: Features) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One lifecycle step: ``steps/<name>.sh``, the roles it runs on and the feature switch it needs."""

    name: str
    summary: str
    roles: frozenset[Role] = frozenset(ROLES)
    when: Callable[[Features], bool] = _always


#: Every step in run order. Workers and login nodes wait for slurmctld before they touch the shared
#: homes, so the controller has created them first; Docker, Enroot and Pyxis come before Slurm starts,
#: so the Pyxis plugin is in plugstack.conf when the daemons read it.
STEPS: tuple[Step, ...] = (
    Step("lustre_efa", "set LNet up over EFA when the Lustre file system and this node's instance type have it"),
    Step("mount_fsx", "mount FSx for Lustre at /fsx and wait until it is writable"),
    Step("mount_openzfs", "mount the FSx for OpenZFS volume the environment declares (NFS, /home by default)"),
    Step("imds", "let only root reach the instance metadata service", roles=frozenset({"controller", "login"})),
    Step("add_users", "create the shared POSIX users with fixed UIDs", when=lambda f: bool(f.users)),
    Step("docker", "install Docker with its data root on local NVMe", when=lambda f: f.docker),
    Step(
        "enroot_pyxis", "install Enroot and the Pyxis Slurm plugin, data on local NVMe", when=lambda f: f.enroot_pyxis
    ),
    Step("nccl_tests", "build the pinned nccl-tests on GPU nodes", roles=frozenset({"worker"})),
    Step("wait_controller", "wait until slurmctld answers on the controller", roles=frozenset({"worker", "login"})),
    Step("homes", "give every cluster user a home on the shared file system, created safely"),
    Step("ssh_keys", "give every user one SSH key pair shared by all nodes"),
    Step(
        "accounting",
        "Slurm accounting: slurmdbd with a local MariaDB or a remote database",
        roles=frozenset({"controller"}),
        when=lambda f: f.accounting.mode != "none",
    ),
    Step("start_slurm", "start slurmctld (controller) or slurmd in configless mode (workers, login)"),
    Step("log_rotation", "rotate Slurm logs with logrotate"),
    Step(
        "observability",
        "metrics exporters as mlc-exporter: node exporter (EFA and, on the controller, Slurm textfile metrics), "
        "the DCGM exporter on GPU nodes",
        when=lambda f: f.observability,
    ),
    Step(
        "collector",
        "the metrics collector (Prometheus agent) scraping every node, remote-writing to the workspace",
        roles=frozenset({"controller"}),
        when=lambda f: f.collector,
    ),
    Step("install_tools", "keep the lifecycle scripts on the node; install mlcluster-precheck and mlcluster-health"),
    Step(
        "scheduled_backup",
        "a daily copy of slurmctld's state and the local accounting database to the patch backup bucket",
        roles=frozenset({"controller"}),
        when=lambda f: f.scheduled_backup is not None,
    ),
)


def plan_steps(role: Role, features: Features) -> tuple[str, ...]:
    """The steps this node runs after ``identify_node``, in order."""
    return tuple(s.name for s in STEPS if role in s.roles and s.when(features))


def node_env(node: Node, params: ProvisioningParameters, features: Features) -> dict[str, str]:
    """The variables the step scripts read from ``/etc/mlcluster/node.env``."""

    def flag(value: bool) -> str:
        return "true" if value else "false"

    acct = features.accounting
    return {
        "MLC_ROLE": node.role,
        "MLC_GROUP": node.group,
        "MLC_INSTANCE_NAME": node.instance_name,
        "MLC_ADDRESS": node.address,
        "MLC_CONTROLLER_ADDRESS": node.controller_address,
        "MLC_PARTITION": node.partition or "",
        "MLC_FSX_DNS_NAME": params.fsx_dns_name,
        "MLC_FSX_MOUNTNAME": params.fsx_mountname,
        "MLC_INSTANCE_TYPE": node.instance_type,
        "MLC_FSX_EFA": flag(params.fsx_efa_enabled),
        "MLC_LUSTRE_EFA": flag(params.fsx_efa_enabled and node.group in params.fsx_efa_groups),
        "MLC_USERS": " ".join(f"{u.name}:{u.uid}" for u in features.users),
        "MLC_ACCOUNTING_MODE": acct.mode,
        "MLC_ACCOUNTING_HOST": acct.host,
        "MLC_ACCOUNTING_PORT": str(acct.port),
        "MLC_ACCOUNTING_SECRET_ARN": acct.secret_arn or "",
        "MLC_ACCOUNTING_SECRET_REGION": acct.secret_region,
        "MLC_DOCKER": flag(features.docker),
        "MLC_ENROOT_PYXIS": flag(features.enroot_pyxis),
        "MLC_HOME_ON_FSX": flag(features.home_on_fsx),
        "MLC_OBSERVABILITY": flag(features.observability),
        "MLC_DOCKER_GROUP": flag(features.docker_group),
        "MLC_ROOTLESS_PODMAN": flag(features.rootless_podman),
        "MLC_CONTROLLER_WAIT_MINUTES": str(features.controller_wait_minutes),
        "MLC_SCHEDULED_BACKUP_URI": features.scheduled_backup.uri if features.scheduled_backup else "",
        "MLC_SCHEDULED_BACKUP_KEY_ARN": features.scheduled_backup.key_arn if features.scheduled_backup else "",
        "MLC_SCHEDULED_BACKUP_CLUSTER": features.scheduled_backup.cluster_name if features.scheduled_backup else "",
        "MLC_SCHEDULED_BACKUP_NAMESPACE": SCHEDULED_COPY_NAMESPACE if features.scheduled_backup else "",
        "MLC_SCHEDULED_BACKUP_METRIC": SCHEDULED_COPY_METRIC if features.scheduled_backup else "",
        "MLC_SCHEDULED_BACKUP_REGION": features.scheduled_backup.region if features.scheduled_backup else "",
        "MLC_OPENZFS_DNS_NAME": params.openzfs.dns_name if params.openzfs else "",
        "MLC_OPENZFS_VOLUME_PATH": params.openzfs.volume_path if params.openzfs else "",
        "MLC_OPENZFS_MOUNT_POINT": params.openzfs.mount_point if params.openzfs else "",
        "MLC_HOME_ROOT": home_root(params, features),
    }


def home_root(params: ProvisioningParameters, features: Features) -> str:
    """Where the users' homes live: on OpenZFS when declared, else /fsx/home, else the local /home."""
    if params.openzfs is not None:
        return params.openzfs.mount_point
    return "/fsx/home" if features.home_on_fsx else "/home"


def render_env(values: Mapping[str, str]) -> str:
    """Shell assignments, safely quoted, for ``source``."""
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#") or not line.strip()


def _with_newline(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _key_of(line: str) -> str | None:
    """The lower-cased key of a ``Key=value`` line, or None for comments and other lines."""
    if _is_comment(line) or "=" not in line:
        return None
    return line.split("=", 1)[0].strip().lower()


def _includes(line: str, path: str) -> bool:
    """Does this ``include`` line include ``path`` (given absolute or relative to the config folder)?"""
    match = re.fullmatch(r"(?i)\s*include\s+(\S+)\s*", line)
    if not match:
        return False
    target = match[1]
    name = path.rsplit("/", 1)[-1]
    return target in (path, name) or target.endswith("/" + name)


def edit_slurm_conf(
    text: str, *, configless: bool = False, includes: Sequence[str] = (), settings: Mapping[str, str] | None = None
) -> str:
    """A Slurm config file with configless mode on, ``Key=value`` settings and ``include`` lines, each once.

    Configless mode adds ``enable_configless`` to ``SlurmctldParameters`` (keeping its other values);
    a setting replaces the key's last value or is appended; an include already present (by absolute
    or relative path) is left alone. Applying the same edit twice changes nothing.
    """
    lines = text.splitlines()
    if configless:
        params = [i for i, line in enumerate(lines) if _key_of(line) == "slurmctldparameters"]
        if not params:
            lines.append("SlurmctldParameters=enable_configless")
        elif "enable_configless" not in lines[params[-1]].split("=", 1)[1].strip().split(","):
            lines[params[-1]] = lines[params[-1]].rstrip() + ",enable_configless"
    for key, value in (settings or {}).items():
        found = [i for i, line in enumerate(lines) if _key_of(line) == key.lower()]
        if found:
            lines[found[-1]] = f"{key}={value}"
        else:
            lines.append(f"{key}={value}")
    for path in includes:
        if not any(_includes(line, path) for line in lines):
            lines.append(f"include {path}")
    return _with_newline(lines)


def configless_unit(text: str, server: str) -> str:
    """Point slurmd at the controller: replace the unit's ``$SLURMD_OPTIONS`` with ``--conf-server``."""
    option = f"--conf-server {server}"
    if "$SLURMD_OPTIONS" in text or "${SLURMD_OPTIONS}" in text:
        return text.replace("${SLURMD_OPTIONS}", option).replace("$SLURMD_OPTIONS", option)
    if option in text:
        return text
    raise LifecycleInputError(
        f"slurmd.service: found neither $SLURMD_OPTIONS nor '{option}'; "
        "allowed: the HyperPod AMI's unit, whose ExecStart ends with $SLURMD_OPTIONS"
    )


def fstab_with(text: str, entry: str, mountpoint: str) -> str:
    """``fstab`` with exactly one line for ``mountpoint``: ``entry`` (other lines for it are dropped)."""
    kept = [line for line in text.splitlines() if _is_comment(line) or line.split()[1:2] != [mountpoint]]
    return _with_newline([*kept, entry])


#: How many EFA interfaces LNet uses per instance type: the table of the FSx for Lustre user guide,
#: "Configuring EFA clients", step "EFA interfaces"
#: (https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html). Other types: two
#: when the instance has more than one EFA device (several network cards), else one. Each interface
#: counts against the file system's limit of 1024 EFA connections.
EFA_INTERFACES_BY_TYPE: dict[str, int] = {
    "p6-b300.48xlarge": 16,
    "p6e-gb200.36xlarge": 8,
    "p6-b200.48xlarge": 8,
    "p5en.48xlarge": 8,
    "p5e.48xlarge": 8,
    "p5.48xlarge": 8,
}


#: What ``mlcluster-health`` expects on a node, per instance type: (NVIDIA GPUs, EFA devices, Neuron
#: devices). The same figures as ``mlcluster.pcluster.instance_types`` (accelerators, from EC2
#: DescribeInstanceTypes) and ``mlcluster.cli.nccl.EFA_DEVICES`` (MaximumEfaInterfaces); this module
#: runs on the node with the standard library only, so tests/lifecycle/test_hyperpod_health.py
#: compares the two. Other types: nothing expected, the checks are skipped.
HEALTH_EXPECTATIONS: dict[str, tuple[int, int, int]] = {
    "p4d.24xlarge": (8, 4, 0),
    "p4de.24xlarge": (8, 4, 0),
    "p5.48xlarge": (8, 32, 0),
    "p5e.48xlarge": (8, 32, 0),
    "p5en.48xlarge": (8, 16, 0),
    "p6-b200.48xlarge": (8, 8, 0),
    "trn1.32xlarge": (0, 8, 16),
    "trn1n.32xlarge": (0, 16, 16),
    "trn2.48xlarge": (0, 16, 16),
}


def health_env(instance_type: str) -> str:
    """``/etc/mlcluster/health.env`` for ``instance_type`` (``ml.`` prefix allowed)."""
    gpus, efa, neuron = HEALTH_EXPECTATIONS.get(instance_type.removeprefix("ml."), (0, 0, 0))
    return (
        f"# Written by mlcluster (install_tools) for {instance_type}: what mlcluster-health expects.\n"
        f"MLC_EXPECT_GPUS={gpus}\nMLC_EXPECT_EFA={efa}\nMLC_EXPECT_NEURON={neuron}\n"
    )


def efa_interfaces(instance_type: str, devices: Sequence[str]) -> list[str]:
    """The EFA devices LNet should use on this node, spread evenly over the sorted device list.

    ``instance_type`` may carry SageMaker's ``ml.`` prefix. With 32 devices and 8 wanted this takes
    every fourth one (one per PCI bus, as AWS's EKS example does); with two or more devices on
    another type, the first and the last.
    """
    found = sorted(set(devices))
    if not found:
        raise LifecycleInputError("no EFA device found under /sys/class/infiniband; allowed: an EFA-enabled instance")
    wanted = EFA_INTERFACES_BY_TYPE.get(instance_type.removeprefix("ml."))
    if wanted is None:
        return found[:1] if len(found) == 1 else [found[0], found[-1]]
    step = max(1, len(found) // wanted)
    return found[::step][:wanted]


def _unescape_mount(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def choose_local_root(mounts: str, root: str = "", candidates: Sequence[str] = LOCAL_VOLUMES) -> str | None:
    """The first local volume that is a mount point (an unmounted folder would be the root volume)."""
    mounted = {
        _unescape_mount(fields[1]) for fields in (line.split() for line in mounts.splitlines()) if len(fields) > 1
    }
    return next((c for c in candidates if root + c in mounted), None)


def docker_daemon_config(current: str | None, data_root: str, source: str = "/etc/docker/daemon.json") -> str:
    """``daemon.json`` with ``data-root`` set, keeping every other setting (e.g. the NVIDIA runtime)."""
    config: dict[str, object] = {}
    if current and current.strip():
        try:
            loaded = json.loads(current)
        except json.JSONDecodeError as err:
            raise LifecycleInputError(f"{source} is not valid JSON ({err}); fix or remove it") from err
        config = dict(_mapping(source, "(top level)", loaded))
    config["data-root"] = data_root
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def secret_field(secret: str, key: str, source: str = "the accounting secret") -> str:
    """One string field of a Secrets Manager JSON secret; errors never echo the secret."""
    try:
        data = json.loads(secret)
    except json.JSONDecodeError:
        raise LifecycleInputError(
            f'{source} is not a JSON object; allowed: {{"username": ..., "password": ...}}'
        ) from None
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        raise LifecycleInputError(
            f"{source}: field '{key}' is missing or not a string; allowed: a JSON object with username and password"
        )
    return value


#: What a StorageUser or StoragePass may hold in slurmdbd.conf: printable ASCII without a space, ``#`` (a
#: comment in Slurm's config parser), ``\`` (its escape) or ``"`` (its quoting). A newline would let whoever
#: writes the secret add a line (e.g. another StorageHost) to the file slurmdbd runs with.
SLURMDBD_VALUE = re.compile(r"[!$-\[\]-~]+")


def slurmdbd_credentials(conf: str, secret: str, source: str = "slurmdbd.conf") -> str:
    """``conf`` (slurmdbd.conf) with StorageUser and StoragePass set from ``secret`` (the JSON secret).

    Every other line stays as it is. Both keys must already be in ``conf`` (the accounting step writes
    them): a file without them is not one mlcluster wrote. Errors never echo the secret.
    """
    values = {"StorageUser": secret_field(secret, "username"), "StoragePass": secret_field(secret, "password")}
    for key, value in values.items():
        if not SLURMDBD_VALUE.fullmatch(value):
            field = "username" if key == "StorageUser" else "password"
            raise LifecycleInputError(
                f"the accounting secret: field '{field}' has a character slurmdbd.conf cannot hold; "
                "allowed: printable ASCII without space, '#', '\\' or '\"'"
            )
    lines = conf.splitlines(keepends=True)
    for key, value in values.items():
        found = [i for i, line in enumerate(lines) if line.split("=", 1)[0].strip().lower() == key.lower()]
        if len(found) != 1:
            raise LifecycleInputError(f"{source} has {len(found)} {key} line(s); allowed: exactly one")
        lines[found[0]] = f"{key}={value}\n"
    return "".join(lines)


def new_password(length: int = 32) -> str:
    """A random password of letters and digits (nothing to quote in SQL or slurmdbd.conf)."""
    return "".join(secrets.choice(PASSWORD_CHARS) for _ in range(length))


def load_json(path: Path) -> object:
    """Read a JSON file, with an error that names the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise LifecycleInputError(f"cannot read {path}: {err.strerror}") from err
    except json.JSONDecodeError as err:
        raise LifecycleInputError(f"{path} is not valid JSON: {err}") from err


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise LifecycleInputError(f"cannot read {path}: {err.strerror}") from err


def _features(path: str) -> Features:
    return parse_features(load_json(Path(path)), source=path)


def _cmd_identify(args: argparse.Namespace) -> str:
    params = parse_provisioning(load_json(Path(args.provisioning)), source=args.provisioning)
    features = _features(args.features)
    node = identify_node(load_json(Path(args.resource_config)), params, args.addresses.split(), args.resource_config)
    return render_env(node_env(node, params, features))


def _cmd_steps(args: argparse.Namespace) -> str:
    return "".join(f"{name}\n" for name in plan_steps(args.role, _features(args.features)))


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _cmd_slurm_conf(args: argparse.Namespace) -> str:
    path = Path(args.conf)
    text = "" if args.missing_ok and not path.exists() else _read(path)
    return edit_slurm_conf(text, configless=args.configless, includes=args.include, settings=dict(args.set))


def _cmd_slurmd_unit(args: argparse.Namespace) -> str:
    return configless_unit(_read(Path(args.unit)), args.server)


def _cmd_fstab(args: argparse.Namespace) -> str:
    path = Path(args.fstab)
    return fstab_with(_read(path) if path.exists() else "", args.entry, args.mountpoint)


def _cmd_local_root(args: argparse.Namespace) -> str:
    chosen = choose_local_root(_read(Path(args.mounts)), root=args.root)
    return f"{chosen}\n" if chosen else ""


def _cmd_docker_daemon(args: argparse.Namespace) -> str:
    path = Path(args.current)
    return docker_daemon_config(_read(path) if path.exists() else None, args.data_root, source=args.current)


def _cmd_health_env(args: argparse.Namespace) -> str:
    return health_env(args.instance_type)


def _cmd_efa_interfaces(args: argparse.Namespace) -> str:
    return "".join(f"{name}\n" for name in efa_interfaces(args.instance_type, args.devices))


def _cmd_secret_field(args: argparse.Namespace) -> str:
    return secret_field(sys.stdin.read(), args.key) + "\n"


def _cmd_slurmdbd_credentials(args: argparse.Namespace) -> str:
    return slurmdbd_credentials(_read(Path(args.conf)), sys.stdin.read(), source=args.conf)


def _cmd_password(_: argparse.Namespace) -> str:
    return new_password() + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plan.py", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    commands: dict[str, tuple[Callable[[argparse.Namespace], str], str]] = {
        "identify": (_cmd_identify, "print node.env for this node"),
        "steps": (_cmd_steps, "print the steps this role runs, in order"),
        "slurm-conf": (_cmd_slurm_conf, "print a Slurm config file with configless mode, settings and includes"),
        "slurmd-unit": (_cmd_slurmd_unit, "print slurmd.service pointed at the controller"),
        "fstab": (_cmd_fstab, "print fstab with one entry for a mount point"),
        "local-root": (_cmd_local_root, "print the local volume for container data (empty if none)"),
        "docker-daemon": (_cmd_docker_daemon, "print daemon.json with data-root set"),
        "efa-interfaces": (_cmd_efa_interfaces, "print the EFA devices LNet uses on this instance type"),
        "health-env": (_cmd_health_env, "print what mlcluster-health expects on this instance type"),
        "secret-field": (_cmd_secret_field, "print one field of a JSON secret read from stdin"),
        "slurmdbd-credentials": (
            _cmd_slurmdbd_credentials,
            "print slurmdbd.conf with StorageUser and StoragePass from a JSON secret read from stdin",
        ),
        "password": (_cmd_password, "print a new random password"),
    }
    subs = {name: sub.add_parser(name, help=text) for name, (_, text) in commands.items()}
    for name, (func, _) in commands.items():
        subs[name].set_defaults(func=func)
    subs["identify"].add_argument("--resource-config", required=True)
    subs["identify"].add_argument("--provisioning", required=True)
    subs["identify"].add_argument("--features", required=True)
    subs["identify"].add_argument("--addresses", required=True, help="this node's IP addresses, space separated")
    subs["steps"].add_argument("--role", required=True, choices=ROLES)
    subs["steps"].add_argument("--features", required=True)
    subs["slurm-conf"].add_argument("--conf", required=True)
    subs["slurm-conf"].add_argument("--configless", action="store_true")
    subs["slurm-conf"].add_argument("--include", action="append", default=[], help="a file to include")
    subs["slurm-conf"].add_argument("--set", action="append", default=[], type=_setting, help="KEY=VALUE")
    subs["slurm-conf"].add_argument("--missing-ok", action="store_true", help="treat a missing file as empty")
    subs["slurmd-unit"].add_argument("--unit", required=True)
    subs["slurmd-unit"].add_argument("--server", required=True, help="host:port of slurmctld")
    subs["fstab"].add_argument("--fstab", required=True)
    subs["fstab"].add_argument("--entry", required=True)
    subs["fstab"].add_argument("--mountpoint", required=True)
    subs["local-root"].add_argument("--mounts", required=True, help="a /proc/mounts file")
    subs["local-root"].add_argument("--root", default="", help="the root prefix the mount points carry")
    subs["docker-daemon"].add_argument("--current", required=True)
    subs["docker-daemon"].add_argument("--data-root", required=True)
    subs["efa-interfaces"].add_argument("--instance-type", required=True, help="e.g. ml.p5.48xlarge")
    subs["efa-interfaces"].add_argument("devices", nargs="*", help="the EFA devices of /sys/class/infiniband")
    subs["secret-field"].add_argument("--key", required=True)
    subs["slurmdbd-credentials"].add_argument("--conf", required=True, help="the slurmdbd.conf to start from")
    subs["health-env"].add_argument("--instance-type", required=True, help="e.g. ml.p5.48xlarge")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; bad input prints ``error: ...`` and exits 2."""
    args = _parser().parse_args(argv)
    try:
        sys.stdout.write(args.func(args))
    except LifecycleInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
