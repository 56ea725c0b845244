"""Every venv is exactly its lock, and every lock still answers what asks for it.

`make` installs each venv from a lock in ``requirements/`` (uv's universal
``pip compile`` with hashes; pip ``--require-hashes``). Here: what is
installed equals the lock, package for package (a test of the install, not of
the resolver); each lock pins exact versions with digests; and each locked
version satisfies the range that asked for it (pyproject.toml, ``*.in``), so a
range edited without ``make lock`` fails here instead of installing an old
version silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import ROOT
from tools.lock_check import differences, installed, read_lock

REQUIREMENTS = ROOT / "requirements"
#: venv folder -> its lock, as the Makefile pairs them.
VENVS = {".venv": "main", ".venv-pcluster": "pcluster", ".venv-checkov": "checkov"}
LATEST = os.environ.get("MLCLUSTER_DEPS") == "latest"


@pytest.mark.skipif(LATEST, reason="make test-latest installs the newest releases, not the locks")
@pytest.mark.parametrize("venv", sorted(VENVS))
def test_venv_is_exactly_its_lock(venv: str) -> None:
    path = ROOT / venv
    if not (path / "bin" / "python").exists():
        assert not os.environ.get("CI"), f"{venv} is missing: `make test` installs it"
        pytest.skip(f"{venv} is not set up (make pytest does)")
    lock = REQUIREMENTS / f"{VENVS[venv]}.txt"
    found = differences(read_lock(lock.read_text(encoding="utf-8")), installed(path))
    assert found == [], (
        f"{venv} differs from {lock.relative_to(ROOT)} (rebuild it: rm -r {venv}; make test):\n" + "\n".join(found)
    )


def _pyproject_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def _in_requirements(name: str) -> list[str]:
    lines = (REQUIREMENTS / f"{name}.in").read_text(encoding="utf-8").splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def unmet(requirements: list[str], pins: dict[str, str]) -> list[str]:
    """Each requirement the pinned versions do not satisfy (or do not pin at all)."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        version = pins.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{text}: not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{text}: the lock has {version}")
    return problems


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("main", [*_pyproject_requirements(), *_in_requirements("main")]),
        ("pcluster", _in_requirements("pcluster")),
        ("checkov", _in_requirements("checkov")),
        ("lock", _in_requirements("lock")),
    ],
    ids=["main", "pcluster", "checkov", "lock"],
)
def test_lock_satisfies_what_asks_for_it(lock: str, requirements: list[str]) -> None:
    pins = read_lock((REQUIREMENTS / f"{lock}.txt").read_text(encoding="utf-8"))
    problems = unmet(requirements, pins)
    assert problems == [], f"requirements/{lock}.txt is stale (run `make lock`):\n" + "\n".join(problems)


@pytest.mark.parametrize("lock", sorted(p.name for p in REQUIREMENTS.glob("*.txt")))
def test_every_pin_has_digests(lock: str) -> None:
    """pip's --require-hashes refuses a pin without one; this says which, before an install does."""
    lines = (REQUIREMENTS / lock).read_text(encoding="utf-8").splitlines()
    pins = [(i, line) for i, line in enumerate(lines) if line and not line.startswith(("#", " "))]
    assert pins, f"{lock} pins nothing"
    for i, line in pins:
        following = lines[i + 1] if i + 1 < len(lines) else ""
        pin = line.rstrip(" \\")
        assert line.endswith("\\") and re.fullmatch(r"\s+--hash=sha256:[0-9a-f]{64}( \\)?", following), (
            f"{lock}: {pin} has no sha256 digest"
        )


def test_make_installs_with_digests_and_nothing_else() -> None:
    """Each venv's install line asks pip for the lock's files only."""
    for venv, lock in VENVS.items():
        recipe = subprocess.run(
            ["make", "-n", "-B", "DEPS=locked", f"{venv}/.installed"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "MAKEFLAGS": ""},  # under `make test-latest`, MAKEFLAGS carries DEPS=latest
        ).stdout
        assert f"--require-hashes -r requirements/{lock}.txt" in recipe, recipe


# --- the reader and the comparison, at their edges -------------------------------------------------------

LOCK = """\
# made by make lock
boto3==1.40.1 \\
    --hash=sha256:aa
colorama==0.4.6 ; sys_platform == 'win32' \\
    --hash=sha256:bb
    # via pytest
Typing_Extensions==4.12.0 ; python_version >= '3.11' \\
    --hash=sha256:cc
"""


def test_reader_keeps_this_platform_and_normalizes_names() -> None:
    assert read_lock(LOCK, {"sys_platform": "linux", "python_version": "3.11"}) == {
        "boto3": "1.40.1",
        "typing-extensions": "4.12.0",
    }
    assert "colorama" in read_lock(LOCK, {"sys_platform": "win32", "python_version": "3.11"})


@pytest.mark.parametrize("line", ["boto3>=1.40", "boto3", "boto3==1.*", "-e ."])
def test_reader_refuses_what_is_not_a_pin(line: str) -> None:
    with pytest.raises(ValueError, match="is not `name==version`"):
        read_lock(line + "\n")


def test_comparison_names_each_difference() -> None:
    assert differences({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2.1", "d": "4"}) == [
        "b: the lock has 2, 2.1 installed",
        "c: the lock has 3, not installed",
        "d: 4 installed, not in the lock",
    ]
    assert differences({"a": "1"}, {"a": "1"}) == []


def test_unmet_range_is_named_and_the_edge_is_accepted() -> None:
    assert unmet(["boto3>=1.40,<2"], {"boto3": "1.40"}) == []
    assert unmet(["boto3>=1.41"], {"boto3": "1.40.9"}) == ["boto3>=1.41: the lock has 1.40.9"]
    assert unmet(["moto[s3]>=5"], {}) == ["moto[s3]>=5: not in the lock"]


def test_aws_cdk_lib_owns_the_cloud_assembly_schema_module() -> None:
    """Two locked distributions ship ``aws_cdk/cloud_assembly_schema/__init__.py``: aws-cdk-lib and its
    dependency aws-cdk.cloud-assembly-schema. Whichever pip installs last owns the file; aws-cdk-lib's
    ``CloudAssembly`` refuses the other's structs ("Wired struct has type
    '@aws-cdk/cloud-assembly-schema.LoadManifestOptions'"). pip installs dependencies first only when
    it resolves them, which is why `make` does not pass --no-deps."""
    from aws_cdk import cloud_assembly_schema

    owner = getattr(cloud_assembly_schema.LoadManifestOptions, "__jsii_type__", None)
    assert owner == "aws-cdk-lib.cloud_assembly_schema.LoadManifestOptions", (
        f"aws_cdk/cloud_assembly_schema holds {owner}: aws-cdk.cloud-assembly-schema was installed after "
        "aws-cdk-lib; rebuild the venv (rm -r .venv; make setup)"
    )
