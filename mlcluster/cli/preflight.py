"""``mlcluster preflight ENV``: ask the account, before ``cdk deploy``, what would fail half-way.

Every check makes read-only calls with the operator's credentials and returns
one or more :class:`Result` rows: an id (for ``--skip``), a level (ERROR
fails the command, WARNING does not), the key in the environment file it is
about, and one line saying what was found and what to do. An AWS error in a
check (access denied, throttling past the retries) is a row with status
``error``, never a pass, and never a traceback.

Contracts the checks rest on, with their source:

* EC2 On-Demand vCPU quotas per instance family (Service Quotas, service code
  ``ec2``). Codes: ``L-1216C47A`` Standard (AWS CLI reference example for
  ``get-aws-default-service-quota``); ``L-417A185B`` P and ``L-DB2E81BA`` G and
  VT (Service Quotas console links in AWS and vendor guides). The codes of the
  other families (Trn, Inf, DL, F, X, HPC, High Memory) are not checked against
  an AWS page; each result prints the ``QuotaName`` AWS returns for its code,
  so a wrong code shows.
* VPCs per Region ``L-F678F1CE`` and NAT gateways per Availability Zone
  ``L-FE5A380F`` (service ``vpc``), EC2-VPC Elastic IPs ``L-0263D0A3`` (service
  ``ec2``; the code AWS's own managed policies grant ``GetServiceQuota`` on).
* HyperPod: quotas named ``ml.<type> for cluster usage`` (service
  ``sagemaker``); their codes differ per type, so they are found by name.
* FSx: quotas of service ``fsx`` whose names mention the file system type and
  either ``storage capacity`` or ``file systems``, found by name.
* ParallelCluster's official images: owner ``amazon``, name
  ``aws-parallelcluster-<version>-<os part>-<arch>*`` (ParallelCluster 3.16
  ``pcluster/aws/ec2.py`` ``get_official_image_id`` and
  ``constants.OS_TO_IMAGE_NAME_PART_MAP``).
* CDK bootstrap: the ``CDKToolkit`` stack's ``BootstrapVersion`` output. The
  synthesized templates refuse versions 1-5 (their ``CheckBootstrapVersion``
  rule); the pinned CLI (aws-cdk 2.1148.1) ships bootstrap template version 33.
"""

from __future__ import annotations

import re
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

Level = Literal["ERROR", "WARNING"]
Status = Literal["pass", "fail", "error"]
Clients = Callable[[str], Any]

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
    return float(quota["Value"]), str(quota.get("QuotaName", code))


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
    """Running On-Demand vCPUs: this environment's EC2 nodes at their max counts plus what already runs."""
    groups = [g for g in ctx.plan.groups if not g.sagemaker]
    if not groups:
        return []
    vcpus = ctx.vcpus(g.ec2_type for g in groups)
    needed: dict[str, list[NodeGroup]] = {}
    for group in groups:
        code = VCPU_QUOTAS.get(family(group.ec2_type), ("", ""))[0]
        needed.setdefault(code, []).append(group)
    running = _running_vcpus(ctx, vcpus)
    results = []
    for code, members in sorted(needed.items()):
        keys = ", ".join(g.key for g in members)
        if not code:
            results.append(
                Result(
                    "vcpu-quota",
                    "fail",
                    "WARNING",
                    keys,
                    "no On-Demand vCPU quota known for this family; check it in the Service Quotas console",
                )
            )
            continue
        need = sum(vcpus[g.ec2_type] * g.max_count for g in members)
        value, name = _quota(ctx, "ec2", code)
        used = running.get(code, 0)
        if used + need > value:
            results.append(
                Result(
                    "vcpu-quota",
                    "fail",
                    "ERROR",
                    keys,
                    f"{name} ({code}) is {value:g} vCPUs; {used} run already and max_count needs {need}: "
                    f"request {used + need:g} in Service Quotas or lower max_count",
                )
            )
        else:
            results.append(
                Result(
                    "vcpu-quota", "pass", "ERROR", keys, f"{name} ({code}) {value:g} >= {used} running + {need} needed"
                )
            )
    return results


