"""The ``cluster.hyperpod`` keys of issue 10 and 17: defaults, edges, and refusals naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, load_environment
from mlcluster.config.awsdata import hyperpod_instance_types
from mlcluster.config.hyperpod import LUSTRE_EFA_INSTANCE_TYPES
from mlcluster.pcluster.instance_types import INSTANCE_TYPES
from tests.support import MINIMAL, write_env

WORKER = {"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge"}


def load(tmp_path: Path, worker: dict[str, Any] | None = None, **hyperpod: Any) -> Any:
    cluster = {"backend": "hyperpod", "hyperpod": {"workers": [{**WORKER, **(worker or {})}], **hyperpod}}
    path = write_env(tmp_path, "hp", {**MINIMAL, "cluster": cluster})
    return load_environment(path).config.cluster.hyperpod


def refused(tmp_path: Path, worker: dict[str, Any] | None = None, **hyperpod: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, worker, **hyperpod)
    return str(caught.value)


def test_defaults_read_only_data_and_no_optional_fields(tmp_path: Path) -> None:
    cfg = load(tmp_path)
    assert cfg.data_bucket_access == "read"
    assert cfg.slurm_config_strategy is None
    worker = cfg.workers[0]
    assert (worker.root_volume_kms_key_id, worker.ebs_volume_kms_key_id, worker.patch_schedule) == (None, None, None)
    assert worker.zones == ()


def test_every_new_field_at_its_edge(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        {
            "root_volume_kms_key_id": "alias/hyperpod-root",
            "ebs_volume_kms_key_id": "1234abcd-12ab-34cd-56ef-1234567890ab",
            "deep_health_checks": ["InstanceStress", "InstanceConnectivity"],
            "zones": ["use1-az4"],
            "patch_schedule": {
                "schedule_expression": "cron(59 23 31 12 ? 2099)",
                "max_batch_size": 6758,
                "wait_interval_seconds": 0,
            },
        },
        data_bucket_access="read_write",
        slurm_config_strategy="Merge",
    )
    worker = cfg.workers[0]
    assert worker.patch_schedule.max_batch_size == 6758
    assert (cfg.data_bucket_access, cfg.slurm_config_strategy) == ("read_write", "Merge")


@pytest.mark.parametrize(
    ("worker", "hyperpod", "message"),
    [
        (
            {"deep_health_checks": ["MultiNodeTrainingValidation"]},
            {},
            "cluster.hyperpod.workers[0].deep_health_checks",
        ),
        ({"deep_health_checks": ["InstanceStress", "InstanceStress"]}, {}, "name each check at most once"),
        ({"root_volume_kms_key_id": "key with spaces"}, {}, "cluster.hyperpod.workers[0].root_volume_kms_key_id"),
        ({"patch_schedule": {"schedule_expression": "rate(1 day)"}}, {}, "patch_schedule.schedule_expression"),
        (
            {"patch_schedule": {"schedule_expression": "cron(0 3 ? * SUN *)", "max_batch_size": 0}},
            {},
            "patch_schedule.max_batch_size",
        ),
        ({"zones": ["use1-az4", "use1-az4"]}, {}, "name each zone at most once"),
        ({"root_volume_size_gib": 200}, {}, "root_volume_size_gib"),
        ({}, {"create_timeout_hours": 12}, "create_timeout_hours"),
        ({}, {"slurm_config_strategy": "Replace"}, "cluster.hyperpod.slurm_config_strategy"),
        ({}, {"data_bucket_access": "write"}, "cluster.hyperpod.data_bucket_access"),
    ],
)
def test_bad_values_name_the_key(
    tmp_path: Path, worker: dict[str, Any], hyperpod: dict[str, Any], message: str
) -> None:
    assert message in refused(tmp_path, worker, **hyperpod)


def test_cluster_name_is_used_as_is_up_to_60_characters(tmp_path: Path) -> None:
    """The native resource takes cluster.name verbatim (no hash suffix any more): 60 characters fit HyperPod's 63."""
    cluster = {"backend": "hyperpod", "name": "a" * 60, "hyperpod": {"workers": [WORKER]}}
    env = load_environment(write_env(tmp_path, "hp", {**MINIMAL, "cluster": cluster}))
    assert env.cluster_name == "a" * 60
    cluster["name"] = "ml-cluster-"
    with pytest.raises(ConfigError, match=r"cluster.name: 'ml-cluster-' is not valid; HyperPod cluster names end in"):
        load_environment(write_env(tmp_path, "hp", {**MINIMAL, "cluster": cluster}))


