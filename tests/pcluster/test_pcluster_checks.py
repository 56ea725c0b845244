"""Pre-deploy checks: each one can fail, with its level, key path and reason; the archetypes pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from mlcluster.config import Environment
from mlcluster.pcluster.checks import (
    Finding,
    PreDeployError,
    access_summary,
    check_cluster,
    check_cluster_name,
    check_environment,
    raise_for_errors,
)
from tests.pcluster.pcluster_support import ARCHETYPES_YAML, NETWORK, archetype_env, pcluster

MakeEnv = Callable[..., Environment]
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def run(text: str, **kwargs: Any) -> list[Finding]:
    options: dict[str, Any] = {"cluster_name": "train", "zone_labels": ZONES, "lustre_zone": "us-east-1a"}
    options.update(kwargs)
    return check_cluster(pcluster(text), **options)


def queue_yaml(resource: str, queue: str = "") -> str:
    return f"""
queues:
  - name: train
    {queue}
    compute_resources:
      - name: gpu
        {resource}
"""


P5 = "instance_type: p5.48xlarge"
CR0 = "cluster.pcluster.queues[0].compute_resources[0]"

FAILING: list[tuple[str, str, dict[str, Any], str, str, str]] = [
    # (id, pcluster YAML, check_cluster options, level, path, fragment)
    (
        "placement group on a targeted odcr",
        queue_yaml(P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        placement_group: true"),
        {},
        "error",
        f"{CR0}.placement_group",
        "insufficient capacity",
    ),
    (
        "placement group on a reservation group",
        queue_yaml(
            P5 + "\n        capacity_reservation_group: arn:aws:resource-groups:us-east-1:123456789012:group/g"
            "\n        placement_group: true"
        ),
        {},
        "error",
        f"{CR0}.placement_group",
        "targeted capacity reservation",
    ),
    (
        "placement group on a capacity block",
        queue_yaml(
            P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        min_count: 2\n        max_count: 2"
            "\n        placement_group: true",
            queue="capacity_type: CAPACITY_BLOCK",
        ),
        {},
        "error",
        f"{CR0}.placement_group",
        "a capacity block",
    ),
    (
        "placement group across zones",
        queue_yaml("instance_type: g5.xlarge\n        placement_group: true", queue="zones: [us-east-1a, us-east-1b]"),
        {},
        "error",
        f"{CR0}.placement_group",
        "spans 2 zones",
    ),
    (
        "named placement group across zones",
        queue_yaml(
            "instance_type: g5.xlarge\n        placement_group_name: mine", queue="zones: [us-east-1a, us-east-1b]"
        ),
        {},
        "error",
        f"{CR0}.placement_group",
        "spans 2 zones",
    ),
    (
        "efa across zones",
        queue_yaml(P5, queue="zones: [us-east-1a, us-east-1b]"),
        {},
        "error",
        f"{CR0}.efa",
        "EFA does not work across zones",
    ),
    (
        "efa without placement",
        queue_yaml(P5 + "\n        placement_group: false"),
        {},
        "warning",
        f"{CR0}.placement_group",
        "without a placement group",
    ),
    (
        "efa on an instance type without it",
        queue_yaml("instance_type: g5.xlarge\n        efa: true"),
        {},
        "error",
        f"{CR0}.efa",
        "g5.xlarge does not support EFA",
    ),
    (
        "unknown instance type",
        queue_yaml("instance_type: m7a.large"),
        {},
        "warning",
        f"{CR0}.instance_type",
        "not in mlcluster's instance-type table",
    ),
    (
        "socket layout that does not add up",
        queue_yaml(P5 + "\n        sockets: 2\n        cores_per_socket: 96"),
        {},
        "error",
        f"{CR0}.sockets",
        "2 x 96 x 2 = 384, but p5.48xlarge has 192 vCPUs",
    ),
    (
        "socket layout that forgets SMT",
        queue_yaml(P5 + "\n        sockets: 2\n        cores_per_socket: 48\n        threads_per_core: 1"),
        {},
        "error",
        f"{CR0}.sockets",
        "2 x 48 x 1 = 96, but p5.48xlarge has 192 vCPUs",
    ),
    (
        "unknown type layout without threads",
        queue_yaml("instance_type: c6a.48xlarge\n        efa: false\n        sockets: 2\n        cores_per_socket: 48"),
        {},
        "error",
        f"{CR0}.threads_per_core",
        "give threads_per_core",
    ),
    (
        "queue away from lustre",
        queue_yaml(P5, queue="zones: [us-east-1b]"),
        {},
        "error",
        "cluster.pcluster.queues[0].zones",
        "FSx for Lustre is in us-east-1a",
    ),
    (
        "queue partly away from lustre",
        queue_yaml("instance_type: g5.xlarge", queue="zones: [us-east-1a, us-east-1c]"),
        {},
        "warning",
        "cluster.pcluster.queues[0].zones",
        "across zones",
    ),
    (
        "queue in a zone without a subnet",
        queue_yaml(P5, queue="zones: [us-east-1d]"),
        {},
        "error",
        "cluster.pcluster.queues[0].zones",
        "us-east-1d: no private subnet there",
    ),
    (
        "cluster name too long",
        queue_yaml(P5),
        {"cluster_name": "c" * 61},
        "error",
        "cluster.name",
        "at most 60 allowed",
    ),
    (
        "cluster name with accounting",
        queue_yaml(P5)
        + """slurm:
  accounting:
    uri: db:3306
    user_name: slurm
    password_secret_arn: arn:aws:secretsmanager:us-east-1:123456789012:secret:x