def _running_vcpus(ctx: Context, known: dict[str, int]) -> dict[str, int]:
    """vCPUs of pending and running On-Demand instances per quota code, except this environment's own nodes."""
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    )
    # Spot instances count against the Spot quotas, not these.
    instances = [
        i
        for page in pages
        for r in page["Reservations"]
        for i in r["Instances"]
        if i.get("InstanceLifecycle") != "spot"
    ]
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
    used: dict[str, int] = {}
    for instance in others:
        code = VCPU_QUOTAS.get(family(instance["InstanceType"]), ("", ""))[0]
        cpu = instance.get("CpuOptions", {})
        count = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 0) or vcpus.get(instance["InstanceType"], 0)
        used[code] = used.get(code, 0) + count
    return used


def check_sagemaker_quota(ctx: Context) -> list[Result]:
    """HyperPod: the ``ml.<type> for cluster usage`` quota for each instance type, at its total count."""
    counts: dict[str, tuple[int, list[str]]] = {}
    for g in ctx.plan.groups:
        if g.sagemaker:
            total, keys = counts.get(g.instance_type, (0, []))
            counts[g.instance_type] = (total + g.max_count, [*keys, g.key])
    if not counts:
        return []
    quotas = {str(q.get("QuotaName", "")): q for q in _list_quotas(ctx, "sagemaker")}
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
        elif need > float(quota["Value"]):
            results.append(
                Result(
                    "sagemaker-quota",
                    "fail",
                    "ERROR",
                    key,
                    f"{name} ({quota.get('QuotaCode')}) is {float(quota['Value']):g}; the groups need {need}: "
                    "request an increase or lower instance_count",
                )
            )
        else:
            results.append(
                Result("sagemaker-quota", "pass", "ERROR", key, f"{name} {float(quota['Value']):g} >= {need}")
            )
    return results


