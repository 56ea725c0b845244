"""``mlcluster cost ENV``: what an environment costs per hour and per month, from the AWS Price List.

Prices come from ``pricing:GetProducts`` (the Price List query API, served from
us-east-1) with the operator's credentials; none is typed into the code. Each
price keeps its SKU and the effective date of its On-Demand term. Every price
fetched is written to a cache file (``$XDG_CACHE_HOME/mlcluster/prices/<region>.json``,
else ``~/.cache/...``) that records when it was fetched; ``--offline`` reads
only that file and says its date.

How each resource is found (service code, exact filters, then a check in code):

========================  ===========  ====================================================================
resource                  service      product
========================  ===========  ====================================================================
EC2 instance (Linux)      AmazonEC2    instanceType, regionCode, operatingSystem=Linux, tenancy=Shared,
                                       preInstalledSw=NA, capacitystatus=Used, licenseModel=No License
                                       required; unit Hrs
HyperPod instance         AmazonSageMaker  regionCode, usagetype CONTAINS ``Cluster:ml.<type>``; the usage
                                       type must end ``-Cluster:ml.<type>`` (not ReservedCluster); unit Hrs
NAT gateway               AmazonEC2    productFamily=NAT Gateway, regionCode; usage type ends
                                       ``NatGateway-Hours``; unit Hrs (data processed is per GB, not counted)
EBS gp3                   AmazonEC2    productFamily=Storage, volumeApiName=gp3, regionCode; unit GB-Mo
FSx file system           AmazonFSx    regionCode, fileSystemType (Lustre/OpenZFS); deploymentOption equal to
                                       the deployment type (letters and digits compared), unit GB-Mo; for
                                       Lustre the throughput tier (an attribute about throughput equal to
                                       MB/s/TiB); for OpenZFS throughput capacity in MBps-Mo
========================  ===========  ====================================================================

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

#: The Price List query API's endpoint region.
PRICING_REGION = "us-east-1"
#: Hours in a month, as AWS's pricing calculator counts them.
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class Query:
    """One product to find: a service code, exact filters, and attribute checks made after the call."""

    service: str
    filters: tuple[tuple[str, str], ...]
    unit: str
    contains: tuple[tuple[str, str], ...] = ()
    suffix: tuple[str, str] | None = None
    same: tuple[tuple[str, str], ...] = ()
    throughput: str | None = None

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

    def priced(self) -> None:
        """Fill the hourly figures from the price and the quantities."""
        if self.price is None:
            return
        per_hour = self.price.usd if self.price.unit == "Hrs" else self.price.usd / HOURS_PER_MONTH
        self.hourly_min = per_hour * self.quantity_min
        self.hourly_max = per_hour * self.quantity_max


@dataclass
class Estimate:
    """Every line and the totals, with where the prices came from."""

    environment: str
    region: str
    source: str
    lines: list[Line] = field(default_factory=list)

    def total(self, which: str) -> float:
        return sum(getattr(line, f"hourly_{which}") or 0.0 for line in self.lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "region": self.region,
            "source": self.source,
            "hours_per_month": HOURS_PER_MONTH,
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


def _norm(value: str) -> str:
    return re.sub(r"[^a-z0-9]", "", value.lower())


def _matches(query: Query, attributes: dict[str, str]) -> bool:
    for name, part in query.contains:
        if part not in attributes.get(name, ""):
            return False
    if query.suffix is not None and not attributes.get(query.suffix[0], "").endswith(query.suffix[1]):
        return False
    for name, value in query.same:
        if _norm(attributes.get(name, "")) != _norm(value):
            return False
    if query.throughput is not None:
        values = [v for k, v in attributes.items() if "throughput" in k.lower()]
        if query.throughput not in values:
            return False
    return True


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
    described = ", ".join(f"{k}={v}" for k, v in query.filters + query.same + query.contains)
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
        suffix=("usagetype", f"-Cluster:{instance_type}"),
    )


def _fsx_queries(fs: FileSystem, region: str) -> list[tuple[str, str, float, Query]]:
    kind = "Lustre" if fs.kind == "LUSTRE" else "OpenZFS"
    base = (("regionCode", region), ("fileSystemType", kind))
    same = (("deploymentOption", fs.deployment_type),)
    if fs.kind == "LUSTRE":
        storage = Query("AmazonFSx", base, "GB-Mo", same=same, throughput=str(fs.throughput))
        return [
            (
                f"FSx for Lustre {fs.deployment_type} {fs.throughput} MB/s/TiB",
                f"{fs.key}.storage_capacity_gib",
                fs.capacity_gib,
                storage,
            )
        ]
    return [
        (
            f"FSx for OpenZFS {fs.deployment_type} storage",
            f"{fs.key}.storage_capacity_gib",
            fs.capacity_gib,
            Query("AmazonFSx", base, "GB-Mo", same=same),
        ),
        (
            f"FSx for OpenZFS {fs.deployment_type} throughput",
            f"{fs.key}.throughput_capacity_mbps",
            fs.throughput,
            Query("AmazonFSx", base, "MBps-Mo", same=same),
        ),
    ]


def _volumes(groups: Sequence[NodeGroup], plan: Plan) -> tuple[int, int]:
    low = sum(g.root_volume_gib * g.min_count for g in groups if not g.sagemaker)
    high = sum(g.root_volume_gib * g.max_count for g in groups if not g.sagemaker)
    extra = sum(size for _, size in plan.extra_volumes_gib)
    return low + extra, high + extra


def estimate(env: str, region: str, plan: Plan, price: Callable[[Query], Price], source: str) -> Estimate:
    """Price every resource of ``plan`` with ``price``; a price not found is a line that says why."""
    result = Estimate(environment=env, region=region, source=source)
    wanted: list[tuple[Line, Query]] = []
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
        for label, key, amount, query in _fsx_queries(fs, region):
            unit = "GiB" if query.unit == "GB-Mo" else "MB/s"
            wanted.append((Line(label, key, unit, amount, amount), query))
    if plan.nat_gateways:
        nat = Query(
            "AmazonEC2",
            (("productFamily", "NAT Gateway"), ("regionCode", region)),
            "Hrs",
            suffix=("usagetype", "NatGateway-Hours"),
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
    low, high = _volumes(plan.groups, plan)
    if high:
        gp3 = Query(
            "AmazonEC2", (("productFamily", "Storage"), ("volumeApiName", "gp3"), ("regionCode", region)), "GB-Mo"
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
    for line, query in wanted:
        try:
            line.price = price(query)
        except PriceNotFoundError as missing:
            line.note = f"no price: {missing}"
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
        "total",
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
    Console(highlight=False).print(table)


@click.command()
@environment_options
@click.option("--offline", is_flag=True, help="Use only the local price cache (no AWS call); prints the cache's date.")
@json_option
def cost(env: str, environments: Path, region: str | None, profile: str | None, offline: bool, as_json: bool) -> None:
    """Estimate the environment's On-Demand cost per hour and month, at min and max node counts.

    Prices come from the AWS Price List (pricing:GetProducts) with your
    credentials and are cached under ~/.cache/mlcluster/prices. Usage-based
    services (Prometheus, Grafana, data transfer) are listed without a figure.
    """
    target = Target.load(env, environments, region, profile)
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

        def cached(query: Query) -> Price:
            hit = prices.get(query.cache_key)
            if hit is None:
                raise PriceNotFoundError("not in the cache; run once without --offline")
            try:
                return Price(**hit)
            except TypeError:
                raise PriceNotFoundError(f"the cache entry is malformed; delete {path}") from None

        est = estimate(env, where, plan, cached, f"cached prices fetched {cache['fetched']} ({path})")
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
