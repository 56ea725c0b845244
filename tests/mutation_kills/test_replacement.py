"""The replacement guard's building blocks (mlcluster/replacement.py): behaviour `make mutation` showed no test asserted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mlcluster.replacement import (
    Change,
    ResourceState,
    StackState,
    compare,
    mount_changes,
    snapshot_from_assembly,
    stack_state,
    template_paths,
    volume_policies,
)


@pytest.mark.parametrize(
    ("action", "reasons", "expected"),
    [
        ("add", (), "Storage/Lustre/Resource (AWS::FSx::FileSystem) added"),
        ("remove", (), "Storage/Lustre/Resource (AWS::FSx::FileSystem) removed"),
        ("update", (), "Storage/Lustre/Resource (AWS::FSx::FileSystem) updated in place"),
        ("replace", ("A: 1 -> 2",), "Storage/Lustre/Resource (AWS::FSx::FileSystem) REPLACED: A: 1 -> 2"),
        (
            "weaken",
            ("DeletionPolicy Retain -> Delete", "B: x -> y"),
            "Storage/Lustre/Resource (AWS::FSx::FileSystem) WEAKENED: DeletionPolicy Retain -> Delete; B: x -> y",
        ),
    ],
)
def test_a_change_describes_itself_with_its_verb_and_every_reason(
    action: str, reasons: tuple[str, ...], expected: str
) -> None:
    """Change.describe: what the refusal and the day-two table print; no reason, no trailing colon."""
    change = Change("p5-Storage", "Lustre1", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", action, reasons)
    assert change.describe() == expected


def test_template_paths_read_the_cdk_path_below_the_stage_and_skip_what_has_none() -> None:
    """template_paths: a deployed template may have no Resources, a resource without metadata or a non-string path."""
    assert template_paths({}, "p5") == {}
    template = {
        "Resources": {
            "Bucket1": {"Type": "AWS::S3::Bucket", "Metadata": {"aws:cdk:path": "p5/Storage/DataBucket/Resource"}},
            "Other": {"Type": "AWS::S3::Bucket", "Metadata": {"aws:cdk:path": "elsewhere/Thing/Resource"}},
            "NoMetadata": {"Type": "AWS::SNS::Topic"},
            "NotAString": {"Type": "AWS::SNS::Topic", "Metadata": {"aws:cdk:path": ["p5", "X"]}},
            "NotADict": "AWS::SNS::Topic",
        }
    }
    assert template_paths(template, "p5") == {
        "Bucket1": "Storage/DataBucket/Resource",
        "Other": "elsewhere/Thing/Resource",
    }


def test_a_replacement_reason_prints_values_with_sorted_keys_and_cuts_long_ones() -> None:
    """compare: the reason text goes into the lock (accepted changes) and refusals: the same change must read the
    same whatever order the template's keys came in, and a long value is cut to 80 characters."""
    long_value = "s3://" + "x" * 100
    old = ResourceState(
        "AWS::FSx::FileSystem",
        "Storage/Lustre/Resource",
        {"/LustreConfiguration": {"b": 1, "a": 2}, "/StorageType": long_value},
        "d1",
    )
    new = ResourceState(
        "AWS::FSx::FileSystem", "Storage/Lustre/Resource", {"/LustreConfiguration": {"b": 1, "a": 3}}, "d2"
    )
    before = {"p5-Storage": StackState({"Lustre1": old}, {})}
    after = {"p5-Storage": StackState({"Lustre1": new}, {})}
    (change,) = compare(before, after)
    assert change.action == "replace"
    cut = json.dumps(long_value)[:77] + "..."
    assert change.reasons == (
        '.LustreConfiguration {"a": 2, "b": 1} -> {"a": 3, "b": 1}',
        f".StorageType {cut} -> null",
    )
    assert len(cut) == 80


@pytest.mark.parametrize(("length", "printed"), [(80, "whole"), (81, "cut")])
def test_a_reason_value_of_80_characters_prints_whole_and_of_81_is_cut(length: int, printed: str) -> None:
    """compare: the edge of the 80-character cut, on the JSON text of the value (quotes included)."""
    value = "v" * (length - 2)  # the JSON string adds two quotes
    old = ResourceState("AWS::FSx::FileSystem", "Storage/Lustre/Resource", {"/StorageType": value}, "d1")
    new = ResourceState("AWS::FSx::FileSystem", "Storage/Lustre/Resource", {"/StorageType": "SSD"}, "d2")
    (change,) = compare({"s": StackState({"L": old}, {})}, {"s": StackState({"L": new}, {})})
    shown = json.dumps(value) if printed == "whole" else json.dumps(value)[:77] + "..."
    assert change.reasons == (f'.StorageType {shown} -> "SSD"',)


