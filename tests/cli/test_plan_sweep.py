"""What ``preflight`` checks and ``cost`` prices: the whole plan of each example and of hand-built edge cases.

Every node group (key, role, type, counts, zones, reservation, capacity block, root volume, Spot), file
system, NAT gateway count, volume and optional service is compared with ``==``, so a plan that counts a
node, a zone or a volume differently is seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlcluster.cli.plan import FileSystem, NodeGroup, Plan, plan_of
from mlcluster.config import load_environment
from tests.support import ENVIRONMENTS, write_env

LUSTRE = FileSystem("storage.lustre", "LUSTRE", "PERSISTENT_2", 1200, 250)
HEAD = "cluster.pcluster.head_node.instance_type"


def queue(index: int, resource: int = 0) -> str:
    return f"cluster.pcluster.queues[{index}].compute_resources[{resource}]"


def test_the_p4de_plan_counts_its_queues_login_nodes_and_home_volume() -> None:
    zone = ("us-west-2b",)
    assert plan_of(load_environment(ENVIRONMENTS / "p4de.yaml")) == Plan(
        groups=(
            NodeGroup(HEAD, "head node", "m5.8xlarge", 1, 1, zone, root_volume_gib=200),
            NodeGroup(queue(0), "queue compute-gpu/p4de", "p4de.24xlarge", 4, 4, zone, root_volume_gib=200),
            NodeGroup(queue(1), "queue inference-gpu/g5", "g5.12xlarge", 0, 10, zone, root_volume_gib=200),
            NodeGroup("cluster.pcluster.login_nodes", "login nodes", "m5.2xlarge", 1, 1, zone, root_volume_gib=200),
        ),
        file_systems=(LUSTRE,),
        nat_gateways=1,
        new_vpc=True,
        zones=zone,
        extra_volumes_gib=(("cluster.pcluster.shared_storage.home_volume.size_gib", 100),),
        prometheus=False,
        grafana=False,
        accounting_acu=None,
    )


def test_the_p5_plan_carries_its_reservation_apps_volume_and_observability() -> None:
    zone = ("us-east-2a",)
    plan = plan_of(load_environment(ENVIRONMENTS / "p5.yaml"))
    assert plan == Plan(
        groups=(
            NodeGroup(HEAD, "head node", "m5.8xlarge", 1, 1, zone, root_volume_gib=200),
            NodeGroup(
                queue(0),
                "queue compute-gpu/p5",
                "p5.48xlarge",
                4,
                4,
                zone,
                reservation_id="cr-0123456789abcdef0",
                root_volume_gib=200,
            ),
        ),
        file_systems=(LUSTRE,),
        nat_gateways=1,
        new_vpc=True,
        zones=zone,
        extra_volumes_gib=(
            ("cluster.pcluster.shared_storage.home_volume.size_gib", 100),
            ("cluster.pcluster.shared_storage.apps.size_gib", 200),
        ),
        prometheus=True,
        grafana=True,
        accounting_acu=None,
    )
    assert plan.uses_zone_ids is False


def test_the_hyperpod_plan_is_its_instance_groups_in_zone_ids() -> None:
    zone = ("usw2-az4",)
    plan = plan_of(load_environment(ENVIRONMENTS / "hyperpod.yaml"))
    assert plan == Plan(
        groups=(
            NodeGroup("cluster.hyperpod.controller", "instance group controller-machine", "ml.m5.12xlarge", 1, 1, zone),
            NodeGroup("cluster.hyperpod.login", "instance group login-group", "ml.m5.4xlarge", 1, 1, zone),
            NodeGroup("cluster.hyperpod.workers[0]", "instance group worker-group-1", "ml.p5.48xlarge", 2, 2, zone),
        ),
        file_systems=(LUSTRE,),
        nat_gateways=1,
        new_vpc=True,
        zones=zone,
        extra_volumes_gib=(),
        prometheus=True,
        grafana=False,
        accounting_acu=None,
    )
    assert plan.uses_zone_ids is True
    assert [(g.sagemaker, g.ec2_type) for g in plan.groups] == [
        (True, "m5.12xlarge"),
        (True, "m5.4xlarge"),
        (True, "p5.48xlarge"),
    ]


def test_the_trn1_plan_has_openzfs_and_no_home_volume_home_being_on_openzfs() -> None:
    zone = ("us-east-1c",)
    assert plan_of(load_environment(ENVIRONMENTS / "trn1.yaml")) == Plan(
        groups=(
            NodeGroup(HEAD, "head node", "m5.8xlarge", 1, 1, zone, root_volume_gib=200),
            NodeGroup(queue(0), "queue compute-trn/trn1", "trn1.32xlarge", 0, 8, zone, root_volume_gib=200),
        ),
        file_systems=(LUSTRE, FileSystem("storage.openzfs", "OPENZFS", "SINGLE_AZ_HA_2", 256, 160)),
        nat_gateways=1,
        new_vpc=True,
        zones=zone,
        extra_volumes_gib=(),
        prometheus=True,
        grafana=False,
        accounting_acu=None,
    )


def test_the_prod_plan_without_a_cluster_has_a_nat_gateway_per_zone() -> None:
    assert plan_of(load_environment(ENVIRONMENTS / "prod.yaml")) == Plan(
        groups=(),
        file_systems=(FileSystem("storage.lustre", "LUSTRE", "PERSISTENT_2", 4800, 500),),
        nat_gateways=2,
        new_vpc=True,
        zones=("usw2-az4", "usw2-az1"),
        extra_volumes_gib=(),
        prometheus=False,
        grafana=False,
        accounting_acu=None,
    )


EDGE = """
network:
  availability_zone: us-east-2a
  extra_zones:
    - availability_zone: us-east-2b
  nat_gateways: one