def check_fsx_quota(ctx: Context) -> list[Result]:
    """FSx: storage capacity and number of file systems of each type, with what the account has already."""
    quotas = _list_quotas(ctx, "fsx")
    pages = ctx.client("fsx").get_paginator("describe_file_systems").paginate()
    existing = [fs for page in pages for fs in page["FileSystems"] if fs.get("Lifecycle") not in ("DELETING", "FAILED")]
    results = []
    for fs in ctx.plan.file_systems:
        word = "lustre" if fs.kind == "LUSTRE" else "openzfs"
        mine = [f for f in existing if f.get("FileSystemType") == fs.kind]
        used_gib = sum(int(f.get("StorageCapacity", 0)) for f in mine)
        for quota in quotas:
            name = str(quota.get("QuotaName", ""))
            lower = name.lower()
            if word not in lower:
                continue
            if "storage capacity" in lower:
                need, used, what = fs.capacity_gib, used_gib, f"{fs.key}.storage_capacity_gib"
            elif "file systems" in lower:
                need, used, what = 1, len(mine), fs.key
            else:
                continue
            value = float(quota["Value"])
            code = quota.get("QuotaCode")
            if used + need > value:
                results.append(
                    Result(
                        "fsx-quota",
                        "fail",
                        "ERROR",
                        what,
                        f"{name} ({code}) is {value:g}; {used} used and {need} needed: "
                        "request an increase or make it smaller",
                    )
                )
            else:
                results.append(
                    Result("fsx-quota", "pass", "ERROR", what, f"{name} ({code}) {value:g} >= {used} used + {need}")
                )
        if not any(r.key.startswith(fs.key) for r in results):
            results.append(
                Result(
                    "fsx-quota",
                    "fail",
                    "WARNING",
                    fs.key,
                    f"no FSx quota for {word} found by name; check Service Quotas > Amazon FSx by hand",
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


def check_nat_quota(ctx: Context) -> list[Result]:
    """NAT gateways per Availability Zone, in the primary zone, unless the environment's VPC exists already."""
    if not ctx.plan.new_vpc or not ctx.plan.zones or not ctx.plan.nat_gateways:
        return []
    _, ours = _own_vpc(ctx)
    ec2 = ctx.client("ec2")
    states = [{"Name": "state", "Values": ["pending", "available"]}]
    pages = ec2.get_paginator("describe_nat_gateways").paginate(Filter=states)
    gateways = [g for page in pages for g in page["NatGateways"]]
    zone = ctx.plan.zones[0]
    in_zone = 0
    if gateways:
        subnets = ec2.describe_subnets(SubnetIds=sorted({g["SubnetId"] for g in gateways}))["Subnets"]
        field = "AvailabilityZoneId" if ZONE_ID.fullmatch(zone) else "AvailabilityZone"
        zone_of = {s["SubnetId"]: s.get(field) for s in subnets}
        in_zone = sum(1 for g in gateways if zone_of.get(g["SubnetId"]) == zone)
    value, name = _quota(ctx, *NAT_QUOTA)
    need = 0 if ours else 1
    status: Status = "fail" if in_zone + need > value else "pass"
    return [
        Result(
            "nat-quota",
            status,
            "ERROR",
            "network.availability_zone",
            f"{name} ({NAT_QUOTA[1]}) is {value:g}; {in_zone} in {zone}, {need} needed"
            + (": request an increase or choose another zone" if status == "fail" else ""),
        )
    ]


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
            if "NotFound" not in str(error.response.get("Error", {}).get("Code", "")):
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


def _reservation_findings(ctx: Context, group: NodeGroup, key: str, res: dict[str, Any]) -> list[Result]:
    rid = res["CapacityReservationId"]
    problems: list[tuple[Level, str]] = []
    state = res.get("State")
    block = res.get("ReservationType") == "capacity-block"
    start, end = res.get("StartDate"), res.get("EndDate")
    if group.capacity_block and not block:
        problems.append(
            ("ERROR", "the queue's capacity_type is CAPACITY_BLOCK but this is an On-Demand Capacity Reservation")
        )
    if block and state == "scheduled" and start is not None:
        problems.append(("WARNING", f"capacity block starts {start:%Y-%m-%d %H:%M} UTC; nodes cannot launch before"))
    elif state != "active":
        problems.append(
            ("ERROR", f"state is {state}, not active: buy or renew the reservation, or remove capacity_reservation_id")
        )
    if res.get("InstanceType") != group.ec2_type:
        problems.append(("ERROR", f"it reserves {res.get('InstanceType')}, the group uses {group.ec2_type}"))
    zone = group.zones[0] if group.zones else None
    if zone is not None:
        actual = res.get("AvailabilityZoneId") if ZONE_ID.fullmatch(zone) else res.get("AvailabilityZone")
        if actual != zone:
            problems.append(
                ("ERROR", f"it is in {actual}, the group in {zone}: set network.availability_zone to {actual}")
            )
    total = int(res.get("TotalInstanceCount", 0))
    if total < group.max_count:
        problems.append(("ERROR", f"it holds {total} instances, max_count is {group.max_count}"))
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
        name = arn.rsplit("/", 1)[-1]
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
        images = ec2.describe_images(Filters=[{"Name": "image-id", "Values": [pc.custom_ami]}])["Images"]
        if images:
            return [Result("pcluster-image", "pass", "ERROR", "cluster.pcluster.custom_ami", f"{pc.custom_ami} exists")]
        return [
            Result(
                "pcluster-image",
                "fail",
                "ERROR",
                "cluster.pcluster.custom_ami",
                f"{pc.custom_ami} not found in {ctx.region}: copy it here or fix the ID",
            )
        ]
    head = pc.head_node.instance_type
    info = ctx.client("ec2").describe_instance_types(InstanceTypes=[head])["InstanceTypes"]
    archs = info[0]["ProcessorInfo"]["SupportedArchitectures"] if info else ["x86_64"]
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


def _tags_say_ours(tags: Iterable[dict[str, str]], env: str) -> bool:
    return any(t.get("Key") == ENV_TAG and t.get("Value") == env for t in tags)


def check_names(ctx: Context) -> list[Result]:
    """Stack, bucket and cluster names the environment takes are free, or carry this environment's tag."""
    from botocore.exceptions import ClientError

    env = ctx.env
    results = []
    cfn = ctx.client("cloudformation")
    stacks = [(f"{env.name}-{s}", "(file name)") for s in ("Network", "Storage", "Cluster")]
    if env.config.cluster.backend == "pcluster":
        stacks.append((env.cluster_name, "cluster.name"))
    for name, key in stacks:
        try:
            found = cfn.describe_stacks(StackName=name)["Stacks"]
        except ClientError as error:
            if "does not exist" not in str(error.response.get("Error", {}).get("Message", "")):
                raise
            found = []
        if (
            not found
            or _tags_say_ours(found[0].get("Tags", []), env.name)
            or found[0].get("StackStatus") == "DELETE_COMPLETE"
        ):
            results.append(Result("names", "pass", "ERROR", key, f"stack {name} is free or this environment's"))
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
        s3 = ctx.client("s3")
        try:
            s3.head_bucket(Bucket=bucket)
            try:
                tags = s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "NoSuchTagSet":
                    raise
                tags = []
            ours = _tags_say_ours(tags, env.name)
            results.append(
                Result(
                    "names",
                    "pass" if ours else "fail",
                    "ERROR",
                    "storage.data_bucket.name",
                    f"bucket {bucket} exists"
                    + ("" if ours else f" in this account without tag {ENV_TAG}={env.name}: choose another name"),
                )
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                results.append(Result("names", "pass", "ERROR", "storage.data_bucket.name", f"bucket {bucket} is free"))
            elif code in ("403", "AccessDenied", "Forbidden"):
                results.append(
                    Result(
                        "names",
                        "fail",
                        "ERROR",
                        "storage.data_bucket.name",
                        f"bucket {bucket} belongs to another account: choose another name",
                    )
                )
            else:
                raise
    if env.config.cluster.backend == "hyperpod":
        sm = ctx.client("sagemaker")
        try:
            cluster = sm.describe_cluster(ClusterName=env.cluster_name)
            tags = sm.list_tags(ResourceArn=cluster["ClusterArn"]).get("Tags", [])
            ours = _tags_say_ours(tags, env.name)
            results.append(
                Result(
                    "names",
                    "pass" if ours else "fail",
                    "ERROR",
                    "cluster.name",
                    f"HyperPod cluster {env.cluster_name} exists"
                    + ("" if ours else f" without tag {ENV_TAG}={env.name}: choose another cluster.name"),
                )
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("ResourceNotFound", "ValidationException"):
                raise
            results.append(
                Result("names", "pass", "ERROR", "cluster.name", f"HyperPod cluster name {env.cluster_name} is free")
            )
    return results


def check_bootstrap(ctx: Context) -> list[Result]:
    """The CDK bootstrap stack exists and its version suits the templates and the pinned CLI."""
    from botocore.exceptions import ClientError

    try:
        stacks = ctx.client("cloudformation").describe_stacks(StackName="CDKToolkit")["Stacks"]
    except ClientError as error:
        if "does not exist" not in str(error.response.get("Error", {}).get("Message", "")):
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
    "instance-offered": check_offerings,
    "capacity-reservation": check_reservations,
    "training-plan": check_training_plans,
    "pcluster-image": check_pcluster_image,
    "names": check_names,
    "cdk-bootstrap": check_bootstrap,
}


def run_checks(ctx: Context, skip: Sequence[str] = ()) -> list[Result]:
    """Run every check not skipped; an AWS failure in one check is a row, and the others still run."""
    results: list[Result] = []
    for check_id, check in CHECKS.items():
        if check_id in skip:
            continue
        try:
            with aws_errors(check.__doc__.splitlines()[0] if check.__doc__ else check_id):
                results += check(ctx)
        except CliError as error:
            results.append(Result(check_id, "error", "ERROR", "-", error.message.replace("\n", " ")))
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


def render(results: Sequence[Result], env: str, region: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"preflight {env} ({region})", show_lines=False)
    for column in ("check", "result", "key", "message"):
        table.add_column(column, overflow="fold")
    styles = {"pass": "green", "fail": "red", "error": "magenta"}
    for r in results:
        label = "ok" if r.status == "pass" else ("AWS ERROR" if r.status == "error" else r.level)
        style = "yellow" if r.status == "fail" and r.level == "WARNING" else styles[r.status]
        table.add_row(r.check, f"[{style}]{label}[/]", r.key, r.message)
    console = Console(highlight=False)
    console.print(table)
    failed = sum(1 for r in results if r.status == "fail" and r.level == "ERROR")
    warned = sum(1 for r in results if r.status == "fail" and r.level == "WARNING")
    errors = sum(1 for r in results if r.status == "error")
    console.print(f"{failed} errors, {warned} warnings, {errors} checks could not run")


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
    environments: Path,
    region: str | None,
    profile: str | None,
    skip: tuple[str, ...],
    reservation_margin_days: int,
    as_json: bool,
) -> None:
    """Check the account before `cdk deploy`: quotas, zones, reservations, images, names, bootstrap.

    Read-only calls with your credentials. Exit 1 when a check at level ERROR
    fails, 3 when a check could not run (AWS refused a call), 0 otherwise.
    """
    target = Target.load(env, environments, region, profile)
    ctx = Context(
        env=target.environment,
        plan=plan_of(target.environment),
        region=target.region,
        client=clients_for(target),
        margin=timedelta(days=reservation_margin_days),
        now=datetime.now(UTC),
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
