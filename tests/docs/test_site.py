"""The documentation site: generated pages fresh, every example drawn, a strict build, Chromium's walk.

Never ``mkdocs build -q``: MkDocs 1.6 then does not count warnings, and ``--strict`` passes a broken link.

The site is built the way ``make docs`` builds it (``mkdocs build --strict``: a warning, a broken
link or anchor, a page missing from the navigation fails it), from a copy of ``docs/`` into which
the pictures of the examples are drawn from the suite's one synthesis (``examples_outdir``).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly, load_assembly
from tests.support import ROOT
from tools import check_site, environment_pictures, gen_cli_docs
from tools.environment_pictures import UnknownKindError, dot_source, unknown_kinds

MKDOCS = str(Path(sys.executable).parent / "mkdocs")
EXAMPLES = ("dev", "hyperpod", "hyperpod-accounting", "p4de", "p5", "pcluster-accounting", "prod", "trn1")


def test_readme_is_a_front_page_whose_links_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/quickstart.md" in links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_the_version_has_its_changelog_entry() -> None:
    """The version rule: every version in pyproject.toml has its heading in CHANGELOG.md (and LICENSE exists)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert re.search(
        rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", (ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")


def test_cli_reference_is_fresh() -> None:
    assert gen_cli_docs.PAGE.read_text(encoding="utf-8") == gen_cli_docs.render(), "run `make docs` and commit"


def test_cli_reference_has_every_command() -> None:
    from mlcluster.cli.main import cli

    text = gen_cli_docs.render()
    for name in cli.list_commands(None):  # type: ignore[arg-type]
        assert f"## `mlcluster {name}`" in text, name
        assert f"Usage: mlcluster {name} [OPTIONS]" in text, name


@pytest.fixture(scope="module")
def assembly(examples_outdir: Path) -> Assembly:
    return load_assembly(examples_outdir)


def test_every_example_is_drawn_with_its_parts(assembly: Assembly) -> None:
    assert assembly.environments == list(EXAMPLES)
    sources = {env: dot_source(assembly, env) for env in EXAMPLES}
    for env, source in sources.items():
        assert unknown_kinds(assembly, env) == [], env
        assert "subgraph cluster_vpc" in source and "subnet 10." in source, env
        assert "FSx for Lustre" in source and "DRA /data" in source, env
        assert "observability, logs and keys" in source, env
    # The node groups of each cluster, and the reachability analysis' paths from them.
    assert 'label="queue compute-gpu\\nEFA"' in sources["p4de"]
    assert 'label="login pool login"' in sources["p4de"]
    assert 'label="instance group controller-machine\\nEFA"' in sources["hyperpod"]
    assert '[label="Lustre", color="#188038"]' in sources["p5"]
    assert '[label="NFS", color="#188038"]' in sources["trn1"]  # /home on OpenZFS
    assert '[label="internet", color="#188038"]' in sources["p5"]  # through its NAT gateway
    assert "FSx for OpenZFS" in sources["trn1"] and "FSx for OpenZFS" not in sources["p5"]
    assert "zone usw2-az4" in sources["prod"] and sources["prod"].count("subgraph cluster_zone") == 2
    assert "AWS Backup vault" in sources["prod"]
    assert "Amazon Managed Grafana" in sources["p5"]
    assert "instance group" not in sources["dev"] and "queue" not in sources["dev"]  # no cluster


def test_a_resource_kind_the_picture_does_not_know_stops_it(assembly: Assembly) -> None:
    templates: dict[str, Any] = copy.deepcopy(assembly.templates)
    templates["p5/Network"]["Resources"]["Tgw"] = {"Type": "AWS::EC2::TransitGateway", "Properties": {}}
    changed = Assembly(templates)
    assert unknown_kinds(changed, "p5") == ["p5/Network: AWS::EC2::TransitGateway"]
    with pytest.raises(UnknownKindError, match=r"p5/Network: AWS::EC2::TransitGateway"):
        dot_source(changed, "p5")
    dot_source(changed, "p4de")  # the other environments are not affected


def test_a_refused_path_is_drawn_as_refused(assembly: Assembly) -> None:
    """A node group the analysis refuses a file system is drawn with a red dashed arrow, not a green one."""
    report = environment_pictures.check_environment(assembly, "p5")
    assert report.problems == []
    group = report.groups[0].name
    report.problems.append(f"p5: {group} cannot reach the Lustre file system: no rule")
    source = dot_source(assembly, "p5", report)
    assert '[label="Lustre: refused", color="#d93025", style="dashed"]' in source


def _build(examples_outdir: Path, tmp_path: Path) -> Path:
    """Draw the examples into a copy of docs/ and build the site strictly; return the site folder."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("environments"))
    written = environment_pictures.write(examples_outdir, docs)
    assert sorted(p.name for p in written) == sorted([*(f"{e}.svg" for e in EXAMPLES), "index.md"])
    for svg in written[:-1]:
        assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml"), svg
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs_dir: docs\n" in config and "paths: [.]" in config
    config = config.replace("docs_dir: docs\n", f"docs_dir: {docs}\n").replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    site = tmp_path / "site"
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT,  # the snippets (CHANGELOG.md, LICENSE) are read from the repository root
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


@pytest.mark.slow
def test_the_site_builds_strictly_and_chromium_follows_the_quickstart(examples_outdir: Path, tmp_path: Path) -> None:
    site = _build(examples_outdir, tmp_path)
    for page in ("index.html", "quickstart.html", "environments/index.html", "reference/cli.html"):
        assert (site / page).is_file(), page
    constructs = (site / "reference/constructs.html").read_text(encoding="utf-8")
    assert "ClusterNetwork" in constructs and "LustreStorage" in constructs  # from the docstrings
    assert "Apache License" in (site / "license.html").read_text(encoding="utf-8")

    shots = tmp_path / "shots"
    assert check_site.check(site, shots) == []
    assert (shots / "home.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (shots / "environment-p4de.png").stat().st_size > 10_000

    # The adversary: the quickstart links a page that is gone and an anchor its page lacks.
    (site / "limits.html").unlink()
    (site / "quickstart.html").write_text(
        '<html><body><article><h1>Quickstart</h1><a href="limits.html">limits</a>'
        '<a href="use-cases/deploy.html#gone">deploy</a><a href="https://aws.amazon.com/">out</a></article></body></html>',
        encoding="utf-8",
    )
    problems = check_site.check(site, shots)
    assert "quickstart links limits.html: no such page" in problems
    assert problems == [
        "quickstart links limits.html: no such page",
        "quickstart links use-cases/deploy.html#gone: no such anchor",
    ]


@pytest.mark.slow
def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("environments"))
    (docs / "environments").mkdir()
    (docs / "environments" / "index.md").write_text("# The example environments\n", encoding="utf-8")
    (docs / "quickstart.md").write_text("# Quickstart\n\nSee [nowhere](nowhere.md).\n", encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("docs_dir: docs\n", f"docs_dir: {docs}\n")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode != 0
    assert "nowhere.md" in done.stdout + done.stderr
