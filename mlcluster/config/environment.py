"""The whole environment file and how it is found and loaded."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import yaml

from mlcluster.config.hyperpod import HyperPodConfig
from mlcluster.config.network import ACCOUNT, REGION, NetworkConfig
from mlcluster.config.pcluster import PclusterConfig
from mlcluster.config.schema import ConfigError, Issues, Problem, load_section, section, setting
from mlcluster.config.storage import StorageConfig

#: Retention periods CloudWatch Logs accepts, in days.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)

#: Extra cdk-nag packs an environment may list; AwsSolutions always runs.
COMPLIANCE_PACKS = ("nist-800-53-r5", "hipaa-security", "pci-dss-3.2.1")

ENV_NAME = r"[a-z][a-z0-9-]{0,19}"


@section
class ComplianceConfig:
    """cdk-nag packs that run on this environment in addition to AwsSolutions."""

    packs: tuple[Literal["nist-800-53-r5", "hipaa-security", "pci-dss-3.2.1"], ...] = ()

    def check(self, issues: Issues) -> None:
        if len(set(self.packs)) != len(self.packs):
            issues.add("packs", list(self.packs), "each pack may appear once")


@section
class RetentionConfig:
    """What happens to data and logs when stacks are deleted."""

    on_delete: Literal["retain", "destroy"] = "retain"
    log_retention_days: int = setting(
        default=365, one_of=LOG_RETENTION_DAYS, allowed="allowed: " + ", ".join(str(d) for d in LOG_RETENTION_DAYS)
    )

    #: Construct paths (below the environment) of data-bearing resources this
    #: file explicitly lets the next deploy replace, e.g. ``Storage/Lustre``.
    #: The synth-time guard (``mlcluster.lockfile``) refuses every other replacement.
    allow_replacement: tuple[str, ...] = setting(
        default=(),
        pattern=r"(Storage|DataRepository|Cluster|Network)(/[A-Za-z0-9_.-]+)*",
        allowed="allowed: construct paths below the environment, e.g. 'Storage/Lustre' or 'Cluster/Cluster'",
    )

    @property
    def keeps_data(self) -> bool:
        return self.on_delete == "retain"


@section
class ClusterConfig:
    """Which cluster runs on the network and storage, if any."""

    backend: Literal["none", "pcluster", "hyperpod"] = "none"
    name: str | None = setting(
        default=None,
        pattern=r"[a-zA-Z][a-zA-Z0-9-]{0,59}",
        allowed="allowed: 1-60 letters, digits and hyphens starting with a letter (default: mlcluster-<environment>)",
    )
    hyperpod: HyperPodConfig | None = None
    pcluster: PclusterConfig | None = None

    def check(self, issues: Issues) -> None:
        if self.backend == "hyperpod" and self.name is not None and (len(self.name) > 56 or self.name.endswith("-")):
            issues.add(
                "name",
                self.name,
                "HyperPod cluster names take a 7-character suffix: use at most 56 letters, digits and hyphens, "
                "not ending in '-'",
            )
        for backend in ("hyperpod", "pcluster"):
            section_value = getattr(self, backend)
            if self.backend == backend and section_value is None:
                issues.add(backend, None, f"required with backend: {backend}")
            if self.backend != backend and section_value is not None:
                issues.add(backend, "...", f"only used with backend: {backend} (backend is {self.backend!r})")


@section
class EnvironmentConfig:
    """One deployable environment: network, storage and an optional cluster."""

    description: str = ""
    account: str | None = setting(default=None, pattern=ACCOUNT, allowed="allowed: a 12-digit AWS account ID, quoted")
    region: str | None = setting(default=None, pattern=REGION, allowed="allowed: a region such as 'us-east-1'")
    tags: dict[str, str] = setting(default={})
    compliance: ComplianceConfig = setting(default=ComplianceConfig())
    retention: RetentionConfig = setting(default=RetentionConfig())
    network: NetworkConfig = setting(allowed="a network section")
    storage: StorageConfig = setting(default=StorageConfig())
    cluster: ClusterConfig = setting(default=ClusterConfig())

    def check(self, issues: Issues) -> None:
        for key, value in self.tags.items():
            if not 1 <= len(key) <= 128 or key.lower().startswith("aws:"):
                issues.add(f"tags.{key}", key, "allowed: tag keys of 1-128 characters not starting with 'aws:'")
            if len(value) > 256:
                issues.add(f"tags.{key}", value, "allowed: tag values of at most 256 characters")


@section
class Environment:
    """A loaded environment: its name (the file's stem), source and settings."""

    name: str
    source: str
    config: EnvironmentConfig

    @property
    def cluster_name(self) -> str:
        return self.config.cluster.name or f"mlcluster-{self.name}"


def load_environment(path: Path) -> Environment:
    """Read and validate one environment file; raise ``ConfigError`` on any problem."""
    source = str(path)
    if not re.fullmatch(ENV_NAME, path.stem):
        raise ConfigError(
            source,
            [
                Problem(
                    "(file name)", path.stem, "allowed: 1-20 lowercase letters, digits and '-', starting with a letter"
                )
            ],
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(source, [Problem("(file)", str(path), f"cannot be read: {exc.strerror}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [Problem(where, "YAML", f"cannot be parsed: {reason}")]) from None
    if not isinstance(data, Mapping):
        raise ConfigError(source, [Problem("(top level)", data, "expected a mapping of settings")])
    config = load_section(EnvironmentConfig, data, source)
    return Environment(name=path.stem, source=source, config=config)


def load_environments(directory: Path, selected: Iterable[str] | None = None) -> list[Environment]:
    """Load every ``*.yaml`` in ``directory``, or only the ``selected`` names.

    Raises ``ConfigError`` naming an unknown selection or the problems of
    every file that fails (all files are checked before any is used).
    """
    files = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    if selected is not None:
        wanted = [s for s in selected if s]
        unknown = [s for s in wanted if s not in files]
        if unknown:
            raise ConfigError(
                str(directory),
                [
                    Problem(
                        "-c env", ",".join(unknown), "allowed: " + (", ".join(files) or "no environment files found")
                    )
                ],
            )
        files = {name: files[name] for name in wanted}
    if not files:
        raise ConfigError(str(directory), [Problem("(directory)", str(directory), "add at least one <name>.yaml")])
    loaded: list[Environment] = []
    failures: list[ConfigError] = []
    for path in files.values():
        try:
            loaded.append(load_environment(path))
        except ConfigError as exc:
            failures.append(exc)
    if failures:
        raise ConfigError.combine(failures)
    return loaded


__all__ = [
    "COMPLIANCE_PACKS",
    "ClusterConfig",
    "ComplianceConfig",
    "Environment",
    "EnvironmentConfig",
    "HyperPodConfig",
    "PclusterConfig",
    "RetentionConfig",
    "load_environment",
    "load_environments",
]