storage:
  accounting:
    min_capacity_acu: 1
    max_capacity_acu: 8
cluster:
  backend: pcluster
  name: edge-train
  pcluster:
    head_node:
      instance_type: c5.xlarge
      root_volume_gib: 80
    queues:
      - name: spot
        capacity_type: SPOT
        zones: [us-east-2b]
        root_volume_gib: 60
        compute_resources:
          - name: small
            instance_type: c5.large
            min_count: 0
            max_count: 3
          - name: big
            instance_type: c5.24xlarge
            min_count: 1
            max_count: 2
      - name: block
        capacity_type: CAPACITY_BLOCK
        compute_resources:
          - name: p5
            instance_type: p5.48xlarge
            min_count: 2
            max_count: 2
            capacity_reservation_id: cr-0123456789abcdef0
    shared_storage:
      home_volume:
        enabled: false
"""


def test_spot_and_capacity_block_queues_their_zones_one_nat_gateway_and_the_accounting_database(
    tmp_path: Path,
) -> None:
    plan = plan_of(load_environment(write_env(tmp_path, "edge", EDGE)))
    assert plan == Plan(
        groups=(
            NodeGroup(HEAD, "head node", "c5.xlarge", 1, 1, ("us-east-2a",), root_volume_gib=80),
            NodeGroup(queue(0), "queue spot/small", "c5.large", 0, 3, ("us-east-2b",), root_volume_gib=60, spot=True),
            NodeGroup(
                queue(0, 1), "queue spot/big", "c5.24xlarge", 1, 2, ("us-east-2b",), root_volume_gib=60, spot=True
            ),
            NodeGroup(
                queue(1),
                "queue block/p5",
                "p5.48xlarge",
                2,
                2,
                ("us-east-2a",),
                reservation_id="cr-0123456789abcdef0",
                capacity_block=True,
                root_volume_gib=200,
            ),
        ),
        file_systems=(LUSTRE,),
        nat_gateways=1,
        new_vpc=True,
        zones=("us-east-2a", "us-east-2b"),
        extra_volumes_gib=(),
        prometheus=False,
        grafana=False,
        accounting_acu=(1.0, 8.0),
    )
    assert [(g.sagemaker, g.ec2_type) for g in plan.groups[:2]] == [(False, "c5.xlarge"), (False, "c5.large")]


def test_an_existing_network_has_no_nat_gateway_and_no_new_vpc(tmp_path: Path) -> None:
    existing = {
        "vpc_id": "vpc-0abc1234",
        "vpc_cidr": "10.20.0.0/16",
        "private_subnet_ids": ["subnet-0abc1234"],
        "security_group_id": "sg-0abc1234",
    }
    env = load_environment(
        write_env(tmp_path, "byo", {"network": {"availability_zone_id": "use2-az1", "existing": existing}})
    )
    plan = plan_of(env)
    assert plan == Plan(
        groups=(),
        file_systems=(LUSTRE,),
        nat_gateways=0,
        new_vpc=False,
        zones=("use2-az1",),
        extra_volumes_gib=(),
        prometheus=False,
        grafana=False,
        accounting_acu=None,
    )
    assert plan.uses_zone_ids is True


@pytest.mark.parametrize(
    ("zones", "ids"),
    [
        (("use2-az1",), True),
        (("us-east-2a", "apne1-az4"), True),
        (("us-east-2a",), False),
        (("use2-az1x",), False),
        (("abcdef1-az1",), False),
        ((), False),
    ],
)
def test_zone_ids_are_told_from_zone_names_whole(zones: tuple[str, ...], ids: bool) -> None:
    plan = Plan((), (), 0, False, zones, (), False, False)
    assert plan.uses_zone_ids is ids
