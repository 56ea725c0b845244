"""Environment files: every error names the file, the key, the bad value and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlcluster.config import ConfigError, load_environment, load_environments
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL, ROOT, write_env


def net(**extra: object) -> dict[str, object]:
    return {"network": {"availability_zone": "us-east-1a", **extra}}


BAD = [
    # (id, data, key path, fragment of the allowed text)
    (
        "unknown top key",
        {**MINIMAL, "clusterr": {}},
        "clusterr",
        "unknown key; did you mean 'cluster'? allowed keys here:",
    ),
    ("unknown nested key", net(cidrr="10.0.0.0/16"), "network.cidrr", "allowed keys here: availability_zone"),
    ("missing network", {"tags": {}}, "network", "this key is required"),
    ("both zone forms", net(availability_zone_id="use1-az4"), "network.availability_zone", "give exactly one"),
    ("no zone", {"network": {"cidr": "10.0.0.0/16"}}, "network.availability_zone", "give exactly one"),
    ("bad az name", {"network": {"availability_zone": "east"}}, "network.availability_zone", "an AZ name such as"),
    ("bad az id", {"network": {"availability_zone_id": "use1az4"}}, "network.availability_zone_id", "an AZ ID such"),
    ("bad cidr", net(cidr="10.0.0.0/33"), "network.cidr", "an IPv4 CIDR block"),
    ("cidr too big", net(cidr="10.0.0.0/8"), "network.cidr", "/16 to /24"),
    ("overlapping secondary", net(secondary_cidr="10.0.128.0/17"), "network.secondary_cidr", "must not overlap"),
    ("bad nat", net(nat_gateways="two"), "network.nat_gateways", "allowed: 'one', 'per_zone'"),
    ("bool as string", net(dynamodb_endpoint="yes"), "network.dynamodb_endpoint", "expected true or false"),
    (
        "flow interval",
        net(flow_logs={"max_aggregation_interval_seconds": 30}),
        "network.flow_logs.max_aggregation_interval_seconds",
        "allowed: 60, 600",
    ),
    (
        "repeated zone",
        net(extra_zones=[{"availability_zone": "us-east-1a"}]),
        "network.extra_zones",
        "each zone may appear once",
    ),
    (
        "mixed zone naming",
        net(extra_zones=[{"availability_zone_id": "use1-az6"}]),
        "network.extra_zones",
        "name every zone the same way",
    ),
    (
        "too many zones",
        net(extra_zones=[{"availability_zone": f"us-east-1{z}"} for z in "bcde"]),
        "network.extra_zones",
        "at most 3 extra zones",
    ),
    (
        "peer overlaps",
        net(peering={"peer_vpc_id": "vpc-0abc1234", "peer_cidr": "10.0.5.0/24"}),
        "network.peering.peer_cidr",
        "must not overlap",
    ),
    (
        "peer routes cross account",
        net(
            peering={
                "peer_vpc_id": "vpc-0abc1234",
                "peer_cidr": "172.31.0.0/16",
                "peer_owner_id": "123456789012",
                "peer_role_arn": "arn:aws:iam::123456789012:role/peer",
                "peer_route_table_ids": ["rtb-0abc1234"],
            }
        ),
        "network.peering.peer_route_table_ids",
        "same account and region",
    ),
    (
        "bad vpc id",
        net(
            existing={
                "vpc_id": "vpc-x",
                "vpc_cidr": "10.0.0.0/16",
                "private_subnet_ids": ["subnet-0abc1234"],
                "security_group_id": "sg-0abc1234",
            }
        ),
        "network.existing.vpc_id",
        "a VPC ID such as",
    ),
    (
        "bad subnet id",
        net(
            existing={
                "vpc_id": "vpc-0abc1234",
                "vpc_cidr": "10.0.0.0/16",
                "private_subnet_ids": ["sub-1"],
                "security_group_id": "sg-0abc1234",
            }
        ),
        "network.existing.private_subnet_ids[0]",
        "subnet IDs such as",
    ),
    (
        "existing with cidr settings",
        net(
            secondary_cidr="10.1.0.0/16",
            existing={
                "vpc_id": "vpc-0abc1234",
                "vpc_cidr": "10.0.0.0/16",
                "private_subnet_ids": ["subnet-0abc1234"],
                "security_group_id": "sg-0abc1234",
            },
        ),
        "network.secondary_cidr",
        "not used with network.existing",
    ),
    ("account as number", {**MINIMAL, "account": 123456789012}, "account", 'quote it: "123456789012"'),
    ("bad account", {**MINIMAL, "account": "1234"}, "account", "a 12-digit AWS account ID"),
    ("bad region", {**MINIMAL, "region": "mars-1"}, "region", "allowed: an AWS region"),
    ("bad retention", {**MINIMAL, "retention": {"on_delete": "keep"}}, "retention.on_delete", "'retain', 'destroy'"),
    (
        "bad log days",
        {**MINIMAL, "retention": {"log_retention_days": 10}},
        "retention.log_retention_days",
        "allowed: 1, 3, 5",
    ),
    ("bad pack", {**MINIMAL, "compliance": {"packs": ["sox"]}}, "compliance.packs[0]", "'nist-800-53-r5'"),
    ("aws tag", {**MINIMAL, "tags": {"aws:owner": "x"}}, "tags.aws:owner", "not starting with 'aws:'"),
    ("tags not mapping", {**MINIMAL, "tags": ["a"]}, "tags", "expected a mapping"),
    (
        "backend unknown",
        {**MINIMAL, "cluster": {"backend": "slurm"}},
        "cluster.backend",
        "'none', 'pcluster', 'hyperpod'",
    ),
    (
        "backend without section",
        {**MINIMAL, "cluster": {"backend": "hyperpod"}},
        "cluster.hyperpod",
        "required with backend",
    ),
]


@pytest.mark.parametrize(("data", "path", "allowed"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_file_key_value_and_allowed(
    tmp_path: Path, data: dict[str, object], path: str, allowed: str
) -> None:
    file = write_env(tmp_path, "bad", data)
    with pytest.raises(ConfigError) as caught:
        load_environment(file)
    message = str(caught.value)
    lines = [line for line in message.splitlines() if f": {path}: " in line]
    assert lines, f"no problem reported at {path}: {message}"
    assert lines[0].startswith(f"{file}: {path}: ")
    # A value is quoted as the file has it; a missing or empty one is never called "None" (issue 26).
    assert any(
        text in lines[0]
        for text in ("is not valid;", ": missing; ", ": no value (empty or missing); ", " are both given; ")
    )
    assert "None is not valid" not in lines[0]
    assert allowed in lines[0]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("network:\n\tavailability_zone: us-east-1a\n", "line 2, column 1"),
        ("network:\n  availability_zone: us-east-1a\n\tcidr: 10.0.0.0/16\n", "line 3, column 1"),
        ("network:\n  availability_zone:\tus-east-1a\n  cidr:\n\t- x\n", "line 4, column 1"),
    ],
)
def test_a_tab_is_named_as_a_tab(tmp_path: Path, text: str, where: str) -> None:
    """PyYAML says "cannot start any token"; the message names the tab and where it is (issue 26)."""
    file = write_env(tmp_path, "tabbed", text)
    with pytest.raises(ConfigError) as caught:
        load_environment(file)
    assert str(caught.value).startswith(f"{file}: {where}: a tab character: YAML indents with spaces only")
    assert "replace the tab with spaces" in str(caught.value)


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    file = write_env(tmp_path, "broken", "network:\n  availability_zone: [us-east-1a\n")
    with pytest.raises(ConfigError, match=rf"{file}: line \d+, column \d+: 'YAML' is not valid; cannot be parsed"):
        load_environment(file)


def test_bad_file_name(tmp_path: Path) -> None:
    file = write_env(tmp_path, "Prod_1", MINIMAL)
    with pytest.raises(ConfigError, match=r"Prod_1.*lowercase letters"):
        load_environment(file)


def test_every_problem_of_every_file_is_reported(tmp_path: Path) -> None:
    write_env(tmp_path, "one", net(dynamodb_endpoint="yes", nat_gateways="two"))
    write_env(tmp_path, "two", {**MINIMAL, "region": "x"})
    with pytest.raises(ConfigError) as caught:
        load_environments(tmp_path)
    paths = [(Path(source).name, p.path) for source, p in caught.value.entries]
    assert ("one.yaml", "network.dynamodb_endpoint") in paths
    assert ("one.yaml", "network.nat_gateways") in paths
    assert ("two.yaml", "region") in paths


def test_unknown_selection_lists_known_environments(tmp_path: Path) -> None:
    write_env(tmp_path, "dev", MINIMAL)
    with pytest.raises(ConfigError, match=r"-c env: 'qa' is not valid; allowed: dev"):
        load_environments(tmp_path, ["qa"])


def test_selection_loads_only_selected(tmp_path: Path) -> None:
    write_env(tmp_path, "dev", MINIMAL)
    write_env(tmp_path, "broken", {"network": {}})
    assert [e.name for e in load_environments(tmp_path, ["dev"])] == ["dev"]


def test_defaults_are_secure_and_retaining(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "x", MINIMAL))
    cfg = env.config
    assert cfg.retention.on_delete == "retain"
    assert cfg.network.cidr == "10.0.0.0/16"
    assert cfg.network.flow_logs.traffic_type == "ALL"
    assert cfg.cluster.backend == "none"
    assert env.cluster_name == "mlcluster-x"


def test_config_objects_are_immutable(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "x", {**MINIMAL, "tags": {"a": "b"}}))
    with pytest.raises(AttributeError):
        env.config.network.cidr = "10.9.0.0/16"  # type: ignore[misc]
    with pytest.raises(TypeError):
        env.config.tags["a"] = "c"  # type: ignore[index]


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_load(name: str) -> None:
    assert load_environment(ENVIRONMENTS / f"{name}.yaml").name == name


def test_examples_include_dev_and_prod() -> None:
    assert {"dev", "prod"} <= set(EXAMPLES)
    assert load_environment(ENVIRONMENTS / "prod.yaml").config.retention.on_delete == "retain"


def test_app_prints_one_message_and_exits_1_without_traceback(tmp_path: Path) -> None:
    write_env(tmp_path / "environments", "dev", net(cidr="10.0.0.0/33"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "environments/dev.yaml: network.cidr: '10.0.0.0/33' is not valid" in result.stderr
    assert not (tmp_path / "cdk.out").exists()
