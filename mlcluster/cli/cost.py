"""``mlcluster cost ENV``: what an environment costs per hour and per month, from the AWS Price List.

Prices come from ``pricing:GetProducts`` (the Price List query API, served from
us-east-1) with the operator's credentials; none is typed into the code. Each
price keeps its SKU and the effective date of its On-Demand term. Every price
fetched is written to a cache file (``$XDG_CACHE_HOME/mlcluster/prices/<region>.json``,
else ``~/.cache/...``) that records when it was fetched; ``--offline`` reads
only that file and says its date.

How each resource is found (service code, exact TERM_MATCH filters, then a check in code):

========================  ===========  ====================================================================
resource                  service      product
========================  ===========  ====================================================================
EC2 instance (Linux)      AmazonEC2    instanceType, regionCode, locationType=AWS Region,
                                       operatingSystem=Linux, tenancy=Shared, preInstalledSw=NA,
                                       capacitystatus=Used, licenseModel=No License required; unit Hrs
HyperPod instance         AmazonSageMaker  regionCode, usagetype CONTAINS ``Cluster:ml.<type>``; the usage
                                       type must be ``[<prefix>-]Cluster:ml.<type>`` (not ReservedCluster);
                                       unit Hrs
NAT gateway               AmazonEC2    productFamily=NAT Gateway, regionCode, locationType=AWS Region; the
                                       usage type must be ``[<prefix>-]NatGateway-Hours`` (us-east-1 has no
                                       prefix; ``<prefix>-RegionalNatGateway-Hours`` is another product);
                                       unit Hrs (data processed is per GB, not counted)
EBS gp3                   AmazonEC2    productFamily=Storage, volumeApiName=gp3, regionCode,
                                       locationType=AWS Region; unit GB-Mo
FSx for Lustre            AmazonFSx    regionCode, fileSystemType=Lustre, storageType=SSD,
PERSISTENT_1/2                         throughputCapacity=<MB/s/TiB tier>; unit GB-Mo. AWS prices both
                                       types as deploymentOption ``Persistent`` with usage types such as
                                       ``USE2-Storage.SSD.125``; the tiers of the two types do not overlap
                                       (50/100/200 and 125/250/500/1000), so the tier picks the product.
FSx for OpenZFS           AmazonFSx    regionCode, fileSystemType=OpenZFS, deploymentOption (below);
                                       storage: productFamily=Storage, storageType=SSD, unit GB-Mo;
                                       throughput: productFamily=Provisioned Throughput, unit MiBps-Mo
Aurora Serverless v2      AmazonRDS    regionCode, productFamily=ServerlessV2, databaseEngine=Aurora MySQL;
(storage.accounting)                   the usage type must be ``[<prefix>-]Aurora:ServerlessV2Usage``
                                       (Aurora Standard; ``...ServerlessV2IOOptimizedUsage`` is the
                                       I/O-Optimized product); unit ACU-Hr
========================  ===========  ====================================================================

Where each attribute spelling comes from (checked 2026-11-28; none is an AWS
page that lists Price List attribute values):

* EC2 instance filters (``instanceType``, ``operatingSystem`` Linux, ``tenancy``
  Shared, ``preInstalledSw`` NA, ``licenseModel`` No License required,
  ``capacitystatus`` Used): the example of the Terraform AWS provider's
  ``aws_pricing_product`` data source (as the Pulumi registry mirrors it,
  pulumi.com/registry/packages/aws/api-docs/pricing/getproduct).
* NAT gateway (productFamily ``NAT Gateway``, usage type ``NatGateway-Hours``)
  and gp3 (productFamily ``Storage``, ``volumeApiName`` gp3):
  infracost/infracost@f0d5778dedabde98f89452d5cb048348a783e133
  internal/resources/aws/nat_gateway.go and
  @da0a5862ad6a970be64ea624fba1a7f79f7bb42e internal/resources/aws/ebs_volume.go.
* Aurora Serverless v2 (productFamily ``ServerlessV2``, usage type
  ``<prefix>-Aurora:ServerlessV2Usage``, ``databaseEngine`` Aurora MySQL, unit
  ACU-Hr): public tools that read the Price List and Cost Explorer usage types
  (not an AWS page); a wrong spelling is an unpriced line.
* ``locationType`` AWS Region / AWS Local Zone, FSx for Lustre's ``deploymentOption``
  Persistent with ``throughputCapacity`` tiers, and HyperPod's
  ``Cluster:ml.<type>`` usage type: not confirmed from a public source here
  (recorded earlier; the matcher refuses zero or several products, so a wrong
  spelling shows as an unpriced line, never as a wrong price).

OpenZFS ``deploymentOption`` per deployment type, as the Price List spells it
(:data:`OPENZFS_DEPLOYMENT_OPTION`, with the source of each spelling). The
HA types (``SINGLE_AZ_HA_1``, ``SINGLE_AZ_HA_2``) have no spelling found in any
reliable public source: their lines stay unpriced and say so, and the estimate
is then marked partial (trn1's, whose /home is SINGLE_AZ_HA_2, among them).

An estimate with any line that should have a price and has none is partial:
its total says so, ``--json`` carries ``"complete": false`` and the unpriced
lines, and the command exits 1 (:data:`~mlcluster.cli.errors.EXIT_FAILED`)
after printing it.

The managed accounting database (``storage.accounting``) is priced for its
capacity alone, at its floor: ``min_capacity_acu``, or with 0 (it pauses with no
connection) :data:`ACTIVE_FLOOR_ACU`, its floor while a cluster runs (slurmdbd
keeps a connection open, so it does not pause; the estimate's cluster runs, so
this is counted, and the note says it is 0 while paused); scaling up towards
``max_capacity_acu`` is not counted. Its storage, I/O, backups and the Secrets
Manager secrets are a line without a price, so such an estimate is partial.

Amazon Managed Service for Prometheus and Amazon Managed Grafana are billed by
use (samples ingested and stored, queries; active user licences): they are
listed without a figure. A month is 730 hours, as AWS's pricing calculator counts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError, aws_errors
from mlcluster.cli.plan import FileSystem, NodeGroup, Plan, plan_of
from mlcluster.config import Environment

#: The Price List query API's endpoint region.
PRICING_REGION = "us-east-1"
#: Hours in a month, as AWS's pricing calculator counts them.
HOURS_PER_MONTH = 730
#: The Price List ``locationType`` of a Region itself (Local Zones and Wavelength Zones share its regionCode).
REGION_LOCATION = "AWS Region"
#: Price units that are per hour (the others are per month).
HOURLY_UNITS = frozenset({"Hrs", "ACU-Hr"})
#: The least capacity of a running Aurora Serverless v2 database whose minimum is 0 (it pauses only when idle).
ACTIVE_FLOOR_ACU = 0.5
#: OpenZFS deployment type -> the Price List's ``deploymentOption``, only spellings seen in price-list data:
#:
#: ============  ===========  ==================================================================================
#: type          spelling     source
#: ============  ===========  ==================================================================================
#: SINGLE_AZ_1   Single-AZ    infracost/infracost@da0a5862ad6a970be64ea624fba1a7f79f7bb42e
#:                            internal/resources/aws/fsx_openzfs_file_system.go (productFamily Storage and
#:                            Provisioned Throughput, fileSystemType OpenZFS, storageType SSD), priced by its golden
#:                            test .../testdata/fsx_openzfs_file_system_test/ (SINGLE_AZ_1, us-east-1) against the
#:                            live Price List: 0.09 USD/GB-Mo and 0.26 USD/MBps-Mo
#: SINGLE_AZ_2   Single-AZ_2  a public pricing tool's test fixture (usage types ``<prefix>-Storage.SAZ2:SSD``,
#:                            ``<prefix>-ThroughputCapacity.SAZ2``); secondary, not an AWS page
#: MULTI_AZ_1    Multi-AZ     the same fixture (``Storage.MAZ``); infracost's file above filters OpenZFS Multi-AZ
#:                            backups by ``deploymentOption`` Multi-AZ
#: ============  ===========  ==================================================================================
#:
#: SINGLE_AZ_HA_1 and SINGLE_AZ_HA_2: no spelling in any source found (searched: infracost, public pricing tools,
#: AWS pricing pages); left out, so their lines are unpriced and the estimate says it is partial.
OPENZFS_DEPLOYMENT_OPTION = {"SINGLE_AZ_1": "Single-AZ", "SINGLE_AZ_2": "Single-AZ_2", "MULTI_AZ_1": "Multi-AZ"}


@dataclass(frozen=True)
class Query:
    """One product to find: a service code, exact filters, and attribute checks made after the call."""

    service: str
    filters: tuple[tuple[str, str], ...]
    unit: str
    contains: tuple[tuple[str, str], ...] = ()
    #: A regular expression the product's ``usagetype`` must match whole.
    usage_type: str | None = None

    @property
    def cache_key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Price:
    """One On-Demand price dimension of one product."""

    sku: str
    usd: float
    unit: str
    effective: str
    description: str
    published: str = ""


@dataclass
class Line:
    """One row of the estimate."""

    resource: str
    key: str
    unit: str
    quantity_min: float
    quantity_max: float
    price: Price | None = None
    note: str = ""
    hourly_min: float | None = None
    hourly_max: float | None = None
    #: Billed by use (no figure is expected), as opposed to a price that was not found.
    usage_based: bool = False

    @property
    def unpriced(self) -> bool:
        """A line that should carry a price and has none: the total leaves it out."""
        return self.price is None and not self.usage_based

    def priced(self) -> None:
        """Fill the hourly figures from the price and the quantities."""
        if self.price is None:
            return
        per_hour = self.price.usd if self.price.unit in HOURLY_UNITS else self.price.usd / HOURS_PER_MONTH
        self.hourly_min = per_hour * self.quantity_min
        self.hourly_max = per_hour * self.quantity_max


@dataclass
class Estimate:
    """Every line and the totals, with where the prices came from."""

    environment: str
    region: str
    source: str
    lines: list[Line] = field(default_factory=list)
    #: The lines unpriced only because the price cache lacks them (an offline estimate).
    not_cached: list[Line] = field(default_factory=list)

    def total(self, which: str) -> float:
        return sum(getattr(line, f"hourly_{which}") or 0.0 for line in self.lines)

    @property
    def unpriced(self) -> list[Line]:
        """The lines the total leaves out because their price was not found."""
        return [line for line in self.lines if line.unpriced]

    @property
    def complete(self) -> bool:
        """True when every line that should have a price has one (usage-based lines aside)."""
        return not self.unpriced

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "region": self.region,
            "source": self.source,
            "hours_per_month": HOURS_PER_MONTH,
            "complete": self.complete,
            "unpriced": [{"resource": line.resource, "key": line.key, "note": line.note} for line in self.unpriced],
            "lines": [
                {
                    **asdict(line),
                    "monthly_min": None if line.hourly_min is None else line.hourly_min * HOURS_PER_MONTH,
                    "monthly_max": None if line.hourly_max is None else line.hourly_max * HOURS_PER_MONTH,
                }
                for line in self.lines
            ],
            "total": {
                "hourly_min": self.total("min"),
                "hourly_max": self.total("max"),
                "monthly_min": self.total("min") * HOURS_PER_MONTH,
                "monthly_max": self.total("max") * HOURS_PER_MONTH,
            },
        }


class PriceNotFoundError(Exception):
    """The price list has no single product for a query."""


class NotCachedError(PriceNotFoundError):
    """The price cache has no entry for a query: one online run of ``mlcluster cost`` would add it."""


def _matches(query: Query, attributes: dict[str, str]) -> bool:
    for name, part in query.contains:
        if part not in attributes.get(name, ""):
            return False
    return query.usage_type is None or re.fullmatch(query.usage_type, attributes.get("usagetype", "")) is not None


def usage_type_pattern(name: str) -> str:
    """A usage type ``name`` with or without a region prefix (``USE2-NatGateway-Hours``, ``NatGateway-Hours``).

    The prefix is one token of capitals and digits (``USE2``, ``EU``, ``APN1``), so
    ``USE2-RegionalNatGateway-Hours`` does not match ``NatGateway-Hours``.
    """
    return rf"(?:[A-Z0-9]+-)?{re.escape(name)}"


def _dimension(item: dict[str, Any], unit: str) -> Price | None:
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") == unit and "USD" in dim.get("pricePerUnit", {}):
                return Price(
                    sku=str(item["product"]["sku"]),
                    usd=float(dim["pricePerUnit"]["USD"]),
                    unit=unit,
                    effective=str(term.get("effectiveDate", "")),
                    description=str(dim.get("description", "")),
                    published=str(item.get("publicationDate", "")),
                )
    return None


def lookup(pricing: Any, query: Query) -> Price:
    """The one On-Demand price for ``query``; :class:`PriceNotFoundError` when none or several match."""
    filters = [{"Type": "TERM_MATCH", "Field": name, "Value": value} for name, value in query.filters]
    filters += [{"Type": "CONTAINS", "Field": name, "Value": value} for name, value in query.contains]
    pages = pricing.get_paginator("get_products").paginate(
        ServiceCode=query.service, Filters=filters, FormatVersion="aws_v1"
    )
    found: list[Price] = []
    for page in pages:
        for raw in page["PriceList"]:
            item = json.loads(raw)
            if not _matches(query, item.get("product", {}).get("attributes", {})):
                continue
            price = _dimension(item, query.unit)
            if price is not None:
                found.append(price)
    described = ", ".join(f"{k}={v}" for k, v in query.filters + query.contains)
    if query.usage_type is not None:
        described += f", usagetype ~ {query.usage_type}"
    if not found:
        raise PriceNotFoundError(f"no {query.service} product with {described} priced in {query.unit}")
    if len({p.sku for p in found}) > 1:
        raise PriceNotFoundError(
            f"{len(found)} {query.service} products match {described}: " + ", ".join(sorted(p.sku for p in found))
        )
    return found[0]


def _ec2_query(instance_type: str, region: str) -> Query:
    return Query(
        "AmazonEC2",
        (
            ("instanceType", instance_type),
            ("regionCode", region),
            ("locationType", REGION_LOCATION),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("licenseModel", "No License required"),
        ),
        "Hrs",
    )


def _hyperpod_query(instance_type: str, region: str) -> Query:
    return Query(
        "AmazonSageMaker",
        (("regionCode", region),),
        "Hrs",
        contains=(("usagetype", f"Cluster:{instance_type}"),),
        usage_type=usage_type_pattern(f"Cluster:{instance_type}"),
    )


def _fsx_queries(fs: FileSystem, region: str) -> list[tuple[str, str, float, Query | str]]:
    """Label, key, quantity and the query of each priced part of ``fs`` (or why it cannot be priced)."""
    if fs.kind == "LUSTRE":
        storage = Query(
            "AmazonFSx",
            (
                ("regionCode", region),
                ("fileSystemType", "Lustre"),
                ("storageType", "SSD"),
                ("throughputCapacity", str(fs.throughput)),
            ),
            "GB-Mo",
        )
        return [
            (
                f"FSx for Lustre {fs.deployment_type} {fs.throughput} MB/s/TiB",
                f"{fs.key}.storage_capacity_gib",
                fs.capacity_gib,
                storage,
            )
        ]
    option = OPENZFS_DEPLOYMENT_OPTION.get(fs.deployment_type)
    base = (("regionCode", region), ("fileSystemType", "OpenZFS"))
    unknown = f"no price: the Price List spelling of OpenZFS {fs.deployment_type} is not known to mlcluster"
    return [
        (
            f"FSx for OpenZFS {fs.deployment_type} storage",
            f"{fs.key}.storage_capacity_gib",
            fs.capacity_gib,
            unknown
            if option is None
            else Query(
                "AmazonFSx",
                (*base, ("productFamily", "Storage"), ("deploymentOption", option), ("storageType", "SSD")),
                "GB-Mo",
            ),
        ),
        (
            f"FSx for OpenZFS {fs.deployment_type} throughput",
            f"{fs.key}.throughput_capacity_mbps",
            fs.throughput,
            unknown
            if option is None
            else Query(
                "AmazonFSx",
                (*base, ("productFamily", "Provisioned Throughput"), ("deploymentOption", option)),
                "MiBps-Mo",
            ),
        ),
    ]


def _aurora_query(region: str) -> Query:
    return Query(
        "AmazonRDS",
        (("regionCode", region), ("productFamily", "ServerlessV2"), ("databaseEngine", "Aurora MySQL")),
        "ACU-Hr",
        usage_type=usage_type_pattern("Aurora:ServerlessV2Usage"),
    )


def _accounting_lines(acu: tuple[float, float], region: str) -> list[tuple[Line, Query | str]]:
    """The managed accounting database's capacity at its floor, and what of it is not priced."""
    least, most = acu
    key = "storage.accounting.min_capacity_acu"
    if least:
        capacity = Line(
            "Aurora Serverless v2 (accounting database)",
            key,
            "ACU",
            least,
            least,
            note=f"the floor; scaling up to max_capacity_acu {most:g} ACU is not counted",
        )
    else:
        # The estimate's cluster runs (its head node or controller at least), and slurmdbd's connection keeps
        # the database from pausing: counted at the running floor, min and max alike.
        capacity = Line(
            "Aurora Serverless v2 (accounting database)",
            key,
            "ACU",
            ACTIVE_FLOOR_ACU,
            ACTIVE_FLOOR_ACU,
            note=f"{ACTIVE_FLOOR_ACU:g} ACU while a cluster runs (slurmdbd keeps it awake), as counted here; 0 ACU "
            f"while paused with no cluster; scaling up to max_capacity_acu {most:g} ACU is not counted",
        )
    rest = Line(
        "Aurora storage, I/O, backups; Secrets Manager secrets (accounting database)",
        "storage.accounting",
        "-",
        0,
        0,
        note="not priced by mlcluster: storage per GB-month, I/O requests, backups beyond the free allowance, "
        "and a monthly fee per secret",
    )
    return [(capacity, _aurora_query(region)), (rest, rest.note)]


