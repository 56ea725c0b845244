"""``mlcluster preflight``: the rows an operator acts on, read whole (issue 27, the cli sample's survivors).

Each test runs one check against the validated stubs of ``test_preflight`` and asserts the status, level,
key and message of its rows, and the AWS calls made: a level lower-cased drops an ERROR out of the exit code,
a message cut short no longer says where to look, and a quota code left out is a request AWS refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlcluster.cli import preflight
from tests.cli.conftest import Aws, aws_client, error
from tests.cli.test_preflight import (
    FSX_QUOTAS,
    P5_REGION,
    RESERVATION,
    context,
    env_folder,
    hyperpod_with_plan,
    missing_custom_ami_rows,
    quota,
    reservation,
    spot_p5_folder,
)


def test_a_quota_never_changed_is_read_from_the_aws_default(aws: Aws, tmp_path: Path) -> None:
    """GetServiceQuota's NoSuchResourceException: the default of the SAME quota code is asked for and used."""
    aws.answer(
        "service-quotas", "GetServiceQuota", always=error("NoSuchResourceException", "never changed", status=400)
    )
    defaults = {"L-417A185B": ("Running On-Demand P instances", 768.0), "L-1216C47A": ("Standard", 1152.0)}
    aws.answer(
        "service-quotas",
        "GetAWSDefaultServiceQuota",
        always=lambda params: quota("ec2", params["QuotaCode"], *defaults[params["QuotaCode"]]),
    )
    results = preflight.check_vcpu_quota(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert [(r.status, r.level, r.message) for r in results] == [
        ("pass", "ERROR", "Standard (L-1216C47A) 1152 >= 0 running + 32 needed"),
        ("pass", "ERROR", "Running On-Demand P instances (L-417A185B) 768 >= 0 running + 768 needed"),
    ]
    assert aws.params("GetAWSDefaultServiceQuota") == [
        {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"},
        {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    ]


def test_a_spot_queue_without_a_spot_quota_is_named_spot(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spot queue of a family the Spot table lacks: the warning says Spot, the quota the operator looks up."""
    monkeypatch.delitem(preflight.SPOT_VCPU_QUOTAS, "p")
    aws.answer("service-quotas", "GetServiceQuota", always=lambda p: quota("ec2", p["QuotaCode"], "Standard", 1152.0))
    folder = spot_p5_folder(tmp_path)
    results = preflight.check_vcpu_quota(context(aws, folder, "p5", P5_REGION))
    assert [(r.status, r.level, r.key, r.message) for r in results if r.status == "fail"] == [
        (
            "fail",
            "WARNING",
            "cluster.pcluster.queues[0].compute_resources[0]",
            "no Spot vCPU quota known for this family; check it in the Service Quotas console",
        )
    ]


def test_this_environments_own_running_nodes_are_not_counted_twice(aws: Aws, tmp_path: Path) -> None:
    """An instance tagged with this cluster's name is in the need already; an untagged one runs besides."""
    aws.answer(
        "service-quotas",
        "GetServiceQuota",
        always=lambda p: quota("ec2", p["QuotaCode"], "Running On-Demand P instances", 960.0),
    )
    ec2 = aws_client("ec2", P5_REGION)
    own = [{"Key": "parallelcluster:cluster-name", "Value": "p5-train"}]
    ec2.run_instances(
        ImageId="ami-12345678",
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": own}],
    )
    folder = env_folder(tmp_path, "p5", P5_REGION)
    results = preflight.check_vcpu_quota(context(aws, folder, "p5", P5_REGION))
    p_rows = [r.message for r in results if "L-417A185B" in r.message]
    assert p_rows == ["Running On-Demand P instances (L-417A185B) 960 >= 0 running + 768 needed"]
    ec2.run_instances(ImageId="ami-12345678", InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)
    results = preflight.check_vcpu_quota(context(aws, folder, "p5", P5_REGION))
    p_rows = [r.message for r in results if "L-417A185B" in r.message]
    assert p_rows == ["Running On-Demand P instances (L-417A185B) 960 >= 192 running + 768 needed"]


def test_a_type_not_offered_for_hyperpod_is_an_error_row(aws: Aws, tmp_path: Path) -> None:
    """No '<type> for cluster usage' quota: an ERROR row (it fails the run), naming the quota and what to do."""
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    listed = [
        {"QuotaCode": "L-AAAA0001", "QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 4.0},
        {"QuotaCode": "L-AAAA0002", "QuotaName": "ml.m5.12xlarge for cluster usage", "Value": 4.0},
    ]
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": listed})
    results = preflight.check_sagemaker_quota(context(aws, folder, "hyperpod", "us-west-2"))
    missing = [(r.status, r.level, r.message) for r in results if "in this region" in r.message]
    assert missing == [
        (
            "fail",
            "ERROR",
            "no quota 'ml.m5.4xlarge for cluster usage' in this region: the type is not offered for HyperPod here; "
            "choose another instance_type or region",
        )
    ]


def test_an_unknown_fsx_quota_says_where_to_look(aws: Aws, tmp_path: Path) -> None:
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": FSX_QUOTAS[2:]})
    results = preflight.check_fsx_quota(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert [(r.status, r.level, r.key, r.message) for r in results] == [
        (
            "fail",
            "WARNING",
            "storage.lustre",
            "no FSx quota for LUSTRE PERSISTENT_2 found ('Lustre Persistent_2 storage capacity', "
            "'Lustre Persistent_2 file systems'); check Service Quotas > Amazon FSx by hand",
        )
    ]


def _capacity_block_queue(tmp_path: Path) -> Path:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data["cluster"]["pcluster"]["queues"][0]["capacity_type"] = "CAPACITY_BLOCK"
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_a_capacity_block_queue_on_an_on_demand_reservation_is_an_error(aws: Aws, tmp_path: Path) -> None:
    aws.answer("ec2", "DescribeCapacityReservations", always=reservation())
    folder = _capacity_block_queue(tmp_path)
    results = preflight.check_reservations(context(aws, folder, "p5", P5_REGION))
    assert [(r.status, r.level, r.message) for r in results] == [
        (
            "fail",
            "ERROR",
            f"{RESERVATION}: the queue's capacity_type is CAPACITY_BLOCK but this is an On-Demand Capacity Reservation",
        )
    ]
    # At the edge: the same queue on an active capacity block passes.
    aws.sticky[("ec2", "DescribeCapacityReservations")] = reservation(ReservationType="capacity-block")
    results = preflight.check_reservations(context(aws, folder, "p5", P5_REGION))
    assert [(r.status, r.level) for r in results] == [("pass", "ERROR")]


def test_a_missing_training_plan_row_names_the_key_to_fix(aws: Aws, tmp_path: Path) -> None:
    aws.answer("sagemaker", "DescribeTrainingPlan", always=error("ResourceNotFound", "no plan"))
    results = preflight.check_training_plans(context(aws, hyperpod_with_plan(tmp_path), "hyperpod", "us-west-2"))
    assert [(r.status, r.level, r.key, r.message) for r in results] == [
        (
            "fail",
            "ERROR",
            "cluster.hyperpod.workers[0].training_plan_arn",
            "p5-plan does not exist in us-west-2: fix the ARN",
        )
    ]


def test_a_missing_custom_ami_row_names_the_key_and_the_way(aws: Aws, tmp_path: Path) -> None:
    results = missing_custom_ami_rows(aws, tmp_path)
    assert [(r.status, r.level, r.key, r.message) for r in results] == [
        (
            "fail",
            "ERROR",
            "cluster.pcluster.custom_ami",
            "ami-0123456789abcdef0 not found, or not available, in us-east-2: copy it here or fix the ID",
        )
    ]
