"""``mlcluster preflight ENV``: ask the account, before ``cdk deploy``, what would fail half-way.

Every check makes read-only calls with the operator's credentials and returns
one or more :class:`Result` rows: an id (for ``--skip``), a level (ERROR
fails the command, WARNING does not), the key in the environment file it is
about, and one line saying what was found and what to do. An AWS error in a
check (access denied, throttling past the retries) is a row with status
``error``, never a pass, and never a traceback.

Contracts the checks rest on, with their source:

* EC2 On-Demand vCPU quotas per instance family (Service Quotas, service code
  ``ec2``) and Spot vCPU quotas (``All <family> Spot Instance Requests``):
  :data:`VCPU_QUOTAS` and :data:`SPOT_VCPU_QUOTAS`, every code from the EC2 User
  Guide (table below); each result also prints the ``QuotaName`` AWS returns.
* VPCs per Region ``L-F678F1CE`` and NAT gateways per Availability Zone
  ``L-FE5A380F`` (service ``vpc``; a row for each zone that gets a NAT gateway:
  the primary zone, and with ``nat_gateways: per_zone`` each extra zone too),
  EC2-VPC Elastic IPs ``L-0263D0A3`` (service ``ec2``; the code AWS's own
  managed policies grant ``GetServiceQuota`` on).
* HyperPod: quotas named ``ml.<type> for cluster usage`` (service
  ``sagemaker``); their codes differ per type, so they are found by name.
* HyperPod also: ``Total number of instances allowed across SageMaker HyperPod
  clusters`` and ``Maximum number instances allowed per SageMaker HyperPod
  cluster``; the per-type and total quotas count every cluster of the account
  (HyperPod prerequisites), so other clusters' instances (ListClusters,
  DescribeCluster ``InstanceGroups[].CurrentCount``) are added.
* FSx: quotas of service ``fsx`` per deployment type, found by exact name
  (:data:`FSX_LUSTRE_QUOTAS`, :data:`FSX_OPENZFS_QUOTAS`).
* ParallelCluster's official images: owner ``amazon``, name
  ``aws-parallelcluster-<version>-<os part>-<arch>*`` (ParallelCluster 3.16
  ``pcluster/aws/ec2.py`` ``get_official_image_id`` and
  ``constants.OS_TO_IMAGE_NAME_PART_MAP``).
* ParallelCluster's own schema and validators, live (``pcluster-validators``):
  :mod:`mlcluster.cli.pcluster_live`; skipped until the Network and Storage
  stacks are deployed, or when no Python with ``aws-parallelcluster`` is found.
* Names: the data bucket is read with ``ExpectedBucketOwner`` = this account (HeadBucket and
  GetBucketTagging in botocore's S3 model: a mismatch is 403), and is this environment's only while the
  ``<env>-Storage`` stack holds it (ListStackResources); a tagged bucket it does not hold was kept from an
  earlier deploy, and creating it again fails "already exists".
* CDK bootstrap: the ``CDKToolkit`` stack's ``BootstrapVersion`` output. The
  synthesized templates refuse versions 1-5 (their ``CheckBootstrapVersion``
  rule); the pinned CLI (aws-cdk 2.1148.1) ships bootstrap template version 33.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import click

from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_OK, CliError, aws_errors
from mlcluster.cli.plan import ZONE_ID, NodeGroup, Plan, plan_of
from mlcluster.config import Environment
from mlcluster.config.observability import observability_enabled
from mlcluster.pcluster.states import cluster_stack_state

Level = Literal["ERROR", "WARNING"]
Status = Literal["pass", "fail", "error", "skipped"]
Clients = Callable[[str], Any]

#: Where each quota code and name used here is written down (checked 2026-11-28):
#:
#: ==================================  ================================================================================
#: constants                           source
#: ==================================  ================================================================================
#: VCPU_QUOTAS (all ten codes)         EC2 User Guide, "On-Demand Instance quotas" (AWSEC2/latest/UserGuide/
#:                                     ec2-on-demand-instances.html): each quota name links its Service Quotas code
#: SPOT_VCPU_QUOTAS (all eight codes)  EC2 User Guide, "Spot Instance quotas" (AWSEC2/latest/UserGuide/
#:                                     using-spot-limits.html), the same way
#: NAT_QUOTA, EIP_QUOTA                Amazon VPC User Guide, "Amazon VPC quotas" (amazon-vpc-limits.html): NAT gateways
#:                                     per Availability Zone L-FE5A380F; Elastic IP addresses per Region ec2/L-0263D0A3
#: VPC_QUOTA                           not found on an AWS page here; VPCs per Region L-F678F1CE in several public
#:                                     deployment guides (aws-samples among them); the row prints AWS's QuotaName
#: FSX_*_QUOTAS, HYPERPOD_* (names)    not confirmed from an AWS page: matched by exact name, and a name AWS does not
#:                                     list is a WARNING row that says to check by hand, never a pass
#: ==================================  ================================================================================
#:
#: EC2 On-Demand vCPU quota per instance family prefix: (quota code, family group as AWS names it).
VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    **{f: ("L-1216C47A", "Standard (A, C, D, H, I, M, R, T, Z)") for f in "acdhimrtz"},
    "p": ("L-417A185B", "P"),
    "g": ("L-DB2E81BA", "G and VT"),
    "vt": ("L-DB2E81BA", "G and VT"),
    "trn": ("L-2C3B7624", "Trn"),
    "inf": ("L-1945791B", "Inf"),
    "dl": ("L-6E869C2A", "DL"),
    "f": ("L-74FC7D96", "F"),
    "x": ("L-7295265B", "X"),
    "hpc": ("L-F7808C92", "HPC"),
    "u": ("L-43DA4232", "High Memory"),
}
#: EC2 Spot vCPU quota ("All <group> Spot Instance Requests") per family prefix (EC2 User Guide, "Spot Instance
#: quotas"). HPC and High Memory have no Spot quota there (no Spot instances).
SPOT_VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    **{f: ("L-34B43A08", "Standard (A, C, D, H, I, M, R, T, Z)") for f in "acdhimrtz"},
    "p": ("L-7212CCBC", "P"),
    "g": ("L-3819A6DF", "G and VT"),
    "vt": ("L-3819A6DF", "G and VT"),
    "trn": ("L-6B0D517C", "Trn"),
    "inf": ("L-B5D1601B", "Inf"),
    "dl": ("L-85EED4F7", "DL"),
    "f": ("L-88CF9481", "F"),
    "x": ("L-E3A00192", "X"),
}
VPC_QUOTA = ("vpc", "L-F678F1CE")
NAT_QUOTA = ("vpc", "L-FE5A380F")
EIP_QUOTA = ("ec2", "L-0263D0A3")
#: Image name part per ParallelCluster ``os`` (ParallelCluster 3.16 ``OS_TO_IMAGE_NAME_PART_MAP``; alinux2 from 3.15).
PCLUSTER_IMAGE_PART = {
    "alinux2": "amzn2-hvm",
    "alinux2023": "amzn2023-hvm",
    "ubuntu2204": "ubuntu-2204-lts-hvm",
    "ubuntu2404": "ubuntu-2404-lts-hvm",
    "rhel8": "rhel8-hvm",
    "rhel9": "rhel9-hvm",
}
#: The lowest bootstrap version the synthesized templates accept (their CheckBootstrapVersion rule).
BOOTSTRAP_REQUIRED = 6
#: The bootstrap template version the pinned CDK CLI (aws-cdk 2.1148.1) deploys with `cdk bootstrap`.
BOOTSTRAP_CURRENT = 33
#: The tag every resource of an environment carries (config: tags on every resource).
ENV_TAG = "mlcluster:environment"
#: Tags EC2 puts on a capacity block (ParallelCluster 3.16 reads them when ReservationType is absent).
RESERVATION_TYPE_TAG = "aws:ec2capacityreservation:capacityReservationType"
RESERVATION_QUANTITY_TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"
#: Stack states a deploy cannot proceed from: a failure that needs a hand, or an operation still running.
STACK_BLOCKED = ("UPDATE_ROLLBACK_FAILED", "DELETE_FAILED", "ROLLBACK_FAILED", "IMPORT_ROLLBACK_FAILED")
#: HyperPod quotas (service ``sagemaker``) over all types, by the names AWS gives them.
HYPERPOD_TOTAL_QUOTA = "Total number of instances allowed across SageMaker HyperPod clusters"
HYPERPOD_PER_CLUSTER_QUOTA = "Maximum number instances allowed per SageMaker HyperPod cluster"
#: FSx for Lustre quotas (service ``fsx``) per deployment type, by name. Codes for reference:
#: Persistent_2 storage capacity L-8F1B9C74, Persistent_2 file systems L-FD6F2F22, Persistent_1
#: storage capacity L-C8640C82 (Scratch L-AD2FC696 / L-C48231E5, Cache_1 L-15D9FE87 and Persistent HDD
#: L-736F3D6F are not deployment types mlcluster creates).
FSX_LUSTRE_QUOTAS: dict[str, tuple[str, ...]] = {
    "PERSISTENT_2": ("Lustre Persistent_2 storage capacity", "Lustre Persistent_2 file systems"),
    "PERSISTENT_1": ("Lustre Persistent_1 storage capacity",),
}
#: FSx for OpenZFS quotas (service ``fsx``), by name: SSD capacity in total and per file system.
FSX_OPENZFS_QUOTAS = ("OpenZFS SSD storage capacity", "OpenZFS SSD storage capacity (per file system)")


@dataclass(frozen=True)
class Result:
    """One finding of one check."""

    check: str
    status: Status
    level: Level
    key: str
    message: str


@dataclass
class Context:
    """What the checks read: the environment, its plan, the region and a client factory."""

    env: Environment
    plan: Plan
    region: str
    client: Clients
    margin: timedelta
    now: datetime
    #: The environment of a child process that calls AWS as the operator (ParallelCluster's validators).
    child_environ: Callable[[], dict[str, str]] = lambda: dict(os.environ)
    _vcpus: dict[str, int] | None = None

    def vcpus(self, types: Iterable[str]) -> dict[str, int]:
        """Default vCPUs per EC2 instance type (DescribeInstanceTypes), fetched once per run."""
        if self._vcpus is None:
            self._vcpus = {}
        missing = sorted({t for t in types if t not in self._vcpus})
        if missing:
            pages = self.client("ec2").get_paginator("describe_instance_types").paginate(InstanceTypes=missing)
            for page in pages:
                for info in page["InstanceTypes"]:
                    self._vcpus[info["InstanceType"]] = int(info["VCpuInfo"]["DefaultVCpus"])
        return self._vcpus


def _quota(ctx: Context, service: str, code: str) -> tuple[float, str]:
    """The applied value of a quota (falling back to AWS's default when never changed) and its name."""
    from botocore.exceptions import ClientError

    client = ctx.client("service-quotas")
    try:
        quota = client.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
        quota = client.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]
    return quota_value(quota), str(quota.get("QuotaName", code))