def _volumes(groups: Sequence[NodeGroup], plan: Plan) -> tuple[int, int]:
    low = sum(g.root_volume_gib * g.min_count for g in groups if not g.sagemaker)
    high = sum(g.root_volume_gib * g.max_count for g in groups if not g.sagemaker)
    extra = sum(size for _, size in plan.extra_volumes_gib)
    return low + extra, high + extra


def estimate(env: str, region: str, plan: Plan, price: Callable[[Query], Price], source: str) -> Estimate:
    """Price every resource of ``plan`` with ``price``; a price not found is a line that says why."""
    result = Estimate(environment=env, region=region, source=source)
    wanted: list[tuple[Line, Query | str]] = []
    for g in plan.groups:
        query = _hyperpod_query(g.instance_type, region) if g.sagemaker else _ec2_query(g.instance_type, region)
        note = ""
        if g.capacity_block:
            note = "capacity blocks are paid up front at their own price; On-Demand shown"
        elif g.reservation_id:
            note = "a capacity reservation bills at this rate whether used or not"
        line = Line(f"{g.role}: {g.instance_type}", g.key, "instances", g.min_count, g.max_count, note=note)
        wanted.append((line, query))
    for fs in plan.file_systems:
        for label, key, amount, part in _fsx_queries(fs, region):
            unit = "MB/s" if key.endswith("_mbps") else "GiB"
            wanted.append((Line(label, key, unit, amount, amount), part))
    if plan.nat_gateways:
        nat = Query(
            "AmazonEC2",
            (("productFamily", "NAT Gateway"), ("regionCode", region), ("locationType", REGION_LOCATION)),
            "Hrs",
            usage_type=usage_type_pattern("NatGateway-Hours"),
        )
        line = Line(
            "NAT gateway",
            "network.nat_gateways",
            "gateways",
            plan.nat_gateways,
            plan.nat_gateways,
            note="plus data processed per GB",
        )
        wanted.append((line, nat))
    if plan.accounting_acu is not None:
        wanted.extend(_accounting_lines(plan.accounting_acu, region))
    low, high = _volumes(plan.groups, plan)
    if high:
        gp3 = Query(
            "AmazonEC2",
            (
                ("productFamily", "Storage"),
                ("volumeApiName", "gp3"),
                ("regionCode", region),
                ("locationType", REGION_LOCATION),
            ),
            "GB-Mo",
        )
        line = Line(
            "EBS gp3 (root and /apps volumes)",
            "cluster.pcluster",
            "GiB",
            low,
            high,
            note="baseline IOPS and throughput",
        )
        wanted.append((line, gp3))
    for line, wanted_query in wanted:
        if isinstance(wanted_query, str):
            line.note = wanted_query
            result.lines.append(line)
            continue
        try:
            line.price = price(wanted_query)
        except PriceNotFoundError as missing:
            line.note = f"no price: {missing}"
            if isinstance(missing, NotCachedError):
                result.not_cached.append(line)
        line.priced()
        result.lines.append(line)
    if plan.prometheus:
        result.lines.append(
            Line(
                "Managed Prometheus workspace",
                "observability.prometheus",
                "-",
                0,
                0,
                note="usage-based: samples ingested, stored and queried",
                usage_based=True,
            )
        )
    if plan.grafana:
        result.lines.append(
            Line(
                "Managed Grafana workspace",
                "observability.grafana",
                "-",
                0,
                0,
                note="usage-based: per active editor/viewer licence per month",
                usage_based=True,
            )
        )
    return result


