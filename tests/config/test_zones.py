"""Zones: malformed ones and unknown regions refused; zones the table (checked against its source) lacks, warned."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlcluster.config import ConfigError, load_environment
from mlcluster.config.advice import warnings_for
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


def _load(tmp_path: Path, network: str) -> list[str]:
    """Load an environment with ``network`` and return its warnings (advice)."""
    path = tmp_path / "qa.yaml"
    path.write_text(f"network: {{{network}}}\n")
    return warnings_for(load_environment(path))


@pytest.mark.parametrize(
    ("network", "where"),
    [
        ("availability_zone: cn-north-1d", "network.availability_zone: cn-north-1d"),
        ("availability_zone_id: cnn1-az4", "network.availability_zone_id: cnn1-az4"),
        ("availability_zone_id: usw1-az2", "network.availability_zone_id: usw1-az2"),
        ("availability_zone_id: cac1-az3", "network.availability_zone_id: cac1-az3"),
        ("availability_zone_id: apne1-az3", "network.availability_zone_id: apne1-az3"),
        ("availability_zone_id: euw1-az4", "network.availability_zone_id: euw1-az4"),
        ("availability_zone: us-east-2z", "network.availability_zone: us-east-2z"),
    ],
)
def test_real_zones_the_table_misses_are_a_warning(tmp_path: Path, network: str, where: str) -> None:
    """Before the review of issue 26 these real zones (moto's table lacks them) were configuration errors."""
    (warning,) = [w for w in _load(tmp_path, network) if "DescribeAvailabilityZones" in w]
    assert warning.startswith(f"{where} is not among the zone")
    assert "EC2 DescribeAvailabilityZones as recorded by moto" in warning and "mlcluster preflight" in warning


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("availability_zone: us-east-9a", "us-east-9 is not an AWS region"),
        ("availability_zone: us-east-1", "network.availability_zone"),
        ("availability_zone_id: zzz9-az1", "zzz9 is not the zone ID code of an AWS region"),
        ("availability_zone_id: use1-az", "network.availability_zone_id"),
    ],
)
def test_malformed_zones_and_unknown_regions_are_still_refused(tmp_path: Path, network: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, network)
    assert message in str(caught.value)


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
    assert not [w for w in _load(tmp_path, network) if "DescribeAvailabilityZones" in w]


def test_per_account_regions_allow_one_letter_more() -> None:
    assert zone_letters("us-west-1") == "abc"  # the table has a, b; older accounts see b, c
    assert zone_letters("us-east-2") == "abc"
    assert zone_letters("xx-none-1") is None
