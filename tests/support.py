"""Test helpers: load environments from YAML text and synthesize them."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import aws_cdk as cdk
import yaml
from aws_cdk import cx_api

from mlcluster.app import build_app

if TYPE_CHECKING:
    from cfnlint.rules import Rules

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ROOT / "environments"
EXAMPLES = sorted(p.stem for p in ENVIRONMENTS.glob("*.yaml"))

#: The smallest valid environment: one zone by name.
MINIMAL: dict[str, object] = {"network": {"availability_zone": "us-east-1a"}}


def write_env(directory: Path, name: str, data: dict[str, object] | str) -> Path:
    """Write an environment file; ``data`` is a mapping or raw YAML text."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def synth_dir(envs: Path, outdir: Path) -> tuple[cdk.App, cx_api.CloudAssembly]:
    """Synthesize every environment in ``envs``."""
    app, _ = build_app(envs, outdir=str(outdir))
    return app, app.synth()


def stack_templates(assembly: cx_api.CloudAssembly) -> dict[str, dict[str, object]]:
    """Every stack template in a nested (stage) assembly, by display name (``dev/Network``)."""
    out: dict[str, dict[str, object]] = {}
    for nested in assembly.nested_assemblies:
        for stack in nested.nested_assembly.stacks:
            out[stack.hierarchical_id] = stack.template
    return out


def cfn_lint(files: Iterable[Path | str], *, ignore: Iterable[str] = ()) -> dict[str, list[str]]:
    """cfn-lint's findings on ``files``, per file (``line:column: rule message``); empty lists when clean.

    Runs cfn-lint's own runner in this process, with the options ``cfn-lint
    [--ignore-checks ...] -- FILES`` gets from its command line (and any
    ``.cfnlintrc``): the rules and the resource schemas load once per test
    process instead of once per cfn-lint process (a second or more of CPU
    each). A finding cfn-lint cannot tie to one of ``files`` fails here.
    """
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner.template.runner import run_template_by_file_paths

    names = [str(f) for f in files]
    if not names:
        raise ValueError("cfn_lint needs at least one template file")
    ignored = list(ignore)
    options = ["--ignore-checks", *ignored] if ignored else []
    matches = list(run_template_by_file_paths(ConfigMixIn([*options, "--", *names]), _cfn_lint_rules()))
    findings: dict[str, list[str]] = {name: [] for name in names}
    for match in sorted(matches, key=lambda m: (str(m.filename), m.linenumber, m.columnnumber, m.rule.id)):
        text = f"{match.linenumber}:{match.columnnumber}: {match.rule.id} {' '.join(match.message.split())}"
        assert match.filename in findings, f"cfn-lint reported on no template it was given: {match.filename}: {text}"
        findings[str(match.filename)].append(text)
    return findings


@functools.cache
def _cfn_lint_rules() -> Rules:
    """cfn-lint's rule set as its runner loads it (built-in rules; no extra or custom rules are configured)."""
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    return Runner(ConfigMixIn([])).rules
