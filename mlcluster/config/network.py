"""The ``network:`` section of an environment file."""

from __future__ import annotations

import difflib
import ipaddress
from typing import Any, ClassVar, Literal

from mlcluster.config import awsdata, zones
from mlcluster.config.schema import NOT_A_VALUE, Issues, section, setting

AZ_NAME = r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d[a-z]"
AZ_ID = r"[a-z]{2,4}\d-az\d{1,2}"
CIDR_HELP = "allowed: an IPv4 CIDR block such as '10.0.0.0/16'"
VPC_ID = r"vpc-[0-9a-f]{8,17}"
SUBNET_ID = r"subnet-[0-9a-f]{8,17}"
SG_ID = r"sg-[0-9a-f]{8,17}"
RTB_ID = r"rtb-[0-9a-f]{8,17}"
ACCOUNT = r"\d{12}"
REGION = r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d"

#: JSON Schema form of "give exactly one of availability_zone or availability_zone_id" (see ``docs``).
ONE_ZONE_RULE: dict[str, Any] = {
    "oneOf": [
        {"required": ["availability_zone"], "not": {"required": ["availability_zone_id"]}},
        {"required": ["availability_zone_id"], "not": {"required": ["availability_zone"]}},
    ]
}

#: The most availability zones one environment spreads its subnets over.
MAX_ZONES = 4


def parse_cidr(value: str) -> ipaddress.IPv4Network | None:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError:
        return None
    return net if isinstance(net, ipaddress.IPv4Network) else None


def _check_zone(issues: Issues, zone: str | None, zone_id: str | None, where: str = "") -> None:
    prefix = f"{where}." if where else ""
    if (zone is None) == (zone_id is None):
        both = f"{prefix}availability_zone {zone!r} and {prefix}availability_zone_id {zone_id!r} are both given; "
        issues.add(
            where or "availability_zone",
            None if zone is None else NOT_A_VALUE,  # None: "no value (empty or missing)", never a Python dict
            ("" if zone is None else both) + f"give exactly one of {prefix}availability_zone (a name like "
            f"'us-east-1a') or {prefix}availability_zone_id (an ID like 'use1-az4')",
        )


@section
class Zone:
    """An extra zone for private subnets (and public ones with per-zone NAT)."""

    SCHEMA_RULES: ClassVar[dict[str, Any]] = ONE_ZONE_RULE

    availability_zone: str | None = setting(
        default=None, pattern=AZ_NAME, allowed="allowed: an AZ name such as 'us-east-1b'"
    )
    availability_zone_id: str | None = setting(
        default=None, pattern=AZ_ID, allowed="allowed: an AZ ID such as 'use1-az6'"
    )
    private_subnet_cidr: str | None = setting(default=None, allowed=CIDR_HELP)
    public_subnet_cidr: str | None = setting(default=None, allowed=CIDR_HELP)

    def check(self, issues: Issues) -> None:
        _check_zone(issues, self.availability_zone, self.availability_zone_id)
        for key in ("private_subnet_cidr", "public_subnet_cidr"):
            value = getattr(self, key)
            if value is not None and parse_cidr(value) is None:
                issues.add(key, value, CIDR_HELP)

    @property
    def label(self) -> str:
        return self.availability_zone or self.availability_zone_id or ""


@section
class FlowLogs:
    """VPC flow logs to CloudWatch Logs."""

    traffic_type: Literal["ALL", "ACCEPT", "REJECT"] = setting(default="ALL", doc="which traffic is logged")
    max_aggregation_interval_seconds: int = setting(
        default=600, one_of=(60, 600), doc="how long flows are gathered before a record is written"
    )