""",
        {"cluster_name": "c" * 41},
        "error",
        "cluster.name",
        "at most 40 allowed with Slurm accounting",
    ),
    (
        "cluster name characters",
        queue_yaml(P5),
        {"cluster_name": "1_train"},
        "error",
        "cluster.name",
        "starting with a",
    ),
    (
        "cluster name equals stack name",
        queue_yaml(P5),
        {"cluster_name": "dev-Cluster", "stack_name": "dev-Cluster"},
        "error",
        "cluster.name",
        "must differ",
    ),
    (
        "neuron queue without neuron",
        queue_yaml("instance_type: trn1.32xlarge") + "node_scripts: {neuron: false}",
        {},
        "warning",
        "cluster.pcluster.node_scripts.neuron",
        "no Neuron driver",
    ),
    (
        "mixed accelerators",
        """
queues:
  - name: mixed
    compute_resources:
      - {name: gpu, instance_type: p5.48xlarge}
      - {name: trn, instance_type: trn1.32xlarge}
""",
        {},
        "warning",
        "cluster.pcluster.queues[0].compute_resources",
        "mixes NVIDIA and Neuron",
    ),
    (
        "unreachable head node",
        queue_yaml(P5) + "head_node: {subnet: private, ssm: false}",
        {},
        "warning",
        "cluster.pcluster.head_node.ssm",
        "reachable only from inside the VPC",
    ),
    (
        "ssh from anywhere on a public head node",
        queue_yaml(P5) + "head_node: {subnet: public, ssh_allowed_cidr: 0.0.0.0/0, allow_ssh_from_internet: true}",
        {},
        "warning",
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "open to the whole internet (allow_ssh_from_internet: true) on the head node",
    ),
    (
        "ssh from anywhere on internet-facing login nodes",
        queue_yaml(P5)
        + "head_node: {ssh_allowed_cidr: 0.0.0.0/0, allow_ssh_from_internet: true}\n"
        + "login_nodes: {internet_facing: true}",
        {},
        "warning",
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "on the login nodes' load balancer",
    ),
    (
        "internet-facing login nodes that admit only the VPC",
        queue_yaml(P5) + "login_nodes: {internet_facing: true}",
        {},
        "warning",
        "cluster.pcluster.login_nodes.internet_facing",
        "admits SSH only from the VPC's CIDR",
    ),
    (
        "internet-facing login nodes in an existing network",
        queue_yaml(P5) + "login_nodes: {internet_facing: true}\nhead_node: {ssh_allowed_cidr: 192.0.2.0/24}",
        {"existing_network": True},
        "warning",
        "cluster.pcluster.login_nodes.internet_facing",
        "must map public IPs on launch",
    ),
    (
        "key pair on ubuntu",
        queue_yaml(P5) + "os: ubuntu2204\nhead_node: {key_name: ops}",
        {},
        "warning",
        "cluster.pcluster.head_node.key_name",
        "accepts only ed25519 key pairs",
    ),
    (
        "public head node without a public subnet",
        queue_yaml(P5) + "head_node: {subnet: public}",
        {"public_subnet": False},
        "error",
        "cluster.pcluster.head_node.subnet",
        "needs a public subnet",
    ),
    (
        "internet-facing login nodes without a public subnet",
        queue_yaml(P5) + "login_nodes: {internet_facing: true}",
        {"public_subnet": False},
        "error",
        "cluster.pcluster.login_nodes.internet_facing",
        "needs a public subnet",
    ),
    (
        "home without openzfs",
        queue_yaml(P5) + "shared_storage: {home_on_openzfs: true}",
        {"openzfs_available": False},
        "error",
        "cluster.pcluster.shared_storage.home_on_openzfs",
        "storage.openzfs",
    ),
    (
        "too many tags",
        queue_yaml(P5) + "tags: {" + ", ".join(f"k{i}: v" for i in range(30)) + "}",
        {"extra_tags": {f"env{i}": "v" for i in range(11)}},
        "error",
        "cluster.pcluster.tags",
        "41 tags",
    ),
]


@pytest.mark.parametrize(
    ("text", "options", "level", "path", "fragment"), [c[1:] for c in FAILING], ids=[c[0] for c in FAILING]
)
def test_check_fails(text: str, options: dict[str, Any], level: str, path: str, fragment: str) -> None:
    findings = run(text, **options)
    matching = [f for f in findings if f.path == path and fragment in f.message]
    assert matching, [f.render() for f in findings]
    assert matching[0].level == level


def test_clean_configuration_has_no_findings() -> None:
    assert run(queue_yaml(P5)) == []


def test_own_placement_group_with_its_targeted_reservation_passes() -> None:
    """The seed's other pattern: a reservation made in your own cluster placement group, named."""
    text = queue_yaml(
        P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        placement_group_name: p5-odcr-pg"
    )
    assert run(text) == []


