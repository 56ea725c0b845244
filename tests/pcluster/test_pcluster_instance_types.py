"""The instance-type table against the EC2 DescribeInstanceTypes snapshot shipped with moto."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from typing import Any

import pytest

from mlcluster.pcluster.instance_types import INSTANCE_TYPES, SOCKET_LAYOUT, lookup, socket_layout


@pytest.fixture(scope="module")
def ec2() -> dict[str, Any]:
    data = resources.files("moto.ec2.resources").joinpath("instance_types.json.gz").read_bytes()
    loaded: dict[str, Any] = json.loads(gzip.decompress(data))
    return loaded


def test_every_entry_matches_describe_instance_types(ec2: dict[str, Any]) -> None:
    mismatches = []
    for name, info in INSTANCE_TYPES.items():
        api = ec2[name]
        accelerator, count = None, 0
        if api.get("GpuInfo"):
            gpu = api["GpuInfo"]["Gpus"][0]
            accelerator, count = ("nvidia" if gpu["Manufacturer"] == "NVIDIA" else gpu["Manufacturer"]), gpu["Count"]
        if api.get("NeuronInfo"):
            accelerator, count = "neuron", api["NeuronInfo"]["NeuronDevices"][0]["Count"]
        expected = (
            api["VCpuInfo"]["DefaultVCpus"],
            api["VCpuInfo"]["DefaultCores"],
            api["NetworkInfo"].get("EfaSupported", False),
            accelerator,
            count,
        )
        actual = (info.vcpus, info.cores, info.efa, info.accelerator, info.accelerators)
        if actual != expected:
            mismatches.append((name, actual, expected))
    assert mismatches == []


def test_socket_layouts_match_the_physical_cores() -> None:
    for name, (sockets, cores_per_socket) in SOCKET_LAYOUT.items():
        info = lookup(name)
        assert info is not None
        assert sockets * cores_per_socket == info.cores, name


@pytest.mark.parametrize(
    ("name", "efa", "accelerator", "layout"),
    [
        ("p5.48xlarge", True, "nvidia", (2, 48)),
        ("p4de.24xlarge", True, "nvidia", (2, 24)),
        ("p4d.24xlarge", True, "nvidia", (2, 24)),
        ("trn1.32xlarge", True, "neuron", None),
        ("g5.12xlarge", True, "nvidia", None),
        ("g5.xlarge", False, "nvidia", None),
        ("m5.8xlarge", False, None, None),
    ],
)
def test_archetype_instance_types(
    name: str, efa: bool, accelerator: str | None, layout: tuple[int, int] | None
) -> None:
    info = lookup(name)
    assert info is not None
    assert (info.efa, info.accelerator, socket_layout(name)) == (efa, accelerator, layout)


def test_unknown_type() -> None:
    assert lookup("x9z.large") is None
    assert socket_layout("x9z.large") is None
