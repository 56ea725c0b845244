"""Write the `mlcluster` command reference (docs/reference/cli.md) from click's command tree.

Each command's section is exactly what ``mlcluster ... --help`` prints (click's own formatter, at a
fixed width of 100 columns so the page does not depend on the terminal), so the page cannot say
anything the command does not. ``make docs`` runs it; ``tests/docs/test_site.py`` fails while the
page is stale. ``--check`` only reports a stale page (exit 1) and writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mlcluster.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "cli.md"
#: The help text's width: wide enough for the option tables, fixed so the page is the same everywhere.
WIDTH = 100


def _sections(command: click.Command, parent: click.Context | None, name: str) -> list[str]:
    """The help of ``command`` and, for a group, of each subcommand in the order ``--help`` lists them."""
    # The command's own context settings (the root's ``-h``) as ``mlcluster`` itself uses them: click caches each
    # command's help option the first time it is built, so a context without them would change ``--help`` for
    # the rest of the process.
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    path = ctx.command_path
    out = [f"## `{path}`", "", "```text", command.get_help(ctx), "```", ""]
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            child = command.get_command(ctx, sub)
            if child is not None and not child.hidden:
                out += _sections(child, ctx, sub)
    return out


def render() -> str:
    """The whole page: a short introduction, then one section per command."""
    head = [
        "# The `mlcluster` command",
        "",
        "Generated from the command itself (`tools/gen_cli_docs.py`, run by `make docs`): each section is",
        "what `--help` prints. What the commands do in practice, with real output, is on the",
        "[day one](../use-cases/day-one.md) and [day two](../use-cases/day-two.md) pages.",
        "",
    ]
    return "\n".join(head + _sections(cli, None, "mlcluster")).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """Write the page, or with ``--check`` report whether it is stale."""
    text = render()
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else None
    if current == text:
        return 0
    if "--check" in argv:
        print(f"{PAGE.relative_to(ROOT)}: stale (run `make docs`)")
        return 1
    PAGE.write_text(text, encoding="utf-8")
    print(f"{PAGE.relative_to(ROOT)}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
