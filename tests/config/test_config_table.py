"""Every rule of issue 12: the failing file, the exact message, bounded time and memory; and the edge that passes."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import jsonschema
import pytest
import yaml

from mlcluster.config.awsdata import botocore_version, ec2_instance_types, hyperpod_instance_types, regions
from mlcluster.config.project import check_environments
from mlcluster.config.schema import ConfigError
from mlcluster.config.yamlfile import LIBYAML_NESTING_PROBLEM, MAX_DEPTH, read_yaml
from tests.config.cases import CASES, GOOD, Case

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schema" / "environment.schema.json").read_text(encoding="utf-8"))

#: Every file of the table is refused within this much CPU time (not wall time: the test machine is shared)
#: and this much traced memory.
SECONDS = 2.0
PEAK_BYTES = 64 * 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def botocore_lists_loaded() -> None:
    """Read botocore's lists once up front: the bounds are about the files, not that one-time cost."""
    ec2_instance_types()
    hyperpod_instance_types()
    regions()


def write(directory: Path, files: dict[str, str | bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = directory / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return directory


def expected(case: Case, directory: Path) -> str:
    return "\n".join(line.format(d=directory, botocore=botocore_version()) for line in case.lines)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_file_gives_the_exact_message_quickly(tmp_path: Path, case: Case) -> None:
    directory = write(tmp_path / "environments", case.files)
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises(ConfigError) as caught:
            check_environments(directory)
        elapsed = time.process_time() - started
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value) == expected(case, directory)
    assert elapsed < SECONDS, f"{case.id}: {elapsed:.2f} s"
    assert peak < PEAK_BYTES, f"{case.id}: {peak / 1e6:.1f} MB"


@pytest.mark.parametrize("case", [c for c in CASES if c.schema], ids=[c.id for c in CASES if c.schema])
def test_schema_rejects_what_it_can_express(tmp_path: Path, case: Case) -> None:
    validator = jsonschema.Draft7Validator(SCHEMA)
    for text in case.files.values():
        data = yaml.safe_load(text)
        assert list(validator.iter_errors(data)), f"{case.id}: the JSON Schema accepts it"


@pytest.mark.parametrize("name", list(GOOD))
def test_edge_good_files_load_and_match_the_schema(tmp_path: Path, name: str) -> None:
    directory = write(tmp_path / "environments", dict(GOOD[name]))
    checked = check_environments(directory)
    assert len(checked.environments) == len(GOOD[name])
    validator = jsonschema.Draft7Validator(SCHEMA)
    for path in directory.iterdir():
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
        assert not [e.message for e in validator.iter_errors(data)]


def test_merge_keys_let_written_keys_win(tmp_path: Path) -> None:
    directory = write(tmp_path / "environments", GOOD["merge keys and aliases within the limits"])
    env = check_environments(directory).environments[0]
    assert env.config.cluster.pcluster is not None
    resources = env.config.cluster.pcluster.queues[0].compute_resources
    assert [(r.name, r.instance_type) for r in resources] == [("a", "p5.48xlarge"), ("b", "p5.48xlarge")]


def nested(depth: int) -> str:
    return "a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"


def test_nesting_limit_edge(tmp_path: Path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text(nested(MAX_DEPTH), encoding="utf-8")
    assert read_yaml(ok).data is not None
    bad = tmp_path / "bad.yaml"
    bad.write_text(nested(MAX_DEPTH + 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"nesting deeper than {MAX_DEPTH} levels"):
        read_yaml(bad)


def test_libyaml_refuses_deep_nesting_in_the_words_we_translate() -> None:
    """Which of two checks refuses a file of 1000 brackets depends on the libyaml PyYAML bundles.

    libyaml 0.2.6 (PyYAML 6.0.4's wheels) refuses past 1000 levels while scanning ahead, before the
    event check sees level 33; ``read_yaml`` reports both as the same refusal. A libyaml that words it
    differently, or no longer refuses, would bring back a raw parser message: this names the version.
    """
    libyaml = yaml._yaml.get_version_string() if yaml.__with_libyaml__ else "none (pure-Python PyYAML)"
    found = f"PyYAML {yaml.__version__} with libyaml {libyaml}"
    try:
        list(yaml.parse("[" * 1001 + "]" * 1001, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.YAMLError as exc:
        assert getattr(exc, "problem", None) == LIBYAML_NESTING_PROBLEM, (
            f"{found} words its nesting refusal {getattr(exc, 'problem', exc)!r}; update LIBYAML_NESTING_PROBLEM"
        )
    else:
        pytest.fail(f"{found} parses 1001 levels; the lock has PyYAML 6.0.4 (libyaml 0.2.6), which refuses them")


def test_deep_nesting_past_libyaml_limit_gets_our_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: " + "[" * 1001 + "]" * 1001 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"bad.yaml: line 1: nesting deeper than {MAX_DEPTH} levels"):
        read_yaml(bad)


def test_nesting_through_aliases_counts(tmp_path: Path) -> None:
    lines = ["l0: &l0 [x]"] + [f"l{i}: &l{i} [*l{i - 1}]" for i in range(1, MAX_DEPTH + 2)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="through an alias"):
        read_yaml(bad)


def test_quadratic_aliases_are_bounded(tmp_path: Path) -> None:
    # 200 lists of 100 aliases each to one 100-item list: a small file, 2 million values once expanded.
    lines = ["base: &b [" + ", ".join(["x"] * 100) + "]"]
    lines += [f"k{i}: [" + ", ".join(["*b"] * 100) + "]" for i in range(200)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.process_time()
    with pytest.raises(ConfigError, match="expands to more than"):
        read_yaml(bad)
    assert time.process_time() - started < SECONDS


def test_largest_allowed_file_reads_quickly(tmp_path: Path) -> None:
    # Just under the size limit, in many small values: read (and refused by the schema) within the bound.
    body = "".join(f"t{i}: v{i}\n" for i in range(18_000))
    path = tmp_path / "big.yaml"
    path.write_text(body, encoding="utf-8")
    assert path.stat().st_size < 256 * 1024
    started = time.process_time()
    assert len(read_yaml(path).data) == 18_000
    assert time.process_time() - started < SECONDS


def test_a_directory_named_like_an_environment_is_reported(tmp_path: Path) -> None:
    directory = write(tmp_path / "environments", {"dev.yaml": "network: {availability_zone: us-east-1a}\n"})
    (directory / "old.yml").mkdir()
    with pytest.raises(ConfigError) as caught:
        check_environments(directory)
    assert (
        str(caught.value)
        == f"{directory}/old.yml: (file): '{directory}/old.yml' is not valid; cannot be read: Is a directory"
    )


def test_other_suffixes_in_the_directory_are_not_environments(tmp_path: Path) -> None:
    directory = write(tmp_path / "environments", {"dev.yaml": "network: {availability_zone: us-east-1a}\n"})
    (directory / "notes.md").write_text("# notes\n", encoding="utf-8")
    (directory / "dev.yaml.bak").write_text("{", encoding="utf-8")
    assert [e.name for e in check_environments(directory).environments] == ["dev"]
