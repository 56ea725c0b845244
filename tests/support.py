"""Test helpers: load environments from YAML text and synthesize them."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import yaml
from aws_cdk import cx_api

from mlcluster.app import build_app

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


def synth_examples(outdir: Path, selected: list[str] | None = None) -> cx_api.CloudAssembly:
    """Synthesize the repository's example environments with cdk-nag on."""
    app, _ = build_app(ENVIRONMENTS, selected=selected, outdir=str(outdir))
    return app.synth()


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
