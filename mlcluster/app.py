"""The mlcluster CDK app: one stage per file in ``environments/``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk

from mlcluster.config import ConfigError, Environment, Problem, load_environments
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.pcluster.checks import check_environment
from mlcluster.stacks.stage import EnvironmentStage


def selected_environments(app: cdk.App) -> list[str] | None:
    """The ``-c env=a,b`` selection, or None for every environment."""
    value = app.node.try_get_context("env")
    if value is None or value == "":
        return None
    return [name.strip() for name in str(value).split(",")]


def build_app(
    environments_dir: Path,
    *,
    selected: list[str] | None = None,
    outdir: str | None = None,
    extra_packs: Sequence[str] = (),
) -> tuple[cdk.App, list[EnvironmentStage]]:
    """Load and validate every selected environment, then compose one stage each.

    All files are validated before any construct is made, so a bad file
    synthesizes nothing. ``extra_packs`` (names from ``EXTRA_PACKS``) run on
    every environment in addition to the packs its file lists: the tests and
    the compliance report use it to judge every environment under every pack
    in one synthesis.
    """
    app = cdk.App(outdir=outdir) if outdir is not None else cdk.App()
    chosen = selected if selected is not None else selected_environments(app)
    environments: list[Environment] = load_environments(environments_dir, chosen)
    for warning in pre_deploy_checks(environments):
        print(f"mlcluster: warning: {warning}", file=sys.stderr)
    stages = [EnvironmentStage(app, env, extra_packs=extra_packs) for env in environments]
    return app, stages


def pre_deploy_checks(environments: list[Environment]) -> list[str]:
    """Run the cluster backends' checks that need the whole environment; raise on any error.

    Errors become one ``ConfigError`` naming file, key path, value and fix,
    raised before any construct exists; warnings are returned as text.
    """
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


def main() -> None:
    """Entry point of ``app.py``: print config errors plainly and exit 1."""
    try:
        app, _ = build_app(Path("environments"))
    except ConfigError as error:
        print(f"mlcluster: configuration error\n{error}", file=sys.stderr)
        sys.exit(1)
    except ValueError as error:
        # The constructs check their props too; the config checks should catch everything first.
        print(f"mlcluster: invalid settings\n{error}", file=sys.stderr)
        sys.exit(1)
    app.synth()
