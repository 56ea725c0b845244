"""``mlcluster cost``: the exact Price List requests, every line of an estimate, the totals and the cache.

A hand-built plan (every kind of resource the estimate prices) is priced by a recorder of the queries it asks;
the whole list of queries and the whole ``--json`` document are compared with ``==``. ``lookup`` is driven
through a stubbed Price List client with exact request parameters, pages included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from mlcluster.cli import cost
from mlcluster.cli.cost import (
    Estimate,
    Line,
    NotCachedError,
    Price,
    PriceNotFoundError,
    Query,
    cached_price,
    estimate,
    lookup,
    read_cache,
    total_lines,
    usage_type_pattern,
    write_cache,
)
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.plan import FileSystem, NodeGroup, Plan

REGION = "us-east-2"
NAT_USAGE = r"(?:[A-Z0-9]+-)?NatGateway\-Hours"


def product(sku: str, attributes: dict[str, str], dimensions: list[dict[str, Any]]) -> str:
    """One Price List entry as GetProducts returns it (a JSON string)."""
    return json.dumps(
        {
            "product": {"sku": sku, "attributes": attributes},
            "publicationDate": "2026-11-20T18:02:11Z",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "priceDimensions": {f"{sku}.{i}": d for i, d in enumerate(dimensions)},
                    }
                }
            },
        }
    )


def dimension(unit: str, usd: str | None, description: str = "") -> dict[str, Any]:
    per_unit = {"USD": usd} if usd is not None else {"CNY": "1.0"}
    return {"unit": unit, "pricePerUnit": per_unit, "description": description}


NAT = Query(
    "AmazonEC2",
    (("productFamily", "NAT Gateway"), ("regionCode", REGION), ("locationType", "AWS Region")),
    "Hrs",
    contains=(("usagetype", "NatGateway"),),
    usage_type=usage_type_pattern("NatGateway-Hours"),
)
NAT_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "NAT Gateway"},
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
    {"Type": "TERM_MATCH", "Field": "locationType", "Value": "AWS Region"},
    {"Type": "CONTAINS", "Field": "usagetype", "Value": "NatGateway"},
]


@pytest.fixture
def pricing() -> Any:
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_usage_type_pattern_allows_one_region_prefix_only() -> None:
    assert usage_type_pattern("NatGateway-Hours") == NAT_USAGE


def test_lookup_sends_exact_filters_reads_every_page_and_keeps_only_the_matching_usd_dimension(
    pricing: tuple[Any, Stubber],
) -> None:
    client, stubber = pricing
    regional = product("REGIONAL", {"usagetype": "USE2-RegionalNatGateway-Hours"}, [dimension("Hrs", "0.05")])
    no_usage = product("NOUSAGE", {}, [dimension("Hrs", "0.05")])
    other_unit = product("PERGB", {"usagetype": "USE2-NatGateway-Bytes"}, [dimension("GB", "0.045")])
    wanted = product(
        "M2YSHUBETB3JX4M4",
        {"usagetype": "USE2-NatGateway-Hours"},
        [dimension("GB", "0.01"), dimension("Hrs", None), dimension("Hrs", "0.045", "$0.045 per NAT Gateway Hour")],
    )
    base = {"ServiceCode": "AmazonEC2", "Filters": NAT_FILTERS, "FormatVersion": "aws_v1"}
    stubber.add_response(
        "get_products", {"FormatVersion": "aws_v1", "PriceList": [regional, no_usage], "NextToken": "t2"}, base
    )
    stubber.add_response(
        "get_products", {"FormatVersion": "aws_v1", "PriceList": [other_unit, wanted]}, base | {"NextToken": "t2"}
    )
    assert lookup(client, NAT) == Price(
        sku="M2YSHUBETB3JX4M4",
        usd=0.045,
        unit="Hrs",
        effective="2026-11-01T00:00:00Z",
        description="$0.045 per NAT Gateway Hour",
        published="2026-11-20T18:02:11Z",
    )


def test_a_product_in_us_east_1_has_no_prefix_and_one_sku_priced_twice_is_one_product(
    pricing: tuple[Any, Stubber],
) -> None:
    client, stubber = pricing
    entry = product("NATUSE1", {"usagetype": "NatGateway-Hours"}, [dimension("Hrs", "0.045")])
    stubber.add_response("get_products", {"PriceList": [entry, entry]})
    assert lookup(client, NAT).sku == "NATUSE1"


def test_no_product_names_the_service_every_filter_the_usage_type_and_the_unit(
    pricing: tuple[Any, Stubber],
) -> None:
    client, stubber = pricing
    stubber.add_response("get_products", {"PriceList": [product("X", {"usagetype": "Other"}, [])]})
    with pytest.raises(PriceNotFoundError) as raised:
        lookup(client, NAT)
    assert str(raised.value) == (
        f"no AmazonEC2 product with productFamily=NAT Gateway, regionCode={REGION}, locationType=AWS Region, "
        f"usagetype=NatGateway, usagetype ~ {NAT_USAGE} priced in Hrs"
    )


def test_several_products_are_refused_with_their_skus_sorted(pricing: tuple[Any, Stubber]) -> None:
    client, stubber = pricing
    query = Query("AmazonFSx", (("regionCode", REGION),), "GB-Mo")
    stubber.add_response(
        "get_products",
        {"PriceList": [product(sku, {}, [dimension("GB-Mo", "0.1")]) for sku in ("ZZ", "AA", "MM")]},
        {
            "ServiceCode": "AmazonFSx",
            "Filters": [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION}],
            "FormatVersion": "aws_v1",
        },
    )
    with pytest.raises(PriceNotFoundError) as raised:
        lookup(client, query)
    assert str(raised.value) == f"3 AmazonFSx products match regionCode={REGION}: AA, MM, ZZ"


def test_the_cache_key_is_the_whole_query_as_sorted_json() -> None:
    assert Query("AmazonFSx", (("regionCode", "r"),), "GB-Mo").cache_key == (
        '{"contains": [], "filters": [["regionCode", "r"]], "service": "AmazonFSx", "unit": "GB-Mo", '
        '"usage_type": null}'
    )


def ec2(instance_type: str) -> Query:
    return Query(
        "AmazonEC2",
        (
            ("instanceType", instance_type),
            ("regionCode", REGION),
            ("locationType", "AWS Region"),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("licenseModel", "No License required"),
        ),
        "Hrs",
    )


PLAN = Plan(
    groups=(
        NodeGroup("cluster.pcluster.head_node.instance_type", "head node", "m5.8xlarge", 1, 1, (), root_volume_gib=200),
        NodeGroup(
            "cluster.pcluster.queues[0].compute_resources[0]",
            "queue gpu/p5",
            "p5.48xlarge",
            2,
            4,
            (),
            capacity_block=True,
            reservation_id="cr-1",
            root_volume_gib=100,
        ),
        NodeGroup(
            "cluster.pcluster.queues[1].compute_resources[0]",
            "queue cpu/c",
            "c5.large",
            0,
            10,
            (),
            reservation_id="cr-2",
            root_volume_gib=50,
        ),
        NodeGroup("cluster.hyperpod.worker", "instance group workers", "ml.p5.48xlarge", 3, 3, (), root_volume_gib=999),
    ),
    file_systems=(
        FileSystem("storage.lustre", "LUSTRE", "PERSISTENT_2", 1200, 250),
        FileSystem("storage.openzfs", "OPENZFS", "SINGLE_AZ_2", 256, 160),
    ),
    nat_gateways=2,
    new_vpc=True,
    zones=(),
    extra_volumes_gib=(("cluster.pcluster.shared_storage.apps.size_gib", 30),),
    prometheus=True,
    grafana=True,
    accounting_acu=(0.0, 4.0),
)
HYPERPOD = Query(
    "AmazonSageMaker",
    (("regionCode", REGION),),
    "Hrs",
    contains=(("usagetype", "Cluster:ml.p5.48xlarge"),),
    usage_type=r"(?:[A-Z0-9]+-)?Cluster:ml\.p5\.48xlarge",
)
LUSTRE = Query(
    "AmazonFSx",
    (("regionCode", REGION), ("fileSystemType", "Lustre"), ("storageType", "SSD"), ("throughputCapacity", "250")),
    "GB-Mo",
)
ZFS_STORAGE = Query(
    "AmazonFSx",
    (
        ("regionCode", REGION),
        ("fileSystemType", "OpenZFS"),
        ("productFamily", "Storage"),
        ("deploymentOption", "Single-AZ_2"),
        ("storageType", "SSD"),
    ),
    "GB-Mo",
)
ZFS_THROUGHPUT = Query(
    "AmazonFSx",
    (
        ("regionCode", REGION),
        ("fileSystemType", "OpenZFS"),
        ("productFamily", "Provisioned Throughput"),
        ("deploymentOption", "Single-AZ_2"),
    ),
    "MiBps-Mo",
)
NAT_QUERY = Query(
    "AmazonEC2",
    (("productFamily", "NAT Gateway"), ("regionCode", REGION), ("locationType", "AWS Region")),
    "Hrs",
    usage_type=NAT_USAGE,
)
AURORA = Query(
    "AmazonRDS",
    (("regionCode", REGION), ("productFamily", "ServerlessV2"), ("databaseEngine", "Aurora MySQL")),
    "ACU-Hr",
    usage_type=r"(?:[A-Z0-9]+-)?Aurora:ServerlessV2Usage",
)
GP3 = Query(
    "AmazonEC2",
    (("productFamily", "Storage"), ("volumeApiName", "gp3"), ("regionCode", REGION), ("locationType", "AWS Region")),
    "GB-Mo",
)
PRICES = {
    ec2("m5.8xlarge"): Price("HEAD", 1.5, "Hrs", "2026-11-01T00:00:00Z", "head"),
    ec2("p5.48xlarge"): Price("P5", 50.0, "Hrs", "2026-11-01T00:00:00Z", "p5"),
    HYPERPOD: Price("HP", 60.0, "Hrs", "2026-11-01T00:00:00Z", "hp"),
    LUSTRE: Price("LUS", 0.73, "GB-Mo", "2026-11-01T00:00:00Z", "lustre"),
    ZFS_STORAGE: Price("ZS", 0.146, "GB-Mo", "2026-11-01T00:00:00Z", "zfs storage"),
    NAT_QUERY: Price("NAT", 0.045, "Hrs", "2026-11-01T00:00:00Z", "nat"),
    AURORA: Price("ACU", 0.12, "ACU-Hr", "2026-11-01T00:00:00Z", "acu"),
    GP3: Price("GP3", 0.073, "GB-Mo", "2026-11-01T00:00:00Z", "gp3"),
}


def priced_by_table(asked: list[Query]) -> Any:
    def price(query: Query) -> Price:
        asked.append(query)
        if query == ZFS_THROUGHPUT:
            raise NotCachedError("not in the cache; run once without --offline")
        if query not in PRICES:
            raise PriceNotFoundError(f"no {query.service} product")
        return PRICES[query]

    return price


def test_the_estimate_asks_each_exact_query_once_in_plan_order() -> None:
    asked: list[Query] = []
    estimate("p5", REGION, PLAN, priced_by_table(asked), "test prices")
    assert asked == [
        ec2("m5.8xlarge"),
        ec2("p5.48xlarge"),
        ec2("c5.large"),
        HYPERPOD,
        LUSTRE,
        ZFS_STORAGE,
        ZFS_THROUGHPUT,
        NAT_QUERY,
        AURORA,
        GP3,
    ]


def test_the_estimate_json_is_every_line_with_its_figures_notes_and_the_totals() -> None:
    est = estimate("p5", REGION, PLAN, priced_by_table([]), "test prices")
    data = est.as_dict()

    def line(
        resource: str,
        key: str,
        unit: str,
        low: float,
        high: float,
        price: Price | None,
        note: str,
        per_hour: float | None = None,
        usage_based: bool = False,
    ) -> dict[str, Any]:
        hourly_min = None if per_hour is None else per_hour * low
        hourly_max = None if per_hour is None else per_hour * high
        return {
            "resource": resource,
            "key": key,
            "unit": unit,
            "quantity_min": low,
            "quantity_max": high,
            "price": None if price is None else price.__dict__,
            "note": note,
            "hourly_min": hourly_min,
            "hourly_max": hourly_max,
            "usage_based": usage_based,
            "monthly_min": None if hourly_min is None else hourly_min * 730,
            "monthly_max": None if hourly_max is None else hourly_max * 730,
        }

    lines = [
        line(
            "head node: m5.8xlarge",
            "cluster.pcluster.head_node.instance_type",
            "instances",
            1,
            1,
            PRICES[ec2("m5.8xlarge")],
            "",
            1.5,
        ),
        line(
            "queue gpu/p5: p5.48xlarge",
            "cluster.pcluster.queues[0].compute_resources[0]",
            "instances",
            2,
            4,
            PRICES[ec2("p5.48xlarge")],
            "capacity blocks are paid up front at their own price; On-Demand shown",
            50.0,
        ),
        line(
            "queue cpu/c: c5.large",
            "cluster.pcluster.queues[1].compute_resources[0]",
            "instances",
            0,
            10,
            None,
            "no price: no AmazonEC2 product",
        ),
        line(
            "instance group workers: ml.p5.48xlarge",
            "cluster.hyperpod.worker",
            "instances",
            3,
            3,
            PRICES[HYPERPOD],
            "",
            60.0,
        ),
        line(
            "FSx for Lustre PERSISTENT_2 250 MB/s/TiB",
            "storage.lustre.storage_capacity_gib",
            "GiB",
            1200,
            1200,
            PRICES[LUSTRE],
            "",
            0.73 / 730,
        ),
        line(
            "FSx for OpenZFS SINGLE_AZ_2 storage",
            "storage.openzfs.storage_capacity_gib",
            "GiB",
            256,
            256,
            PRICES[ZFS_STORAGE],
            "",
            0.146 / 730,
        ),
        line(
            "FSx for OpenZFS SINGLE_AZ_2 throughput",
            "storage.openzfs.throughput_capacity_mbps",
            "MB/s",
            160,
            160,
            None,
            "no price: not in the cache; run once without --offline",
        ),
        line(
            "NAT gateway",
            "network.nat_gateways",
            "gateways",
            2,
            2,
            PRICES[NAT_QUERY],
            "plus data processed per GB",
            0.045,
        ),
        line(
            "Aurora Serverless v2 (accounting database)",
            "storage.accounting.min_capacity_acu",
            "ACU",
            0.5,
            0.5,
            PRICES[AURORA],
            "0.5 ACU while a cluster runs (slurmdbd keeps it awake), as counted here; 0 ACU while paused with no "
            "cluster; scaling up to max_capacity_acu 4 ACU is not counted",
            0.12,
        ),
        line(
            "Aurora storage, I/O, backups; Secrets Manager secrets (accounting database)",
            "storage.accounting",
            "-",
            0,
            0,
            None,
            "not priced by mlcluster: storage per GB-month, I/O requests, backups beyond the free allowance, and a "
            "monthly fee per secret",
        ),
        # Roots of the EC2 groups (not HyperPod's) at min and max nodes, plus /apps.
        line(
            "EBS gp3 (root and /apps volumes)",
            "cluster.pcluster",
            "GiB",
            200 + 200 + 0 + 30,
            200 + 400 + 500 + 30,
            PRICES[GP3],
            "baseline IOPS and throughput",
            0.073 / 730,
        ),
        line(
            "Managed Prometheus workspace",
            "observability.prometheus",
            "-",
            0,
            0,
            None,
            "usage-based: samples ingested, stored and queried",
            usage_based=True,
        ),
        line(
            "Managed Grafana workspace",
            "observability.grafana",
            "-",
            0,
            0,
            None,
            "usage-based: per active editor/viewer licence per month",
            usage_based=True,
        ),
    ]
    low = sum(entry["hourly_min"] or 0.0 for entry in lines)
    high = sum(entry["hourly_max"] or 0.0 for entry in lines)
    assert data == {
        "environment": "p5",
        "region": REGION,
        "source": "test prices",
        "hours_per_month": 730,
        "complete": False,
        "unpriced": [
            {
                "resource": "queue cpu/c: c5.large",
                "key": "cluster.pcluster.queues[1].compute_resources[0]",
                "note": "no price: no AmazonEC2 product",
            },
            {
                "resource": "FSx for OpenZFS SINGLE_AZ_2 throughput",
                "key": "storage.openzfs.throughput_capacity_mbps",
                "note": "no price: not in the cache; run once without --offline",
            },
            {
                "resource": "Aurora storage, I/O, backups; Secrets Manager secrets (accounting database)",
                "key": "storage.accounting",
                "note": lines[9]["note"],
            },
        ],
        "lines": lines,
        "total": {"hourly_min": low, "hourly_max": high, "monthly_min": low * 730, "monthly_max": high * 730},
    }
    assert [line.resource for line in est.not_cached] == ["FSx for OpenZFS SINGLE_AZ_2 throughput"]


def test_a_reservation_note_a_minimum_capacity_an_unknown_openzfs_type_and_no_optional_parts() -> None:
    plan = Plan(
        groups=(NodeGroup("k", "queue q/r", "c5.large", 1, 2, (), reservation_id="cr-1"),),
        file_systems=(FileSystem("storage.openzfs", "OPENZFS", "SINGLE_AZ_HA_2", 64, 320),),
        nat_gateways=0,
        new_vpc=False,
        zones=(),
        extra_volumes_gib=(),
        prometheus=False,
        grafana=False,
        accounting_acu=(2.0, 16.0),
    )
    asked: list[Query] = []
    est = estimate("e", REGION, plan, priced_by_table(asked), "s")
    assert asked == [ec2("c5.large"), AURORA]  # no NAT, no gp3 (no root volume), nothing for an unknown spelling
    unknown = "no price: the Price List spelling of OpenZFS SINGLE_AZ_HA_2 is not known to mlcluster"
    assert [(line.resource, line.unit, line.quantity_min, line.quantity_max, line.note) for line in est.lines] == [
        ("queue q/r: c5.large", "instances", 1, 2, "no price: no AmazonEC2 product"),
        ("FSx for OpenZFS SINGLE_AZ_HA_2 storage", "GiB", 64, 64, unknown),
        ("FSx for OpenZFS SINGLE_AZ_HA_2 throughput", "MB/s", 320, 320, unknown),
        (
            "Aurora Serverless v2 (accounting database)",
            "ACU",
            2.0,
            2.0,
            "the floor; scaling up to max_capacity_acu 16 ACU is not counted",
        ),
        (
            "Aurora storage, I/O, backups; Secrets Manager secrets (accounting database)",
            "-",
            0,
            0,
            "not priced by mlcluster: storage per GB-month, I/O requests, backups beyond the free allowance, and a "
            "monthly fee per secret",
        ),
    ]
    assert est.lines[0].note.startswith("no price")
    (reserved,) = estimate("e", REGION, plan, lambda q: PRICES[AURORA], "s").lines[:1]
    assert reserved.note == "a capacity reservation bills at this rate whether used or not"
    assert (reserved.hourly_min, reserved.hourly_max) == (0.12, 0.24)


def fetched_estimate(lines: list[Line], not_cached: list[Line] | None = None) -> Estimate:
    return Estimate("p5", REGION, "s", lines=lines, not_cached=not_cached or [])


def priced_line(name: str, usd: float, low: float, high: float) -> Line:
    line = Line(name, name, "instances", low, high, price=Price("S", usd, "Hrs", "", ""))
    line.priced()
    return line


def test_the_total_line_of_a_complete_estimate() -> None:
    est = fetched_estimate([priced_line("a", 1.25, 1, 2), priced_line("b", 1000.0, 1, 1)])
    assert total_lines(est, "2026-11-28T10:00:00Z") == [
        "p5 (us-east-2): USD 1,001.25-1,002.50 per hour, 730,912.50-731,825.00 per month "
        "(On-Demand, min-max nodes; prices cached 2026-11-28)"
    ]


def test_the_total_line_of_a_partial_estimate_names_what_the_cache_lacks() -> None:
    missing = Line("NAT gateway", "network.nat_gateways", "gateways", 1, 1)
    gp3 = Line("EBS gp3", "cluster.pcluster", "GiB", 1, 1)
    usage = Line("Managed Grafana workspace", "observability.grafana", "-", 0, 0, usage_based=True)
    est = fetched_estimate([priced_line("a", 2.0, 1, 1), missing, gp3, usage], not_cached=[missing, gp3])
    assert total_lines(est, "2026-11-28T10:00:00Z") == [
        "p5 (us-east-2): USD 2.00-2.00 per hour, 1,460.00-1,460.00 per month "
        "(On-Demand, min-max nodes; prices cached 2026-11-28; partial: 2 line(s) unpriced)",
        "  not in the us-east-2 price cache: NAT gateway; EBS gp3: run `mlcluster cost p5` once with AWS credentials "
        "to add them",
    ]


def test_no_figure_when_no_line_is_priced() -> None:
    missing = Line("NAT gateway", "network.nat_gateways", "gateways", 1, 1)
    assert total_lines(fetched_estimate([missing]), "2026-11-28T10:00:00Z") == [
        "p5 (us-east-2): no figure: none of its lines is priced in the price cache of 2026-11-28"
    ]


def test_a_monthly_price_is_spread_over_730_hours_and_an_hourly_one_is_not() -> None:
    monthly = Line("gp3", "k", "GiB", 100, 200, price=Price("S", 0.073, "GB-Mo", "", ""))
    monthly.priced()
    assert (monthly.hourly_min, monthly.hourly_max) == (0.073 / 730 * 100, 0.073 / 730 * 200)
    acu = Line("acu", "k", "ACU", 0.5, 0.5, price=Price("S", 0.12, "ACU-Hr", "", ""))
    acu.priced()
    assert (acu.hourly_min, acu.hourly_max) == (0.06, 0.06)
    unpriced = Line("x", "k", "GiB", 1, 1)
    unpriced.priced()
    assert (unpriced.hourly_min, unpriced.hourly_max, unpriced.unpriced) == (None, None, True)


def test_the_cache_is_read_back_as_written_and_its_faults_are_named(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "prices" / "us-east-2.json"
    assert read_cache(path) == {"fetched": None, "prices": {}}
    write_cache(path, {"k": {"sku": "S"}}, "2026-11-28T10:00:00Z")
    assert read_cache(path) == {"fetched": "2026-11-28T10:00:00Z", "prices": {"k": {"sku": "S"}}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["us-east-2.json"]  # no temporary file left
    path.write_text("[1]")
    with pytest.raises(CliError) as raised:
        read_cache(path)
    assert (raised.value.message, raised.value.exit_code) == (
        f"price cache {path} has no prices\n  what to do: delete it and run without --offline",
        EXIT_FAILED,
    )
    path.write_text('{"fetched": "x", "prices": []}')
    with pytest.raises(CliError, match="has no prices"):
        read_cache(path)
    path.write_text("{")
    with pytest.raises(CliError) as raised:
        read_cache(path)
    assert (raised.value.message, raised.value.exit_code) == (
        f"price cache {path} is unreadable (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))\n  what to do: delete it and run without --offline",
        EXIT_FAILED,
    )


def test_a_cached_price_is_read_a_miss_is_not_cached_and_a_bad_entry_names_the_file(tmp_path: Path) -> None:
    query = Query("AmazonEC2", (("regionCode", REGION),), "Hrs")
    entry = {"sku": "S", "usd": 1.5, "unit": "Hrs", "effective": "e", "description": "d", "published": "p"}
    path = tmp_path / "c.json"
    assert cached_price({query.cache_key: entry}, path)(query) == Price("S", 1.5, "Hrs", "e", "d", "p")
    with pytest.raises(NotCachedError) as missed:
        cached_price({}, path)(query)
    assert str(missed.value) == "not in the cache; run once without --offline"
    with pytest.raises(PriceNotFoundError) as bad:
        cached_price({query.cache_key: {"sku": "S"}}, path)(query)
    assert type(bad.value) is PriceNotFoundError
    assert str(bad.value) == f"the cache entry is malformed; delete {path}"


def test_the_cache_lives_under_xdg_cache_home_else_the_home_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cost.cache_path("eu-west-1") == tmp_path / "xdg" / "mlcluster" / "prices" / "eu-west-1.json"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cost.cache_path("eu-west-1") == tmp_path / "home" / ".cache" / "mlcluster" / "prices" / "eu-west-1.json"


def test_the_pricing_client_is_in_us_east_1_with_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class Session:
        def client(self, service: str, **kwargs: Any) -> str:
            made.append((service, kwargs))
            return "client"

    assert cost.pricing_client(type("T", (), {"session": Session()})()) == "client"
    ((service, kwargs),) = made
    assert (service, kwargs["region_name"]) == ("pricing", "us-east-1")
    config = kwargs["config"]
    assert config.retries == {"mode": "standard", "max_attempts": 5}
    assert config.user_agent_extra == "mlcluster-cli"


def render_text(est: Estimate, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "260")
    cost.render(est)
    return capsys.readouterr().out


def test_the_table_shows_each_line_its_figures_and_the_total(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], snapshot: Any
) -> None:
    est = estimate("p5", REGION, PLAN, priced_by_table([]), "AWS Price List, fetched 2026-11-28T10:00:00Z")
    assert render_text(est, monkeypatch, capsys) == snapshot


def test_the_table_of_a_complete_estimate_has_a_plain_total_and_no_partial_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], snapshot: Any
) -> None:
    est = fetched_estimate([priced_line("queue a/b: c5.large", 0.085, 0, 16), priced_line("head", 1.5, 1, 1)])
    assert render_text(est, monkeypatch, capsys) == snapshot