def quota_value(quota: dict[str, Any]) -> float:
    """The ``Value`` of a Service Quotas ``ServiceQuota``; :class:`CliError` when AWS gave none.

    The model makes ``Value`` optional, and a quota AWS could not read carries
    ``ErrorReason`` (``ErrorCode``, ``ErrorMessage``) instead: the check then
    cannot decide, which is an error row, never a pass or a traceback.
    """
    name = f"{quota.get('QuotaName', '?')} ({quota.get('ServiceCode', '?')}/{quota.get('QuotaCode', '?')})"
    reason = quota.get("ErrorReason")
    if reason:
        raise CliError(
            f"Service Quotas could not read {name}: {reason.get('ErrorCode', '?')}: {reason.get('ErrorMessage', '')}"
            " - check it in the Service Quotas console",
            EXIT_AWS,
        )
    if quota.get("Value") is None:
        raise CliError(f"Service Quotas returned no value for {name}: check it in the Service Quotas console", EXIT_AWS)
    return float(quota["Value"])


def _list_quotas(ctx: Context, service: str) -> list[dict[str, Any]]:
    pages = ctx.client("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode=service)
    return [q for page in pages for q in page["Quotas"]]


def family(instance_type: str) -> str:
    """The quota family prefix of an EC2 instance type: ``p5.48xlarge`` -> ``p``, ``trn1.32xlarge`` -> ``trn``."""
    match = re.match(r"([a-z]+?)(?:\d|-)", instance_type)
    name = match.group(1) if match else instance_type
    for prefix in sorted(VCPU_QUOTAS, key=len, reverse=True):
        if name.startswith(prefix) and (len(prefix) > 1 or name == prefix or len(name) <= 2):
            return prefix
    return name


def check_vcpu_quota(ctx: Context) -> list[Result]:
    """Running vCPUs: this environment's EC2 nodes at their max counts plus what already runs, per market.

    On-Demand groups are compared with the family's On-Demand quota and the
    other running On-Demand instances; Spot queues with the family's Spot quota
    (:data:`SPOT_VCPU_QUOTAS`) and the other running Spot instances.
    """
    groups = [g for g in ctx.plan.groups if not g.sagemaker]
    if not groups:
        return []
    vcpus = ctx.vcpus(g.ec2_type for g in groups)
    running = _running_vcpus(ctx, vcpus)
    results: list[Result] = []
    for spot, table in ((False, VCPU_QUOTAS), (True, SPOT_VCPU_QUOTAS)):
        needed: dict[str, list[NodeGroup]] = {}
        for group in groups:
            if group.spot == spot:
                code = table.get(family(group.ec2_type), ("", ""))[0]
                needed.setdefault(code, []).append(group)
        market = "Spot" if spot else "On-Demand"
        for code, members in sorted(needed.items()):
            keys = ", ".join(g.key for g in members)
            if not code:
                results.append(
                    Result(
                        "vcpu-quota",
                        "fail",
                        "WARNING",
                        keys,
                        f"no {market} vCPU quota known for this family; check it in the Service Quotas console",
                    )
                )
                continue
            need = sum(vcpus[g.ec2_type] * g.max_count for g in members)
            value, name = _quota(ctx, "ec2", code)
            used = running[spot].get(code, 0)
            already = f"{used} Spot run already" if spot else f"{used} run already"
            if used + need > value:
                results.append(
                    Result(
                        "vcpu-quota",
                        "fail",
                        "ERROR",
                        keys,
                        f"{name} ({code}) is {value:g} vCPUs; {already} and max_count needs {need}: "
                        f"request {used + need:g} in Service Quotas or lower max_count",
                    )
                )
            else:
                results.append(
                    Result(
                        "vcpu-quota",
                        "pass",
                        "ERROR",
                        keys,
                        f"{name} ({code}) {value:g} >= {used} running + {need} needed",
                    )
                )
    return results


def _running_vcpus(ctx: Context, known: dict[str, int]) -> dict[bool, dict[str, int]]:
    """vCPUs of pending and running instances per quota code, On-Demand (False) and Spot (True).

    This environment's own nodes are left out (the need counts them). Each
    instance counts its type's ``DefaultVCpus``, as the need does (and as the
    quota counts: CPU options that turn threads off do not lower it).
    """
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    )
    instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    mine = ctx.env.cluster_name
    others = [
        i
        for i in instances
        if not any(
            t.get("Key") in ("parallelcluster:cluster-name", ENV_TAG) and t.get("Value") in (mine, ctx.env.name)
            for t in i.get("Tags", [])
        )
    ]
    vcpus = ctx.vcpus(i["InstanceType"] for i in others) if others else known
    used: dict[bool, dict[str, int]] = {False: {}, True: {}}
    for instance in others:
        spot = instance.get("InstanceLifecycle") == "spot"
        table = SPOT_VCPU_QUOTAS if spot else VCPU_QUOTAS
        code = table.get(family(instance["InstanceType"]), ("", ""))[0]
        used[spot][code] = used[spot].get(code, 0) + vcpus.get(instance["InstanceType"], 0)
    return used


