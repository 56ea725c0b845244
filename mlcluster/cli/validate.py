"""``mlcluster validate``: check environment files without CDK, for pre-commit hooks and CI.

It runs exactly the checks ``cdk synth`` runs before building anything
(:func:`mlcluster.config.project.check_environments`), prints the same
messages and exits the same way: 0 when every file is valid (warnings
included), 1 on any configuration error.
"""

from __future__ import annotations

from pathlib import Path

import click

from mlcluster.cli.context import echo_json, environments_folder, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.config.schema import ConfigError


def resolve_files(files: tuple[Path, ...], environments_dir: Path | None) -> tuple[Path, ...]:
    """FILES as given, except a bare environment name (``dev``: no folder, no suffix, no such file), which
    names ``<environments>/dev.yaml`` (or ``.yml``), as every other verb's ENV does."""
    resolved = []
    for file in files:
        if file.is_file() or file.suffix or len(file.parts) != 1:
            resolved.append(file)
            continue
        folder = environments_folder(environments_dir)
        named = [folder / f"{file.name}{suffix}" for suffix in (".yaml", ".yml")]
        resolved.append(next((path for path in named if path.is_file()), named[0]))
    return tuple(resolved)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--environments",
    "environments_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder whose *.yaml and *.yml files are checked when no FILES are given "
    "(default: environments/ beside cdk.json, else ./environments).",
)
@json_option
def validate(files: tuple[Path, ...], environments_dir: Path | None, as_json: bool) -> None:
    """Check environment FILES (default: every file in --environments) as `cdk synth` would.

    A bare name such as `dev` means <environments>/dev.yaml.

    Reports every problem of every file (file, key path, value, what is
    allowed), names two files that claim the same bucket, cluster, stack or
    export name, and prints warnings for settings that are legal but unwise.
    Exit 0 when valid, 1 on a configuration error. With --json, one document
    on stdout either way: {"valid", "environments", "warnings", "errors"}.
    """
    from mlcluster.config.project import check_environments, check_files

    try:
        checked = (
            check_files(resolve_files(files, environments_dir))
            if files
            else check_environments(environments_folder(environments_dir))
        )
    except ConfigError as error:
        if as_json:
            errors = [{"file": source, "key": p.path, "message": p.render()} for source, p in error.entries]
            echo_json({"valid": False, "environments": [], "warnings": [], "errors": errors})
        raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
    names = [env.name for env in checked.environments]
    if as_json:
        echo_json({"valid": True, "environments": names, "warnings": list(checked.warnings), "errors": []})
        return
    for warning in checked.warnings:
        click.echo(f"mlcluster: warning: {warning}", err=True)
    click.echo(f"mlcluster: {len(names)} environment file(s) valid: {', '.join(names)}")
