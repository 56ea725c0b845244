"""The ``storage:`` config section: the service rules its ``check()`` methods add.

The same rule helpers back the constructs, so these tests pin the rules at
the config level, where a user sees them first, with the key path to fix.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mlcluster.config.schema import ConfigError, load_section
from mlcluster.config.storage import (
    LUSTRE_EFA_CAPACITY_STEP_GIB,
    StorageConfig,
    association_conflicts,
    bucket_name_problem,
    lustre_capacity_problem,
    metadata_iops_valid,
    s3_path_problem,
)
from mlcluster.constructs.lustre import DataRepositoryAssociationProps


def load(data: dict[str, Any]) -> StorageConfig:
    return load_section(StorageConfig, data, "env.yaml")


def problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        load(data)
    return {p.path: p.allowed for p in raised.value.problems}


def dras(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"lustre": {"data_repository_associations": list(entries)}}


def test_defaults() -> None:
    config = load({})
    assert config.lustre.deployment_type == "PERSISTENT_2"
    assert config.lustre.metadata.mode is None
    assert config.lustre.lustre_version == "2.15"
    assert config.lustre.security_group == "dedicated"
    (dra,) = config.lustre.data_repository_associations
    assert dra.file_system_path == "/data"
    assert dra.data_repository_path is None
    assert config.openzfs is None


@pytest.mark.parametrize(
    "data",
    [
        {"lustre": {"efa_enabled": True, "storage_capacity_gib": 4800, "throughput_mbps_per_tib": 1000}},
        {
            "lustre": {
                "efa_enabled": True,
                "storage_capacity_gib": 19200,
                "security_group": "dedicated",
            }
        },
        # The old placement, kept for file systems created before "dedicated" became the default.
        {"lustre": {"security_group": "cluster"}, "openzfs": {"security_group": "cluster"}},
        {"lustre": {"efa_enabled": True, "storage_capacity_gib": 38400, "throughput_mbps_per_tib": 125}},
        {
            "lustre": {
                "deployment_type": "PERSISTENT_1",
                "throughput_mbps_per_tib": 50,
                "lustre_version": "2.12",
            }
        },
        {"lustre": {"metadata": {"mode": "USER_PROVISIONED", "iops": 24000}}},
        {"lustre": {"storage_capacity_gib": 7200}},
        {"openzfs": {"deployment_type": "SINGLE_AZ_1", "throughput_capacity_mbps": 64, "security_group": "dedicated"}},
        dras(
            {"file_system_path": "/data", "data_bucket_prefix": "data/"},
            {"file_system_path": "/ckpt", "data_bucket_prefix": "ckpt/"},
            {"file_system_path": "/ref", "data_repository_path": "s3://reference-data/sets/"},
        ),
        dras({"file_system_path": "/"}),
    ],
)
def test_accepts(data: dict[str, Any]) -> None:
    load(data)


@pytest.mark.parametrize(
    ("data", "path", "allowed"),
    [
        (
            {"lustre": {"throughput_mbps_per_tib": 300}},
            "lustre.throughput_mbps_per_tib",
            "allowed for PERSISTENT_2: 125, 250, 500, 1000 MB/s/TiB",
        ),
        (
            {"lustre": {"deployment_type": "PERSISTENT_1"}},
            "lustre.throughput_mbps_per_tib",
            "allowed for PERSISTENT_1: 50, 100, 200 MB/s/TiB",
        ),
        (
            {"lustre": {"storage_capacity_gib": 1000}},
            "lustre.storage_capacity_gib",
            "allowed for PERSISTENT_2 SSD: 1200, 2400, or a multiple of 2400 GiB",
        ),
        (
            {"lustre": {"efa_enabled": True, "storage_capacity_gib": 2400, "throughput_mbps_per_tib": 1000}},
            "lustre.storage_capacity_gib",
            "allowed with EFA at 1000 MB/s/TiB: a multiple of 4800 GiB",
        ),
        ({"lustre": {"lustre_version": "2.12"}}, "lustre.lustre_version", "allowed with PERSISTENT_2: '2.15'"),
        (
            {
                "lustre": {
                    "deployment_type": "PERSISTENT_1",
                    "throughput_mbps_per_tib": 50,
                    "metadata": {"mode": "AUTOMATIC"},
                }
            },
            "lustre.metadata.mode",
            "PERSISTENT_1 has no metadata configuration; remove it",
        ),
        (
            {"lustre": {"deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 50, "efa_enabled": True}},
            "lustre.efa_enabled",
            "EFA needs deployment_type: PERSISTENT_2",
        ),
        ({"lustre": {"metadata": {"mode": "USER_PROVISIONED", "iops": 5000}}}, "lustre.metadata.iops", "12000"),
        ({"lustre": {"metadata": {"mode": "USER_PROVISIONED"}}}, "lustre.metadata.iops", "required with mode"),
        ({"lustre": {"metadata": {"iops": 3000}}}, "lustre.metadata.iops", "only used with mode: USER_PROVISIONED"),
        (
            dras({"file_system_path": "/a/../b"}),
            "lustre.data_repository_associations[0].file_system_path",
            "absolute path",
        ),
        (
            dras({"data_repository_path": "s3://bucket//x/"}),
            "lustre.data_repository_associations[0].data_repository_path",
            "allowed: an S3 URI",
        ),
        (
            dras({"data_bucket_prefix": "a//b/"}),
            "lustre.data_repository_associations[0].data_bucket_prefix",
            "without '//'",
        ),
        (
            dras({"data_repository_path": "s3://bucket/x/", "data_bucket_prefix": "x/"}),
            "lustre.data_repository_associations[0].data_bucket_prefix",
            "not both",
        ),
        (
            dras(*({"file_system_path": f"/d{i}", "data_bucket_prefix": f"d{i}/"} for i in range(9))),
            "lustre.data_repository_associations",
            "at most 8 per file system",
        ),
        (
            dras({"file_system_path": "/"}, {"file_system_path": "/data", "data_bucket_prefix": "data/"}),
            "lustre.data_repository_associations[0].file_system_path",
            "must be the only association",
        ),
        (
            dras({"data_bucket_prefix": "a/"}, {"file_system_path": "/data/b", "data_bucket_prefix": "b/"}),
            "lustre.data_repository_associations[1].file_system_path",
            "overlaps '/data' of association 0",
        ),
        (
            {
                "data_bucket": {"name": "my-data"},
                **dras(
                    {"data_bucket_prefix": "x/y/"},
                    {"file_system_path": "/other", "data_repository_path": "s3://my-data/x"},
                ),
            },
            "lustre.data_repository_associations[1].data_repository_path",
            "overlaps 's3://my-data/x/y/' of association 0",
        ),
        (
            {"openzfs": {"throughput_capacity_mbps": 64}},
            "openzfs.throughput_capacity_mbps",
            "allowed for SINGLE_AZ_HA_2: 160, 320, 640",
        ),
        (
            {"openzfs": {"deployment_type": "SINGLE_AZ_HA_1"}},
            "openzfs.throughput_capacity_mbps",
            "allowed for SINGLE_AZ_HA_1: 64, 128",
        ),
        ({"data_bucket": {"name": "10.0.0.1"}}, "data_bucket.name", "not formatted as an IP address"),
        (
            {
                "data_bucket": {
                    "kms_key_arn": "arn:aws:kms:us-east-1:111111111111:key/11111111-2222-3333-4444-555555555555"
                }
            },
            "data_bucket.kms_key_arn",
            "only used with encryption: kms",
        ),
    ],
)
def test_rejects(data: dict[str, Any], path: str, allowed: str) -> None:
    found = problems(data)
    assert path in found, found
    assert allowed in found[path]


def test_conflicts_use_the_unnamed_data_bucket_placeholder() -> None:
    found = problems(dras({"data_bucket_prefix": "x/"}, {"file_system_path": "/b", "data_bucket_prefix": "x/"}))
    assert found == {
        "lustre.data_repository_associations[1].data_repository_path": "the same as association 0; each association needs its own"
    }


# -- the shared rule helpers --------------------------------------------------


@pytest.mark.parametrize(
    ("iops", "valid"),
    [
        (1500, True),
        (3000, True),
        (6000, True),
        (12000, True),
        (24000, True),
        (192000, True),
        (9000, False),
        (204000, False),
        (0, False),
    ],
)
def test_metadata_iops(iops: int, valid: bool) -> None:
    assert metadata_iops_valid(iops) is valid


@pytest.mark.parametrize(("throughput", "step"), sorted(LUSTRE_EFA_CAPACITY_STEP_GIB.items()))
def test_efa_capacity_steps(throughput: int, step: int) -> None:
    kwargs = {"deployment_type": "PERSISTENT_2", "throughput": throughput, "efa_enabled": True}
    assert lustre_capacity_problem(step, **kwargs) is None
    assert lustre_capacity_problem(step * 3, **kwargs) is None
    assert lustre_capacity_problem(step // 2, **kwargs) is not None
    assert lustre_capacity_problem(step + 2400, **kwargs) is not None


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("s3://bucket", True),
        ("s3://bucket/", True),
        ("s3://my.bucket-1/a/b/", True),
        ("s3://bucket/a/b", True),
        ("s3:/bucket", False),
        ("https://bucket/", False),
        ("s3://Bucket/", False),
        ("s3://bucket//a", False),
        ("s3://192.168.0.1/", False),
    ],
)
def test_s3_paths(path: str, ok: bool) -> None:
    assert (s3_path_problem(path) is None) is ok


@pytest.mark.parametrize(
    ("name", "ok"), [("abc", True), ("a.b-c", True), ("ab", False), ("-ab", False), ("sthree-x", False)]
)
def test_bucket_names(name: str, ok: bool) -> None:
    assert (bucket_name_problem(name) is None) is ok


def test_association_conflicts_compare_as_directories() -> None:
    assert association_conflicts(["/data", "/database"], ["s3://b/data/", "s3://b/database/"]) == []
    assert association_conflicts(["/data", "/data2"], ["s3://b/x", "s3://b/x2"]) == []
    ((index, key, value, message),) = association_conflicts(["/a", "/b"], ["s3://b/x", "s3://b/x/"])
    assert (index, key, value) == (1, "data_repository_path", "s3://b/x/")
    assert "the same as association 0" in message


def test_association_config_maps_one_to_one_onto_the_construct_props() -> None:
    config = load(dras({"file_system_path": "/ckpt", "data_bucket_prefix": "ckpt/", "auto_import_events": []}))
    (dra,) = config.lustre.data_repository_associations
    props = DataRepositoryAssociationProps(**dataclasses.asdict(dra))
    assert props.file_system_path == "/ckpt"
    assert props.data_bucket_prefix == "ckpt/"
    assert props.auto_import_events == ()
    assert props.auto_export_events == (
        "NEW",
        "CHANGED",
    )  # DELETED is opt-in (issue 33: deletions under /fsx would delete S3 objects)
