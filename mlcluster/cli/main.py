"""The ``mlcluster`` console script: a click group with one module per verb."""

from __future__ import annotations

import sys

import click

from mlcluster.cli import diff
from mlcluster.cli.errors import CliError
from mlcluster.cli.validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mlcluster", prog_name="mlcluster")
def cli() -> None:
    """Operate mlcluster environments after `cdk deploy`: reach, inspect, prove and patch clusters.

    Environments are found by name in ./environments (or --environments DIR
    on each command); stacks, outputs, region and account come from the
    environment file and CloudFormation.
    """


cli.add_command(validate)
for command in (diff.diff, diff.lock, diff.protect):
    cli.add_command(command)


def main() -> None:
    """Run the command; print a :class:`CliError` plainly and exit with its code."""
    try:
        cli.main(standalone_mode=False)
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
