"""Names two environment files must not share.

Some names are unique in the whole of AWS (S3 bucket names), others per
account and region (CloudFormation stack and export names, cluster names).
Two environment files that claim the same name would deploy fine one at a
time and fail, or take over each other's resources, the second time. Each
file's claims are listed here, and any two that meet are an error naming
both files.

An environment without ``account`` or ``region`` deploys wherever the
credentials point, so it is taken to share that account or region with any
other environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mlcluster.config.environment import Environment
from mlcluster.config.schema import NOT_A_VALUE, ConfigError, Problem

#: The HyperPod lifecycle bucket, ``mlc-lifecycle-<environment>-<account>-<region>`` (see the lifecycle construct).
LIFECYCLE_BUCKET_PREFIX = "mlc-lifecycle"
#: The stacks an environment can deploy, named ``<environment>-<stack>`` (``mlcluster.stacks.stage``).
STACKS = ("Network", "Storage", "DataRepository", "Observability", "Cluster")


@dataclass(frozen=True)
class Claim:
    """A name one environment takes in a namespace."""

    namespace: str
    name: str
    path: str
    scope: Literal["world", "region"]
    account: str | None
    region: str | None

    def meets(self, other: Claim) -> bool:
        """True when both take the same name where it must be unique."""
        if self.namespace != other.namespace or self.name != other.name:
            return False
        if self.scope == "world":
            return True
        same_account = self.account is None or other.account is None or self.account == other.account
        same_region = self.region is None or other.region is None or self.region == other.region
        return same_account and same_region


def claims(env: Environment) -> list[Claim]:
    """Every name ``env`` takes that another environment must not."""
    cfg = env.config
    account, region = cfg.account, cfg.region

    def claim(namespace: str, name: str, path: str, scope: Literal["world", "region"] = "region") -> Claim:
        return Claim(namespace, name, path, scope, account, region)

    found = [claim("CloudFormation stack name", f"{env.name}-{stack}", "(file name)") for stack in STACKS]
    found.append(claim("CloudFormation export name", f"{env.name}-*", "(file name)"))
    if cfg.storage.data_bucket.name is not None:
        found.append(claim("S3 bucket name", cfg.storage.data_bucket.name, "storage.data_bucket.name", "world"))
    if cfg.cluster.backend == "pcluster":
        # ParallelCluster names its own CloudFormation stack after the cluster.
        found.append(claim("ParallelCluster cluster name", env.cluster_name, "cluster.name"))
        found.append(claim("CloudFormation stack name", env.cluster_name, "cluster.name"))
    if cfg.cluster.backend == "hyperpod":
        found.append(claim("HyperPod cluster name", env.cluster_name, "cluster.name"))
        bucket = f"{LIFECYCLE_BUCKET_PREFIX}-{env.name}-{account or '<account>'}-{region or '<region>'}"
        found.append(claim("HyperPod lifecycle bucket name", bucket, "(file name)"))
    return found


def collisions(environments: Sequence[Environment]) -> list[tuple[Environment, Problem]]:
    """Each name claimed by two environments, reported once per pair of files and key paths."""
    found: list[tuple[Environment, Problem]] = []
    reported: set[tuple[str, str, str, str]] = set()
    every = [(env, c) for env in environments for c in claims(env)]
    for j, (env, later) in enumerate(every):
        for other, earlier in every[:j]:
            if other is env or not later.meets(earlier):
                continue
            pair = (other.source, earlier.path, env.source, later.path)
            if pair in reported:
                continue
            reported.add(pair)
            where = "in every account and region" if later.scope == "world" else "in the same account and region"
            found.append(
                (
                    env,
                    Problem(
                        later.path,
                        NOT_A_VALUE,
                        f"{later.namespace} {later.name!r} is also taken by {other.source} ({earlier.path}); "
                        f"it must be unique {where}: rename one"
                        + (", or set different account or region in the two files" if later.scope == "region" else ""),
                    ),
                )
            )
    return found


def check_unique(environments: Sequence[Environment]) -> None:
    """Raise ``ConfigError`` naming both files of every name two environments share."""
    found = collisions(environments)
    if found:
        raise ConfigError.combine([ConfigError(env.source, [problem]) for env, problem in found])