def cache_path(region: str) -> Path:
    """The price cache of ``region``, under the user's cache folder."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "mlcluster" / "prices" / f"{region}.json"


def read_cache(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"fetched": None, "prices": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CliError(
            f"price cache {path} is unreadable ({error})\n  what to do: delete it and run without --offline",
            EXIT_FAILED,
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
        raise CliError(
            f"price cache {path} has no prices\n  what to do: delete it and run without --offline", EXIT_FAILED
        )
    return data


def write_cache(path: Path, prices: dict[str, Any], fetched: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fetched": fetched, "prices": prices}, indent=1, sort_keys=True))
    tmp.replace(path)


def cached_price(prices: dict[str, Any], path: Path) -> Callable[[Query], Price]:
    """A price source that reads only the cache's ``prices`` (never AWS); a miss is :class:`PriceNotFoundError`."""

    def cached(query: Query) -> Price:
        hit = prices.get(query.cache_key)
        if hit is None:
            raise NotCachedError("not in the cache; run once without --offline")
        try:
            return Price(**hit)
        except TypeError:
            raise PriceNotFoundError(f"the cache entry is malformed; delete {path}") from None

    return cached


def offline_total(environment: Environment, region: str) -> tuple[Estimate, str] | None:
    """The estimate of ``environment`` from the price cache of ``region`` alone, and the cache's date.

    None when there is no cache for the region. No AWS call is made and no
    credentials are read: ``make synth`` prints this for every environment.

    :raises CliError: when the cache cannot be read.
    """
    path = cache_path(region)
    cache = read_cache(path)
    if cache["fetched"] is None:
        return None
    source = f"cached prices fetched {cache['fetched']} ({path})"
    est = estimate(environment.name, region, plan_of(environment), cached_price(dict(cache["prices"]), path), source)
    return est, str(cache["fetched"])


