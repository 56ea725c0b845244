"""Warnings for settings that are legal but probably not what the author wants.

Each rule returns text naming the key path and why; :func:`warnings_for`
gathers them for one environment. Synth and ``mlcluster validate`` print
each once, with the file name, before anything is built.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from mlcluster.config.environment import Environment
from mlcluster.config.network import parse_cidr, unlisted_zones

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


def _dra_exports_deletions(env: Environment) -> list[str]:
    storage = env.config.storage
    if storage.lustre is None:
        return []
    bucket = storage.data_bucket
    kept = (
        f"keeps the deleted version {bucket.noncurrent_version_expiration_days} days"
        if bucket.noncurrent_version_expiration_days is not None
        else "keeps the deleted version (versioning) until someone deletes it"
    )
    backup = (
        f"its AWS Backup recovery points keep it {bucket.backup.retention_days} days"
        if bucket.backup is not None
        else "it has no AWS Backup plan (storage.data_bucket.backup)"
    )
    return [
        f"storage.lustre.data_repository_associations[{index}].auto_export_events: DELETED makes a file removed "
        f"under /fsx{dra.file_system_path} ('rm -rf' included) delete its object in the bucket too; the bucket "
        f"{kept} and {backup}. Leave DELETED out if deletions on the file system must not reach the bucket"
        for index, dra in enumerate(storage.lustre.data_repository_associations)
        if "DELETED" in dra.auto_export_events
    ]


def _home_on_head_node(env: Environment) -> list[str]:
    cluster = env.config.cluster
    if cluster.backend != "pcluster" or cluster.pcluster is None:
        return []
    shared = cluster.pcluster.shared_storage
    if shared.home_on_openzfs or shared.home_volume.enabled:
        return []
    return [
        "cluster.pcluster.shared_storage.home_volume.enabled: false and home_on_openzfs: false, so /home lives on "
        f"the head node's root volume: 'npx cdk destroy {env.name}/Cluster', a new cluster (a new cluster.name, a "
        "ParallelCluster version or head node change) or a lost head node deletes every user's home, and nothing "
        "copies it. Remove home_volume.enabled: false (a retained EBS volume at /home), or add storage.openzfs and "
        "set home_on_openzfs: true"
    ]


def _hyperpod_local_accounting(env: Environment) -> list[str]:
    cluster = env.config.cluster
    if cluster.backend != "hyperpod" or cluster.hyperpod is None:
        return []
    if cluster.hyperpod.lifecycle.accounting.mode != "local":
        return []
    return [
        "cluster.hyperpod.lifecycle.accounting.mode: local keeps the Slurm accounting database and slurmctld's "
        "state on the controller's own volume: replacing the controller or deleting the cluster destroys the job "
        "history, and its only copy is the one 'mlcluster patch' takes around a patch. A scheduled second copy "
        "is a database outside the cluster (mode: remote)"
    ]


def _unlisted_zones(env: Environment) -> list[str]:
    return unlisted_zones(env.config.network, env.config.region)


RULES: tuple[Rule, ...] = (
    _unlisted_zones,
    _public_ranges,
    _unreachable,
    _destroy_with_compliance,
    _sagemaker_bucket,
    _single_nat,
    _unused_cluster_name,
    _dra_exports_deletions,
    _home_on_head_node,
    _hyperpod_local_accounting,
)


def warnings_for(env: Environment) -> list[str]:
    """Every warning for ``env``, as ``<key path>: <why and what to do>``."""
    return [text for rule in RULES for text in rule(env)]
