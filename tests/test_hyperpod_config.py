"""The ``cluster.hyperpod`` keys of issue 10 and 17: defaults, edges, and refusals naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, load_environment
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


def test_environment_named_sagemaker_without_a_cluster_is_accepted(tmp_path: Path) -> None:
    assert load_environment(write_env(tmp_path, "sagemaker-data", MINIMAL)).name == "sagemaker-data"
