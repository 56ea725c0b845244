"""Reading environment files and their unique names (mlcluster/config/yamlfile.py, names.py): what `make mutation`
showed no test asserted.

Each test names the surviving mutants it kills; all of them assert what an operator reads or relies on: where a
tab is reported (with libyaml and with PyYAML's own parser, which a venv without libyaml uses), and that two
files taking one name collide when either leaves its account or region open.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlcluster.config import load_environment, yamlfile
from mlcluster.config.names import Claim
from mlcluster.config.project import check_environments
from mlcluster.config.schema import ConfigError
from tests.config.cases import hyperpod, pcluster

LOADERS = {"libyaml": getattr(yaml, "CSafeLoader", yaml.SafeLoader), "pyyaml": yaml.SafeLoader}


def first_problem(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        yamlfile.read_yaml(path)
    return str(caught.value).splitlines()[0]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("text", "where"),
    [
        # A tab on the first line (x__tab_near__mutmut_11: the first line skipped).
        ("\tnetwork:\n  cidr: 10.0.0.0/16\n", "line 1, column 1"),
        # A space, then two tabs: the first tab is named (mutmut_12, rindex: column 3).
        ("network:\n \t\tcidr: 10.0.0.0/16\n", "line 2, column 2"),
        # libyaml stops on the line after the tab (an unclosed list); the tab is still named
        # (mutmut_9 and mutmut_10: the line before the mark not looked at).
        ("network:\n  cidr: [10.0.0.0/16,\n\t10.1.0.0/16\n", "line 3, column 1"),
        # PyYAML names the tab itself ("found character '\t'"): its mark is the tab
        # (mutmut_2: that branch never taken; mutmut_4 to 7: the line or column off by one or two).
        ("network:\n  cidr: 10.0.0.0/16\n \tnat_gateways: 1\n", "line 3, column 2"),
    ],
)
def test_the_tab_is_named_where_it_is_with_either_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: str, text: str, where: str
) -> None:
    monkeypatch.setattr(yamlfile, "_Loader", LOADERS[loader])
    path = tmp_path / "tabbed.yaml"
    path.write_text(text, encoding="utf-8")
    assert first_problem(path).startswith(f"{path}: {where}: a tab character: YAML indents with spaces only")


def test_pyyaml_names_a_tab_inside_a_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML refuses a tab between flow items, which libyaml allows; the tab is named (x__tab_near__mutmut_2).

    The tab is not in any line's indentation, so only PyYAML's own words ("found character '\\t'") find it.
    """
    monkeypatch.setattr(yamlfile, "_Loader", yaml.SafeLoader)
    path = tmp_path / "tabbed.yaml"
    path.write_text("network:\n  cidr: 10.0.0.0/16\n  zones: [a,\tb]\n", encoding="utf-8")
    assert first_problem(path).startswith(f"{path}: line 3, column 13: a tab character: YAML indents with spaces only")


def test_a_tab_after_the_indentation_is_not_blamed_for_another_error(tmp_path: Path) -> None:
    """A parse error on a line whose tab follows text is reported as the parser's (mutmut_15: whole line as indent)."""
    path = tmp_path / "broken.yaml"
    path.write_text("network:\n  cidr: [10.0.0.0/16\t\n", encoding="utf-8")
    problem = first_problem(path)
    assert "a tab character" not in problem
    assert problem.startswith(f"{path}: line 3, column 1: 'YAML' is not valid; cannot be parsed: ")


def test_a_problem_without_a_position_names_the_file() -> None:
    """(x__line__mutmut_2, 6, 7: the file marker changed or a missing mark read.)"""
    assert yamlfile._line(None) == "(file)"


def claim(account: str | None, region: str | None) -> Claim:
    return Claim("CloudFormation stack name", "dev-Network", "(file name)", "region", account, region)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # One file names its account, the other leaves it to the credentials: they may meet (names.py
        # Claim.meets mutants 10 and 11), in either order.
        (claim("111111111111", "us-east-1"), claim(None, "us-east-1")),
        (claim(None, "us-east-1"), claim("111111111111", "us-east-1")),
        # The same for the region (mutmut_16).
        (claim("111111111111", "us-east-1"), claim("111111111111", None)),
        (claim("111111111111", None), claim("111111111111", "us-east-1")),
    ],
)
def test_a_name_collides_when_either_file_leaves_account_or_region_open(first: Claim, second: Claim) -> None:
    assert first.meets(second)
    assert second.meets(first)


def test_a_name_in_different_accounts_or_regions_does_not_collide() -> None:
    assert not claim("111111111111", "us-east-1").meets(claim("222222222222", "us-east-1"))
    assert not claim("111111111111", "us-east-1").meets(claim("111111111111", "eu-west-1"))


