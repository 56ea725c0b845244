"""The lock-file guard treats the managed accounting database (``storage.accounting``) as data.

Templates are reduced by the real ``stack_state`` (create-only properties from the CloudFormation
resource schema cfn-lint bundles) and compared by ``compare``/``weakenings``, the functions the
synth-time guard calls.
"""

from __future__ import annotations

import copy
from typing import Any

from mlcluster.lockfile import SAFE_WAYS
from mlcluster.replacement import DATA_BEARING_TYPES, compare, stack_state, weakenings

PATH = "Storage/AccountingDatabase/Cluster/Resource"
CLUSTER: dict[str, Any] = {
    "Type": "AWS::RDS::DBCluster",
    "DeletionPolicy": "Snapshot",
    "UpdateReplacePolicy": "Snapshot",
    "Properties": {
        "Engine": "aurora-mysql",
        "EngineVersion": "8.0.mysql_aurora.3.10.0",
        "StorageEncrypted": True,
        "KmsKeyId": "arn:aws:kms:us-west-2:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "BackupRetentionPeriod": 35,
        "DeletionProtection": True,
    },
}


def state(resource: dict[str, Any]) -> Any:
    return {"acct-Storage": stack_state({"Resources": {"Db": resource}}, {"Db": PATH})}


def edited(**properties: Any) -> dict[str, Any]:
    resource = copy.deepcopy(CLUSTER)
    for key, value in properties.items():
        if value is None:
            resource["Properties"].pop(key)
        else:
            resource["Properties"][key] = value
    return resource


def test_the_database_is_data_bearing_with_a_safe_way() -> None:
    assert "AWS::RDS::DBCluster" in DATA_BEARING_TYPES
    assert "mysqldump" in SAFE_WAYS["AWS::RDS::DBCluster"]
    # How to delete it for good where data is kept: the final snapshot and the retained secret by hand.
    assert "aws rds delete-db-cluster-snapshot --db-cluster-snapshot-identifier ID" in SAFE_WAYS["AWS::RDS::DBCluster"]
    assert "aws secretsmanager delete-secret --secret-id ARN" in SAFE_WAYS["AWS::RDS::DBCluster"]


def test_a_new_key_replaces_the_database_and_is_data_bearing() -> None:
    changes = compare(state(CLUSTER), state(edited(KmsKeyId="arn:aws:kms:us-west-2:111111111111:key/other")))
    (change,) = changes
    assert (change.action, change.path, change.data_bearing) == ("replace", PATH, True)


def test_an_engine_version_upgrade_is_an_update_in_place() -> None:
    (change,) = compare(state(CLUSTER), state(edited(EngineVersion="8.0.mysql_aurora.3.11.0")))
    assert change.action == "update"


def _weakenings(after: dict[str, Any]) -> list[str]:
    before = state(CLUSTER)["acct-Storage"].resources["Db"]
    return weakenings(before, state(after)["acct-Storage"].resources["Db"])


def test_shorter_backups_or_no_snapshot_weaken_it() -> None:
    assert _weakenings(edited(BackupRetentionPeriod=7)) == ["BackupRetentionPeriod 35 -> 7"]
    # Absent, Aurora keeps automated backups one day.
    assert _weakenings(edited(BackupRetentionPeriod=None)) == ["BackupRetentionPeriod 35 -> 1"]
    deleted = copy.deepcopy(CLUSTER)
    deleted["DeletionPolicy"] = deleted["UpdateReplacePolicy"] = "Delete"
    assert _weakenings(deleted) == ["DeletionPolicy Snapshot -> Delete", "UpdateReplacePolicy Snapshot -> Delete"]


def test_deletion_protection_going_off_is_not_refused() -> None:
    """A lock recorded with protection on (deployed before it went off) lets the construct's new default through.

    The construct keeps protection off (a failed create must roll back); the snapshot policy and the
    backups are what the guard holds, and they still weaken when they go.
    """
    assert _weakenings(edited(DeletionProtection=False)) == []
    assert _weakenings(edited(DeletionProtection=None)) == []
    deleted = edited(DeletionProtection=False)
    deleted["DeletionPolicy"] = "Delete"
    assert _weakenings(deleted) == ["DeletionPolicy Snapshot -> Delete"]


def test_keeping_more_is_not_a_weakening() -> None:
    assert _weakenings(edited(BackupRetentionPeriod=35)) == []
    before = state(edited(DeletionProtection=False, BackupRetentionPeriod=7))["acct-Storage"].resources["Db"]
    assert weakenings(before, state(CLUSTER)["acct-Storage"].resources["Db"]) == []
