"""AWS's own lists of valid values, read offline from the data botocore ships.

botocore carries every service's API model and the partitions' region list;
they are the lists the services validate against, updated with each botocore
release. Reading them costs a few tens of milliseconds and is done once, on
first use, so an environment without a cluster never pays for the EC2 model.

- EC2 instance types: the ``InstanceType`` enum of the EC2 model (what
  ParallelCluster launches).
- SageMaker HyperPod instance types: the ``ClusterInstanceType`` enum of the
  SageMaker model.
- Regions: the ``regions`` of every partition in ``endpoints.json``.
- Availability zone IDs: ``<region code><digit>-az<n>``, the region code
  built from the region name as AWS writes it (``us-east-1`` -> ``use1``,
  ``ap-northeast-2`` -> ``apne2``, ``us-gov-west-1`` -> ``usgw1``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from mlcluster.config.schema import Choices

#: The partitions whose AZ ID codes follow the documented pattern; others are not checked.
_AZ_ID_PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
_DIRECTIONS = {
    "east": "e",
    "west": "w",
    "north": "n",
    "south": "s",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}


@functools.cache
def _loader() -> Any:
    from botocore.loaders import create_loader

    return create_loader()


def botocore_version() -> str:
    """The botocore release whose data the lists come from."""
    import botocore

    return str(botocore.__version__)


@functools.cache
def _enum(service: str, shape: str) -> frozenset[str]:
    model = _loader().load_service_model(service, "service-2")
    return frozenset(model["shapes"][shape]["enum"])


def ec2_instance_types() -> frozenset[str]:
    """Every EC2 instance type the EC2 API model knows."""
    return _enum("ec2", "InstanceType")


def hyperpod_instance_types() -> frozenset[str]:
    """Every instance type a SageMaker HyperPod instance group accepts."""
    return _enum("sagemaker", "ClusterInstanceType")


@functools.cache
def _partitions() -> dict[str, str]:
    """Region name -> partition name, from botocore's endpoints data."""
    data = _loader().load_data("endpoints")
    return {region: p["partition"] for p in data["partitions"] for region in p["regions"]}


def regions() -> frozenset[str]:
    """Every region botocore's partition data lists."""
    return frozenset(_partitions())


def az_id_code(region: str) -> str | None:
    """The AZ ID prefix of ``region`` (``us-west-2`` -> ``usw2``), or None where the pattern is not documented."""
    if _partitions().get(region) not in _AZ_ID_PARTITIONS:
        return None
    match = re.fullmatch(r"([a-z]{2})-(gov-)?([a-z]+)-(\d+)", region)
    if match is None or match.group(3) not in _DIRECTIONS:
        return None
    country, gov, direction, number = match.groups()
    return f"{country}{'g' if gov else ''}{_DIRECTIONS[direction]}{number}"


@functools.cache
def az_id_codes() -> dict[str, str]:
    """AZ ID prefix -> region, for every region whose code is known."""
    return {code: region for region in sorted(regions()) if (code := az_id_code(region)) is not None}


def _source(what: str) -> str:
    return f"{what}, botocore {botocore_version()}"


EC2_INSTANCE_TYPES = Choices(
    name="Ec2InstanceType",
    what="an EC2 instance type",
    source=lambda: _source("the EC2 API's InstanceType list"),
    values=ec2_instance_types,
)
HYPERPOD_INSTANCE_TYPES = Choices(
    name="HyperPodInstanceType",
    what="a SageMaker HyperPod instance type",
    source=lambda: _source("the SageMaker API's ClusterInstanceType list"),
    values=hyperpod_instance_types,
)
REGIONS = Choices(
    name="Region",
    what="an AWS region",
    source=lambda: _source("the partitions' region list"),
    values=regions,
)