def _other_hyperpod_instances(ctx: Context) -> dict[str, int]:
    """Instances per ``ml.`` type in the region's other HyperPod clusters (ListClusters, DescribeCluster).

    The cluster named like this environment's is left out: it is the one the
    deploy creates or updates (the ``names`` check fails when another
    environment owns that name).
    """
    sm = ctx.client("sagemaker")
    counts: dict[str, int] = {}
    for page in sm.get_paginator("list_clusters").paginate():
        for summary in page["ClusterSummaries"]:
            if summary["ClusterName"] == ctx.env.cluster_name:
                continue
            cluster = sm.describe_cluster(ClusterName=summary["ClusterName"])
            for group in cluster.get("InstanceGroups", []):
                itype = str(group.get("InstanceType", ""))
                counts[itype] = counts.get(itype, 0) + int(group.get("CurrentCount", 0))
    return counts


def check_sagemaker_quota(ctx: Context) -> list[Result]:
    """HyperPod: per-type and account-wide instance quotas, with the other clusters' instances counted.

    Per the HyperPod prerequisites, ``ml.<type> for cluster usage`` limits that
    type across every cluster of the account and region, as does
    :data:`HYPERPOD_TOTAL_QUOTA` for all types; :data:`HYPERPOD_PER_CLUSTER_QUOTA`
    limits one cluster alone.
    """
    counts: dict[str, tuple[int, list[str]]] = {}
    for g in ctx.plan.groups:
        if g.sagemaker:
            total, keys = counts.get(g.instance_type, (0, []))
            counts[g.instance_type] = (total + g.max_count, [*keys, g.key])
    if not counts:
        return []
    quotas = {str(q.get("QuotaName", "")): q for q in _list_quotas(ctx, "sagemaker")}
    others = _other_hyperpod_instances(ctx)
    results = []
    for itype, (need, keys) in sorted(counts.items()):
        name = f"{itype} for cluster usage"
        key = ", ".join(keys)
        quota = quotas.get(name)
        if quota is None:
            results.append(
                Result(
                    "sagemaker-quota",
                    "fail",
                    "ERROR",
                    key,
                    f"no quota {name!r} in this region: the type is not offered for HyperPod here; "
                    "choose another instance_type or region",
                )
            )
            continue
        results.append(_count_row(key, name, quota, others.get(itype, 0), need, "in other HyperPod clusters"))
    need_all = sum(need for need, _ in counts.values())
    account_wide: tuple[str, int | None, str] = (
        HYPERPOD_TOTAL_QUOTA,
        sum(others.values()),
        "in other HyperPod clusters",
    )
    per_cluster: tuple[str, int | None, str] = (HYPERPOD_PER_CLUSTER_QUOTA, None, "")
    for name, used, where in (account_wide, per_cluster):
        quota = quotas.get(name)
        if quota is None:
            results.append(
                Result(
                    "sagemaker-quota",
                    "fail",
                    "WARNING",
                    "cluster.hyperpod",
                    f"no quota {name!r} found: check it in Service Quotas > Amazon SageMaker by hand",
                )
            )
        else:
            results.append(_count_row("cluster.hyperpod", name, quota, used, need_all, where))
    return results


def _count_row(key: str, name: str, quota: dict[str, Any], used: int | None, need: int, where: str) -> Result:
    """A HyperPod instance quota row: ``used`` elsewhere (None for a per-cluster quota) plus ``need``."""
    value = quota_value(quota)
    code = quota.get("QuotaCode")
    total = (used or 0) + need
    running = "" if used is None else f"{used} run {where} and "
    if total > value:
        return Result(
            "sagemaker-quota",
            "fail",
            "ERROR",
            key,
            f"{name} ({code}) is {value:g}; {running}the groups need {need}: request {total} or lower instance_count",
        )
    counted = f"{need}" if used is None else f"{used} {where} + {need}"
    return Result("sagemaker-quota", "pass", "ERROR", key, f"{name} ({code}) {value:g} >= {counted}")


def _fsx_quota_names(kind: str, deployment_type: str) -> tuple[str, ...]:
    """The Service Quotas (service ``fsx``) names that limit a new file system of this kind and type."""
    if kind == "LUSTRE":
        return FSX_LUSTRE_QUOTAS.get(deployment_type, ())
    return FSX_OPENZFS_QUOTAS


def _fsx_counted(fs: dict[str, Any], kind: str, deployment_type: str, env: str) -> bool:
    """Whether an existing file system uses the same quota as the new one (and is not this environment's)."""
    if fs.get("Lifecycle") in ("DELETING", "FAILED") or fs.get("FileSystemType") != kind:
        return False
    if _tags_say_ours(fs.get("Tags", []), env):
        return False
    if kind == "LUSTRE":
        return bool(fs.get("LustreConfiguration", {}).get("DeploymentType") == deployment_type)
    return str(fs.get("StorageType", "SSD")) == "SSD"


def check_fsx_quota(ctx: Context) -> list[Result]:
    """FSx: the storage capacity and file-system quotas of the environment's deployment type.

    FSx quotas are per deployment type (:data:`FSX_LUSTRE_QUOTAS`,
    :data:`FSX_OPENZFS_QUOTAS`): usage counts only the file systems of that
    type, except this environment's own (tag ``mlcluster:environment``), and a
    ``(per file system)`` quota is compared with the new file system alone.
    """
    quotas = {str(q.get("QuotaName", "")): q for q in _list_quotas(ctx, "fsx")}
    pages = ctx.client("fsx").get_paginator("describe_file_systems").paginate()
    existing = [fs for page in pages for fs in page["FileSystems"]]
    results = []
    for fs in ctx.plan.file_systems:
        same = [f for f in existing if _fsx_counted(f, fs.kind, fs.deployment_type, ctx.env.name)]
        found = False
        for name in _fsx_quota_names(fs.kind, fs.deployment_type):
            quota = quotas.get(name)
            if quota is None:
                continue
            found = True
            if name.endswith("file systems"):
                need, used, what, unit = 1, len(same), fs.key, "file systems"
            elif name.endswith("(per file system)"):
                need, used, what, unit = fs.capacity_gib, 0, f"{fs.key}.storage_capacity_gib", "GiB"
            else:
                used = sum(int(f.get("StorageCapacity", 0)) for f in same)
                need, what, unit = fs.capacity_gib, f"{fs.key}.storage_capacity_gib", "GiB"
            value = quota_value(quota)
            code = quota.get("QuotaCode")
            alone = name.endswith("(per file system)")
            if used + need > value:
                counted = "" if alone else f"{used} {unit} used by other {fs.deployment_type} file systems and "
                results.append(
                    Result(
                        "fsx-quota",
                        "fail",
                        "ERROR",
                        what,
                        f"{name} ({code}) is {value:g}; {counted}{need} {unit} needed: "
                        "request an increase or make it smaller",
                    )
                )
            else:
                counted = f"{need}" if alone else f"{used} used + {need}"
                results.append(Result("fsx-quota", "pass", "ERROR", what, f"{name} ({code}) {value:g} >= {counted}"))
        if not found:
            wanted = ", ".join(repr(n) for n in _fsx_quota_names(fs.kind, fs.deployment_type)) or "none known"
            results.append(
                Result(
                    "fsx-quota",
                    "fail",
                    "WARNING",
                    fs.key,
                    f"no FSx quota for {fs.kind} {fs.deployment_type} found ({wanted}); "
                    "check Service Quotas > Amazon FSx by hand",
                )
            )
    return results


