"""The instance-type table against the EC2 DescribeInstanceTypes snapshot shipped with moto."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from typing import Any

import pytest

from mlcluster.pcluster.instance_types import (
    INSTANCE_TYPES,
    MEASURED,
    SOCKET_LAYOUT,
    lookup,
    slurm_layout,
    socket_layout,
)


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
            api["VCpuInfo"].get("DefaultThreadsPerCore", 1),
            api["NetworkInfo"].get("EfaSupported", False),
            accelerator,
            count,
        )
        actual = (info.vcpus, info.cores, info.threads_per_core, info.efa, info.accelerator, info.accelerators)
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
        ("trn1.32xlarge", True, "neuron", (2, 32)),
        ("g5.12xlarge", True, "nvidia", (1, 24)),
        ("g5.xlarge", False, "nvidia", (1, 2)),
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


ACCELERATED = sorted(name for name, info in INSTANCE_TYPES.items() if info.accelerator is not None)


def test_every_accelerated_family_the_issue_names_is_in_the_table() -> None:
    families = {name.split(".")[0] for name in ACCELERATED}
    wanted = {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "trn1", "trn1n", "trn2", "g5", "g6", "g6e"}
    assert wanted <= families


@pytest.mark.parametrize("name", ACCELERATED)
def test_layout_adds_up_to_the_vcpus(name: str) -> None:
    """Sockets x cores per socket x threads per core == vCPUs, or Slurm gets the wrong CPU count."""
    info = INSTANCE_TYPES[name]
    layout = slurm_layout(name)
    assert layout is not None, f"{name}: every accelerated type needs a Slurm layout"
    assert layout.sockets * layout.cores_per_socket == info.cores
    assert layout.sockets * layout.cores_per_socket * layout.threads_per_core == info.vcpus
    assert layout.settings() == {
        "Sockets": layout.sockets,
        "CoresPerSocket": layout.cores_per_socket,
        "ThreadsPerCore": layout.threads_per_core,
    }


def test_measured_rows_keep_their_measurement() -> None:
    assert {name: socket_layout(name) for name in MEASURED} == {
        "p5.48xlarge": (2, 48),
        "p4de.24xlarge": (2, 24),
        "p4d.24xlarge": (2, 24),
    }


def test_types_without_accelerators_get_no_layout() -> None:
    assert slurm_layout("m5.8xlarge") is None
    assert slurm_layout("x9z.large") is None
