"""The options every environment verb shares (``mlcluster/cli/context.py``), built at test time.

The verbs apply ``environment_options`` when ``mlcluster.cli`` is imported, before a mutation test
switches a mutant on, so only a command decorated inside a test reaches a mutant of it (cli's
``environment_options`` survivors 14 and 22 of the seed-1 sample).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from mlcluster.cli.context import environment_options


def _verb() -> click.Command:
    @click.command()
    @environment_options
    def verb(**params: Any) -> None:
        click.echo(f"{params['env']} {params['environments']} {params['region']} {params['profile']}")

    return verb


def test_environments_takes_a_folder_and_hands_it_over_as_a_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _verb(), ["dev", "--environments", str(tmp_path), "--region", "us-west-2", "--profile", "ops"]
    )
    assert result.exit_code == 0, result.output
    assert result.output == f"dev {tmp_path} us-west-2 ops\n"


def test_environments_refuses_a_file_with_the_option_named(tmp_path: Path) -> None:
    """An environment *file* given where the folder goes is a usage error (exit 2), not read as a folder."""
    file = tmp_path / "dev.yaml"
    file.write_text("name: dev\n")
    result = CliRunner().invoke(_verb(), ["dev", "--environments", str(file)])
    assert result.exit_code == 2
    assert "Invalid value for '--environments'" in result.output
    assert "is a file" in result.output


def test_without_options_the_defaults_are_none() -> None:
    result = CliRunner().invoke(_verb(), ["dev"])
    assert result.exit_code == 0, result.output
    assert result.output == "dev None None None\n"