def _own_vpc(ctx: Context) -> tuple[int, bool]:
    """How many VPCs the region has, and whether one already carries this environment's tag (a redeploy)."""
    pages = ctx.client("ec2").get_paginator("describe_vpcs").paginate()
    vpcs = [v for page in pages for v in page["Vpcs"]]
    return len(vpcs), any(_tags_say_ours(v.get("Tags", []), ctx.env.name) for v in vpcs)


def check_vpc_quota(ctx: Context) -> list[Result]:
    """VPCs per Region: one more unless the environment's VPC exists already."""
    if not ctx.plan.new_vpc:
        return []
    count, ours = _own_vpc(ctx)
    value, name = _quota(ctx, *VPC_QUOTA)
    need = 0 if ours else 1
    status: Status = "fail" if count + need > value else "pass"
    return [
        Result(
            "vpc-quota",
            status,
            "ERROR",
            "network",
            f"{name} ({VPC_QUOTA[1]}) is {value:g}; {count} exist, {need} more needed"
            + (": delete one or request an increase" if status == "fail" else ""),
        )
    ]


def check_eip_quota(ctx: Context) -> list[Result]:
    """Elastic IPs: one per NAT gateway, unless the environment's VPC exists already."""
    if not ctx.plan.new_vpc or not ctx.plan.nat_gateways:
        return []
    _, ours = _own_vpc(ctx)
    addresses = ctx.client("ec2").describe_addresses()["Addresses"]
    value, name = _quota(ctx, *EIP_QUOTA)
    need = 0 if ours else ctx.plan.nat_gateways
    status: Status = "fail" if len(addresses) + need > value else "pass"
    return [
        Result(
            "eip-quota",
            status,
            "ERROR",
            "network.nat_gateways",
            f"{name} ({EIP_QUOTA[1]}) is {value:g}; {len(addresses)} allocated, {need} needed for NAT gateways"
            + (": release unused addresses or request an increase" if status == "fail" else ""),
        )
    ]


def _nat_zones(ctx: Context) -> dict[str, tuple[str, int]]:
    """Each zone that gets a NAT gateway: its environment key and how many it gets.

    ``nat_gateways: one`` puts one in the primary zone; ``per_zone`` one in the primary zone and one in each
    of ``network.extra_zones``.
    """
    net = ctx.env.config.network
    wanted = [
        (
            "network.availability_zone" if net.availability_zone else "network.availability_zone_id",
            net.primary_zone_label,
        )
    ]
    if net.nat_gateways == "per_zone":
        wanted += [(f"network.extra_zones[{i}]", z.label) for i, z in enumerate(net.extra_zones)]
    counts = Counter(zone for _, zone in wanted if zone)
    keys: dict[str, str] = {}
    for key, zone in wanted:
        if zone:
            keys.setdefault(zone, key)
    return {zone: (keys[zone], count) for zone, count in counts.items()}


def check_nat_quota(ctx: Context) -> list[Result]:
    """NAT gateways per Availability Zone, in each zone that gets one, unless the environment's VPC exists
    already."""
    if not ctx.plan.new_vpc or not ctx.plan.nat_gateways:
        return []
    zones = _nat_zones(ctx)
    if not zones:
        return []
    _, ours = _own_vpc(ctx)
    ec2 = ctx.client("ec2")
    states = [{"Name": "state", "Values": ["pending", "available"]}]
    pages = ec2.get_paginator("describe_nat_gateways").paginate(Filter=states)
    gateways = [g for page in pages for g in page["NatGateways"]]
    # A subnet's zone by name and by ID: the environment may name its zones either way.
    zones_of: dict[str, tuple[str | None, str | None]] = {}
    if gateways:
        subnets = ec2.describe_subnets(SubnetIds=sorted({g["SubnetId"] for g in gateways}))["Subnets"]
        zones_of = {s["SubnetId"]: (s.get("AvailabilityZone"), s.get("AvailabilityZoneId")) for s in subnets}
    value, name = _quota(ctx, *NAT_QUOTA)
    results = []
    for zone, (key, count) in zones.items():
        in_zone = sum(1 for g in gateways if zone in zones_of.get(g["SubnetId"], (None, None)))
        need = 0 if ours else count
        status: Status = "fail" if in_zone + need > value else "pass"
        results.append(
            Result(
                "nat-quota",
                status,
                "ERROR",
                key,
                f"{name} ({NAT_QUOTA[1]}) is {value:g}; {in_zone} in {zone}, {need} needed"
                + (": request an increase or choose another zone" if status == "fail" else ""),
            )
        )
    return results


def check_zones_exist(ctx: Context) -> list[Result]:
    """Each zone of the environment file exists for this account (DescribeAvailabilityZones).

    ``validate`` only warns about a zone its committed table lacks (the table is
    moto's record, and real zones are missing from it); this is the account's own
    answer. A zone EC2 does not list, or lists in a state other than ``available``,
    is an ERROR row.
    """
    net = ctx.env.config.network
    wanted = [("network", net.availability_zone, net.availability_zone_id)]
    wanted += [
        (f"network.extra_zones[{i}]", z.availability_zone, z.availability_zone_id)
        for i, z in enumerate(net.extra_zones)
    ]
    results = []
    ec2 = ctx.client("ec2")
    for where, name, zone_id in wanted:
        zone, kind, key = (
            (name, "zone-name", "availability_zone") if name else (zone_id, "zone-id", "availability_zone_id")
        )
        if zone is None:
            continue
        found = ec2.describe_availability_zones(Filters=[{"Name": kind, "Values": [zone]}])["AvailabilityZones"]
        state = found[0].get("State") if found else None
        if state == "available":
            results.append(Result("zone-exists", "pass", "ERROR", f"{where}.{key}", f"{zone} is available"))
        else:
            why = f"{zone} is {state}" if found else f"EC2 lists no zone {zone} in {ctx.region} for this account"
            results.append(
                Result(
                    "zone-exists",
                    "fail",
                    "ERROR",
                    f"{where}.{key}",
                    f"{why}: choose a zone `aws ec2 describe-availability-zones` lists as available",
                )
            )
    return results


def check_offerings(ctx: Context) -> list[Result]:
    """Each instance type is offered in each zone it uses (DescribeInstanceTypeOfferings)."""
    results = []
    ec2 = ctx.client("ec2")
    for group in ctx.plan.groups:
        zones = [z for z in group.zones if not z.startswith("subnet-")]
        if not zones:
            results.append(
                Result(
                    "instance-offered",
                    "fail",
                    "WARNING",
                    group.key,
                    "zone unknown (network.existing); check the offering by hand",
                )
            )
            continue
        for zone in zones:
            kind = "availability-zone-id" if ZONE_ID.fullmatch(zone) else "availability-zone"
            pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType=kind,
                Filters=[{"Name": "location", "Values": [zone]}, {"Name": "instance-type", "Values": [group.ec2_type]}],
            )
            offered = any(page["InstanceTypeOfferings"] for page in pages)
            if offered:
                results.append(
                    Result("instance-offered", "pass", "ERROR", group.key, f"{group.ec2_type} is offered in {zone}")
                )
            else:
                results.append(
                    Result(
                        "instance-offered",
                        "fail",
                        "ERROR",
                        group.key,
                        f"{group.ec2_type} is not offered in {zone}: "
                        "choose another instance_type or zone (network.availability_zone)",
                    )
                )
    return results