def total_lines(est: Estimate, fetched: str) -> list[str]:
    """The On-Demand total per hour and per month, min-max, whether it is partial, and what the cache lacks.

    No figure when no line has a price (a region's cache filled by another
    environment): a total of the lines that are priced would read as the
    environment's cost. A second line names the lines the cache lacks and the
    one command that adds them.
    """
    low, high = est.total("min"), est.total("max")
    head = f"{est.environment} ({est.region}): "
    if all(line.price is None for line in est.lines):
        lines = [f"{head}no figure: none of its lines is priced in the price cache of {fetched[:10]}"]
    else:
        partial = "" if est.complete else f"; partial: {len(est.unpriced)} line(s) unpriced"
        lines = [
            f"{head}USD {_money(low)}-{_money(high)} per hour, "
            f"{_money(low * HOURS_PER_MONTH)}-{_money(high * HOURS_PER_MONTH)} per month "
            f"(On-Demand, min-max nodes; prices cached {fetched[:10]}{partial})"
        ]
    if est.not_cached:
        lines.append(
            f"  not in the {est.region} price cache: {'; '.join(line.resource for line in est.not_cached)}: "
            f"run `mlcluster cost {est.environment}` once with AWS credentials to add them"
        )
    return lines


def pricing_client(target: Target) -> Any:
    """A Price List client with the target's credentials, in the Price List API's region."""
    from botocore.config import Config

    session: Any = target.session
    config = Config(retries={"mode": "standard", "max_attempts": 5}, user_agent_extra="mlcluster-cli")
    return session.client("pricing", region_name=PRICING_REGION, config=config)


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def render(est: Estimate) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cost {est.environment} ({est.region}), USD, On-Demand; {est.source}")
    for column in (
        "resource",
        "key",
        "qty min-max",
        "unit price",
        "SKU",
        "effective",
        "/h min",
        "/h max",
        "/month min",
        "/month max",
        "note",
    ):
        table.add_column(column, overflow="fold", justify="right" if column.startswith(("/", "unit")) else "left")
    for line in est.lines:
        if line.unit == "-":
            qty = "-"
        else:
            qty = (
                f"{line.quantity_min:g}"
                if line.quantity_min == line.quantity_max
                else f"{line.quantity_min:g}-{line.quantity_max:g}"
            )
        p = line.price
        table.add_row(
            line.resource,
            line.key,
            qty if line.unit == "-" else f"{qty} {line.unit}",
            f"{p.usd:g}/{p.unit}" if p else "-",
            p.sku if p else "-",
            p.effective[:10] if p else "-",
            _money(line.hourly_min),
            _money(line.hourly_max),
            _money(None if line.hourly_min is None else line.hourly_min * HOURS_PER_MONTH),
            _money(None if line.hourly_max is None else line.hourly_max * HOURS_PER_MONTH),
            line.note,
        )
    table.add_row(
        "total" if est.complete else "total (partial)",
        "",
        "",
        "",
        "",
        "",
        _money(est.total("min")),
        _money(est.total("max")),
        _money(est.total("min") * HOURS_PER_MONTH),
        _money(est.total("max") * HOURS_PER_MONTH),
        "",
    )
    console = Console(highlight=False)
    console.print(table)
    if not est.complete:
        console.print(f"The total is partial: {len(est.unpriced)} line(s) have no price and count nothing:")
        for line in est.unpriced:
            console.print(f"  {line.resource} ({line.key}): {line.note}")


