"""The mlcluster CDK app: one stage per file in ``environments/``."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import cx_api

from mlcluster.appdir import find_project
from mlcluster.config import ConfigError
from mlcluster.config.project import check_environments
from mlcluster.lockfile import guard_assembly

if TYPE_CHECKING:
    from mlcluster.stacks.stage import EnvironmentStage


def selected_environments(app: cdk.App) -> list[str] | None:
    """The ``-c env=a,b`` selection, or None for every environment."""
    value = app.node.try_get_context("env")
    if value is None or value == "":
        return None
    return [name.strip() for name in str(value).split(",")]


def project_context() -> dict[str, Any]:
    """The feature flags of the project in the current folder (see :mod:`mlcluster.appdir`).

    ``cdk synth`` runs the app in the folder of ``cdk.json``; in-process
    synthesis (tests, tools) finds the same file from the current folder up,
    and falls back to the flags the package ships, so both build the same
    templates as ``cdk deploy``.
    """
    return find_project().context()


def build_app(
    environments_dir: Path,
    *,
    selected: list[str] | None = None,
    outdir: str | None = None,
    extra_packs: Sequence[str] = (),
    template_checks: bool = True,
    context: dict[str, Any] | None = None,
) -> tuple[cdk.App, list[EnvironmentStage]]:
    """Load and validate every selected environment, then compose one stage each.

    All files are validated before any construct is made, so a bad file
    synthesizes nothing; the checks are the ones ``mlcluster validate`` runs
    (:func:`mlcluster.config.project.check_environments`), and each warning
    is printed once. ``extra_packs`` (names from ``EXTRA_PACKS``) run on
    every environment in addition to the packs its file lists: the tests use
    it to judge every environment under every pack in one synthesis. The
    stacks' modules (most of aws-cdk-lib's Python) are imported only once
    the files are valid, so a bad file is reported a second sooner.

    ``template_checks=False`` synthesizes the same templates without judging
    them: no cdk-nag pack and no CloudFormation validation (aws-cdk-lib's
    built-in plugin, whose engine costs seconds of CPU per process), and no
    acknowledgement metadata for them (``nag.acknowledgements_skipped``). It is
    for tests that only compare templates (the day-two edit table) while
    others run every check on the same configurations; ``app.py`` and the
    ``mlcluster`` command never pass it, and no context key or environment
    variable of ours turns it off.

    ``context`` is the feature flags to build with (default:
    :func:`project_context`); the ``mlcluster`` command passes its project's.
    """
    flags = project_context() if context is None else context
    props: dict[str, Any] = {"context": flags, "builtin_cloud_formation_validation": template_checks}
    app = cdk.App(outdir=outdir, **props) if outdir is not None else cdk.App(**props)
    chosen = selected if selected is not None else selected_environments(app)
    checked = check_environments(environments_dir, chosen)
    for warning in checked.warnings:
        print(f"mlcluster: warning: {warning}", file=sys.stderr)
    from mlcluster.constructs.nag import acknowledgements_skipped
    from mlcluster.stacks.stage import EnvironmentStage

    with contextlib.nullcontext() if template_checks else acknowledgements_skipped():
        stages = [
            EnvironmentStage(app, env, extra_packs=extra_packs, nag=template_checks) for env in checked.environments
        ]
    return app, stages


def synth_guarded(app: cdk.App, stages: list[EnvironmentStage]) -> cx_api.CloudAssembly:
    """Synthesize, then refuse what the lock files do not expect (see ``mlcluster.lockfile.guard``).

    Raises ``ConfigError`` naming every refused change of every environment, and every lock file
    whose environment file is gone. On any refusal every stage's templates are removed from the
    output directory first (its nested assembly), so ``cdk deploy --app cdk.out`` deploys
    nothing of a refused synth: the top-level manifest still names the assemblies, and the CLI
    fails reading them. Notices about what an accepted edit leaves running are printed as warnings.
    """
    assembly = app.synth()
    try:
        notes = guard_assembly(Path(assembly.directory), [stage.environment for stage in stages])
    except ConfigError:
        for stage in stages:
            shutil.rmtree(Path(assembly.directory) / f"assembly-{stage.stage_name}", ignore_errors=True)
        raise
    for note in notes:
        print(f"mlcluster: warning: {note}", file=sys.stderr)
    return assembly


def main() -> None:
    """Entry point of ``app.py``: print config errors plainly and exit 1."""
    try:
        app, stages = build_app(Path("environments"))
    except ConfigError as error:
        print(f"mlcluster: configuration error\n{error}", file=sys.stderr)
        sys.exit(1)
    except ValueError as error:
        # The constructs check their props too; the config checks should catch everything first.
        print(f"mlcluster: invalid settings\n{error}", file=sys.stderr)
        sys.exit(1)
    try:
        synth_guarded(app, stages)
    except ConfigError as error:
        print(
            f"mlcluster: change refused (no template of this synth is left in the output to deploy)\n{error}",
            file=sys.stderr,
        )
        sys.exit(1)