def check_reservations(ctx: Context) -> list[Result]:
    """Each capacity reservation: exists, active, right zone and type, enough instances, lasts past the margin."""
    from botocore.exceptions import ClientError

    results = []
    ec2 = ctx.client("ec2")
    for group in ctx.plan.groups:
        rid = group.reservation_id
        if rid is None:
            continue
        key = f"{group.key}.capacity_reservation_id"
        try:
            found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
        except ClientError as error:
            if "NotFound" not in str(error.response.get("Error", {}).get("Code")):
                raise
            found = []
        if not found:
            results.append(
                Result(
                    "capacity-reservation",
                    "fail",
                    "ERROR",
                    key,
                    f"{rid} does not exist in {ctx.region} for these credentials: fix the ID or the region/account",
                )
            )
            continue
        results += _reservation_findings(ctx, group, key, found[0])
    return results


def _tag(resource: dict[str, Any], key: str) -> str | None:
    return next((str(t.get("Value")) for t in resource.get("Tags", []) if t.get("Key") == key), None)


def reservation_kind_and_size(res: dict[str, Any]) -> tuple[str, int]:
    """The reservation type and the instances it holds, as ParallelCluster reads them.

    A capacity block bought but not yet started may lack ``ReservationType``
    and report ``TotalInstanceCount`` 0: its tags
    ``aws:ec2capacityreservation:capacityReservationType`` and
    ``aws:ec2capacityreservation:incrementalRequestedQuantity`` say what it is
    and how big (ParallelCluster 3.16 ``CapacityReservationInfo``).
    """
    kind = res.get("ReservationType") or _tag(res, RESERVATION_TYPE_TAG) or "default"
    requested = _tag(res, RESERVATION_QUANTITY_TAG) or ""
    size = max(int(res.get("TotalInstanceCount", 0)), int(requested) if requested.isdigit() else 0)
    return str(kind), size


def _instance_platform(ctx: Context) -> str:
    """The ``InstancePlatform`` a reservation must have for the cluster's OS (Linux/UNIX, or RHEL's own)."""
    pc = ctx.env.config.cluster.pcluster
    return "Red Hat Enterprise Linux" if pc is not None and pc.os.startswith("rhel") else "Linux/UNIX"


def _own_instances_in(ctx: Context, rid: str) -> int:
    """This environment's pending and running instances already launched into reservation ``rid``."""
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instances")
        .paginate(
            Filters=[
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
                {"Name": "tag:parallelcluster:cluster-name", "Values": [ctx.env.cluster_name]},
            ]
        )
    )
    return sum(
        1
        for page in pages
        for r in page["Reservations"]
        for i in r["Instances"]
        if i.get("CapacityReservationId") == rid
    )


def _reservation_findings(ctx: Context, group: NodeGroup, key: str, res: dict[str, Any]) -> list[Result]:
    rid = res["CapacityReservationId"]
    problems: list[tuple[Level, str]] = []
    state = res.get("State")
    kind, total = reservation_kind_and_size(res)
    block = kind == "capacity-block"
    start, end = res.get("StartDate"), res.get("EndDate")
    if group.capacity_block and not block:
        problems.append(
            ("ERROR", "the queue's capacity_type is CAPACITY_BLOCK but this is an On-Demand Capacity Reservation")
        )
    started = state == "active"
    if block and state == "scheduled" and start is not None:
        problems.append(("WARNING", f"capacity block starts {start:%Y-%m-%d %H:%M} UTC; nodes cannot launch before"))
    elif not started:
        problems.append(
            ("ERROR", f"state is {state}, not active: buy or renew the reservation, or remove capacity_reservation_id")
        )
    if res.get("InstanceType") != group.ec2_type:
        problems.append(("ERROR", f"it reserves {res.get('InstanceType')}, the group uses {group.ec2_type}"))
    platform = _instance_platform(ctx)
    if res.get("InstancePlatform", platform) != platform:
        problems.append(
            ("ERROR", f"it is for {res.get('InstancePlatform')} instances, the cluster's OS runs as {platform}")
        )
    if res.get("Tenancy", "default") != "default":
        problems.append(("ERROR", f"its tenancy is {res.get('Tenancy')}; the cluster launches default tenancy"))
    zones = [z for z in group.zones if not z.startswith("subnet-")]
    zone = zones[0] if zones else None
    if zones:
        actual = res.get("AvailabilityZoneId") if ZONE_ID.fullmatch(zones[0]) else res.get("AvailabilityZone")
        if actual not in zones:
            problems.append(
                (
                    "ERROR",
                    f"it is in {actual}, the group in {', '.join(zones)}: set the group's zone to {actual}",
                )
            )
        else:
            zone = str(actual)
            if len(zones) > 1:
                others = ", ".join(z for z in zones if z != actual)
                problems.append(("WARNING", f"nodes launched in {others} cannot use it (it is in {actual} only)"))
    if total < group.max_count:
        problems.append(("ERROR", f"it holds {total} instances, max_count is {group.max_count}"))
    elif started:
        ours = _own_instances_in(ctx, rid)
        available = int(res.get("AvailableInstanceCount", 0))
        if available + ours < group.max_count:
            problems.append(
                (
                    "ERROR",
                    f"{available} of its {total} instances are free and {ours} are this cluster's; "
                    f"max_count is {group.max_count}: other instances use the rest",
                )
            )
    if res.get("EndDateType") == "limited" and end is not None:
        limit = ctx.now + ctx.margin
        if end <= ctx.now:
            problems.append(("ERROR", f"it ended {end:%Y-%m-%d %H:%M} UTC: renew it or remove capacity_reservation_id"))
        elif end <= limit:
            problems.append(("WARNING", f"it ends {end:%Y-%m-%d %H:%M} UTC, within {ctx.margin.days} days: extend it"))
    if not problems:
        until = f"until {end:%Y-%m-%d}" if end is not None else "with no end date"
        return [
            Result(
                "capacity-reservation",
                "pass",
                "ERROR",
                key,
                f"{rid}: active {group.ec2_type} x{total} in {zone} {until}",
            )
        ]
    return [Result("capacity-reservation", "fail", level, key, f"{rid}: {text}") for level, text in problems]


