"""Everything checked before anything is built, shared by ``cdk synth`` and ``mlcluster validate``.

:func:`check_environments` loads the files, checks the names they share,
runs the cluster backends' pre-deploy checks and gathers the warnings. It
never imports aws-cdk-lib, so ``mlcluster validate`` stays fast, and both
commands report the same problems in the same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlcluster.config.advice import warnings_for
from mlcluster.config.environment import Environment, load_environments, load_files
from mlcluster.config.schema import NOT_A_VALUE, ConfigError, Problem


@dataclass(frozen=True)
class Checked:
    """Environments that passed every check, and the warnings to print once."""

    environments: list[Environment]
    warnings: list[str]


def pre_deploy_checks(environments: Sequence[Environment]) -> list[str]:
    """Run the cluster backends' checks that need the whole environment; raise on any error.

    Errors become one ``ConfigError`` naming file, key path, value and fix;
    warnings are returned as ``<file>: <key path>: <message>``.
    """
    from mlcluster.pcluster.checks import check_environment

    problems: list[ConfigError] = []
    warnings: list[str] = []
    for env in environments:
        findings = check_environment(env, stack_name=f"{env.name}-Cluster")
        errors = [Problem(f.path, NOT_A_VALUE, f.message) for f in findings if f.level == "error"]
        if errors:
            problems.append(ConfigError(env.source, errors))
        warnings += [f"{env.source}: {f.path}: {f.message}" for f in findings if f.level == "warning"]
    if problems:
        raise ConfigError.combine(problems)
    return warnings


def check_loaded(environments: list[Environment]) -> Checked:
    """Pre-deploy checks and warnings for environments already loaded (and checked for shared names)."""
    warnings = pre_deploy_checks(environments)
    warnings += [f"{env.source}: {text}" for env in environments for text in warnings_for(env)]
    return Checked(environments, warnings)


def check_environments(directory: Path, selected: Sequence[str] | None = None) -> Checked:
    """Load and check the environments in ``directory`` (or the ``selected`` names); raise ``ConfigError``."""
    return check_loaded(load_environments(directory, selected))


def check_files(files: Sequence[Path]) -> Checked:
    """Load and check exactly ``files``, including the names they share; raise ``ConfigError``."""
    return check_loaded(load_files(files))