@section
class Peering:
    """Peering with an existing VPC (seed 003: reach a VPC that already holds tools or data)."""

    peer_vpc_id: str = setting(pattern=VPC_ID, allowed="allowed: a VPC ID such as 'vpc-0abc1234'")
    peer_cidr: str = setting(allowed=CIDR_HELP)
    peer_route_table_ids: tuple[str, ...] = setting(
        default=(), pattern=RTB_ID, allowed="allowed: route table IDs such as 'rtb-0abc1234'"
    )
    peer_owner_id: str | None = setting(default=None, pattern=ACCOUNT, allowed="allowed: a 12-digit account ID")
    peer_region: str | None = setting(
        default=None, choices=awsdata.REGIONS, doc="the peer VPC's region, when it differs from this one"
    )
    peer_role_arn: str | None = setting(
        default=None,
        pattern=r"arn:aws[a-z-]*:iam::\d{12}:role/.+",
        allowed="allowed: an IAM role ARN in the peer account",
    )

    def check(self, issues: Issues) -> None:
        if parse_cidr(self.peer_cidr) is None:
            issues.add("peer_cidr", self.peer_cidr, CIDR_HELP)
        if self.peer_owner_id is not None and self.peer_role_arn is None:
            issues.add(
                "peer_role_arn",
                None,
                "required with peer_owner_id: a role in the peer account that accepts the peering",
            )
        if self.peer_route_table_ids and (self.peer_owner_id is not None or self.peer_region is not None):
            issues.add(
                "peer_route_table_ids",
                list(self.peer_route_table_ids),
                "routes in the peer VPC can only be added when it is in the same account and region; "
                "leave this empty and add the return routes in the peer account",
            )


@section
class ExistingNetwork:
    """Use a VPC, subnets and security group that already exist instead of creating them."""

    vpc_id: str = setting(pattern=VPC_ID, allowed="allowed: a VPC ID such as 'vpc-0abc1234'")
    vpc_cidr: str = setting(allowed=CIDR_HELP + " (the VPC's primary CIDR, used for NFS exports)")
    public_subnet_id: str | None = setting(
        default=None, pattern=SUBNET_ID, allowed="allowed: a subnet ID such as 'subnet-0abc1234'"
    )
    private_subnet_ids: tuple[str, ...] = setting(
        pattern=SUBNET_ID, allowed="allowed: subnet IDs such as 'subnet-0abc1234'"
    )
    security_group_id: str = setting(pattern=SG_ID, allowed="allowed: a security group ID such as 'sg-0abc1234'")

    def check(self, issues: Issues) -> None:
        if parse_cidr(self.vpc_cidr) is None:
            issues.add("vpc_cidr", self.vpc_cidr, CIDR_HELP)
        if not self.private_subnet_ids:
            issues.add(
                "private_subnet_ids", [], "give at least one private subnet ID; the first holds FSx and the nodes"
            )
        if len(set(self.private_subnet_ids)) != len(self.private_subnet_ids):
            issues.add("private_subnet_ids", list(self.private_subnet_ids), "subnet IDs must be unique")