def check_training_plans(ctx: Context) -> list[Result]:
    """HyperPod: each training plan exists, is active (or scheduled), is for HyperPod, and covers the group."""
    from botocore.exceptions import ClientError

    results = []
    sm = ctx.client("sagemaker")
    for group in ctx.plan.groups:
        arn = group.training_plan_arn
        if arn is None:
            continue
        key = f"{group.key}.training_plan_arn"
        name = arn.rpartition("/")[2]
        try:
            plan = sm.describe_training_plan(TrainingPlanName=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("ResourceNotFound", "ResourceNotFoundException"):
                raise
            results.append(
                Result("training-plan", "fail", "ERROR", key, f"{name} does not exist in {ctx.region}: fix the ARN")
            )
            continue
        results += _plan_findings(ctx, group, key, plan)
    return results


def _plan_findings(ctx: Context, group: NodeGroup, key: str, plan: dict[str, Any]) -> list[Result]:
    name = plan["TrainingPlanName"]
    problems: list[tuple[Level, str]] = []
    status, start, end = plan.get("Status"), plan.get("StartTime"), plan.get("EndTime")
    if status == "Scheduled" and start is not None:
        problems.append(("WARNING", f"scheduled to start {start:%Y-%m-%d %H:%M} UTC; nodes cannot launch before"))
    elif status != "Active":
        problems.append(("ERROR", f"status is {status}, not Active: buy a new plan or remove training_plan_arn"))
    if "hyperpod-cluster" not in plan.get("TargetResources", []):
        problems.append(("ERROR", "the plan is not for hyperpod-cluster (TargetResources)"))
    capacity = [c for c in plan.get("ReservedCapacitySummaries", []) if c.get("InstanceType") == group.instance_type]
    total = sum(int(c.get("TotalInstanceCount", 0)) for c in capacity)
    if total < group.max_count:
        problems.append(("ERROR", f"it reserves {total} {group.instance_type}, instance_count is {group.max_count}"))
    zone = group.zones[0] if group.zones else None
    zones = {
        c.get("AvailabilityZoneId") if ZONE_ID.fullmatch(zone or "") else c.get("AvailabilityZone") for c in capacity
    }
    if zone is not None and capacity and zone not in zones:
        problems.append(
            ("ERROR", f"its capacity is in {', '.join(sorted(str(z) for z in zones))}, the group in {zone}")
        )
    if end is not None:
        if end <= ctx.now:
            problems.append(("ERROR", f"it ended {end:%Y-%m-%d %H:%M} UTC"))
        elif end <= ctx.now + ctx.margin:
            problems.append(("WARNING", f"it ends {end:%Y-%m-%d %H:%M} UTC, within {ctx.margin.days} days"))
    if not problems:
        until = f"until {end:%Y-%m-%d}" if end is not None else ""
        return [
            Result("training-plan", "pass", "ERROR", key, f"{name}: {status} {group.instance_type} x{total} {until}")
        ]
    return [Result("training-plan", "fail", level, key, f"{name}: {text}") for level, text in problems]


def check_pcluster_image(ctx: Context) -> list[Result]:
    """ParallelCluster: the official image for its version, OS and architecture exists in the region."""
    pc = ctx.env.config.cluster.pcluster
    if ctx.env.config.cluster.backend != "pcluster" or pc is None:
        return []
    ec2 = ctx.client("ec2")
    if pc.custom_ami is not None:
        images = ec2.describe_images(
            Filters=[{"Name": "image-id", "Values": [pc.custom_ami]}, {"Name": "state", "Values": ["available"]}],
            IncludeDeprecated=True,
        )["Images"]
        if images:
            return [Result("pcluster-image", "pass", "ERROR", "cluster.pcluster.custom_ami", f"{pc.custom_ami} exists")]
        return [
            Result(
                "pcluster-image",
                "fail",
                "ERROR",
                "cluster.pcluster.custom_ami",
                f"{pc.custom_ami} not found, or not available, in {ctx.region}: copy it here or fix the ID",
            )
        ]
    head = pc.head_node.instance_type
    info = ctx.client("ec2").describe_instance_types(InstanceTypes=[head])["InstanceTypes"]
    # A type EC2 does not describe is taken as x86_64, like one that supports both.
    archs = info[0]["ProcessorInfo"]["SupportedArchitectures"] if info else []
    arch = "arm64" if "arm64" in archs and "x86_64" not in archs else "x86_64"
    part = PCLUSTER_IMAGE_PART.get(pc.os)
    if part is None:
        return [
            Result(
                "pcluster-image",
                "fail",
                "ERROR",
                "cluster.pcluster.os",
                f"ParallelCluster publishes no image for {pc.os}: set custom_ami",
            )
        ]
    pattern = f"aws-parallelcluster-{pc.version}-{part}-{arch}*"
    images = ec2.describe_images(
        Owners=["amazon"],
        Filters=[{"Name": "name", "Values": [pattern]}, {"Name": "state", "Values": ["available"]}],
        IncludeDeprecated=True,
    )["Images"]
    if images:
        newest = max(images, key=lambda i: i.get("CreationDate", ""))
        return [
            Result(
                "pcluster-image",
                "pass",
                "ERROR",
                "cluster.pcluster.version",
                f"{newest['ImageId']} ({newest.get('Name')})",
            )
        ]
    return [
        Result(
            "pcluster-image",
            "fail",
            "ERROR",
            "cluster.pcluster.version",
            f"no official image {pattern} owned by amazon in {ctx.region}: "
            "choose a released version/os or set custom_ami",
        )
    ]


def check_pcluster_validators(ctx: Context) -> list[Result]:
    """ParallelCluster: its own schema and validators, run live on the configuration with the deployed values."""
    from mlcluster.cli.pcluster_live import check_pcluster_validators as run

    return run(ctx, ctx.child_environ)


def _tags_say_ours(tags: Iterable[dict[str, str]], env: str) -> bool:
    return any(t.get("Key") == ENV_TAG and t.get("Value") == env for t in tags)


def _rollback_failed(cfn: Any, stack: str) -> str:
    """What to do about one of our stacks in UPDATE_ROLLBACK_FAILED: the resources that could not roll back, and the
    command that continues the rollback past them.

    The Cluster stack gets there when ParallelCluster's custom resource (``Custom::PclusterCluster``) fails to roll
    back: CloudFormation then refuses every update until ``continue-update-rollback`` is run, skipping it. The
    cluster itself is ParallelCluster's stack; its own state is reported by ``mlcluster status``.
    """
    failed: list[tuple[str, str]] = []
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
        for summary in page.get("StackResourceSummaries", []):
            if summary.get("ResourceStatus") == "UPDATE_FAILED":
                failed.append((str(summary["LogicalResourceId"]), str(summary.get("ResourceType", ""))))
    # The custom resource first: it is the one ParallelCluster's provider leaves behind.
    failed.sort(key=lambda item: item[1] != "Custom::PclusterCluster")
    skip = " ".join(logical_id for logical_id, _ in failed) or "<logical id of the resource that failed>"
    named = ", ".join(f"{logical_id} ({kind})" for logical_id, kind in failed) or "no resource in UPDATE_FAILED"
    return (
        f"stack {stack} (this environment's) is UPDATE_ROLLBACK_FAILED ({named}): CloudFormation refuses every "
        f"update until the rollback is continued: `aws cloudformation continue-update-rollback --stack-name {stack} "
        f"--resources-to-skip {skip}`, then `mlcluster status` and deploy"
    )


#: Statuses of a stack resource that the stack no longer holds: deleted, or kept (``Retain``) when it left the stack.
RESOURCE_GONE = ("DELETE_COMPLETE", "DELETE_SKIPPED")


def _stack_holds_bucket(cfn: Any, stack: str, bucket: str) -> bool:
    """Whether ``stack`` lists the bucket named ``bucket`` (ListStackResources) as a resource it still holds."""
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
        for summary in page.get("StackResourceSummaries", []):
            if (
                summary.get("ResourceType") == "AWS::S3::Bucket"
                and summary.get("PhysicalResourceId") == bucket
                and summary.get("ResourceStatus") not in RESOURCE_GONE
            ):
                return True
    return False


def _data_bucket_row(ctx: Context, bucket: str, storage: str, storage_status: str) -> Result:
    """Whether ``storage.data_bucket.name`` is free, or the bucket this environment's Storage stack holds.

    Both S3 calls carry ``ExpectedBucketOwner`` (this account, STS ``GetCallerIdentity``): S3 then answers
    403 for a bucket of any other account, even one whose policy grants these credentials ``s3:ListBucket``
    or ``s3:GetBucketTagging`` (botocore's S3 model for both operations). A 200 from HeadBucket therefore
    means this account's bucket. A 403 cannot tell another account's bucket from this account's bucket
    that these credentials may not list (HeadBucket needs ``s3:ListBucket``), so its row names both.

    A bucket with this environment's tag that the Storage stack does not hold was kept (its deletion policy
    retains it) when an earlier Storage stack was deleted: ``cdk deploy`` would try to create it again and
    fail with "already exists".
    """
    from botocore.exceptions import ClientError

    key = "storage.data_bucket.name"
    env = ctx.env.name
    account = str(ctx.client("sts").get_caller_identity()["Account"])
    s3 = ctx.client("s3")
    try:
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code"))
        if code in ("404", "NoSuchBucket", "NotFound"):
            return Result("names", "pass", "ERROR", key, f"bucket {bucket} is free")
        if code not in ("403", "AccessDenied", "Forbidden"):
            raise
        return Result(
            "names",
            "fail",
            "ERROR",
            key,
            f"bucket {bucket} exists and HeadBucket as account {account} was refused: either another account "
            "owns it (choose another name), or this account does and these credentials lack s3:ListBucket on it "
            "(grant it and run again)",
        )
    try:
        tags = s3.get_bucket_tagging(Bucket=bucket, ExpectedBucketOwner=account)["TagSet"]
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code"))
        if code == "NoSuchTagSet":
            tags = []
        elif code in ("403", "AccessDenied", "Forbidden"):
            return Result(
                "names",
                "fail",
                "ERROR",
                key,
                f"bucket {bucket} exists in account {account}, and these credentials cannot read its tags "
                f"(GetBucketTagging refused): grant s3:GetBucketTagging on it and run again, or choose another name",
            )
        else:
            raise
    if not _tags_say_ours(tags, env):
        return Result(
            "names",
            "fail",
            "ERROR",
            key,
            f"bucket {bucket} exists in this account without tag {ENV_TAG}={env}: choose another name",
        )
    if storage_status != "DELETE_COMPLETE" and _stack_holds_bucket(ctx.client("cloudformation"), storage, bucket):
        return Result("names", "pass", "ERROR", key, f"bucket {bucket} exists, held by stack {storage}")
    where = "does not exist" if storage_status == "DELETE_COMPLETE" else f"({storage_status}) does not hold it"
    return Result(
        "names",
        "fail",
        "ERROR",
        key,
        f"bucket {bucket} carries tag {ENV_TAG}={env} but stack {storage} {where}: it was kept from an earlier "
        "deploy (deleted with its stack, or left it, and retained), and `cdk deploy` would fail creating it again "
        f"(already exists): bring it "
        f"into the stack with `npx cdk import '{env}/Storage'` (then deploy), or take what you need from it, empty "
        "and delete it, or choose another storage.data_bucket.name",
    )


def check_names(ctx: Context) -> list[Result]:
    """Stack, bucket and cluster names the environment takes are free, or carry this environment's tag."""
    from botocore.exceptions import ClientError

    env = ctx.env
    results = []
    cfn = ctx.client("cloudformation")
    parts = ["Network", "Storage", "Cluster"]
    if env.config.storage.lustre.data_repository_associations:
        parts.append("DataRepository")
    if observability_enabled(env.config):
        parts.append("Observability")
    stacks = [(f"{env.name}-{s}", "(file name)") for s in parts]
    statuses: dict[str, str] = {}
    if env.config.cluster.backend == "pcluster":
        stacks.append((env.cluster_name, "cluster.name"))
    for name, key in stacks:
        try:
            found = cfn.describe_stacks(StackName=name)["Stacks"]
        except ClientError as error:
            if "does not exist" not in str(error.response.get("Error", {}).get("Message")):
                raise
            found = []
        status = str(found[0].get("StackStatus", "")) if found else "DELETE_COMPLETE"
        statuses[name] = status
        if status == "DELETE_COMPLETE":
            results.append(Result("names", "pass", "ERROR", key, f"stack {name} is free"))
        elif key == "cluster.name" and _tags_say_ours(found[0].get("Tags", []), env.name):
            # ParallelCluster's own stack: its table decides (a rolled-back create still holds the name).
            state = cluster_stack_state(status)
            message = f"cluster stack {name} is {status}: {state.reason}"
            app_stack = statuses[f"{env.name}-Cluster"]
            if app_stack in HOLDS_NO_CLUSTER:
                # Kept after the app's Cluster stack went: its custom resource's create would find the name taken.
                results.append(
                    Result(
                        "names",
                        "fail",
                        "ERROR",
                        key,
                        f"cluster stack {name} ({status}) is this environment's, but stack {env.name}-Cluster "
                        f"{_holds_none(app_stack)}: the deploy would create the cluster again and ParallelCluster "
                        "refuses a name in use; delete the kept cluster (`pcluster delete-cluster`) once nothing of "
                        "it is needed, or choose another cluster.name",
                    )
                )
            elif state.decision in ("ready", "degraded"):
                results.append(Result("names", "pass", "ERROR", key, message))
            else:
                results.append(Result("names", "fail", "ERROR", key, message))
        elif _tags_say_ours(found[0].get("Tags", []), env.name):
            if status == "UPDATE_ROLLBACK_FAILED":
                results.append(Result("names", "fail", "ERROR", key, _rollback_failed(cfn, name)))
            elif status in STACK_BLOCKED or status.endswith("_IN_PROGRESS"):
                results.append(
                    Result(
                        "names",
                        "fail",
                        "ERROR",
                        key,
                        f"stack {name} (this environment's) is {status}: wait for it to finish, or fix or delete it "
                        "in the CloudFormation console, before `cdk deploy`",
                    )
                )
            else:
                results.append(Result("names", "pass", "ERROR", key, f"stack {name} is this environment's ({status})"))
        else:
            results.append(
                Result(
                    "names",
                    "fail",
                    "ERROR",
                    key,
                    f"stack {name} exists without tag {ENV_TAG}={env.name}: rename the environment or cluster.name",
                )
            )
    bucket = env.config.storage.data_bucket.name
    if bucket is not None:
        storage = f"{env.name}-Storage"
        results.append(_data_bucket_row(ctx, bucket, storage, statuses[storage]))
    if env.config.cluster.backend == "hyperpod":
        sm = ctx.client("sagemaker")
        try:
            cluster = sm.describe_cluster(ClusterName=env.cluster_name)
            tags = sm.list_tags(ResourceArn=cluster["ClusterArn"]).get("Tags", [])
            results.append(_hyperpod_name_row(env, cluster, tags, statuses[f"{env.name}-Cluster"]))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFound":
                raise
            results.append(
                Result("names", "pass", "ERROR", "cluster.name", f"HyperPod cluster name {env.cluster_name} is free")
            )
    return results


#: States of the environment's Cluster stack in which it holds no cluster: gone, or a create rolled back (the next
#: deploy deletes it and creates the cluster again).
HOLDS_NO_CLUSTER = frozenset({"DELETE_COMPLETE", "ROLLBACK_COMPLETE"})


def _holds_none(status: str) -> str:
    """How a Cluster stack in :data:`HOLDS_NO_CLUSTER` is said: absent (read as DELETE_COMPLETE) or rolled back."""
    return "does not exist" if status == "DELETE_COMPLETE" else f"is {status} and holds none"


def _hyperpod_name_row(env: Environment, cluster: dict[str, Any], tags: list[Any], cluster_stack: str) -> Result:
    """The row for a HyperPod cluster that already has the environment's cluster name.

    Ours only while the environment's Cluster stack exists (it holds the ``AWS::SageMaker::Cluster``): with the
    stack gone (``cluster_stack`` DELETE_COMPLETE) the cluster was kept or is still being deleted, and the
    Cluster stack's create would be refused for the name (the preflight of the cluster's handler).
    """
    name = env.cluster_name
    if not _tags_say_ours(tags, env.name):
        return Result(
            "names",
            "fail",
            "ERROR",
            "cluster.name",
            f"HyperPod cluster {name} exists without tag {ENV_TAG}={env.name}: choose another cluster.name",
        )
    if cluster_stack not in HOLDS_NO_CLUSTER:
        return Result("names", "pass", "ERROR", "cluster.name", f"HyperPod cluster {name} exists")
    status = cluster.get("ClusterStatus")
    way = (
        "wait until its deletion has finished"
        if status == "Deleting"
        else "delete it if nothing of it is needed (its nodes' disks go with it), or choose another cluster.name"
    )
    return Result(
        "names",
        "fail",
        "ERROR",
        "cluster.name",
        f"HyperPod cluster {name} ({status}) is this environment's, but stack {env.name}-Cluster "
        f"{_holds_none(cluster_stack)}: the deploy would create the cluster again and be refused for the name; {way}",
    )


def check_bootstrap(ctx: Context) -> list[Result]:
    """The CDK bootstrap stack exists and its version suits the templates and the pinned CLI."""
    from botocore.exceptions import ClientError

    try:
        stacks = ctx.client("cloudformation").describe_stacks(StackName="CDKToolkit")["Stacks"]
    except ClientError as error:
        if "does not exist" not in str(error.response.get("Error", {}).get("Message")):
            raise
        stacks = []
    fix = f"run `npx cdk bootstrap aws://<account>/{ctx.region}`"
    if not stacks:
        return [Result("cdk-bootstrap", "fail", "ERROR", "region", f"no CDKToolkit stack in {ctx.region}: {fix}")]
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stacks[0].get("Outputs", [])}
    raw = outputs.get("BootstrapVersion", "")
    version = int(raw) if raw.isdigit() else 0
    if version < BOOTSTRAP_REQUIRED:
        return [
            Result(
                "cdk-bootstrap",
                "fail",
                "ERROR",
                "region",
                f"bootstrap version {raw or 'unknown'} < {BOOTSTRAP_REQUIRED}, which the templates require: {fix}",
            )
        ]
    if version < BOOTSTRAP_CURRENT:
        return [
            Result(
                "cdk-bootstrap",
                "fail",
                "WARNING",
                "region",
                f"bootstrap version {version} is older than {BOOTSTRAP_CURRENT} of the pinned CDK CLI: {fix}",
            )
        ]
    return [Result("cdk-bootstrap", "pass", "ERROR", "region", f"bootstrap version {version}")]


