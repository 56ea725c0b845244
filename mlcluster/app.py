"""The mlcluster CDK app: one stage per file in ``environments/``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk

from mlcluster.config import ConfigError
from mlcluster.config.project import check_environments
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
    synthesizes nothing; the checks are the ones ``mlcluster validate`` runs
    (:func:`mlcluster.config.project.check_environments`), and each warning
    is printed once. ``extra_packs`` (names from ``EXTRA_PACKS``) run on
    every environment in addition to the packs its file lists: the tests use
    it to judge every environment under every pack in one synthesis.
    """
    app = cdk.App(outdir=outdir) if outdir is not None else cdk.App()
    chosen = selected if selected is not None else selected_environments(app)
    checked = check_environments(environments_dir, chosen)
    for warning in checked.warnings:
        print(f"mlcluster: warning: {warning}", file=sys.stderr)
    stages = [EnvironmentStage(app, env, extra_packs=extra_packs) for env in checked.environments]
    return app, stages


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