@pytest.mark.parametrize("backend", ["hyperpod", "pcluster"])
def test_environment_named_sagemaker_with_a_cluster_is_refused(tmp_path: Path, backend: str) -> None:
    """Issue 17 item 1: script bucket names carry the environment's name; 'sagemaker' there invites managed writes."""
    queue = {"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge"}]}
    section = {"workers": [WORKER]} if backend == "hyperpod" else {"queues": [queue]}
    path = write_env(tmp_path, "sagemaker-dev", {**MINIMAL, "cluster": {"backend": backend, backend: section}})
    with pytest.raises(ConfigError, match=r"sagemaker-dev.yaml: \(file name\): 'sagemaker-dev' is not valid"):
        load_environment(path)


def test_an_environment_named_like_glue_buckets_is_refused_and_its_neighbour_accepted(tmp_path: Path) -> None:
    """Every generated bucket name begins with the environment's; AWSGlueServiceRole grants object writes on
    "aws-glue-*" buckets (user review: the name passed here and failed at synth with a traceback)."""
    path = write_env(tmp_path, "aws-glue-dev", MINIMAL)
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    assert str(caught.value).splitlines() == [
        f"{path}: (file name): 'aws-glue-dev' is not valid; the buckets' generated names would begin 'aws-glue-', "
        "where the AWS managed policy AWSGlueServiceRole grants object writes and deletes; allowed: a name not "
        "beginning with it"
    ]
    assert load_environment(write_env(tmp_path, "aws-glue", MINIMAL)).name == "aws-glue"


def test_environment_named_sagemaker_without_a_cluster_is_accepted(tmp_path: Path) -> None:
    assert load_environment(write_env(tmp_path, "sagemaker-data", MINIMAL)).name == "sagemaker-data"


@pytest.mark.parametrize("key", ["root_volume_size_gib", "root_volume_size"])
def test_a_root_volume_size_is_refused_with_the_reason(tmp_path: Path, key: str) -> None:
    message = refused(tmp_path, {key: 200})
    assert f"cluster.hyperpod.workers[0].{key}: 200 is not valid" in message
    assert "HyperPod sizes each node's root volume itself" in message
    assert "VolumeSizeInGB" in message
    assert "ebs_volume_size_gib" in message


def test_the_secondary_volume_size_is_accepted_at_its_edges(tmp_path: Path) -> None:
    assert load(tmp_path, {"ebs_volume_size_gib": 16384}).workers[0].ebs_volume_size_gib == 16384
    assert load(tmp_path, {"ebs_volume_size_gib": 1}).workers[0].ebs_volume_size_gib == 1


def test_multi_node_training_validation_is_refused_with_the_reason(tmp_path: Path) -> None:
    message = refused(tmp_path, {"deep_health_checks": ["InstanceStress", "MultiNodeTrainingValidation"]})
    assert "cluster.hyperpod.workers[0].deep_health_checks[1]: 'MultiNodeTrainingValidation' is not valid" in message
    assert "CloudFormation's AWS::SageMaker::Cluster" in message


def load_efa(tmp_path: Path, worker: dict[str, Any], *, efa_enabled: bool = True) -> Any:
    """An environment whose FSx for Lustre is EFA-enabled (19200 GiB: the 250 MB/s/TiB EFA step)."""
    storage = {"lustre": {"efa_enabled": efa_enabled, "storage_capacity_gib": 19200}}
    cluster = {"backend": "hyperpod", "hyperpod": {"workers": [{**WORKER, **worker}]}}
    return load_environment(write_env(tmp_path, "hp", {**MINIMAL, "storage": storage, "cluster": cluster}))


def test_an_efa_group_outside_the_efa_file_systems_zone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_efa(tmp_path, {"zones": ["us-east-1a", "us-east-1b"]})
    message = str(caught.value)
    assert "cluster.hyperpod.workers[0].zones: ['us-east-1a', 'us-east-1b'] is not valid" in message
    assert "ml.p5.48xlarge nodes reach the EFA-enabled FSx for Lustre file system" in message
    assert "EFA does not leave a zone: the file system is in 'us-east-1a', not in 'us-east-1b'" in message
    assert "Allowed: zones: [us-east-1a] or no zones; or storage.lustre.efa_enabled: false" in message


