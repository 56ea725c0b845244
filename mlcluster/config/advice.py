"""Warnings for settings that are legal but probably not what the author wants.

Each rule returns text naming the key path and why; :func:`warnings_for`
gathers them for one environment. Synth and ``mlcluster validate`` print
each once, with the file name, before anything is built.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from mlcluster.config.environment import Environment
from mlcluster.config.network import parse_cidr

#: RFC 1918 private address space; VPC ranges outside it shadow public addresses.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
#: Bucket names AWS managed policies grant access to by pattern (AmazonSageMakerFullAccess and others).
SAGEMAKER_WORDS = ("sagemaker", "SageMaker", "Sagemaker")

Rule = Callable[[Environment], list[str]]


def _public_ranges(env: Environment) -> list[str]:
    net = env.config.network
    found = []
    for key in ("cidr", "secondary_cidr"):
        value = getattr(net, key)
        block = parse_cidr(value) if value is not None else None
        if net.existing is None and block is not None and not any(block.subnet_of(p) for p in PRIVATE_RANGES):
            found.append(
                f"network.{key}: {value} is outside the private address space (10.0.0.0/8, 172.16.0.0/12, "
                "192.168.0.0/16); the VPC then hides the public addresses in it from every node"
            )
    return found


def _unreachable(env: Environment) -> list[str]:
    # The pcluster pre-deploy checks warn about a private head node without Session Manager; this is the
    # case they do not cover: no Session Manager and no SSH key, so nobody can log in from anywhere.
    cfg = env.config.cluster.pcluster
    if env.config.cluster.backend != "pcluster" or cfg is None or cfg.head_node.ssm:
        return []
    if cfg.head_node.key_name is not None:
        return []
    return [
        "cluster.pcluster.head_node: ssm is false and there is no key_name, so no operator can log in to the "
        "cluster from anywhere (no Session Manager, no SSH key); set ssm: true or give a key pair"
    ]


def _destroy_with_compliance(env: Environment) -> list[str]:
    cfg = env.config
    if cfg.retention.on_delete != "destroy" or not cfg.compliance.packs:
        return []
    return [
        f"retention.on_delete: destroy deletes the data bucket, file systems and logs with the stacks, while "
        f"compliance.packs ({', '.join(cfg.compliance.packs)}) asks for an audited environment; use retain"
    ]


def _sagemaker_bucket(env: Environment) -> list[str]:
    name = env.config.storage.data_bucket.name
    if name is None or not any(word in name for word in SAGEMAKER_WORDS):
        return []
    return [
        f"storage.data_bucket.name: {name!r} contains 'sagemaker'; AWS managed policies such as "
        "AmazonSageMakerFullAccess grant s3:PutObject on every such bucket, so roles outside this environment "
        "could write to it; choose a name without it"
    ]


def _single_nat(env: Environment) -> list[str]:
    net = env.config.network
    if net.existing is not None or not net.extra_zones or net.nat_gateways != "one":
        return []
    return [
        "network.nat_gateways: one NAT gateway serves private subnets in "
        f"{len(net.extra_zones) + 1} zones; traffic from the others crosses zones (charged) and stops when the "
        "primary zone fails; use per_zone"
    ]


def _unused_cluster_name(env: Environment) -> list[str]:
    cluster = env.config.cluster
    if cluster.backend != "none" or cluster.name is None:
        return []
    return [f"cluster.name: {cluster.name!r} is set but cluster.backend is none, so nothing uses it"]


RULES: tuple[Rule, ...] = (
    _public_ranges,
    _unreachable,
    _destroy_with_compliance,
    _sagemaker_bucket,
    _single_nat,
    _unused_cluster_name,
)


def warnings_for(env: Environment) -> list[str]:
    """Every warning for ``env``, as ``<key path>: <why and what to do>``."""
    return [text for rule in RULES for text in rule(env)]