@section
class NetworkConfig:
    """Where the cluster lives.

    The primary zone (``availability_zone`` or ``availability_zone_id``, one
    of them required) holds the public subnet, the first private subnet, FSx
    and the compute nodes. Every zone must be in ``region`` when it is given.

    Subnet carving: public subnets take one sixteenth of ``cidr`` each from
    its first quarter (a /20 of a /16); private subnets take a quarter each,
    from ``secondary_cidr`` when given, otherwise the remaining three
    quarters of ``cidr``.
    """

    SCHEMA_RULES: ClassVar[dict[str, Any]] = ONE_ZONE_RULE

    availability_zone: str | None = setting(
        default=None,
        pattern=AZ_NAME,
        allowed="allowed: an AZ name such as 'us-east-1a'",
        doc="the primary zone by name (`us-east-1a`, the ParallelCluster habit)",
    )
    availability_zone_id: str | None = setting(
        default=None,
        pattern=AZ_ID,
        allowed="allowed: an AZ ID such as 'use1-az4'",
        doc="the primary zone by ID (`use1-az4`, the HyperPod habit: capacity is promised per AZ ID)",
    )
    cidr: str = setting(default="10.0.0.0/16", allowed=CIDR_HELP, doc="the VPC's primary block, /16 to /24")
    secondary_cidr: str | None = setting(
        default=None, allowed=CIDR_HELP, doc="a second block; the private subnets are carved from it"
    )
    public_subnet_cidr: str | None = setting(
        default=None, allowed=CIDR_HELP, doc="the primary zone's public subnet (default: carved)"
    )
    private_subnet_cidr: str | None = setting(
        default=None, allowed=CIDR_HELP, doc="the primary zone's private subnet (default: carved)"
    )
    extra_zones: tuple[Zone, ...] = setting(
        default=(), doc="up to 3 more zones for private subnets; name all zones the same way (names or IDs)"
    )
    nat_gateways: Literal["one", "per_zone"] = setting(
        default="one", doc="`per_zone` adds a public subnet and NAT gateway in every zone"
    )
    dynamodb_endpoint: bool = setting(default=False, doc="a DynamoDB gateway endpoint next to the S3 one (always on)")
    flow_logs: FlowLogs = setting(default=FlowLogs())
    peering: Peering | None = setting(
        default=None,
        doc="routes to the peer from every route table, and back from the listed peer route tables "
        "(same account and region only)",
    )
    existing: ExistingNetwork | None = setting(
        default=None,
        doc="use this VPC, subnets and security group instead of creating a network; the zone keys still name "
        "the first private subnet's zone",
    )

    def check(self, issues: Issues) -> None:
        _check_zone(issues, self.availability_zone, self.availability_zone_id)
        primary = parse_cidr(self.cidr)
        if primary is None:
            issues.add("cidr", self.cidr, CIDR_HELP)
        elif not 16 <= primary.prefixlen <= 24:
            issues.add("cidr", self.cidr, "allowed: a block from /16 to /24 (the VPC limits)")
        secondary = None
        if self.secondary_cidr is not None:
            secondary = parse_cidr(self.secondary_cidr)
            if secondary is None:
                issues.add("secondary_cidr", self.secondary_cidr, CIDR_HELP)
            elif not 16 <= secondary.prefixlen <= 24:
                issues.add("secondary_cidr", self.secondary_cidr, "allowed: a block from /16 to /24")
            elif primary is not None and primary.overlaps(secondary):
                issues.add("secondary_cidr", self.secondary_cidr, f"must not overlap cidr {self.cidr}")
        if len(self.extra_zones) + 1 > MAX_ZONES:
            issues.add("extra_zones", len(self.extra_zones), f"allowed: at most {MAX_ZONES - 1} extra zones")
        labels = [self.availability_zone or self.availability_zone_id] + [z.label for z in self.extra_zones]
        if len(set(labels)) != len(labels):
            issues.add("extra_zones", labels, "each zone may appear once, and not repeat the primary zone")
        named = [self.availability_zone is not None] + [z.availability_zone is not None for z in self.extra_zones]
        if len(set(named)) > 1:
            issues.add(
                "extra_zones",
                labels,
                "name every zone the same way: all by availability_zone or all by availability_zone_id",
            )
        if self.peering is not None and primary is not None:
            peer = parse_cidr(self.peering.peer_cidr)
            if peer is not None and (peer.overlaps(primary) or (secondary is not None and peer.overlaps(secondary))):
                issues.add("peering.peer_cidr", self.peering.peer_cidr, "must not overlap the VPC's CIDR blocks")
        if self.existing is not None:
            for key in ("secondary_cidr", "public_subnet_cidr", "private_subnet_cidr", "peering"):
                if getattr(self, key) is not None:
                    issues.add(key, getattr(self, key), "not used with network.existing; remove it")
            if self.extra_zones:
                issues.add(
                    "extra_zones", len(self.extra_zones), "not used with network.existing; list the subnets there"
                )
        for key in ("public_subnet_cidr", "private_subnet_cidr"):
            value = getattr(self, key)
            if value is not None and parse_cidr(value) is None:
                issues.add(key, value, CIDR_HELP)

    @property
    def primary_zone_label(self) -> str:
        return self.availability_zone or self.availability_zone_id or ""

    @property
    def uses_zone_ids(self) -> bool:
        return self.availability_zone_id is not None


def _zone_region(name: str) -> str:
    """``us-east-1a`` -> ``us-east-1`` (a zone name is its region's name and a letter)."""
    return name[:-1]


def _az_id_code(zone_id: str) -> str:
    """``use1-az4`` -> ``use1``."""
    return zone_id.split("-az", 1)[0]


