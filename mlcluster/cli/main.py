"""The ``mlcluster`` console script: a click group with one module per verb."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from mlcluster.cli import diff
from mlcluster.cli.cost import cost
from mlcluster.cli.errors import CliError
from mlcluster.cli.health import health
from mlcluster.cli.patch import patch
from mlcluster.cli.preflight import preflight
from mlcluster.cli.smoke import smoke
from mlcluster.cli.ssh import ssh, ssh_config
from mlcluster.cli.status import status
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
            return super().invoke(ctx)
        except CliError as error:
            if not self.standalone:
                raise
            click.echo(f"mlcluster: {error.message}", err=True)
            ctx.exit(error.exit_code)


@click.group(name="mlcluster", cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mlcluster", prog_name="mlcluster")
def cli() -> None:
    """Operate mlcluster environments after `cdk deploy`: reach, inspect, prove and patch clusters.

    Environments are found by name in ./environments (or --environments DIR
    on each command); stacks, outputs, region and account come from the
    environment file and CloudFormation.
    """


cli.add_command(ssh)
cli.add_command(ssh_config)
cli.add_command(status)
cli.add_command(smoke)
cli.add_command(health)
cli.add_command(patch)
cli.add_command(validate)
cli.add_command(preflight)
cli.add_command(cost)
for command in (diff.diff, diff.lock, diff.protect):
    cli.add_command(command)


def main() -> None:
    """Run the command; print a :class:`CliError`, click's errors and Ctrl-C plainly and exit with their codes."""
    try:
        result = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mlcluster: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except CliError as error:
        click.echo(f"mlcluster: {error.message}", err=True)
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    # Without standalone mode, click returns the code of a ``ctx.exit(code)`` instead of exiting.
    if isinstance(result, int):
        sys.exit(result)
