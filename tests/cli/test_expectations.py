"""The NCCL expectation table against its source: EC2 DescribeInstanceTypes (moto's snapshot)."""

from __future__ import annotations

import gzip
import json
import re
from importlib import resources
from typing import Any

from mlcluster.cli.expectations import PASS_FRACTION, expectation
from mlcluster.pcluster.instance_types import INSTANCE_TYPES, NETWORK_GBITS


def describe_instance_types() -> dict[str, Any]:
    data = resources.files("moto.ec2.resources").joinpath("instance_types.json.gz").read_bytes()
    loaded: dict[str, Any] = json.loads(gzip.decompress(data))
    return loaded


def gbits(performance: str) -> int:
    match = re.fullmatch(r"(?:(\d+)x )?(\d+) Gigabit", performance)
    assert match, performance
    return int(match[1] or 1) * int(match[2])


def test_every_entry_matches_describe_instance_types() -> None:
    snapshot = describe_instance_types()
    for name, value in NETWORK_GBITS.items():
        info = snapshot[name]["NetworkInfo"]
        assert info["EfaSupported"], name
        assert gbits(info["NetworkPerformance"]) == value, name


def test_every_nvidia_efa_type_has_an_expectation() -> None:
    wanted = {n for n, t in INSTANCE_TYPES.items() if t.accelerator == "nvidia" and t.efa}
    assert wanted <= set(NETWORK_GBITS)


def test_expectation_line_rate_and_pass_mark() -> None:
    p5 = expectation("ml.p5.48xlarge")
    assert p5 is not None and (p5.line_rate_gbytes, p5.pass_gbytes) == (400.0, 400.0 * PASS_FRACTION)
    p4d = expectation("p4d.24xlarge", min_busbw=40.0)
    assert p4d is not None and (p4d.line_rate_gbytes, p4d.pass_gbytes) == (50.0, 40.0)
    assert expectation("trn1.32xlarge") is None


def test_expectations_come_from_the_one_instance_type_table() -> None:
    """Issue 12: the same sourced table feeds the EFA check, the Slurm layout and the smoke expectations."""
    assert set(NETWORK_GBITS) <= set(INSTANCE_TYPES)
    assert expectation("g5.xlarge") is None  # no EFA: no multi-node expectation
    assert expectation("g5.8xlarge") is not None  # the smallest g5 with EFA
