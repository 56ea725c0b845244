"""Which project a command works on, and the CDK feature flags it synthesizes with.

The CDK CLI reads ``cdk.json`` from the folder it runs in: its ``context``
holds the feature flags (``@aws-cdk/core:defaultCrossStackReferences`` and
the others) that decide what the templates say. The ``mlcluster`` command
and in-process synthesis must use the same flags, or ``mlcluster lock`` and
``mlcluster diff`` judge templates that ``cdk deploy`` never writes. So the
project is found the way a user expects of the CDK CLI, never next to the
installed package (for an installed wheel that is ``site-packages``):

1. ``--app-dir DIR`` (or ``MLCLUSTER_APP_DIR``) when given;
2. else the current folder or the nearest parent holding ``cdk.json``;
3. else the current folder, with the flags this package ships
   (``mlcluster/cdk_context.json``, generated from the repository's
   ``cdk.json`` by ``tools/cdk_context.py``; a test keeps the two equal),
   and the command says so on stderr.

This module imports nothing heavy: the command imports it before any verb.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

#: The CDK CLI's project file.
CDK_JSON: Final = "cdk.json"
#: The flags the package ships, read when no ``cdk.json`` is found.
PACKAGED_CONTEXT: Final = "cdk_context.json"
#: Environment variable naming the project folder (what ``--app-dir`` sets).
APP_DIR_VARIABLE: Final = "MLCLUSTER_APP_DIR"


class ProjectError(Exception):
    """A ``cdk.json`` that cannot be read: the message names the file and what is wrong."""


def packaged_context() -> dict[str, Any]:
    """The feature flags shipped in the package (the repository's ``cdk.json`` ``context``)."""
    text = resources.files("mlcluster").joinpath(PACKAGED_CONTEXT).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def read_context(cdk_json: Path) -> dict[str, Any]:
    """The ``context`` object of ``cdk_json``; a file that is not a JSON object is a :class:`ProjectError`."""
    try:
        data = json.loads(cdk_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ProjectError(f"{cdk_json}: cannot read it as JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("context", {}), dict):
        raise ProjectError(f"{cdk_json}: expected a JSON object whose `context` is an object")
    return dict(data.get("context", {}))


@dataclass(frozen=True)
class Project:
    """The folder a command works on and the ``cdk.json`` found there (``None``: the packaged flags)."""

    root: Path
    cdk_json: Path | None

    @property
    def environments(self) -> Path:
        """The default folder of environment files: ``environments/`` beside ``cdk.json``."""
        return self.root / "environments"

    def context(self) -> dict[str, Any]:
        """The feature flags to synthesize with."""
        return read_context(self.cdk_json) if self.cdk_json is not None else packaged_context()

    def notice(self) -> str | None:
        """What to tell the user when the packaged flags stand in for a ``cdk.json``; ``None`` otherwise."""
        if self.cdk_json is not None:
            return None
        return (
            f"no {CDK_JSON} in {self.root} or above; synthesizing with the CDK feature flags this mlcluster "
            f"package ships (the project's {CDK_JSON}); run from your CDK project or pass --app-dir to use yours"
        )


def find_project(start: Path | None = None, app_dir: Path | None = None) -> Project:
    """The project for ``app_dir`` if given, else the nearest folder from ``start`` (default: cwd) up with cdk.json."""
    if app_dir is not None:
        root = app_dir.resolve()
        candidate = root / CDK_JSON
        return Project(root, candidate if candidate.is_file() else None)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CDK_JSON
        if candidate.is_file():
            return Project(folder, candidate)
    return Project(here, None)