#: Every check by id, in the order they run.
CHECKS: dict[str, Callable[[Context], list[Result]]] = {
    "vcpu-quota": check_vcpu_quota,
    "sagemaker-quota": check_sagemaker_quota,
    "fsx-quota": check_fsx_quota,
    "vpc-quota": check_vpc_quota,
    "eip-quota": check_eip_quota,
    "nat-quota": check_nat_quota,
    "zone-exists": check_zones_exist,
    "instance-offered": check_offerings,
    "capacity-reservation": check_reservations,
    "training-plan": check_training_plans,
    "pcluster-image": check_pcluster_image,
    "pcluster-validators": check_pcluster_validators,
    "names": check_names,
    "cdk-bootstrap": check_bootstrap,
}


def run_checks(ctx: Context, skip: Sequence[str] = ()) -> list[Result]:
    """Run every check not skipped; a failure in one check is an error row, and the others still run.

    An AWS error becomes the row's message with what to do; any other exception
    (an answer of a shape the check did not expect) is an error row naming the
    exception, so the operator never sees a traceback and never a pass.
    """
    results: list[Result] = []
    for check_id, check in CHECKS.items():
        if check_id in skip:
            continue
        try:
            with aws_errors(check.__doc__.splitlines()[0] if check.__doc__ else check_id):
                results += check(ctx)
        except CliError as error:
            results.append(Result(check_id, "error", "ERROR", "-", error.message.replace("\n", " ")))
        except Exception as error:  # any failure of a check is a row, never a traceback
            results.append(
                Result(
                    check_id,
                    "error",
                    "ERROR",
                    "-",
                    f"the check failed on an unexpected answer ({type(error).__name__}: {error}); "
                    f"run again with --skip {check_id} and check it by hand",
                )
            )
    return results


