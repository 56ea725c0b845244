"""``mlcluster validate``: check environment files without CDK, for pre-commit hooks and CI.

It runs exactly the checks ``cdk synth`` runs before building anything
(:func:`mlcluster.config.project.check_environments`), prints the same
messages and exits the same way: 0 when every file is valid (warnings
included), 1 on any configuration error.
"""

from __future__ import annotations

from pathlib import Path

import click

from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.config.schema import ConfigError


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--environments",
    "environments_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("environments"),
    show_default=True,
    help="Directory whose *.yaml and *.yml files are checked when no FILES are given.",
)
def validate(files: tuple[Path, ...], environments_dir: Path) -> None:
    """Check environment FILES (default: every file in --environments) as `cdk synth` would.

    Reports every problem of every file (file, key path, value, what is
    allowed), names two files that claim the same bucket, cluster, stack or
    export name, and prints warnings for settings that are legal but unwise.
    Exit 0 when valid, 1 on a configuration error.
    """
    from mlcluster.config.project import check_environments, check_files

    try:
        checked = check_files(files) if files else check_environments(environments_dir)
    except ConfigError as error:
        raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
    for warning in checked.warnings:
        click.echo(f"mlcluster: warning: {warning}", err=True)
    names = ", ".join(env.name for env in checked.environments)
    click.echo(f"mlcluster: {len(checked.environments)} environment file(s) valid: {names}")