def test_volume_policies_read_only_managed_volumes_with_a_mount_dir() -> None:
    """volume_policies mutant 9 ("or" to "and"): a volume ParallelCluster does not create (FSx for OpenZFS,
    ONTAP) and an entry without a MountDir are left out, not read (the mutant fails on both)."""
    storage = [
        {"StorageType": "FsxOpenZfs", "MountDir": "/home", "FsxOpenZfsSettings": {"VolumeId": "fsvol-1"}},
        {"StorageType": "Ebs", "EbsSettings": {"DeletionPolicy": "Retain"}},
        {"StorageType": "Efs", "MountDir": "/shared", "EfsSettings": {"DeletionPolicy": "Retain"}},
        {"StorageType": "Ebs", "MountDir": "/scratch"},
    ]
    assert volume_policies(storage) == {"/shared": "Retain", "/scratch": "Delete"}


# Survivors of the first `make mutation MODULE=replacement SAMPLE=200` sample (seed 1).


def _cluster(groups: list[dict[str, object]]) -> dict[str, object]:
    cluster = {"Type": "AWS::SageMaker::Cluster", "Properties": {"ClusterName": "c", "InstanceGroups": groups}}
    return {"Resources": {"Cluster": cluster}}


def test_the_controller_is_the_group_slurm_calls_controller_wherever_it_is_listed() -> None:
    """``_create_only_values`` mutants 35, 40 and 49: the NodeType decides, not the order of the groups."""
    groups: list[dict[str, object]] = [
        {"InstanceGroupName": "workers", "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["p"]}},
        {"InstanceGroupName": "head", "SlurmConfig": {"NodeType": "Controller"}},
    ]
    state = stack_state(_cluster(groups), {})
    assert state.resources["Cluster"].create_only["ControllerInstanceGroupName"] == "head"
    # Without SlurmConfig (the construct renders the controller first) the first group is the controller.
    bare = stack_state(_cluster([{"InstanceGroupName": "first"}, {"InstanceGroupName": "second"}]), {})
    assert bare.resources["Cluster"].create_only["ControllerInstanceGroupName"] == "first"


def test_a_retention_given_as_one_number_or_per_rule_is_read_as_its_shortest() -> None:
    """``_fate_values`` mutant 15: a bucket's rules give a list of days (``*`` in the pointer), read whole."""
    rules = [
        {"NoncurrentVersionExpiration": {"NoncurrentDays": 90}},
        {"NoncurrentVersionExpiration": {"NoncurrentDays": 30}},
    ]
    bucket = {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": rules}}}
    state = stack_state({"Resources": {"Bucket": bucket}}, {})
    assert (
        state.resources["Bucket"].fate["LifecycleConfiguration/Rules/*/NoncurrentVersionExpiration/NoncurrentDays"]
        == 30
    )


def test_a_mount_change_on_a_lock_that_records_mounts_carries_no_hint() -> None:
    """``mount_changes`` mutants 7 and 13: the 'run mlcluster lock' hint is only for a lock without the record."""
    (recorded,) = mount_changes({}, {"/home": "Ebs"})
    assert recorded == "SharedStorage MountDir /home: head node -> Ebs"
    (old,) = mount_changes(None, {"/home": "Ebs"})
    assert old.endswith(
        "(this lock does not record the cluster's mounts: if the deployed cluster already has it, run "
        "'mlcluster lock' to read them from the deployed stacks)"
    )
    assert recorded == old.removesuffix(
        " (this lock does not record the cluster's mounts: if the deployed cluster already has it, run "
        "'mlcluster lock' to read them from the deployed stacks)"
    )


def test_a_digest_does_not_depend_on_the_order_properties_are_written_in() -> None:
    """Two synths (or a CDK upgrade) may write a resource's keys in another order: no change, so no 'update'."""
    one = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"A": 1, "B": {"x": 1, "y": 2}}}}}
    two = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"B": {"y": 2, "x": 1}, "A": 1}}}}
    changed = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"A": 2, "B": {"x": 1, "y": 2}}}}}
    digest = stack_state(one, {}).resources["Topic"].digest
    assert stack_state(two, {}).resources["Topic"].digest == digest
    assert stack_state(changed, {}).resources["Topic"].digest != digest
    # A resource written without Properties and one with empty Properties are the same resource to CloudFormation.
    bare = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    empty = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {}}}}
    assert stack_state(bare, {}).resources["Topic"].digest == stack_state(empty, {}).resources["Topic"].digest


