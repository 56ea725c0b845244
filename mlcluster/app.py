"""The mlcluster CDK app: one stage per file in ``environments/``."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import cx_api

from mlcluster.config import ConfigError
from mlcluster.config.project import check_environments
from mlcluster.lockfile import guard, orphan_locks
from mlcluster.replacement import snapshot_from_assembly

if TYPE_CHECKING:
    from mlcluster.stacks.stage import EnvironmentStage


def selected_environments(app: cdk.App) -> list[str] | None:
    """The ``-c env=a,b`` selection, or None for every environment."""
    value = app.node.try_get_context("env")
    if value is None or value == "":
        return None
    return [name.strip() for name in str(value).split(",")]


#: The CDK CLI's project file. Its ``context`` (feature flags such as
#: ``@aws-cdk/core:defaultCrossStackReferences``) reaches the app from the CLI
#: through the environment; ``build_app`` reads it too, so in-process
#: synthesis (tests, tools) builds the same templates as ``cdk synth``.
CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def project_context(cdk_json: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` of ``cdk_json``; empty when the file is absent (an installed wheel)."""
    if not cdk_json.is_file():
        return {}
    context = json.loads(cdk_json.read_text(encoding="utf-8")).get("context", {})
    return dict(context)


def build_app(
    environments_dir: Path,
    *,
    selected: list[str] | None = None,
    outdir: str | None = None,
    extra_packs: Sequence[str] = (),
    template_checks: bool = True,
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
    """
    context = project_context()
    props: dict[str, Any] = {"context": context, "builtin_cloud_formation_validation": template_checks}
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
    refused: list[ConfigError] = []
    for directory in sorted({Path(stage.environment.source).parent for stage in stages}):
        refused += orphan_locks(directory)
    for stage in stages:
        try:
            _, notes = guard(stage.environment, snapshot_from_assembly(Path(assembly.directory), stage.stage_name))
        except ConfigError as error:
            refused.append(error)
            continue
        for note in notes:
            print(f"mlcluster: warning: {note}", file=sys.stderr)
    if refused:
        for stage in stages:
            shutil.rmtree(Path(assembly.directory) / f"assembly-{stage.stage_name}", ignore_errors=True)
        raise ConfigError.combine(refused)
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