def test_own_placement_group_with_placement_group_true_and_a_reservation_passes() -> None:
    text = queue_yaml(
        P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        placement_group: true"
        "\n        placement_group_name: p5-odcr-pg"
    )
    assert run(text) == []


@pytest.mark.parametrize(
    "layout",
    [
        "sockets: 2\n        cores_per_socket: 48",  # threads from the table
        "sockets: 4\n        cores_per_socket: 24\n        threads_per_core: 2",  # another split, same total
        "sockets: 1\n        cores_per_socket: 96\n        threads_per_core: 2",
    ],
)
def test_layouts_that_add_up_pass(layout: str) -> None:
    assert run(queue_yaml(P5 + "\n        " + layout)) == []


@pytest.mark.parametrize(
    "extra",
    [
        "head_node: {subnet: public}",
        "head_node: {key_name: ops}",  # alinux2023 takes RSA and ed25519 keys
        "head_node: {ssh_allowed_cidr: 0.0.0.0/0, allow_ssh_from_internet: true}",  # private nodes: not exposed
        "login_nodes: {}",
        "login_nodes: {internet_facing: true}\nhead_node: {ssh_allowed_cidr: 192.0.2.0/24}",
    ],
)
def test_access_edges_pass(extra: str) -> None:
    """Each access choice at its edge: chosen on purpose, no finding."""
    assert run(queue_yaml(P5) + extra, public_subnet=True) == []


def test_private_nodes_need_no_public_subnet() -> None:
    assert run(queue_yaml(P5) + "login_nodes: {}", public_subnet=False) == []