def _assembly(tmp_path: Path, artifacts: dict[str, dict[str, object]]) -> Path:
    nested = tmp_path / "assembly-p5"
    nested.mkdir()
    (nested / "t.json").write_text(json.dumps({"Resources": {"Bucket1": {"Type": "AWS::S3::Bucket"}}}))
    (nested / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return tmp_path


@pytest.mark.parametrize("where", ["manifest", "file"])
def test_a_snapshot_reads_construct_paths_from_the_manifest_or_its_metadata_file(tmp_path: Path, where: str) -> None:
    """The cloud assembly carries a stack's metadata inline (``metadata``) or in ``additionalMetadataFile``."""
    metadata = {"/p5/Storage/DataBucket/Resource": [{"type": "aws:cdk:logicalId", "data": "Bucket1"}]}
    stack: dict[str, object] = {
        "type": "aws:cloudformation:stack",
        "properties": {"templateFile": "t.json", "stackName": "p5-Storage", "terminationProtection": True},
    }
    if where == "manifest":
        stack["metadata"] = metadata
    else:
        stack["additionalMetadataFile"] = "Storage.metadata.json"
    root = _assembly(tmp_path, {"p5Storage": stack, "p5.assets": {"type": "cdk:asset-manifest"}})
    if where == "file":
        (root / "assembly-p5" / "Storage.metadata.json").write_text(json.dumps(metadata))
    snapshot = snapshot_from_assembly(root, "p5")
    assert list(snapshot) == ["p5-Storage"]  # by stack name; the asset manifest is no stack
    assert snapshot["p5-Storage"].resources["Bucket1"].path == "Storage/DataBucket/Resource"
    assert snapshot["p5-Storage"].termination_protection is True


def test_a_stack_without_a_stack_name_is_keyed_by_its_artifact_id(tmp_path: Path) -> None:
    stack = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "t.json"}}
    snapshot = snapshot_from_assembly(_assembly(tmp_path, {"p5Storage": stack}), "p5")
    assert list(snapshot) == ["p5Storage"]
    state = snapshot["p5Storage"]
    assert state.resources["Bucket1"].path == "Bucket1"  # no metadata: the logical id stands for the path
    assert state.termination_protection is False


def test_a_template_without_resources_is_a_stack_of_none() -> None:
    assert stack_state({"Outputs": {}}, {}).resources == {}


def _old_lock(groups: list[dict[str, object]]) -> StackState:
    """A cluster's state as a lock written before the controller's name was recorded holds it."""
    state = stack_state(_cluster(groups), {})
    cluster = state.resources["Cluster"]
    create_only = {k: v for k, v in cluster.create_only.items() if k != "ControllerInstanceGroupName"}
    assert create_only, "the groups' own create-only values stay"
    return StackState(
        resources={"Cluster": dataclasses.replace(cluster, create_only=create_only)},
        outputs={},
        termination_protection=False,
    )


@pytest.mark.parametrize(
    ("controller", "reason"),
    [
        ("ctl", None),  # a locked group's name: the same controller
        ("gpu", None),  # ... whichever locked group it is (the old lock cannot say which one was the controller)
        ("ctl2", 'ControllerInstanceGroupName (one of ctl, gpu) -> "ctl2"'),
    ],
)
def test_an_old_lock_reads_its_group_names_to_tell_a_new_controller(controller: str, reason: str | None) -> None:
    """``_controller_reasons`` mutants 10 and 15: the names are read from ``InstanceGroups[<name>].<field>`` keys."""
    fields = {"InstanceType": "ml.m5.xlarge", "ExecutionRole": "arn:aws:iam::111111111111:role/r"}
    old = _old_lock([{"InstanceGroupName": "ctl", **fields}, {"InstanceGroupName": "gpu", **fields}])
    groups = [{"InstanceGroupName": controller, **fields}, {"InstanceGroupName": "gpu", **fields}]
    new = stack_state(_cluster(groups), {})
    changes = compare({"c-Cluster": old}, {"c-Cluster": new})
    reasons = [r for change in changes for r in change.reasons if r.startswith("ControllerInstanceGroupName")]
    if reason is None:
        assert reasons == []
    else:
        assert reasons == [f"{reason} (a new Slurm controller: the locked one's group is removed)"]


