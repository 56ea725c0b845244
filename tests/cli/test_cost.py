"""``mlcluster cost``: prices from a recorded Price List response, the cache, and AWS errors.

``data/price-list-us-east-2.json`` holds products in the real GetProducts shape
(each ``PriceList`` entry a JSON string with ``product`` and ``terms``); the
figures are test data, not a statement of current AWS prices. The fake
GetProducts below applies the request's filters (TERM_MATCH, CONTAINS) to it as
the service does; requests and responses are checked against botocore's model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.cli import cost
from tests.cli.conftest import Aws, error, invoke
from tests.cli.test_preflight import P5_REGION, REPO, env_folder

RECORDED = json.loads((Path(__file__).parent / "data" / "price-list-us-east-2.json").read_text())


def get_products(params: dict[str, Any]) -> dict[str, Any]:
    """GetProducts over the recorded products: every filter must hold."""
    chosen = []
    for raw in RECORDED["PriceList"]:
        item = json.loads(raw)
        if item["serviceCode"] != params["ServiceCode"]:
            continue
        product = item["product"]
        values = {**product["attributes"], "productFamily": product["productFamily"]}
        ok = True
        for f in params.get("Filters", []):
            value = values.get(f["Field"], "")
            ok &= value == f["Value"] if f["Type"] == "TERM_MATCH" else f["Value"] in value
        if ok:
            chosen.append(raw)
    return {"FormatVersion": "aws_v1", "PriceList": chosen}


@pytest.fixture
def pricing(aws: Aws, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Aws:
    """The Price List API answered from the recorded response, and a cache folder of the test's own."""
    import boto3

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    client = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing").client(
        "pricing", region_name=cost.PRICING_REGION
    )
    aws.attach(client)
    monkeypatch.setattr(cost, "pricing_client", lambda target: client)
    aws.answer("pricing", "GetProducts", always=get_products)
    return aws