ACCESS = [
    (
        "defaults",
        "",
        ["head node: private subnet behind NAT, no public IP; SSH from the VPC's CIDR; Session Manager"],
    ),
    (
        "public head, internal login",
        "head_node: {subnet: public, ssh_allowed_cidr: 192.0.2.0/24}\nlogin_nodes: {count: 2}",
        [
            "head node: public subnet with an Elastic IP; SSH from 192.0.2.0/24; Session Manager",
            "login nodes (2): private subnet behind NAT, internal load balancer (VPC and peered networks); "
            "SSH from 192.0.2.0/24; Session Manager",
        ],
    ),
    (
        "internet login from anywhere",
        "head_node: {ssh_allowed_cidr: 0.0.0.0/0, allow_ssh_from_internet: true, ssm: false}\n"
        "login_nodes: {internet_facing: true}",
        [
            "head node: private subnet behind NAT, no public IP; SSH from the whole internet (0.0.0.0/0); "
            "no Session Manager",
            "login nodes (1): public subnet with public IPs, internet-facing load balancer; "
            "SSH from the whole internet (0.0.0.0/0); no Session Manager",
        ],
    ),
]


@pytest.mark.parametrize(("extra", "expected"), [c[1:] for c in ACCESS], ids=[c[0] for c in ACCESS])
def test_access_summary(extra: str, expected: list[str]) -> None:
    lines = access_summary(pcluster(queue_yaml(P5) + extra))
    assert lines[: len(expected)] == expected
    assert lines[len(expected) :] == [
        "queue train: private subnets behind NAT, no public IP; reachable only from the cluster's nodes; "
        "no Session Manager"
    ]


def test_errors_come_first_and_raise() -> None:
    findings = run(
        queue_yaml("instance_type: m7a.large\n        efa: false", queue="zones: [us-east-1b]"),
        cluster_name="c" * 70,
    )
    assert [f.level for f in findings] == sorted((f.level for f in findings), key=lambda level: level != "error")
    with pytest.raises(PreDeployError) as err:
        raise_for_errors(findings)
    assert "error: cluster.name:" in str(err.value)
    assert "error: cluster.pcluster.queues[0].zones:" in str(err.value)
    assert err.value.findings == findings


def test_warnings_alone_do_not_raise() -> None:
    findings = run(queue_yaml("instance_type: m7a.large"))
    assert [f.level for f in findings] == ["warning"]
    assert raise_for_errors(findings) == findings


def test_cluster_name_rules_accept_valid_names() -> None:
    assert check_cluster_name("a" * 60, stack_name="other") == []
    assert check_cluster_name("a" * 40, accounting=True) == []


@pytest.mark.parametrize("name", sorted(ARCHETYPES_YAML))
def test_archetypes_pass(make_env: MakeEnv, name: str) -> None:
    env = make_env(archetype_env(name))
    findings = check_environment(env, stack_name=f"{env.name}-Cluster")
    assert [f for f in findings if f.level == "error"] == []


def test_environment_with_existing_network_uses_subnet_ids(make_env: MakeEnv) -> None:
    data = yaml.safe_load(ARCHETYPES_YAML["p5-odcr"])
    data["cluster"]["pcluster"]["queues"][0]["zones"] = ["subnet-0aaaaaaaaaaaaaaa2"]
    env = make_env(
        {
            "network": {
                "availability_zone": "us-east-1a",
                "existing": {
                    "vpc_id": "vpc-0abc1234",
                    "vpc_cidr": "10.0.0.0/16",
                    "public_subnet_id": "subnet-0bbbbbbbbbbbbbbb1",
                    "private_subnet_ids": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"],
                    "security_group_id": "sg-0ccccccccccccccc1",
                },
            },
            **data,
        }
    )
    (finding,) = check_environment(env)
    assert finding.path == "cluster.pcluster.queues[0].zones"
    assert "FSx for Lustre is in subnet-0aaaaaaaaaaaaaaa1" in finding.message


def test_environment_cluster_name_and_openzfs(make_env: MakeEnv) -> None:
    data = archetype_env("trn1-neuron")
    del data["storage"]
    data["cluster"]["name"] = "x" * 60
    data["cluster"]["pcluster"]["slurm"] = {
        "accounting": {
            "uri": "db:3306",
            "user_name": "slurm",
            "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:x",
        }
    }
    env = make_env(data)
    paths = {f.path for f in check_environment(env) if f.level == "error"}
    assert paths == {"cluster.name", "cluster.pcluster.shared_storage.home_on_openzfs"}


def test_other_backends_are_not_checked(make_env: MakeEnv) -> None:
    assert check_environment(make_env({"network": NETWORK})) == []
