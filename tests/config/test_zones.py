"""Zones that do not exist are refused (issue 26, finding 6), from a table checked against its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlcluster.config import ConfigError, load_environment
from mlcluster.config.zones import PER_ACCOUNT_LETTERS, ZONES, zone_letters


def test_table_matches_its_source() -> None:
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend

    recorded = {
        region: (
            "".join(sorted(z.name[len(region) :] for z in zones)),
            tuple(sorted(int(z.zone_id.split("-az")[1]) for z in zones)),
        )
        for region, zones in RegionsAndZonesBackend.zones.items()
    }
    assert recorded == ZONES
    assert set(ZONES) >= PER_ACCOUNT_LETTERS


def _load(tmp_path: Path, network: str) -> None:
    path = tmp_path / "qa.yaml"
    path.write_text(f"network: {{{network}}}\n")
    load_environment(path)


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("availability_zone: us-east-2z", "us-east-2 has no zone 'z'"),
        ("availability_zone_id: usw2-az9", "us-west-2 has no zone usw2-az9"),
        ("availability_zone: us-west-1d", "us-west-1 has no zone 'd'"),
    ],
)
def test_zones_that_do_not_exist(tmp_path: Path, network: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, network)
    text = str(caught.value)
    assert message in text and "EC2 DescribeAvailabilityZones as recorded by moto" in text
    assert "allowed: " in text


@pytest.mark.parametrize(
    "network",
    [
        "availability_zone: us-east-2c",
        "availability_zone_id: usw2-az4",
        "availability_zone: us-east-1f",
        "availability_zone: us-west-1c",
        "availability_zone_id: use1-az6",
    ],
)
def test_the_last_zone_of_a_region_is_accepted(tmp_path: Path, network: str) -> None:
    _load(tmp_path, network)


def test_per_account_regions_allow_one_letter_more() -> None:
    assert zone_letters("us-west-1") == "abc"  # the table has a, b; older accounts see b, c
    assert zone_letters("us-east-2") == "abc"
    assert zone_letters("xx-none-1") is None