@pytest.mark.parametrize(
    ("worker", "efa_enabled"),
    [
        ({"zones": ["us-east-1a"]}, True),  # the file system's own zone
        ({}, True),  # no zones: the primary zone, where the file system is
        ({"instance_type": "ml.p4d.24xlarge", "zones": ["us-east-1b"]}, True),  # Nitro v3: TCP, any zone
        ({"zones": ["us-east-1b"]}, False),  # no EFA file system
    ],
)
def test_efa_zone_edges_are_accepted(tmp_path: Path, worker: dict[str, Any], efa_enabled: bool) -> None:
    env = load_efa(tmp_path, worker, efa_enabled=efa_enabled)
    hyperpod = env.config.cluster.hyperpod
    assert hyperpod.lustre_efa_groups() == (["gpu"] if "instance_type" not in worker else [])


def test_lustre_efa_instance_types_are_hyperpod_types_with_efa() -> None:
    assert LUSTRE_EFA_INSTANCE_TYPES.issubset(hyperpod_instance_types())
    # trn2 is excluded by the FSx guide; Nitro v3 types (p4d, g5) have EFA but not for Lustre.
    assert not {"ml.trn2.48xlarge", "ml.p4d.24xlarge", "ml.g5.48xlarge"} & LUSTRE_EFA_INSTANCE_TYPES
    for name in LUSTRE_EFA_INSTANCE_TYPES:
        info = INSTANCE_TYPES.get(name.removeprefix("ml."))
        assert info is None or info.efa, name


@pytest.mark.parametrize("name", ["mlc-collector", "mlc-exporter", "mlc-anything"])
def test_cluster_users_cannot_take_the_node_steps_system_names(tmp_path: Path, name: str) -> None:
    """``mlc-`` names belong to the steps' system users; a login account of that name would get their access.

    The collector's user may reach the instance metadata service (the role's credentials): a cluster user
    named like it must be refused at synth, not only by the node step.
    """
    message = refused(tmp_path, lifecycle={"users": [{"name": name, "uid": 2001}]})
    assert "cluster.hyperpod.lifecycle.users[0].name" in message
    assert repr(name) in message and "mlc-" in message


@pytest.mark.parametrize("name", ["mlc", "mlc_collector", "alice-mlc-", "xmlc-collector"])
def test_names_near_the_reserved_prefix_are_accepted(tmp_path: Path, name: str) -> None:
    cfg = load(tmp_path, lifecycle={"users": [{"name": name, "uid": 2001}]})
    assert cfg.lifecycle.users[0].name == name


@pytest.mark.parametrize(
    ("instance_type", "asked", "expected"),
    [
        ("ml.p5.48xlarge", None, ("InstanceStress", "InstanceConnectivity")),  # unset on GPUs: both
        ("ml.trn1.32xlarge", None, ("InstanceStress", "InstanceConnectivity")),  # and on Trainium
        ("ml.m5.12xlarge", None, ()),  # unset elsewhere: none
        ("ml.g5.xlarge", None, ()),  # a GPU type without EFA: none
        ("ml.g5.48xlarge", None, ("InstanceStress", "InstanceConnectivity")),  # the same family with EFA: both
        ("ml.inf2.48xlarge", None, ()),  # Inferentia: no EFA, none
        ("ml.trn1.2xlarge", None, ()),  # the small Trainium type has no EFA: none
        ("ml.p5.48xlarge", (), ()),  # [] turns them off
        ("ml.p5.48xlarge", ("InstanceConnectivity",), ("InstanceConnectivity",)),
    ],
)
def test_deep_health_checks_default_on_for_accelerated_groups(
    instance_type: str, asked: tuple[str, ...] | None, expected: tuple[str, ...]
) -> None:
    from mlcluster.config.hyperpod import WorkerGroupConfig

    group = WorkerGroupConfig(
        instance_group_name="w",
        instance_type=instance_type,
        deep_health_checks=asked,  # type: ignore[arg-type]
    )
    assert group.deep_checks() == expected