@click.command()
@environment_options
@click.option("--offline", is_flag=True, help="Use only the local price cache (no AWS call); prints the cache's date.")
@json_option
def cost(
    env: str, environments: Path | None, region: str | None, profile: str | None, offline: bool, as_json: bool
) -> None:
    """Estimate the environment's On-Demand cost per hour and month, at min and max node counts.

    Prices come from the AWS Price List (pricing:GetProducts) with your
    credentials and are cached under ~/.cache/mlcluster/prices. Usage-based
    services (Prometheus, Grafana, data transfer) are listed without a figure.
    Exit 1 after printing when any line could not be priced (the total is partial).
    """
    target = Target.load(env, environments, region, profile, offline=offline)
    where = target.region
    plan = plan_of(target.environment)
    path = cache_path(where)
    cache = read_cache(path)
    prices: dict[str, Any] = dict(cache["prices"])
    if offline:
        if cache["fetched"] is None:
            raise CliError(
                f"no price cache at {path}\n  what to do: run `mlcluster cost {env}` once online", EXIT_FAILED
            )

        source = f"cached prices fetched {cache['fetched']} ({path})"
        est = estimate(env, where, plan, cached_price(prices, path), source)
    else:
        client = pricing_client(target)

        def live(query: Query) -> Price:
            with aws_errors(f"GetProducts for {query.service}"):
                found = lookup(client, query)
            prices[query.cache_key] = asdict(found)
            return found

        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        est = estimate(env, where, plan, live, f"AWS Price List, fetched {now}")
        write_cache(path, prices, now)
    if as_json:
        echo_json(est.as_dict())
    else:
        render(est)
    if not est.complete:
        raise CliError(
            f"the estimate is partial: {len(est.unpriced)} line(s) unpriced (listed above)\n"
            "  what to do: run online if --offline missed a price, or price those lines by hand",
            EXIT_FAILED,
        )
