"""The synthesized stacks of environments as plain data, with references resolved across stacks.

Pure Python over the templates CDK writes (no CDK import), so tests and
``tools/synth_summary.py`` share it. An intrinsic function is rendered to a
*canonical string*: ``{"Ref": "Subnet1"}`` in ``dev/Network`` becomes
``${dev/Network|Subnet1}``, ``Fn::GetAtt`` adds ``.Attribute``, pseudo
parameters stay ``${AWS::Region}``, and ``Fn::ImportValue`` is replaced by
the rendering of the exporting stack's output, so one resource has one name
whichever stack refers to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TOKEN = re.compile(r"\$\{([^}|]+)\|([A-Za-z0-9]+)(?:\.([A-Za-z0-9.]+))?\}")
_SUB_VAR = re.compile(r"\$\{([^}!][^}]*)\}")


@dataclass(frozen=True)
class Resource:
    """One resource of one stack."""

    stack: str
    logical_id: str
    type: str
    properties: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The canonical reference of this resource (what ``Ref`` to it renders to)."""
        return f"${{{self.stack}|{self.logical_id}}}"


class Assembly:
    """Stack templates by display name (``dev/Network``); an environment is the part before ``/``."""

    def __init__(
        self,
        templates: Mapping[str, Mapping[str, Any]],
        assets: Path | None = None,
        stack_names: Mapping[str, str] | None = None,
    ) -> None:
        """Index ``templates``; ``assets`` is the cloud assembly folder holding ``asset.<hash>`` folders.

        ``stack_names`` maps CloudFormation stack names to display names; by
        default a stage's stack ``dev/Network`` is named ``dev-Network``.
        """
        self.templates = dict(templates)
        self.assets = assets
        self.stack_names = {stack.replace("/", "-"): stack for stack in self.templates}
        self.stack_names.update(stack_names or {})
        self._exports: dict[str, tuple[str, Any]] = {}
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if isinstance(export, str):
                    self._exports[export] = (stack, output["Value"])

    @property
    def environments(self) -> list[str]:
        """Every environment with at least one stack."""
        return sorted({stack.split("/", 1)[0] for stack in self.templates})

    def stacks(self, environment: str) -> list[str]:
        """The stacks of ``environment``."""
        return sorted(s for s in self.templates if s.split("/", 1)[0] == environment)

    def resources(self, environment: str, *types: str) -> Iterator[Resource]:
        """Resources of ``environment`` of any of ``types`` (all when none given)."""
        for stack in self.stacks(environment):
            for logical_id, body in self.templates[stack].get("Resources", {}).items():
                if not types or body.get("Type") in types:
                    yield Resource(stack, logical_id, body.get("Type", ""), body.get("Properties", {}))

    def resource(self, canonical: str) -> Resource | None:
        """The resource a canonical string names (``${stack|Id}`` or ``${stack|Id.Attr}``), if any."""
        match = _TOKEN.fullmatch(canonical)
        if match is None:
            return None
        stack, logical_id = match.group(1), match.group(2)
        body = self.templates.get(stack, {}).get("Resources", {}).get(logical_id)
        if body is None:
            return None
        return Resource(stack, logical_id, body.get("Type", ""), body.get("Properties", {}))

    def identity(self, canonical: str) -> str:
        """The resource's name for a reference to it by ``Ref`` or any attribute; else the string itself."""
        found = self.resource(canonical)
        return found.name if found is not None else canonical

    def render(self, stack: str, value: Any) -> Any:
        """``value`` with every intrinsic function rendered; strings for functions, lists and maps kept."""
        if isinstance(value, list):
            return [self.render(stack, v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: self.render(stack, v) for k, v in value.items()}
        ((key, arg),) = value.items()
        if key == "Ref":
            return f"${{{arg}}}" if arg.startswith("AWS::") else f"${{{stack}|{arg}}}"
        if key == "Fn::GetAtt":
            logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            body = self.templates.get(stack, {}).get("Resources", {}).get(logical_id, {})
            if body.get("Type") == "AWS::S3::Bucket" and attribute == "Arn":
                # A bucket's ARN has one form, so policies written with GetAtt and with Ref compare equal.
                return f"arn:${{AWS::Partition}}:s3:::${{{stack}|{logical_id}}}"
            return f"${{{stack}|{logical_id}.{self.text(stack, attribute)}}}"
        if key == "Fn::ImportValue":
            name = self.text(stack, arg)
            if name in self._exports:
                source, exported = self._exports[name]
                return self.render(source, exported)
            return f"${{import:{name}}}"
        if key == "Fn::GetStackOutput":
            # A weak reference to another stack's output (CDK's recommended flags): render that output.
            target = self.stack_names.get(self.text(stack, arg.get("StackName")), "")
            output = self.templates.get(target, {}).get("Outputs", {}).get(self.text(stack, arg.get("OutputName")))
            if output is not None:
                return self.render(target, output["Value"])
            return f"${{output:{json.dumps(self.render(stack, arg), sort_keys=True)}}}"
        if key == "Fn::Join":
            separator, parts = arg
            rendered = self.render(stack, parts)
            if isinstance(rendered, list):
                return separator.join(self._as_text(p) for p in rendered)
            return f"${{join:{json.dumps(rendered)}}}"
        if key == "Fn::Sub":
            template, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            return _SUB_VAR.sub(lambda m: self._sub_var(stack, m.group(1), variables), template)
        if key == "Fn::Select":
            index, items = self.render(stack, arg)
            if isinstance(items, list) and str(index).isdigit() and int(index) < len(items):
                return items[int(index)]
            return f"${{select:{json.dumps([index, items])}}}"
        if key.startswith("Fn::") or key == "Condition":
            return f"${{{key}:{json.dumps(self.render(stack, arg), sort_keys=True)}}}"
        return {key: self.render(stack, arg)}

    def text(self, stack: str, value: Any) -> str:
        """``value`` rendered to one string (lists and maps as JSON)."""
        return self._as_text(self.render(stack, value))

    def _sub_var(self, stack: str, name: str, variables: Mapping[str, Any]) -> str:
        if name in variables:
            return self.text(stack, variables[name])
        if name.startswith("AWS::"):
            return f"${{{name}}}"
        logical_id, _, attribute = name.partition(".")
        return f"${{{stack}|{logical_id}.{attribute}}}" if attribute else f"${{{stack}|{logical_id}}}"

    @staticmethod
    def _as_text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

    def asset_folder(self, object_key: str) -> Path | None:
        """The folder of a file asset uploaded as ``<hash>.zip`` (``None`` without an assembly folder)."""
        if self.assets is None:
            return None
        folder = self.assets / f"asset.{object_key.removesuffix('.zip')}"
        return folder if folder.is_dir() else None


def load_assembly(outdir: Path) -> Assembly:
    """Read every stack of every stage from a cloud assembly folder (``cdk.out``)."""
    templates: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    found = [outdir / "manifest.json", *sorted(outdir.glob("assembly-*/manifest.json"))]
    for manifest in (path for path in found if path.is_file()):
        for artifact in json.loads(manifest.read_text()).get("artifacts", {}).values():
            if artifact.get("type") != "aws:cloudformation:stack":
                continue
            template = manifest.parent / artifact["properties"]["templateFile"]
            display = artifact.get("displayName", template.stem)
            templates[display] = json.loads(template.read_text())
            names[artifact["properties"].get("stackName", display)] = display
    return Assembly(templates, assets=outdir, stack_names=names)
