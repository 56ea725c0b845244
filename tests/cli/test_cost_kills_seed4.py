"""``mlcluster cost``: the whole ``--json`` lines and the table an operator reads (issue 27, cli seed 4).

The p5 example (Prometheus and Grafana on) is priced from the recorded Price List of ``test_cost``; each
figure below is worked out from that file's price and the example's quantities (730 hours a month).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Aws, invoke
from tests.cli.test_cost import lines, pricing  # noqa: F401 (the fixture)
from tests.cli.test_preflight import P5_REGION, env_folder

PUBLISHED = "2026-11-20T18:02:11Z"
EFFECTIVE = "2026-11-01T00:00:00Z"


def p5_cost(tmp_path: Path, *options: str) -> Any:
    return invoke("cost", "p5", "--environments", str(env_folder(tmp_path, "p5", P5_REGION)), *options)


def test_each_json_line_carries_its_price_and_its_hour_and_month_figures(
    pricing: Aws,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """A script reads the month figures beside the hour ones; a usage-based service has neither, nor a unit."""
    result = p5_cost(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    by = lines(json.loads(result.stdout))
    assert by["head node: m5.8xlarge"] == {
        "resource": "head node: m5.8xlarge",
        "key": "cluster.pcluster.head_node.instance_type",
        "unit": "instances",
        "quantity_min": 1,
        "quantity_max": 1,
        "price": {
            "sku": "8KTQAHWA58GUHDGC",
            "usd": 1.536,
            "unit": "Hrs",
            "effective": EFFECTIVE,
            "description": "$1.536 per On Demand Linux m5.8xlarge Instance Hour",
            "published": PUBLISHED,
        },
        "note": "",
        "hourly_min": 1.536,
        "hourly_max": 1.536,
        "usage_based": False,
        "monthly_min": pytest.approx(1.536 * 730),
        "monthly_max": pytest.approx(1.536 * 730),
    }
    assert by["NAT gateway"] == {
        "resource": "NAT gateway",
        "key": "network.nat_gateways",
        "unit": "gateways",
        "quantity_min": 1,
        "quantity_max": 1,
        "price": {
            "sku": "M2YSHUBETB3JX4M4",
            "usd": 0.045,
            "unit": "Hrs",
            "effective": EFFECTIVE,
            "description": "$0.045 per NAT Gateway Hour",
            "published": PUBLISHED,
        },
        "note": "plus data processed per GB",
        "hourly_min": 0.045,
        "hourly_max": 0.045,
        "usage_based": False,
        "monthly_min": pytest.approx(0.045 * 730),
        "monthly_max": pytest.approx(0.045 * 730),
    }
    usage_based = {"unit": "-", "quantity_min": 0, "quantity_max": 0, "price": None, "usage_based": True}
    no_figure = {"hourly_min": None, "hourly_max": None, "monthly_min": None, "monthly_max": None}
    assert by["Managed Prometheus workspace"] == {
        "resource": "Managed Prometheus workspace",
        "key": "observability.prometheus",
        "note": "usage-based: samples ingested, stored and queried",
        **usage_based,
        **no_figure,
    }
    assert by["Managed Grafana workspace"] == {
        "resource": "Managed Grafana workspace",
        "key": "observability.grafana",
        "note": "usage-based: per active editor/viewer licence per month",
        **usage_based,
        **no_figure,
    }


def table_rows(output: str) -> dict[str, list[str]]:
    """The table's rows by their first cell, each cell as printed (with its padding), and the header as ``""``."""
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        if line.startswith("┃"):
            rows[""] = line.strip("┃").split("┃")
        elif line.startswith("│"):
            cells = line.strip("│").split("│")
            rows[cells[0].strip()] = cells
    return rows


def test_the_table_shows_no_quantity_for_a_usage_based_service_and_right_aligns_the_figures(
    pricing: Aws,  # noqa: F811 (the fixture)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator compares the money columns down the table: their digits line up on the right."""
    monkeypatch.setenv("COLUMNS", "400")
    result = p5_cost(tmp_path)
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    header = [cell.strip() for cell in rows[""]]
    assert header == [
        "resource", "key", "qty min-max", "unit price", "SKU", "effective",
        "/h min", "/h max", "/month min", "/month max", "note",
    ]  # fmt: skip
    for name in ("Managed Prometheus workspace", "Managed Grafana workspace"):
        assert [cell.strip() for cell in rows[name][2:10]] == ["-"] * 8
    nat = rows["NAT gateway"]
    assert [cell.strip() for cell in nat] == [
        "NAT gateway", "network.nat_gateways", "1 gateways", "0.045/Hrs", "M2YSHUBETB3JX4M4", "2026-11-01",
        "0.04", "0.04", "32.85", "32.85", "plus data processed per GB",
    ]  # fmt: skip
    right = {"unit price", "/h min", "/h max", "/month min", "/month max"}
    for name, cells in rows.items():
        for column, cell in zip(header, cells, strict=True):
            text = cell.strip()
            if len(text) + 2 == len(cell):
                continue  # the cell's text fills the column: no alignment to see
            if column in right:
                assert cell == f"{cell[: -len(text) - 1]}{text} ", (name, column, cell)
            else:
                assert cell == f" {text}{cell[len(text) + 1 :]}", (name, column, cell)