def test_a_weakened_resource_replaced_through_a_reference_keeps_its_weakening_reasons() -> None:
    """``_cascade`` mutant 33: the refusal says both why it is replaced and what it no longer keeps."""

    def template(name: str, policy: str) -> dict[str, object]:
        bucket = {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": name}}
        properties = {"Bucket": {"Ref": "Data"}, "PolicyDocument": {}}
        lock = {"Type": "AWS::S3::BucketPolicy", "DeletionPolicy": policy, "UpdateReplacePolicy": policy}
        return {"Resources": {"Data": bucket, "Policy": {**lock, "Properties": properties}}}

    changes = compare({"s": stack_state(template("a", "Retain"), {})}, {"s": stack_state(template("b", "Delete"), {})})
    assert [(c.logical_id, c.action, c.reasons) for c in changes] == [
        ("Data", "replace", ('BucketName "a" -> "b"',)),
        (
            "Policy",
            "replace",
            ("refers to replaced Data", "DeletionPolicy Retain -> Delete", "UpdateReplacePolicy Retain -> Delete"),
        ),
    ]


def _changes(before: dict[str, object], after: dict[str, object]) -> list[tuple[str, str, tuple[str, ...]]]:
    old, new = ({"s": stack_state({"Resources": r}, {})} for r in (before, after))
    return [(c.logical_id, c.action, c.reasons) for c in compare(old, new)]


def test_the_weakenings_the_guard_refuses_are_each_named_with_the_old_and_new_value() -> None:
    """Seed-4 survivors: versioning suspended (``_fate_values`` 28), a log group that never expired given a
    retention (``weakenings`` 18), a DeletionPolicy removed, read as Delete (``stack_state`` 54, 58)."""
    versioned = {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": {"Status": "Enabled"}}}
    suspended = {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": {"Status": "Suspended"}}}
    assert _changes({"B": versioned}, {"B": suspended}) == [
        ("B", "weaken", ('VersioningConfiguration.Status "Enabled" -> "Suspended"',))
    ]
    logs = {"Type": "AWS::Logs::LogGroup", "Properties": {}}
    month = {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}}
    assert _changes({"L": logs}, {"L": month}) == [("L", "weaken", ("RetentionInDays never expire -> 30",))]
    kept = {"Type": "AWS::SNS::Topic", "DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    assert _changes({"T": kept}, {"T": {"Type": "AWS::SNS::Topic"}}) == [
        ("T", "weaken", ("DeletionPolicy Retain -> Delete", "UpdateReplacePolicy Retain -> Delete"))
    ]


def test_a_new_type_under_the_same_logical_id_is_a_replacement_for_that_reason_alone() -> None:
    """``compare`` mutant 59: the old resource's settings say nothing of another type's."""
    bucket = {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain", "Properties": {}}
    assert _changes({"X": bucket}, {"X": {"Type": "AWS::SNS::Topic", "Properties": {}}}) == [
        ("X", "replace", ("type AWS::S3::Bucket -> AWS::SNS::Topic",))
    ]


def test_a_cluster_resource_without_properties_records_no_settings() -> None:
    """``stack_state`` mutant 96: a resource may be written without Properties (CloudFormation allows it)."""
    state = stack_state({"Resources": {"C": {"Type": "Custom::PclusterCluster"}}}, {})
    assert state.resources["C"].settings == {}


@pytest.mark.parametrize("reference", [{"Fn::GetAtt": ["Data", "Arn"]}, {"Fn::GetAtt": "Data.Arn"}, {"Ref": "Data"}])
def test_a_create_only_reference_in_any_form_carries_the_replacement(reference: dict[str, object]) -> None:
    """``_refs`` mutant 19: Fn::GetAtt may be written as a list or as one "LogicalId.Attribute" string."""

    def resources(name: str) -> dict[str, object]:
        bucket = {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": name}}
        policy = {"Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": reference, "PolicyDocument": {}}}
        return {"Data": bucket, "Policy": policy}

    assert _changes(resources("a"), resources("b")) == [
        ("Data", "replace", ('BucketName "a" -> "b"',)),
        ("Policy", "replace", ("refers to replaced Data",)),
    ]
