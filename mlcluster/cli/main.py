"""The ``mlcluster`` console script: a click group with one module per verb."""

from __future__ import annotations

import sys

import click

from mlcluster.cli import diff
from mlcluster.cli.errors import CliError
from mlcluster.cli.patch import patch
from mlcluster.cli.smoke import smoke
from mlcluster.cli.ssh import ssh, ssh_config
from mlcluster.cli.status import status
from mlcluster.cli.validate import validate


class CliGroup(click.Group):
    """A click group that reports a :class:`CliError` plainly (no traceback) and exits with its code.

    Handling it here rather than only in :func:`main` makes the behaviour the same under
    ``CliRunner`` and in the console script.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except CliError as error:
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
cli.add_command(patch)
cli.add_command(validate)
for command in (diff.diff, diff.lock, diff.protect):
    cli.add_command(command)


def main() -> None:
    """Run the command: click's errors and Ctrl-C without a traceback (:class:`CliGroup` handles ``CliError``)."""
    try:
        result = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mlcluster: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    # Without standalone mode, click returns the code of a ``ctx.exit`` (how CliGroup reports a CliError).
    if isinstance(result, int):
        sys.exit(result)