def test_a_tilde_where_a_string_belongs_is_explained_as_null(tmp_path: Path) -> None:
    """x__advice__mutmut_22 to 24: the words for a value YAML read as null."""
    folder = tmp_path / "environments"
    folder.mkdir()
    path = folder / "dev.yaml"
    path.write_text("network:\n  availability_zone: us-east-1a\ntags:\n  Owner: ~\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    assert str(caught.value) == (
        f"{path}: tags.Owner: no value (empty or missing); expected a string; "
        'YAML read the unquoted ~ as null (no value); quote it: "~"'
    )


REGION_WIDE = (
    "it must be unique in the same account and region: rename one, or set different account or region in the two files"
)


@pytest.mark.parametrize(
    ("text", "cluster"),
    [
        (hyperpod(), "HyperPod cluster name 'hp'"),
        (pcluster(), "ParallelCluster cluster name 'mlcluster-dev'"),
    ],
)
def test_two_files_of_one_name_report_each_shared_key_once(tmp_path: Path, text: str, cluster: str) -> None:
    """Every pair of clashing key paths is reported, each once (names.py x_claims__mutmut_110 and 118: the lifecycle
    bucket's path changed, so it is reported again; x_collisions__mutmut_11: only the first pair reported;
    x_collisions__mutmut_13: the search stops at the first claim that does not clash)."""
    for name in ("dev.yaml", "dev.yml"):
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        check_environments(tmp_path)
    assert str(caught.value).splitlines() == [
        f"{tmp_path}/dev.yml: (file name): CloudFormation stack name 'dev-Network' is also taken by "
        f"{tmp_path}/dev.yaml ((file name)); {REGION_WIDE}",
        f"{tmp_path}/dev.yml: cluster.name: {cluster} is also taken by {tmp_path}/dev.yaml (cluster.name); "
        f"{REGION_WIDE}",
    ]


def test_a_key_written_twice_after_a_merge_key_is_refused(tmp_path: Path) -> None:
    """A merge key (<<: *defaults) first in a mapping does not end the duplicate check (_Builder._mapping mutant 3)."""
    path = tmp_path / "merged.yaml"
    path.write_text(
        "defaults: &d\n  nat_gateways: 1\nnetwork:\n  <<: *d\n  cidr: 10.0.0.0/16\n  cidr: 10.1.0.0/16\n",
        encoding="utf-8",
    )
    assert first_problem(path) == (
        f"{path}: network.cidr: 'cidr' is not valid; written twice in one mapping (line 5 and line 6); keep one"
    )