def exit_code(results: Sequence[Result]) -> int:
    """1 when an ERROR-level check failed, else 3 when a check could not run (AWS error), else 0."""
    if any(r.status == "fail" and r.level == "ERROR" for r in results):
        return EXIT_FAILED
    if any(r.status == "error" for r in results):
        return EXIT_AWS
    return EXIT_OK


def clients_for(target: Target) -> Clients:
    """The client factory the checks use: the target's clients (one session, standard retries)."""
    return target.client


def operator_environ(target: Target) -> dict[str, str]:
    """This process's environment with the target's credentials and region, for a child that calls AWS.

    The session's credentials are resolved here (profile, SSO, role chain) and
    handed over as plain variables, so the child acts exactly as this command does.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    environ["AWS_DEFAULT_REGION"] = environ["AWS_REGION"] = target.region
    for name in ("AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"):
        if name in os.environ:
            environ[name] = os.environ[name]
    credentials = target.session.get_credentials()
    if credentials is None:
        raise CliError("no AWS credentials: configure a profile or pass --profile", EXIT_AWS)
    frozen = credentials.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        raise CliError("the AWS credentials have no access key: configure a profile or pass --profile", EXIT_AWS)
    environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"] = frozen.access_key, frozen.secret_key
    if frozen.token:
        environ["AWS_SESSION_TOKEN"] = frozen.token
    environ["AWS_CONFIG_FILE"] = environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    return environ


def render(results: Sequence[Result], env: str, region: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"preflight {env} ({region})")
    for column in ("check", "result", "key", "message"):
        table.add_column(column, overflow="fold")
    styles = {"pass": "green", "fail": "red", "error": "magenta", "skipped": "yellow"}
    labels = {"pass": "ok", "error": "AWS ERROR", "skipped": "skipped"}
    for r in results:
        label = labels.get(r.status, r.level)
        style = "yellow" if r.status == "fail" and r.level == "WARNING" else styles[r.status]
        table.add_row(r.check, f"[{style}]{label}[/]", r.key, r.message)
    console = Console(highlight=False)
    console.print(table)
    failed = sum(1 for r in results if r.status == "fail" and r.level == "ERROR")
    warned = sum(1 for r in results if r.status == "fail" and r.level == "WARNING")
    errors = sum(1 for r in results if r.status == "error")
    skipped = sum(1 for r in results if r.status == "skipped")
    console.print(f"{failed} errors, {warned} warnings, {errors} checks could not run, {skipped} skipped")


@click.command()
@environment_options
@click.option(
    "--skip",
    "skip",
    multiple=True,
    type=click.Choice(sorted(CHECKS)),
    help="Do not run this check (repeatable).",
)
@click.option(
    "--reservation-margin-days",
    type=click.IntRange(min=0),
    default=7,
    show_default=True,
    help="A capacity reservation must last at least this long.",
)
@json_option
def preflight(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    skip: tuple[str, ...],
    reservation_margin_days: int,
    as_json: bool,
) -> None:
    """Check the account before `cdk deploy`: quotas, zones, reservations, images, names, bootstrap.

    Read-only calls with your credentials. ParallelCluster environments also get
    ParallelCluster's own validators, run live once the Network and Storage stacks
    are deployed (a Python with aws-parallelcluster: $MLCLUSTER_PCLUSTER_PYTHON, a
    `pcluster` command on PATH, or the checkout's .venv-pcluster; never the
    current folder, and only one no one else can write). Exit 1 when a check at level
    ERROR fails, 3 when a check could not run (AWS refused a call), 0 otherwise.
    """
    target = Target.load(env, environments, region, profile)
    ctx = Context(
        env=target.environment,
        plan=plan_of(target.environment),
        region=target.region,
        client=clients_for(target),
        margin=timedelta(days=reservation_margin_days),
        now=datetime.now(UTC),
        child_environ=lambda: operator_environ(target),
    )
    results = run_checks(ctx, skip)
    if as_json:
        echo_json({"environment": env, "region": ctx.region, "results": [asdict(r) for r in results]})
    else:
        render(results, env, ctx.region)
    code = exit_code(results)
    if code == EXIT_FAILED:
        raise CliError("preflight failed: fix the ERROR rows above before `cdk deploy`", code)
    if code == EXIT_AWS:
        raise CliError("preflight incomplete: some checks could not run (see the AWS ERROR rows)", code)