def lines(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {line["resource"]: line for line in data["lines"]}


def test_cost_p5_from_the_recorded_price_list(pricing: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    table = invoke("cost", "p5", "--environments", str(folder))
    print(table.output)
    assert table.exit_code == 0, table.output
    result = invoke("cost", "p5", "--environments", str(folder), "--json")
    data = json.loads(result.stdout)
    by = lines(data)
    p5 = by["queue compute-gpu/p5: p5.48xlarge"]
    assert p5["price"]["sku"] == "Q4QTSF6ZVMRWJTKZ"  # the Used product, not the unused-reservation one
    assert p5["price"]["effective"] == "2026-11-01T00:00:00Z"
    assert p5["price"]["published"] == "2026-11-20T18:02:11Z"
    assert p5["hourly_min"] == p5["hourly_max"] == pytest.approx(4 * 55.04)
    assert by["head node: m5.8xlarge"]["hourly_max"] == pytest.approx(1.536)
    lustre = by["FSx for Lustre PERSISTENT_2 250 MB/s/TiB"]
    assert lustre["price"]["sku"] == "7K4R8Q8WCJ8GBT5N"
    assert lustre["monthly_max"] == pytest.approx(1200 * 0.21)
    assert by["NAT gateway"]["monthly_max"] == pytest.approx(0.045 * 730)
    ebs = by["EBS gp3 (root and /apps volumes)"]
    assert (ebs["quantity_min"], ebs["quantity_max"]) == (200 + 4 * 200 + 100 + 200, 200 + 4 * 200 + 100 + 200)
    assert by["Managed Prometheus workspace"]["note"].startswith("usage-based")
    assert by["Managed Grafana workspace"]["hourly_max"] is None
    expected = 4 * 55.04 + 1.536 + 0.045 + (1200 * 0.21 + 1300 * 0.08) / 730  # gp3: roots, /home, /apps
    assert data["total"]["hourly_max"] == pytest.approx(expected)
    assert data["total"]["monthly_max"] == pytest.approx(expected * 730)
    # Every query filtered by region and, for EC2 instances, by the On-Demand Linux shared product.
    ec2 = [p for p in pricing.params("GetProducts") if p["ServiceCode"] == "AmazonEC2"]
    assert {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"} in ec2[0]["Filters"]
    assert all({"Type": "TERM_MATCH", "Field": "regionCode", "Value": P5_REGION} in p["Filters"] for p in ec2)
    # Instances, NAT gateway and gp3 in the Region itself: the Local Zone gp3 product of the recorded list
    # shares regionCode us-east-2 and would make the gp3 line ambiguous without this filter.
    assert all({"Type": "TERM_MATCH", "Field": "locationType", "Value": "AWS Region"} in p["Filters"] for p in ec2)
    assert ebs["price"]["sku"] == "4RUAYYN9CFBPWMDS"
    # The NAT gateway, not the Regional NAT gateway whose usage type also ends in NatGateway-Hours.
    assert by["NAT gateway"]["price"]["sku"] == "M2YSHUBETB3JX4M4"
    assert data["complete"] is True and data["unpriced"] == []
    assert "total (partial)" not in table.output


def test_offline_uses_the_cache_and_says_its_date(pricing: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    missing = invoke("cost", "p5", "--environments", str(folder), "--offline")
    assert missing.exit_code == 1 and "no price cache at" in missing.output
    online = json.loads(invoke("cost", "p5", "--environments", str(folder), "--json").stdout)
    calls = len(pricing.params("GetProducts"))
    cache = json.loads(cost.cache_path(P5_REGION).read_text())
    assert cache["fetched"] and len(cache["prices"]) == 5
    offline = invoke("cost", "p5", "--environments", str(folder), "--offline", "--json")
    data = json.loads(offline.stdout)
    assert len(pricing.params("GetProducts")) == calls  # no call made
    assert data["source"].startswith(f"cached prices fetched {cache['fetched']}")
    assert data["total"] == online["total"]


def test_hyperpod_uses_the_cluster_usage_type(pricing: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = env_folder(tmp_path, "hyperpod", P5_REGION, network={"availability_zone_id": "use2-az1"})
    data = json.loads(invoke("cost", "hyperpod", "--environments", str(folder), "--json").stdout)
    by = lines(data)
    worker = by["instance group worker-group-1: ml.p5.48xlarge"]
    assert worker["price"]["sku"] == "VZ3X3QWJ8G5Z9CRX"
    assert worker["hourly_max"] == pytest.approx(2 * 63.296)
    # No ml.m5 product in the recorded list: the line says so and counts nothing.
    controller = by["instance group controller-machine: ml.m5.12xlarge"]
    assert controller["hourly_max"] is None
    assert controller["note"].startswith("no price: no AmazonSageMaker product")
    # ... and the estimate says it is partial, names the line, and the command exits 1.
    assert data["complete"] is False
    assert [u["key"] for u in data["unpriced"]] == ["cluster.hyperpod.controller", "cluster.hyperpod.login"]
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line
    table = invoke("cost", "hyperpod", "--environments", str(folder))
    assert table.exit_code == 1
    assert "total (partial)" in table.output
    assert "The total is partial: 2 line(s) have no price and count nothing:" in table.output
    assert "instance group controller-machine: ml.m5.12xlarge (cluster.hyperpod.controller)" in table.output
    assert "the estimate is partial: 2 line(s) unpriced" in table.output and "Traceback" not in table.output
    sagemaker = [p for p in pricing.params("GetProducts") if p["ServiceCode"] == "AmazonSageMaker"]
    assert {"Type": "CONTAINS", "Field": "usagetype", "Value": "Cluster:ml.p5.48xlarge"} in sagemaker[-1]["Filters"]


class Listing:
    """A Price List client whose GetProducts repeats the recorded answer ``times`` times on one page."""

    def __init__(self, times: int) -> None:
        self.times = times

    def get_paginator(self, name: str) -> Listing:
        return self

    def paginate(self, **params: Any) -> list[dict[str, Any]]:
        return [{"PriceList": get_products(params)["PriceList"] * self.times}]


def test_ambiguous_products_are_refused() -> None:
    query = cost._ec2_query("p5.48xlarge", P5_REGION)
    assert cost.lookup(Listing(2), query).sku == "Q4QTSF6ZVMRWJTKZ"  # the same SKU twice is one product
    broad = cost.Query("AmazonFSx", (("regionCode", P5_REGION), ("fileSystemType", "Lustre")), "GB-Mo")
    with pytest.raises(cost.PriceNotFoundError, match="5 AmazonFSx products match"):
        cost.lookup(Listing(1), broad)
    with pytest.raises(cost.PriceNotFoundError, match="no AmazonEC2 product"):
        cost.lookup(Listing(1), cost._ec2_query("p5en.48xlarge", P5_REGION))


@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [("AccessDeniedException", 3, "lack this permission"), ("ThrottlingException", 3, "AWS throttled the calls")],
)
def test_aws_errors_end_cleanly(pricing: Aws, tmp_path: Path, code: str, exit_code: int, words: str) -> None:
    pricing.sticky[("pricing", "GetProducts")] = error(code, "no")
    result = invoke("cost", "p5", "--environments", str(env_folder(tmp_path, "p5", P5_REGION)))
    assert result.exit_code == exit_code
    assert f"GetProducts for AmazonEC2 failed: {code}: no" in result.output and words in result.output
    assert "Traceback" not in result.output


def test_a_corrupt_cache_is_reported(pricing: Aws, tmp_path: Path) -> None:
    path = cost.cache_path(P5_REGION)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = invoke("cost", "p5", "--environments", str(env_folder(tmp_path, "p5", P5_REGION)), "--offline")
    assert result.exit_code == 1 and "is unreadable" in result.output and "Traceback" not in result.output


def test_a_malformed_cache_entry_is_a_row(pricing: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    invoke("cost", "p5", "--environments", str(folder), "--json")
    path = cost.cache_path(P5_REGION)
    cache = json.loads(path.read_text())
    key = next(k for k in cache["prices"] if "p5.48xlarge" in k)
    cache["prices"][key] = {"sku": "X", "usd": "free"}
    path.write_text(json.dumps(cache))
    data = json.loads(invoke("cost", "p5", "--environments", str(folder), "--offline", "--json").stdout)
    p5 = lines(data)["queue compute-gpu/p5: p5.48xlarge"]
    assert p5["hourly_max"] is None and p5["note"] == f"no price: the cache entry is malformed; delete {path}"


@pytest.mark.parametrize(
    ("usage_type", "matches"),
    [
        ("USE2-NatGateway-Hours", True),
        ("NatGateway-Hours", True),  # us-east-1 usage types carry no region prefix
        ("EU-NatGateway-Hours", True),
        ("USE2-RegionalNatGateway-Hours", False),
        ("RegionalNatGateway-Hours", False),
        ("USE2-NatGateway-Bytes", False),
        ("USE2-NatGateway-Hours-Extra", False),
    ],
)
def test_nat_gateway_usage_type_is_exact(usage_type: str, matches: bool) -> None:
    pattern = cost.usage_type_pattern("NatGateway-Hours")
    query = cost.Query("AmazonEC2", (), "Hrs", usage_type=pattern)
    assert cost._matches(query, {"usagetype": usage_type}) is matches


def _with_storage(tmp_path: Path, storage: dict[str, Any]) -> Path:
    return env_folder(tmp_path, "p5", P5_REGION, storage=storage)


def test_lustre_is_priced_by_storage_type_and_throughput_tier(pricing: Aws, tmp_path: Path) -> None:
    folder = _with_storage(tmp_path, {"lustre": {"deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 200}})
    data = json.loads(invoke("cost", "p5", "--environments", str(folder), "--json").stdout)
    lustre = lines(data)["FSx for Lustre PERSISTENT_1 200 MB/s/TiB"]
    assert lustre["price"]["sku"] == "P1SSD200USE2XXXX"
    assert lustre["monthly_max"] == pytest.approx(1200 * 0.29)
    (fsx,) = [p for p in pricing.params("GetProducts") if p["ServiceCode"] == "AmazonFSx"]
    assert fsx["Filters"] == [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": P5_REGION},
        {"Type": "TERM_MATCH", "Field": "fileSystemType", "Value": "Lustre"},
        {"Type": "TERM_MATCH", "Field": "storageType", "Value": "SSD"},
        {"Type": "TERM_MATCH", "Field": "throughputCapacity", "Value": "200"},
    ]


def test_openzfs_storage_and_throughput(pricing: Aws, tmp_path: Path) -> None:
    zfs = {"deployment_type": "SINGLE_AZ_2", "storage_capacity_gib": 512, "throughput_capacity_mbps": 320}
    folder = _with_storage(tmp_path, {"openzfs": zfs})
    data = json.loads(invoke("cost", "p5", "--environments", str(folder), "--json").stdout)
    by = lines(data)
    storage, throughput = by["FSx for OpenZFS SINGLE_AZ_2 storage"], by["FSx for OpenZFS SINGLE_AZ_2 throughput"]
    assert storage["price"]["sku"] == "ZSAZ2SSDUSE2XXXX" and storage["monthly_max"] == pytest.approx(512 * 0.09)
    assert throughput["price"]["unit"] == "MiBps-Mo" and throughput["unit"] == "MB/s"
    assert throughput["monthly_max"] == pytest.approx(320 * 0.26)
    assert data["complete"] is True
    openzfs = {"Type": "TERM_MATCH", "Field": "fileSystemType", "Value": "OpenZFS"}
    zfs_filters = [p["Filters"] for p in pricing.params("GetProducts") if openzfs in p["Filters"]]
    assert {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "Storage"} in zfs_filters[0]
    assert {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "Provisioned Throughput"} in zfs_filters[1]
    # A deployment type whose Price List spelling is unchecked is an unpriced line, and the total is partial.
    zfs["deployment_type"] = "SINGLE_AZ_HA_2"
    zfs["throughput_capacity_mbps"] = 320
    folder = _with_storage(tmp_path, {"openzfs": zfs})
    result = invoke("cost", "p5", "--environments", str(folder), "--json")
    assert result.exit_code == 1
    partial = json.loads(result.stdout)
    assert partial["complete"] is False
    assert [u["key"] for u in partial["unpriced"]] == [
        "storage.openzfs.storage_capacity_gib",
        "storage.openzfs.throughput_capacity_mbps",
    ]
    assert partial["unpriced"][0]["note"] == (
        "no price: the Price List spelling of OpenZFS SINGLE_AZ_HA_2 is not known to mlcluster"
    )


def test_openzfs_single_az_1_is_priced_as_single_az(pricing: Aws, tmp_path: Path) -> None:
    """SINGLE_AZ_1 is ``deploymentOption`` Single-AZ (infracost's OpenZFS filters and golden test, data file)."""
    zfs = {"deployment_type": "SINGLE_AZ_1", "storage_capacity_gib": 300, "throughput_capacity_mbps": 256}
    data = json.loads(
        invoke("cost", "p5", "--environments", str(_with_storage(tmp_path, {"openzfs": zfs})), "--json").stdout
    )
    by = lines(data)
    storage, throughput = by["FSx for OpenZFS SINGLE_AZ_1 storage"], by["FSx for OpenZFS SINGLE_AZ_1 throughput"]
    assert storage["price"]["sku"] == "ZSAZ1SSDUSE2XXXX" and storage["monthly_max"] == pytest.approx(300 * 0.09)
    assert throughput["price"]["sku"] == "ZSAZ1TPUTUSE2XXX" and throughput["monthly_max"] == pytest.approx(256 * 0.26)
    assert data["complete"] is True


AURORA_LINE = "Aurora Serverless v2 (accounting database)"
AURORA_REST = "Aurora storage, I/O, backups; Secrets Manager secrets (accounting database)"


@pytest.mark.parametrize("name", ["hyperpod-accounting", "pcluster-accounting"])
def test_the_managed_accounting_database_is_priced_at_its_floor(pricing: Aws, tmp_path: Path, name: str) -> None:
    """min_capacity_acu 0 (the default): 0.5 ACU while a cluster runs (0 only while paused); the rest unpriced."""
    network = yaml.safe_load((REPO / "environments" / f"{name}.yaml").read_text())["network"]
    if name == "hyperpod-accounting":  # its zones are us-west-2's; the recorded price list is us-east-2's
        network.update(availability_zone_id="use2-az1", extra_zones=[{"availability_zone_id": "use2-az2"}])
    folder = env_folder(tmp_path, name, P5_REGION, network=network)
    result = invoke("cost", name, "--environments", str(folder), "--json")
    data = json.loads(result.stdout)
    by = lines(data)
    aurora = by[AURORA_LINE]
    # The Aurora MySQL Standard product: not the I/O-Optimized one, not PostgreSQL's.
    assert aurora["price"]["sku"] == "AURSV2MYSQLUSE2X" and aurora["price"]["unit"] == "ACU-Hr"
    # The estimate's cluster runs, so the database does not pause: 0.5 ACU x 730 h, min and max alike.
    assert (aurora["quantity_min"], aurora["quantity_max"]) == (0.5, 0.5)
    assert aurora["hourly_min"] == aurora["hourly_max"] == pytest.approx(0.5 * 0.12)
    assert aurora["monthly_max"] == pytest.approx(0.5 * 0.12 * 730)
    assert aurora["note"].startswith("0.5 ACU while a cluster runs (slurmdbd keeps it awake), as counted here; 0 ACU")
    (rds,) = [p for p in pricing.params("GetProducts") if p["ServiceCode"] == "AmazonRDS"]
    assert rds["Filters"] == [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": P5_REGION},
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "ServerlessV2"},
        {"Type": "TERM_MATCH", "Field": "databaseEngine", "Value": "Aurora MySQL"},
    ]
    # Storage, I/O, backups and secrets have no price: the estimate is partial, never silently complete.
    assert by[AURORA_REST]["hourly_max"] is None
    assert data["complete"] is False and result.exit_code == 1
    assert {"resource": AURORA_REST, "key": "storage.accounting", "note": by[AURORA_REST]["note"]} in data["unpriced"]


def test_a_minimum_capacity_is_the_floor_both_ways(pricing: Aws, tmp_path: Path) -> None:
    name = "pcluster-accounting"
    source = yaml.safe_load((REPO / "environments" / f"{name}.yaml").read_text())["storage"]
    storage = {**source, "accounting": {"min_capacity_acu": 1.5, "max_capacity_acu": 4}}
    folder = env_folder(tmp_path, name, P5_REGION, storage=storage)
    aurora = lines(json.loads(invoke("cost", name, "--environments", str(folder), "--json").stdout))[AURORA_LINE]
    assert (aurora["quantity_min"], aurora["quantity_max"]) == (1.5, 1.5)
    assert aurora["hourly_min"] == aurora["hourly_max"] == pytest.approx(1.5 * 0.12)
    assert "max_capacity_acu 4 ACU is not counted" in aurora["note"]


def test_a_missing_aurora_price_makes_the_estimate_partial(pricing: Aws, tmp_path: Path) -> None:
    """No ACU product in the region's price list (us-west-2 has none recorded): the line is unpriced and named."""
    folder = env_folder(tmp_path, "hyperpod-accounting", "us-west-2")
    data = json.loads(invoke("cost", "hyperpod-accounting", "--environments", str(folder), "--json").stdout)
    aurora = lines(data)[AURORA_LINE]
    assert aurora["hourly_max"] is None and aurora["note"].startswith("no price: no AmazonRDS product")
    assert data["complete"] is False
    assert "storage.accounting.min_capacity_acu" in [u["key"] for u in data["unpriced"]]


def test_no_accounting_database_no_line(pricing: Aws, tmp_path: Path) -> None:
    for name, changes in (("p5", {}), ("hyperpod", {"network": {"availability_zone_id": "use2-az1"}})):
        folder = env_folder(tmp_path, name, P5_REGION, **changes)
        data = json.loads(invoke("cost", name, "--environments", str(folder), "--json").stdout)
        assert not [line for line in data["lines"] if "accounting" in line["key"]]
    assert not [p for p in pricing.params("GetProducts") if p["ServiceCode"] == "AmazonRDS"]
