"""The ``mlcluster`` console script: a click group with one module per verb."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from mlcluster.appdir import APP_DIR_VARIABLE, find_project
from mlcluster.cli import diff
from mlcluster.cli.cost import cost
from mlcluster.cli.errors import EXIT_CODES, EXIT_INTERRUPTED, CliError, botocore_failure, one_line
from mlcluster.cli.health import health
from mlcluster.cli.patch import patch
from mlcluster.cli.preflight import preflight
from mlcluster.cli.smoke import smoke
from mlcluster.cli.ssh import ssh, ssh_config
from mlcluster.cli.status import status
from mlcluster.cli.update import update
from mlcluster.cli.validate import validate


class CliGroup(click.Group):
    """A click group that, run standalone (``CliRunner``, click's own entry), reports a :class:`CliError`.

    It prints the message without a traceback and exits with the error's code. Run with
    ``standalone_mode=False`` (what :func:`main` does, and tests that inspect the exception),
    it lets the ``CliError`` propagate to the caller.
    """

    standalone = True

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        self.standalone = standalone_mode
        return super().main(args, prog_name, complete_var, standalone_mode, **extra)

    def invoke(self, ctx: click.Context) -> object:
        try:
            try:
                return super().invoke(ctx)
            except Exception as error:
                converted = as_cli_error(error)
                if converted is error:
                    raise
                raise converted from None
        except CliError as error:
            if not self.standalone:
                raise
            click.echo(f"mlcluster: {error.message}", err=True)
            ctx.exit(error.exit_code)


def as_cli_error(error: Exception) -> Exception:
    """A botocore error no verb wrapped becomes a :class:`CliError` with its code; anything else is kept."""
    failure = botocore_failure(error)
    if failure is None:
        return error
    code, advice = failure
    return CliError(f"AWS call failed: {one_line(str(error))}\n  what to do: {advice}", code)


EPILOG = (
    "\b\nExit codes:\n"
    + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
    + (
        "\n\n\b\nShell completion (bash; zsh and fish alike with zsh_source, fish_source):\n"
        '  eval "$(_MLCLUSTER_COMPLETE=bash_source mlcluster)"'
    )
)


@click.group(name="mlcluster", cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(package_name="mlcluster", prog_name="mlcluster")
@click.option(
    "--app-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    envvar=APP_DIR_VARIABLE,
    help="The CDK project folder (default: the current folder or the nearest parent with cdk.json).",
)
@click.pass_context
def cli(ctx: click.Context, app_dir: Path | None) -> None:
    """Operate mlcluster environments after `cdk deploy`: reach, inspect, prove and patch clusters.

    The project is found as the CDK CLI would: --app-dir, else the current
    folder or the nearest parent holding cdk.json (without one, the CDK
    feature flags shipped with mlcluster are used, and the command says so).
    Environments are found by name in its environments/ folder (or
    --environments DIR on each command); stacks, outputs, region and account
    come from the environment file and CloudFormation.
    """
    ctx.obj = find_project(app_dir=app_dir)


cli.add_command(ssh)
cli.add_command(ssh_config)
cli.add_command(status)
cli.add_command(smoke)
cli.add_command(health)
cli.add_command(patch)
cli.add_command(validate)
cli.add_command(preflight)
cli.add_command(cost)
cli.add_command(update)
for command in (diff.diff, diff.lock, diff.protect):
    cli.add_command(command)


def main() -> None:
    """Run the command; print a :class:`CliError`, click's errors and Ctrl-C plainly and exit with their codes."""
    try:
        result = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mlcluster: aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except CliError as error:
        click.echo(f"mlcluster: {error.message}", err=True)
        sys.exit(error.exit_code)
    # Without standalone mode, click returns the code of a ``ctx.exit(code)`` (``--help``, ``--version``)
    # instead of raising ``Exit`` or exiting.
    if isinstance(result, int):
        sys.exit(result)
