"""Environment configuration: typed, immutable, validated before any construct is made."""

from mlcluster.config.environment import (
    ClusterConfig,
    ComplianceConfig,
    Environment,
    EnvironmentConfig,
    RetentionConfig,
    load_environment,
    load_environments,
)
from mlcluster.config.schema import ConfigError, Problem

__all__ = [
    "ClusterConfig",
    "ComplianceConfig",
    "ConfigError",
    "Environment",
    "EnvironmentConfig",
    "Problem",
    "RetentionConfig",
    "load_environment",
    "load_environments",
]