def _closest(value: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(value, candidates, n=3, cutoff=0.6)
    return "; closest: " + ", ".join(repr(c) for c in close) if close else ""


def unlisted_zones(network: NetworkConfig, region: str | None, prefix: str = "network") -> list[str]:
    """Zones of ``network`` that :mod:`mlcluster.config.zones` does not list, as ``<key path>: <advice>``.

    The table is moto's record, not AWS's answer for the account: real zones
    are missing from it (``cn-north-1d``, ``usw1-az2``, new zones), so an
    unlisted zone is a warning, never an error. ``mlcluster preflight`` asks
    EC2 (DescribeAvailabilityZones) with the account's credentials. Zones
    :func:`check_zones` refuses (malformed, unknown region) are not repeated.
    """
    found: list[str] = []
    entries = [(f"{prefix}.", network.availability_zone, network.availability_zone_id)]
    entries += [
        (f"{prefix}.extra_zones[{i}].", z.availability_zone, z.availability_zone_id)
        for i, z in enumerate(network.extra_zones)
    ]
    codes = awsdata.az_id_codes()
    for where, name, zone_id in entries:
        if name is not None:
            zone_region = _zone_region(name)
            letters = zones.zone_letters(zone_region)
            if letters is not None and name[-1] not in letters:
                found.append(
                    f"{where}availability_zone: {name} is not among the zones of {zone_region} in {zones.SOURCE} "
                    f"({', '.join(zone_region + letter for letter in letters)}); it may be newer than the table or "
                    "mapped to your account only: `mlcluster preflight` checks it with DescribeAvailabilityZones"
                )
        elif zone_id is not None:
            zone_region = region or codes.get(_az_id_code(zone_id)) or ""
            known = zones.zone_ids(zone_region, _az_id_code(zone_id))
            if known is not None and zone_id not in known:
                found.append(
                    f"{where}availability_zone_id: {zone_id} is not among the zone IDs of {zone_region} in "
                    f"{zones.SOURCE} ({', '.join(known)}); it may be newer than the table: `mlcluster preflight` "
                    "checks it with DescribeAvailabilityZones"
                )
    return found


def check_zones(issues: Issues, network: NetworkConfig, region: str | None, prefix: str = "network") -> None:
    """Every zone of ``network`` in ``region`` (or, without one, in one region botocore knows).

    A zone name is its region's name plus a letter; an AZ ID starts with
    the region's code (``use1-az4`` is in ``us-east-1``). Paths are reported
    under ``prefix``.
    """
    zones = [(f"{prefix}.", network.availability_zone, network.availability_zone_id)]
    zones += [
        (f"{prefix}.extra_zones[{i}].", z.availability_zone, z.availability_zone_id)
        for i, z in enumerate(network.extra_zones)
    ]
    known = awsdata.regions()
    codes = awsdata.az_id_codes()
    first: tuple[str, str] | None = None  # (region, zone) of the first zone
    for where, name, zone_id in zones:
        zone_region: str | None = None
        if name is not None:
            zone_region = _zone_region(name)
            if region is not None and zone_region != region:
                issues.add(
                    f"{where}availability_zone",
                    name,
                    f"the zone is in region {zone_region}, not in region {region}; "
                    f"allowed: a zone of {region} such as '{region}a'",
                )
                continue
            if zone_region not in known:
                issues.add(
                    f"{where}availability_zone",
                    name,
                    f"{zone_region} is not an AWS region ({awsdata.REGIONS.source()}); allowed: a region name "
                    "and a letter such as 'us-east-1a'" + _closest(zone_region, sorted(known)),
                )
                continue
        elif zone_id is not None:
            code = _az_id_code(zone_id)
            expected = awsdata.az_id_code(region) if region is not None else None
            if region is not None and expected is not None and code != expected:
                owner = f" (the zone ID of {codes[code]})" if code in codes else ""
                issues.add(
                    f"{where}availability_zone_id",
                    zone_id,
                    f"not a zone ID of region {region}{owner}; allowed: {expected}-az<n> such as '{expected}-az1'",
                )
                continue
            if region is None and code not in codes:
                issues.add(
                    f"{where}availability_zone_id",
                    zone_id,
                    f"{code} is not the zone ID code of an AWS region; allowed: '<code>-az<n>' with a code such as "
                    "'use1' (us-east-1) or 'usw2' (us-west-2)" + _closest(code, sorted(codes)),
                )
                continue
            zone_region = region or codes.get(code)
        if zone_region is None:
            continue
        if first is None:
            first = (zone_region, name or zone_id or "")
        elif zone_region != first[0]:
            key = "availability_zone" if name is not None else "availability_zone_id"
            issues.add(
                f"{where}{key}",
                name or zone_id,
                f"the zone is in {zone_region} but {first[1]} is in {first[0]}; allowed: zones of one region",
            )