def test_a_claim_clashing_with_two_files_is_reported_for_each(tmp_path: Path) -> None:
    """devb's cluster name takes the stack name dev-Network of dev.yaml and of dev.yml: both are reported, after a
    pair already reported (x_collisions__mutmut_13: the search stopped at the first pair already reported)."""
    (tmp_path / "dev.yaml").write_text(pcluster(name="dev-Network"), encoding="utf-8")
    (tmp_path / "dev.yml").write_text(pcluster(), encoding="utf-8")
    (tmp_path / "devb.yaml").write_text(pcluster(name="dev-Network"), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        check_environments(tmp_path)
    stack = "CloudFormation stack name 'dev-Network'"
    assert str(caught.value).splitlines() == [
        f"{tmp_path}/dev.yml: (file name): {stack} is also taken by {tmp_path}/dev.yaml ((file name)); {REGION_WIDE}",
        f"{tmp_path}/dev.yml: (file name): {stack} is also taken by {tmp_path}/dev.yaml (cluster.name); {REGION_WIDE}",
        f"{tmp_path}/devb.yaml: cluster.name: ParallelCluster cluster name 'dev-Network' is also taken by "
        f"{tmp_path}/dev.yaml (cluster.name); {REGION_WIDE}",
        f"{tmp_path}/devb.yaml: cluster.name: {stack} is also taken by {tmp_path}/dev.yaml ((file name)); {REGION_WIDE}",
        f"{tmp_path}/devb.yaml: cluster.name: {stack} is also taken by {tmp_path}/dev.yml ((file name)); {REGION_WIDE}",
    ]


def test_an_alias_is_built_once_and_shared(tmp_path: Path) -> None:
    """An anchored mapping used again through an alias reads as the same object, as PyYAML builds it
    (_Builder.build mutants 17 and 19: the built node not found, or looked up under the wrong key)."""
    path = tmp_path / "aliased.yaml"
    path.write_text("tags: &t {Team: ml}\nother: *t\n", encoding="utf-8")
    data = yamlfile.read_yaml(path).data
    assert data == {"tags": {"Team": "ml"}, "other": {"Team": "ml"}}
    assert data["other"] is data["tags"]


@pytest.mark.parametrize(("extra", "refused"), [(0, False), (1, True)])
def test_the_value_limit_is_exact(tmp_path: Path, extra: int, refused: bool) -> None:
    """A file of exactly MAX_NODES values is read, one more is refused (x__check_shape__mutmut_4: counted from 1).

    The mapping, its key and the list are three values; the list holds the rest.
    """
    path = tmp_path / "big.yaml"
    items = yamlfile.MAX_NODES - 3 + extra
    path.write_text("v: [" + ",".join(["1"] * items) + "]\n", encoding="utf-8")
    if refused:
        assert f"expands to more than {yamlfile.MAX_NODES} values; an environment file holds settings" in (
            first_problem(path)
        )
    else:
        assert len(yamlfile.read_yaml(path).data["v"]) == items


def test_a_list_items_advice_names_its_index(tmp_path: Path) -> None:
    """The advice for an unquoted list item is kept under its path (_Builder.build mutant 40: path dropped)."""
    path = tmp_path / "list.yaml"
    path.write_text("subnets: [a, yes]\n", encoding="utf-8")
    assert yamlfile.read_yaml(path).hints == {
        "subnets[1]": 'YAML read the unquoted yes as the boolean true; quote it: "yes"'
    }


def nested(depth: int, inner: str) -> str:
    """``inner`` inside ``depth`` flow lists."""
    return "[" * depth + inner + "]" * depth


DEEP = yamlfile.MAX_DEPTH


@pytest.mark.parametrize(
    ("text", "refused_line"),
    [
        # A list 31 deep under the top mapping is 32 levels; an alias to it at the top level is 32 too (accepted),
        # one list deeper is 33 (x__check_shape__mutmut_39: ">=" refused the edge; 40: the file not named).
        (f"a: &a {nested(DEEP - 1, '1')}\nb: *a\n", None),
        (f"a: &a {nested(DEEP - 1, '1')}\nb: [*a]\n", 2),
        # An anchored list holding an alias is one level higher than what the alias points to
        # (mutmut_34 and 37: the height taken from the wrong list or counted two higher).
        (f"x: &x [1]\na: &a [*x]\nb: {nested(DEEP - 3, '*a')}\n", None),
        (f"x: &x [1]\na: &a [*x]\nb: {nested(DEEP - 2, '*a')}\n", 3),
    ],
)
def test_nesting_through_an_alias_is_refused_exactly_past_the_limit(
    tmp_path: Path, text: str, refused_line: int | None
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    if refused_line is None:
        yamlfile.read_yaml(path)
    else:
        assert first_problem(path) == (
            f"{path}: line {refused_line}: nesting deeper than {DEEP} levels (through an alias)"
        )


@pytest.mark.parametrize(
    ("pin", "bucket"),
    [
        ("", "mlc-lifecycle-dev-<account>-<region>"),  # neither known: a placeholder for each
        ("account: '111111111111'\nregion: us-east-1\n", "mlc-lifecycle-dev-111111111111-us-east-1"),
    ],
)
def test_a_hyperpod_environment_claims_its_stacks_exports_and_lifecycle_bucket(
    tmp_path: Path, pin: str, bucket: str
) -> None:
    """``names.claims`` mutants 30 and 101 of the config-files seed-3 sample: the export prefix is claimed in its
    own namespace, and the lifecycle bucket's name carries the account and region the file pins."""
    from mlcluster.config.names import claims

    path = tmp_path / "dev.yaml"
    path.write_text(pin + hyperpod(), encoding="utf-8")
    found = {(c.namespace, c.name, c.path) for c in claims(load_environment(path))}
    assert ("CloudFormation export name", "dev-*", "(file name)") in found
    assert ("HyperPod lifecycle bucket name", bucket, "(file name)") in found
    assert ("HyperPod cluster name", "hp", "cluster.name") in found


def test_an_undefined_alias_at_the_deepest_level_allowed_is_named_as_undefined(tmp_path: Path) -> None:
    """``_check_shape`` mutant 17 of the config-files seed-4 sample: an alias to no anchor counts as one value and
    no level, so at the deepest level allowed the parser's own error names it ("found undefined alias"), not a
    nesting the file does not have; one collection deeper is the nesting error."""

    def nested(levels: int) -> str:
        lines = ["top: x"]
        for level in range(levels):
            lines.append("  " * level + f"k{level}:")
        lines.append("  " * levels + "value: *nowhere")
        return "\n".join(lines) + "\n"

    path = tmp_path / "deep.yaml"
    path.write_text(nested(yamlfile.MAX_DEPTH - 1), encoding="utf-8")  # the document's mapping is the first level
    assert first_problem(path).endswith("'YAML' is not valid; cannot be parsed: found undefined alias")
    path.write_text(nested(yamlfile.MAX_DEPTH), encoding="utf-8")
    assert first_problem(path).endswith(f"nesting deeper than {yamlfile.MAX_DEPTH} levels")
