"""The ``cluster.pcluster:`` section: defaults, and every bad value named with its key path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from mlcluster.config import ConfigError, Environment
from tests.pcluster.pcluster_support import ARCHETYPES_YAML, NETWORK, archetype, archetype_env

MakeEnv = Callable[..., Environment]

GPU = {"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 1, "max_count": 2}


def env_with(pcluster: dict[str, Any]) -> dict[str, Any]:
    return {"network": NETWORK, "cluster": {"backend": "pcluster", "pcluster": pcluster}}


def queue(**extra: Any) -> dict[str, Any]:
    return {"name": "train", "compute_resources": [dict(GPU)], **extra}


def cr(**extra: Any) -> dict[str, Any]:
    return {"queues": [{"name": "train", "compute_resources": [{**GPU, **extra}]}]}


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown key", {"queues": [queue()], "head_nodes": {}}, "cluster.pcluster.head_nodes", "unknown key"),
    ("no queues", {"queues": []}, "cluster.pcluster.queues", "give at least one queue"),
    ("queues missing", {}, "cluster.pcluster.queues", "this key is required"),
    ("bad version", {"queues": [queue()], "version": "2.11.9"}, "cluster.pcluster.version", "ParallelCluster 3"),
    ("bad os", {"queues": [queue()], "os": "centos7"}, "cluster.pcluster.os", "'alinux2023'"),
    ("alinux2 on 3.16", {"queues": [queue()], "os": "alinux2"}, "cluster.pcluster.os", "no longer offers alinux2"),
    ("bad ami", {"queues": [queue()], "custom_ami": "ami-12"}, "cluster.pcluster.custom_ami", "an AMI ID"),
    (
        "head node subnet",
        {"queues": [queue()], "head_node": {"subnet": "dmz"}},
        "cluster.pcluster.head_node.subnet",
        "'public', 'private'",
    ),
    (
        "head node ssh cidr",
        {"queues": [queue()], "head_node": {"ssh_allowed_cidr": "everywhere"}},
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "CIDR block",
    ),
    (
        "ssh from the whole internet",
        {"queues": [queue()], "head_node": {"ssh_allowed_cidr": "0.0.0.0/0"}},
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "allow_ssh_from_internet: true",
    ),
    (
        "ssh from the whole IPv6 internet",
        {"queues": [queue()], "head_node": {"ssh_allowed_cidr": "::/0"}},
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "opens SSH to the whole internet",
    ),
    (
        "ipv6 with the internet allowed",
        {"queues": [queue()], "head_node": {"ssh_allowed_cidr": "::/0", "allow_ssh_from_internet": True}},
        "cluster.pcluster.head_node.ssh_allowed_cidr",
        "IPv4 CIDR block",
    ),
    (
        "login subnet key is gone",
        {"queues": [queue()], "login_nodes": {"subnet": "public"}},
        "cluster.pcluster.login_nodes.subnet",
        "unknown key",
    ),
    (
        "head node root volume",
        {"queues": [queue()], "head_node": {"root_volume_gib": 10}},
        "cluster.pcluster.head_node.root_volume_gib",
        "from 40",
    ),
    (
        "policy arn",
        {"queues": [queue()], "head_node": {"additional_iam_policies": ["AmazonS3ReadOnlyAccess"]}},
        "cluster.pcluster.head_node.additional_iam_policies[0]",
        "IAM managed policy ARNs",
    ),
    (
        "script url",
        {"queues": [queue()], "head_node": {"custom_actions": {"on_node_start": [{"script": "ftp://x/y.sh"}]}}},
        "cluster.pcluster.head_node.custom_actions.on_node_start[0].script",
        "s3:// or https://",
    ),
    (
        "min above max",
        cr(min_count=3, max_count=2),
        "cluster.pcluster.queues[0].compute_resources[0].min_count",
        "must not exceed",
    ),
    ("wrong type", cr(max_count="four"), "cluster.pcluster.queues[0].compute_resources[0].max_count", "a whole number"),
    (
        "bad instance type",
        cr(instance_type="P5"),
        "cluster.pcluster.queues[0].compute_resources[0].instance_type",
        "an EC2 instance type",
    ),
    (
        "bad reservation id",
        cr(capacity_reservation_id="cr-123"),
        "cluster.pcluster.queues[0].compute_resources[0].capacity_reservation_id",
        "cr-0123456789abcdef0",
    ),
    (
        "id and group",
        {
            **cr(capacity_reservation_id="cr-0123456789abcdef0", capacity_reservation_group="pool"),
            "capacity_reservation_groups": [{"name": "pool", "reservation_ids": ["cr-0123456789abcdef1"]}],
        },
        "cluster.pcluster.queues[0].compute_resources[0].capacity_reservation_group",
        "not both",
    ),
    (
        "unknown group",
        cr(capacity_reservation_group="nope"),
        "cluster.pcluster.queues[0].compute_resources[0].capacity_reservation_group",
        "no such group",
    ),
    ("rocky8 without an image", {"queues": [queue()], "os": "rocky8"}, "cluster.pcluster.os", "publishes no image"),
    (
        "rocky9 with only a queue image",
        {"queues": [queue(custom_ami="ami-0123456789abcdef0")], "os": "rocky9"},
        "cluster.pcluster.os",
        "give custom_ami",
    ),
    (
        "named group with placement off",
        cr(placement_group=False, placement_group_name="p5-odcr-group"),
        "cluster.pcluster.queues[0].compute_resources[0].placement_group",
        "launches into that group",
    ),
    (
        "placement group name",
        cr(placement_group_name="bad name!"),
        "cluster.pcluster.queues[0].compute_resources[0].placement_group_name",
        "placement group you created",
    ),
    ("sockets alone", cr(sockets=2), "cluster.pcluster.queues[0].compute_resources[0].sockets", "together"),
    (
        "denied compute resource slurm setting",
        cr(custom_slurm_settings={"Weight": "10"}),
        "cluster.pcluster.queues[0].compute_resources[0].custom_slurm_settings.Weight",
        "refuses it here",
    ),
    (
        "threads without sockets",
        cr(threads_per_core=2),
        "cluster.pcluster.queues[0].compute_resources[0].threads_per_core",
        "with sockets and cores_per_socket",
    ),
    (
        "three threads per core",
        cr(sockets=2, cores_per_socket=32, threads_per_core=3),
        "cluster.pcluster.queues[0].compute_resources[0].threads_per_core",
        "to 2",
    ),
    (
        "threads via custom settings",
        cr(custom_slurm_settings={"ThreadsPerCore": "2"}),
        "cluster.pcluster.queues[0].compute_resources[0].custom_slurm_settings",
        "threads_per_core with their own keys",
    ),
    (
        "sockets via custom settings",
        cr(custom_slurm_settings={"Sockets": "2"}),
        "cluster.pcluster.queues[0].compute_resources[0].custom_slurm_settings",
        "own keys",
    ),
    (
        "slurm setting not a string",
        cr(custom_slurm_settings={"MaxJobs": 10}),
        "cluster.pcluster.queues[0].compute_resources[0].custom_slurm_settings.MaxJobs",
        "quote it",
    ),
    ("queue name", {"queues": [queue(name="Train")]}, "cluster.pcluster.queues[0].name", "lowercase letters"),
    ("queue default", {"queues": [queue(name="default")]}, "cluster.pcluster.queues[0].name", "forbids"),
    ("duplicate queues", {"queues": [queue(), queue()]}, "cluster.pcluster.queues", "must be unique"),
    (
        "duplicate compute resources",
        {"queues": [queue(compute_resources=[dict(GPU), dict(GPU)])]},
        "cluster.pcluster.queues[0].compute_resources",
        "unique within a queue",
    ),
    ("bad zone", {"queues": [queue(zones=["east"])]}, "cluster.pcluster.queues[0].zones[0]", "zone names or IDs"),
    (
        "capacity type",
        {"queues": [queue(capacity_type="RESERVED")]},
        "cluster.pcluster.queues[0].capacity_type",
        "'ONDEMAND', 'SPOT', 'CAPACITY_BLOCK'",
    ),
    (
        "spot with reservation",
        {
            "queues": [
                queue(
                    capacity_type="SPOT", compute_resources=[{**GPU, "capacity_reservation_id": "cr-0123456789abcdef0"}]
                )
            ]
        },
        "cluster.pcluster.queues[0].capacity_type",
        "on-demand launches only",
    ),
    (
        "capacity block without reservation",
        {
            "queues": [
                queue(capacity_type="CAPACITY_BLOCK", compute_resources=[{**GPU, "min_count": 2, "max_count": 2}])
            ]
        },
        "cluster.pcluster.queues[0].compute_resources[0].capacity_reservation_id",
        "required with capacity_type CAPACITY_BLOCK",
    ),
    (
        "capacity block dynamic",
        {
            "queues": [
                queue(
                    capacity_type="CAPACITY_BLOCK",
                    compute_resources=[{**GPU, "capacity_reservation_id": "cr-0123456789abcdef0"}],
                )
            ]
        },
        "cluster.pcluster.queues[0].compute_resources[0].min_count",
        "must equal max_count",
    ),
    (
        "denied queue slurm setting",
        {"queues": [queue(custom_slurm_settings={"PartitionName": "x"})]},
        "cluster.pcluster.queues[0].custom_slurm_settings.PartitionName",
        "refuses it here",
    ),
    (
        "denied cluster slurm setting",
        {"queues": [queue()], "slurm": {"custom_settings": {"SuspendTime": "60"}}},
        "cluster.pcluster.slurm.custom_settings.SuspendTime",
        "refuses it here",
    ),
    (
        "accounting setting with database",
        {
            "queues": [queue()],
            "slurm": {
                "custom_settings": {"AccountingStorageHost": "db"},
                "accounting": {
                    "uri": "db:3306",
                    "user_name": "slurm",
                    "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:x",
                },
            },
        },
        "cluster.pcluster.slurm.custom_settings.AccountingStorageHost",
        "refuses it here",
    ),
    (
        "accounting secret",
        {
            "queues": [queue()],
            "slurm": {"accounting": {"uri": "db:3306", "user_name": "slurm", "password_secret_arn": "secret"}},
        },
        "cluster.pcluster.slurm.accounting.password_secret_arn",
        "Secrets Manager",
    ),
    (
        "scaledown",
        {"queues": [queue()], "slurm": {"scaledown_idle_minutes": -5}},
        "cluster.pcluster.slurm.scaledown_idle_minutes",
        "from -1",
    ),
    (
        "update strategy",
        {"queues": [queue()], "slurm": {"queue_update_strategy": "REPLACE"}},
        "cluster.pcluster.slurm.queue_update_strategy",
        "'DRAIN'",
    ),
    (
        "apps deletion policy",
        {"queues": [queue()], "shared_storage": {"apps": {"deletion_policy": "Keep"}}},
        "cluster.pcluster.shared_storage.apps.deletion_policy",
        "'Snapshot'",
    ),
    (
        "home volume deletion policy",
        {"queues": [queue()], "shared_storage": {"home_volume": {"deletion_policy": "Keep"}}},
        "cluster.pcluster.shared_storage.home_volume.deletion_policy",
        "'Retain'",
    ),
    ("login count", {"queues": [queue()], "login_nodes": {"count": 0}}, "cluster.pcluster.login_nodes.count", "from 1"),
    (
        "group without reservations",
        {"queues": [queue()], "capacity_reservation_groups": [{"name": "pool", "reservation_ids": []}]},
        "cluster.pcluster.capacity_reservation_groups[0].reservation_ids",
        "at least one",
    ),
    (
        "group with a bad id",
        {"queues": [queue()], "capacity_reservation_groups": [{"name": "pool", "reservation_ids": ["r-1"]}]},
        "cluster.pcluster.capacity_reservation_groups[0].reservation_ids[0]",
        "capacity reservation ARNs",
    ),
    (
        "group repeats a reservation",
        {
            "queues": [queue()],
            "capacity_reservation_groups": [
                {
                    "name": "pool",
                    "reservation_ids": [
                        "cr-0123456789abcdef0",
                        "arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0",
                    ],
                }
            ],
        },
        "cluster.pcluster.capacity_reservation_groups[0].reservation_ids",
        "may appear once",
    ),
    (
        "duplicate groups",
        {
            "queues": [queue()],
            "capacity_reservation_groups": [
                {"name": "pool", "reservation_ids": ["cr-0123456789abcdef0"]},
                {"name": "pool", "reservation_ids": ["cr-0123456789abcdef1"]},
            ],
        },
        "cluster.pcluster.capacity_reservation_groups",
        "must be unique",
    ),
    (
        "reserved tag",
        {"queues": [queue()], "tags": {"parallelcluster:owner": "me"}},
        "cluster.pcluster.tags.parallelcluster:owner",
        "not starting with 'parallelcluster:'",
    ),
    (
        "node scripts toggle",
        {"queues": [queue()], "node_scripts": {"neuron": "yes"}},
        "cluster.pcluster.node_scripts.neuron",
        "true or false",
    ),
]


@pytest.mark.parametrize(("pcluster", "path", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_value_names_key_path(make_env: MakeEnv, pcluster: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_env(env_with(copy.deepcopy(pcluster)))
    problems = {p.path: p.allowed for p in err.value.problems}
    assert path in problems, problems
    assert fragment in problems[path]
    assert f"{path}:" in str(err.value)


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "0.0.0.0/1", "192.0.2.0/24", "pl-0123abcd"])
def test_ssh_sources_accepted_at_the_edge(make_env: MakeEnv, cidr: str) -> None:
    """The whole internet with the explicit setting; anything narrower without it."""
    allow = cidr == "0.0.0.0/0"
    head = {"ssh_allowed_cidr": cidr, "allow_ssh_from_internet": allow}
    env = make_env(env_with({"queues": [queue()], "head_node": head}))
    assert env.config.cluster.pcluster is not None
    assert env.config.cluster.pcluster.head_node.ssh_allowed_cidr == cidr


@pytest.mark.parametrize("os_name", ["rocky8", "rocky9"])
def test_rocky_with_a_custom_image_is_accepted(make_env: MakeEnv, os_name: str) -> None:
    env = make_env(env_with({"queues": [queue()], "os": os_name, "custom_ami": "ami-0123456789abcdef0"}))
    assert env.config.cluster.pcluster is not None and env.config.cluster.pcluster.os == os_name


def test_defaults() -> None:
    cfg = archetype("p5-odcr")
    assert cfg.version == "3.16.1"
    assert cfg.os == "alinux2023"
    assert cfg.head_node.instance_type == "m5.8xlarge"
    assert cfg.head_node.subnet == "private"
    assert cfg.head_node.allow_ssh_from_internet is False
    assert cfg.head_node.ssm is True
    assert cfg.slurm.queue_update_strategy == "DRAIN"
    assert cfg.slurm.scaledown_idle_minutes == 10
    assert cfg.shared_storage.home_on_openzfs is False
    # /home on a retained EBS volume of its own unless switched off (issue 33).
    home = cfg.shared_storage.home_volume
    # Unset: Retain, or Delete with retention.on_delete: destroy (decided at render).
    assert (home.enabled, home.size_gib, home.deletion_policy) == (True, 100, None)
    assert cfg.monitoring.logs and cfg.monitoring.dashboards and cfg.monitoring.alarms
    assert not cfg.monitoring.detailed_monitoring
    assert cfg.login_nodes is None
    assert (cfg.node_scripts.docker_enroot_pyxis, cfg.node_scripts.nccl_efa, cfg.node_scripts.neuron) == (
        True,
        True,
        True,
    )
    (resource,) = cfg.queues[0].compute_resources
    assert resource.efa is None
    assert resource.placement_group is False
    assert resource.reserved


@pytest.mark.parametrize("name", sorted(ARCHETYPES_YAML))
def test_archetypes_load_as_environments(make_env: MakeEnv, name: str) -> None:
    env = make_env(archetype_env(name))
    assert env.config.cluster.backend == "pcluster"
    assert env.config.cluster.pcluster is not None
