"""Issue 29: the synth guard knows each edit's deploy outcome (``mlcluster.deploy_outcomes``).

The lock and the new snapshot are reduced from templates built here the way
the stacks render them (``stack_state``): a ``Custom::PclusterCluster`` with the
rendered p4de configuration and its provider stack, the Lustre and OpenZFS
file systems, a DRA. Each rule: the edit refused (key, old and new value, safe
way) and the edge accepted. The real synthesis of the head-node edit is in
``tests/test_day_two_guard.py``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.app import build_app, main, synth_guarded
from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.deploy_outcomes import cluster_key
from mlcluster.lockfile import Lock, guard, write_lock
from mlcluster.replacement import Snapshot, snapshot_from_assembly, snapshot_from_json, snapshot_to_json, stack_state
from tests.pcluster.test_update_policy_contract import P4DE
from tests.support import ENVIRONMENTS, MINIMAL, write_env

NAME = "p4de"
PROVIDER_URL = {
    "Fn::Sub": "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
    "/parallelcluster/{v}/templates/custom_resource/cluster.yaml"
}
BUCKET = {"Fn::GetStackOutput": {"OutputName": "Bucket", "StackName": f"{NAME}-Storage"}}
DRA = "DataRepository/Lustre/AssociationData"
FILE_SYSTEM = {"Fn::GetStackOutput": {"OutputName": "Lustre", "StackName": f"{NAME}-Storage"}}


def provider(version: str) -> dict[str, Any]:
    return {
        "Type": "AWS::CloudFormation::Stack",
        "Properties": {"TemplateURL": {"Fn::Sub": PROVIDER_URL["Fn::Sub"].replace("{v}", version)}},
    }


def templates(
    *,
    config: dict[str, Any] | None = None,
    version: str = "3.16.1",
    cluster_name: str = "p4de-train",
    capacity: int = 2400,
    throughput: int = 250,
    zfs_capacity: int = 512,
    dra: tuple[str, str] = ("/data", "/"),
    dra_id: str = "Data",
) -> Snapshot:
    """The snapshot of p4de's cluster, storage and DRA stacks with the values given."""
    cluster = {
        "Type": "Custom::PclusterCluster",
        "DeletionPolicy": "Retain",
        "Properties": {
            "ServiceToken": {"Fn::GetAtt": ["Provider", "Outputs.ServiceToken"]},
            "ClusterName": cluster_name,
            "ClusterConfiguration": P4DE if config is None else config,
            "DeletionPolicy": "Retain",
        },
    }
    lustre = {
        "Type": "AWS::FSx::FileSystem",
        "DeletionPolicy": "Retain",
        "Properties": {
            "FileSystemType": "LUSTRE",
            "StorageCapacity": capacity,
            "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": throughput},
        },
    }
    zfs = {
        "Type": "AWS::FSx::FileSystem",
        "DeletionPolicy": "Retain",
        "Properties": {"FileSystemType": "OPENZFS", "StorageCapacity": zfs_capacity},
    }
    association = {
        "Type": "AWS::FSx::DataRepositoryAssociation",
        "DeletionPolicy": "Retain",
        "Properties": {
            "FileSystemId": FILE_SYSTEM,
            "FileSystemPath": dra[0],
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", BUCKET, dra[1]]]},
        },
    }
    return {
        f"{NAME}-Cluster": stack_state(
            {"Resources": {"Cluster": cluster, "Provider": provider(version)}},
            {"Cluster": "Cluster/Cluster/Resource", "Provider": "Cluster/Cluster/Provider"},
        ),
        f"{NAME}-Storage": stack_state(
            {"Resources": {"Lustre": lustre, "Zfs": zfs}},
            {"Lustre": "Storage/Lustre/Resource", "Zfs": "Storage/OpenZfs/Resource"},
        ),
        f"{NAME}-DataRepository": stack_state(
            {"Resources": {dra_id: association}}, {dra_id: f"DataRepository/Lustre/Association{dra_id}"}
        ),
    }


def environment(tmp_path: Path, deployed: Snapshot, **retention: Any) -> Environment:
    env = load_environment(write_env(tmp_path, NAME, {**MINIMAL, "retention": retention}))
    write_lock(env, Lock(deployed, "deployed"))
    return env


def refusal(env: Environment, snapshot: Snapshot) -> str:
    with pytest.raises(ConfigError) as raised:
        guard(env, snapshot)
    return str(raised.value)


def edited(edit: Any) -> dict[str, Any]:
    config = copy.deepcopy(P4DE)
    edit(config)
    return config


# -- ParallelCluster ---------------------------------------------------------------------------------------


def test_the_lock_records_the_cluster_configuration_and_round_trips() -> None:
    snapshot = templates()
    cluster = snapshot[f"{NAME}-Cluster"].resources["Cluster"]
    assert cluster.settings["ClusterConfiguration"] == P4DE
    assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot
    provider_entry = snapshot_to_json(snapshot)[f"{NAME}-Cluster"]["resources"]["Provider"]
    assert "/parallelcluster/3.16.1/templates/" in provider_entry["settings"]["TemplateURL"]["Fn::Sub"]
    # Resources without such settings keep their lock entries exactly as before (no "settings" key).
    plain = stack_state({"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"A": 1}}}}, {})
    assert "settings" not in snapshot_to_json({"s": plain})["s"]["resources"]["Topic"]


def test_a_head_node_instance_type_change_is_refused_naming_the_key_and_the_way(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    text = refusal(env, templates(config=edited(lambda c: c["HeadNode"].update(InstanceType="m5.4xlarge"))))
    assert (
        "cluster.pcluster.head_node.instance_type: this edit changes HeadNode.InstanceType of the ParallelCluster "
        f'cluster in {NAME}-Cluster from "m5.8xlarge" to "m5.4xlarge"'
    ) in text
    assert "update policy UNSUPPORTED" in text and "roll the stack back" in text
    assert "Safe way: deploy a second environment (a new cluster)" in text


def test_an_os_change_is_refused(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    text = refusal(env, templates(config=edited(lambda c: c["Image"].update(Os="ubuntu2204"))))
    assert (
        'cluster.pcluster.os: this edit changes Image.Os of the ParallelCluster cluster in p4de-Cluster from "alinux2023"'
        in text
    )


def test_a_fleet_stop_change_passes_with_the_update_note(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    _, notes = guard(env, templates(config=edited(lambda c: c["Scheduling"]["SlurmQueues"].pop())))
    (note,) = notes
    assert "applies these changes only with its compute fleet stopped" in note
    assert "cluster.pcluster.queues[inference-gpu] (Scheduling.SlurmQueues[inference-gpu]:" in note
    assert f"'mlcluster update {NAME}'" in note and "a plain 'cdk deploy' fails at the cluster resource" in note


def test_an_in_place_change_passes_without_a_note(tmp_path: Path) -> None:
    """A change ParallelCluster applies either way with the fleet running (a queue's root volume under DRAIN)."""
    env = environment(tmp_path, templates())
    volume = edited(
        lambda c: c["Scheduling"]["SlurmQueues"][0]["ComputeSettings"]["LocalStorage"]["RootVolume"].update(Size=400)
    )
    assert guard(env, templates(config=volume))[1] == []
    assert guard(env, templates())[1] == []


def test_a_change_whose_rollback_needs_the_fleet_stopped_is_noted(tmp_path: Path) -> None:
    """More nodes apply with the fleet running; taking them back (a rollback) needs it stopped."""
    env = environment(tmp_path, templates())
    raised = edited(lambda c: c["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0].update(MaxCount=8))
    (note,) = guard(env, templates(config=raised))[1]
    assert "applies this edit with its fleet running, but should anything else in the same deploy fail" in note
    assert "MaxCount: 8 -> 4" in note
    assert f"'mlcluster update {NAME}' (it stops the fleet for such an edit too, so a rollback can complete)" in note
    assert f"continue-update-rollback --stack-name {NAME}-Cluster" in note


def test_a_change_whose_rollback_parallelcluster_refuses_is_noted(tmp_path: Path) -> None:
    """Login nodes added: once they run, ParallelCluster refuses to take them away, so a rollback would stop."""
    without = edited(lambda c: c.pop("LoginNodes"))
    env = environment(tmp_path, templates(config=without))
    notes = guard(env, templates())[1]
    assert any(
        "cluster.pcluster.login_nodes: should this deploy fail after the cluster in p4de-Cluster is updated, "
        "ParallelCluster would refuse the rollback's change of LoginNodes" in note
        for note in notes
    ), notes


def test_a_new_cluster_name_is_left_to_the_data_guard(tmp_path: Path) -> None:
    """A rename is refused by the data guard alone, allowance or not (ParallelCluster's provider refuses a new
    ClusterName: lockfile.cluster_rename_refusal); the update policies are not applied to it on top."""
    env = environment(tmp_path, templates(), allow_replacement=["Cluster/Cluster"])
    new = edited(lambda c: c["HeadNode"].update(InstanceType="m5.4xlarge"))
    text = refusal(env, templates(config=new, cluster_name="p4de-train2"))
    assert "'Cannot update the ClusterName in the properties.'" in text
    assert "update policy" not in text and "cluster.pcluster.head_node" not in text  # no update-policy refusal


def test_a_lock_without_the_configuration_notes_it_and_checks_nothing(tmp_path: Path) -> None:
    old = templates()
    bare = snapshot_to_json(old)
    for stack in bare.values():
        for resource in stack["resources"].values():
            resource.pop("settings", None)
    env = environment(tmp_path, snapshot_from_json(bare))
    _, notes = guard(env, templates(config=edited(lambda c: c["HeadNode"].update(InstanceType="m5.4xlarge"))))
    assert any(f"the lock does not record the cluster configuration of {NAME}-Cluster" in n for n in notes)
    assert any(f"run 'mlcluster lock {NAME}'" in n for n in notes)


# -- the ParallelCluster release ---------------------------------------------------------------------------


def test_a_version_change_of_a_deployed_cluster_is_refused_with_the_procedure(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    text = refusal(env, templates(version="3.17.0"))
    assert (
        "cluster.pcluster.version: this edit moves ParallelCluster's provider in p4de-Cluster from 3.16.1 to 3.17.0"
        in text
    )
    assert "never upgrades a cluster in place" in text
    assert "keep version: 3.16.1" in text and "npx cdk destroy --exclusively 'p4de/Cluster'" in text


def test_the_same_version_passes_and_a_renamed_cluster_is_left_to_the_data_guard(tmp_path: Path) -> None:
    guard(environment(tmp_path, templates()), templates(version="3.16.1"))
    env = environment(tmp_path, templates(), allow_replacement=["Cluster/Cluster"])
    text = refusal(env, templates(version="3.17.0", cluster_name="p4de-next"))
    assert "Cannot update the ClusterName" in text
    assert "cluster.pcluster.version" not in text


# -- FSx ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "key", "told"),
    [
        ({"capacity": 1200}, "storage.lustre.storage_capacity_gib", "from 2400 to 1200 GiB"),
        ({"zfs_capacity": 256}, "storage.openzfs.storage_capacity_gib", "from 512 to 256 GiB"),
    ],
)
def test_a_file_system_cannot_shrink(tmp_path: Path, edit: dict[str, int], key: str, told: str) -> None:
    env = environment(tmp_path, templates())
    text = refusal(env, templates(**edit))
    assert f"{key}: this edit lowers the storage capacity" in text and told in text
    assert "FSx cannot shrink a file system" in text and "Safe way: keep storage_capacity_gib" in text


def test_a_file_system_grows_with_a_note(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    (note,) = guard(env, templates(capacity=4800))[1]
    assert "storage.lustre.storage_capacity_gib" in note and "grows from 2400 to 4800 GiB in place" in note
    assert "refuses another capacity increase until 6 hours after this one was requested" in note
    assert "its optimization has finished (whichever is later)" in note


def test_a_throughput_change_is_refused_with_the_in_place_way(tmp_path: Path) -> None:
    env = environment(tmp_path, templates())
    text = refusal(env, templates(throughput=500))
    assert "storage.lustre.throughput_mbps_per_tib: this edit changes the per-unit throughput" in text
    assert "from 250 to 500 MB/s/TiB" in text
    assert "--lustre-configuration PerUnitStorageThroughput=500" in text
    guard(env, templates(throughput=250))


# -- DRAs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("allow", [[], [DRA]])
def test_a_dra_path_change_is_refused_even_allowed(tmp_path: Path, allow: list[str]) -> None:
    env = environment(tmp_path, templates(), allow_replacement=allow)
    text = refusal(env, templates(dra=("/datasets", "/")))
    assert "storage.lustre.data_repository_associations: this edit replaces the DRA" in text
    assert '"/data" -> "/datasets"' in text and "DataRepositoryPath overlaps" in text
    assert "in two deploys" in text and "--no-delete-data-in-file-system" in text


def test_a_dra_moved_clear_of_both_paths_is_only_the_data_guards(tmp_path: Path) -> None:
    """New file-system and repository paths that overlap neither of the old ones: FSx creates it. The bucket's
    root overlaps every prefix of it."""
    env = environment(tmp_path, templates(dra=("/data", "/data/")), allow_replacement=[DRA])
    guard(env, templates(dra=("/datasets", "/datasets/")))
    assert "DataRepositoryPath overlaps" in refusal(env, templates(dra=("/datasets", "/data/sets/")))
    assert "FileSystemPath overlaps" in refusal(env, templates(dra=("/data/sets", "/datasets/")))


def test_a_dra_whose_path_moves_is_a_new_dra_beside_the_retained_one(tmp_path: Path) -> None:
    """The construct id names the path: a new file_system_path removes (and retains) the old DRA and adds one."""
    env = environment(tmp_path, templates())
    text = refusal(env, templates(dra=("/datasets", "/"), dra_id="Datasets"))
    assert "this edit removes (and keeps) and adds beside it the DRA" in text
    assert "DataRepositoryPath overlaps" in text and "in two deploys" in text
    # Clear of both paths, FSx creates it (the retained old one is the data guard's notice).
    env = environment(tmp_path, templates(dra=("/data", "/data/")))
    guard(env, templates(dra=("/datasets", "/datasets/"), dra_id="Datasets"))


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("HeadNode.InstanceType", "cluster.pcluster.head_node.instance_type"),
        ("Image.Os", "cluster.pcluster.os"),
        (
            "Scheduling.SlurmQueues[gpu].ComputeResources[p5].InstanceType",
            "cluster.pcluster.queues[gpu].compute_resources[p5].instance_type",
        ),
        (
            "Scheduling.SlurmQueues[gpu].ComputeResources[p5].MinCount",
            "cluster.pcluster.queues[gpu].compute_resources[p5].min_count",
        ),
        ("Scheduling.SlurmQueues[gpu]", "cluster.pcluster.queues[gpu]"),
        ("Scheduling.SlurmSettings.ScaledownIdletime", "cluster.pcluster.slurm.scaledown_idle_minutes"),
        ("SharedStorage[apps]", "cluster.pcluster.shared_storage.apps"),
        ("Monitoring.DetailedMonitoring", "cluster.pcluster.monitoring.detailed_monitoring"),
        ("Region", "cluster.pcluster"),
    ],
)
def test_config_paths_map_to_environment_keys(path: str, key: str) -> None:
    assert cluster_key(path) == key


# -- the real synthesis: the example p4de, locked from its templates, then edited ---------------------------


@pytest.fixture(scope="module")
def p4de_locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with a copy of p4de.yaml, synthesized and locked from its templates."""
    root = tmp_path_factory.mktemp("outcomes")
    envs = root / "environments"
    envs.mkdir()
    shutil.copy(ENVIRONMENTS / f"{NAME}.yaml", envs / f"{NAME}.yaml")
    write_lock(load_environment(envs / f"{NAME}.yaml"), Lock({}, "new"))
    app, stages = build_app(envs, outdir=str(root / "cdk.out"), template_checks=False)
    assembly = synth_guarded(app, stages)
    (stage,) = stages
    write_lock(stage.environment, Lock(snapshot_from_assembly(Path(assembly.directory), stage.stage_name), "templates"))
    return root


def run_app(root: Path, name: str, change: Any) -> tuple[object, str]:
    """``app.py``'s ``main`` on a copy of the locked p4de with ``change`` applied: its exit code and stderr."""
    envs = root / name / "environments"
    envs.mkdir(parents=True)
    shutil.copy(root / "environments" / f"{NAME}.lock.json", envs / f"{NAME}.lock.json")
    data = yaml.safe_load((root / "environments" / f"{NAME}.yaml").read_text(encoding="utf-8"))
    change(data["cluster"]["pcluster"])
    write_env(envs, NAME, data)
    err = io.StringIO()
    code: object = 0
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.chdir(envs.parent)
        try:
            main()
        except SystemExit as exit_:
            code = exit_.code
    return code, err.getvalue()


def test_synth_refuses_the_head_node_instance_type_of_the_example(p4de_locked: Path) -> None:
    code, err = run_app(p4de_locked, "head", lambda c: c.setdefault("head_node", {}).update(instance_type="m5.4xlarge"))
    assert code == 1
    assert "mlcluster: change refused (no template of this synth is left in the output to deploy)" in err
    assert (
        "environments/p4de.yaml: cluster.pcluster.head_node.instance_type: this edit changes HeadNode.InstanceType "
        'of the ParallelCluster cluster in p4de-Cluster from "m5.8xlarge" to "m5.4xlarge"'
    ) in err
    assert "Traceback" not in err


def test_synth_passes_a_queue_removal_with_the_update_note(p4de_locked: Path) -> None:
    code, err = run_app(p4de_locked, "queue", lambda c: c["queues"].pop())
    assert code == 0, err
    assert "mlcluster: warning: environments/p4de.yaml: the cluster in p4de-Cluster applies these changes only" in err
    assert "cluster.pcluster.queues[inference-gpu]" in err and "'mlcluster update p4de'" in err


# -- the accounting database a kept cluster's slurmdbd uses ----------------------------------------------------

DATABASE = {
    "Uri": "acct.cluster-x.us-west-2.rds.amazonaws.com:3306",
    "UserName": "slurmdbd",
    "PasswordSecretArn": "arn:aws:secretsmanager:us-west-2:111111111111:secret:slurmdbd-AbCdEf",
    "DatabaseName": "slurm_acct_db",
}


def with_database(**fields: str) -> dict[str, Any]:
    return edited(lambda c: c["Scheduling"]["SlurmSettings"].update(Database={**DATABASE, **fields}))


def test_a_new_database_name_is_noted_with_the_old_and_new_and_how_to_carry_the_history(tmp_path: Path) -> None:
    """Review i33e finding 2: DatabaseName is SUPPORTED (in place, fleet running): slurmdbd moves to an empty
    database and the history stays behind in the old one; the synth says so, naming both and the ways."""
    env = environment(tmp_path, templates(config=with_database()))
    _, notes = guard(env, templates(config=with_database(DatabaseName="slurm_team_b")))
    (note,) = [n for n in notes if "another database" in n]
    assert "cluster.pcluster.slurm.accounting: this edit points slurmdbd of the cluster in p4de-Cluster at" in note
    assert 'DatabaseName "slurm_acct_db" -> "slurm_team_b"' in note and "in place (with the fleet running)" in note
    assert "slurmdbd starts on empty tables there" in note and "the old database stays as it was" in note
    assert "keep the old value" in note and "'sacctmgr dump <cluster> file=cluster.cfg'" in note
    assert "'mysqldump' the old database into the new one" in note
    # Another endpoint is another database too.
    _, notes = guard(env, templates(config=with_database(Uri="other.cluster-y.us-west-2.rds.amazonaws.com:3306")))
    (note,) = [n for n in notes if "another database" in n]
    assert 'Uri "acct.cluster-x.us-west-2.rds.amazonaws.com:3306" -> "other.cluster-y' in note
    # A Uri is COMPUTE_FLEET_STOP, not applied with the fleet running (re-review, data-loss).
    assert "in place (with the compute fleet stopped)" in note


def test_the_same_database_or_none_before_is_not_noted(tmp_path: Path) -> None:
    """The edges: the database as deployed (its user changed), and accounting added to a cluster without it."""
    env = environment(tmp_path, templates(config=with_database()))
    _, notes = guard(env, templates(config=with_database(UserName="slurmdbd2")))
    assert not [n for n in notes if "another database" in n]
    env = environment(tmp_path, templates())
    _, notes = guard(env, templates(config=with_database()))
    assert not [n for n in notes if "another database" in n]


def test_the_managed_databases_name_is_the_key_the_note_names(tmp_path: Path) -> None:
    """With storage.accounting the edit is database_name's: the note names that key."""
    from tests.test_accounting_pcluster import ENVIRONMENT as MANAGED

    env = load_environment(write_env(tmp_path, NAME, MANAGED))
    write_lock(env, Lock(templates(config=with_database()), "deployed"))
    _, notes = guard(env, templates(config=with_database(DatabaseName="train_history")))
    (note,) = [n for n in notes if "another database" in n]
    assert "storage.accounting.database_name: this edit points slurmdbd of the cluster in p4de-Cluster" in note


def test_a_version_change_with_the_managed_database_says_to_snapshot_it_and_delete_the_old_cluster(
    tmp_path: Path,
) -> None:
    """Review i33e finding 3: a newer Slurm converts the shared accounting database in place and no older slurmdbd
    starts on it again: with storage.accounting the refusal's way says to snapshot it first and to delete a
    retained old cluster; without storage.accounting it says neither."""
    from tests.test_accounting_pcluster import ENVIRONMENT as MANAGED

    env = load_environment(write_env(tmp_path, NAME, MANAGED))
    write_lock(env, Lock(templates(), "deployed"))
    text = refusal(env, templates(version="3.17.0"))
    assert "converts its tables in place on its first start: no older slurmdbd starts on them again" in text
    assert (
        "'aws rds create-db-cluster-snapshot --db-cluster-identifier <the accounting database's cluster id> "
        "--db-cluster-snapshot-identifier p4de-before-3-17-0 --region us-west-2' (the way back to 3.16.1;" in text
    )
    assert "'pcluster delete-cluster -n p4de-train --region us-west-2' (its older slurmdbd must not write" in text
    # Re-review (data-loss): the old cluster goes before the snapshot, so the snapshot holds everything it wrote.
    assert text.index("pcluster delete-cluster") < text.index("create-db-cluster-snapshot")
    assert "bills until 'aws rds delete-db-cluster-snapshot'" in text and "'aws ec2 delete-volume'" in text
    plain = refusal(environment(tmp_path / "plain", templates()), templates(version="3.17.0"))
    assert "never upgrades a cluster in place" in plain
    assert "create-db-cluster-snapshot" not in plain and "pcluster delete-cluster" not in plain


@pytest.mark.parametrize("managed", [True, False])
def test_a_database_change_names_the_key_that_wrote_it(tmp_path: Path, managed: bool) -> None:
    """``SlurmSettings.Database`` comes from storage.accounting (the managed database) when the environment has
    it, else from cluster.pcluster.slurm.accounting: the note names the key the operator edited."""
    database = {"Uri": "db.example:3306", "UserName": "slurmdbd", "PasswordSecretArn": "arn:aws:secretsmanager:x"}
    before = edited(lambda c: c["Scheduling"]["SlurmSettings"].update(Database=database))
    after = edited(lambda c: c["Scheduling"]["SlurmSettings"].update(Database={**database, "Uri": "db2.example:3306"}))
    source = yaml.safe_load((ENVIRONMENTS / "pcluster-accounting.yaml").read_text()) if managed else MINIMAL
    env = load_environment(write_env(tmp_path, NAME, source))
    assert (env.config.storage.accounting is not None) is managed
    write_lock(env, Lock(templates(config=before), "deployed"))
    notes = guard(env, templates(config=after))[1]
    (note,) = [n for n in notes if "another database" not in n]
    key = "storage.accounting" if managed else "cluster.pcluster.slurm.accounting"
    assert "applies these changes only with its compute fleet stopped" in note
    # Another Uri is another database too (review i33e finding 2): noted apart, under the same key.
    (moved,) = [n for n in notes if "another database" in n]
    assert f"{key}: this edit points slurmdbd of the cluster in p4de-Cluster at another database" in moved
    assert f"{key} (Scheduling.SlurmSettings.Database.Uri: " in note


def test_the_database_path_maps_to_the_managed_key_only_with_it() -> None:
    assert cluster_key("Scheduling.SlurmSettings.Database.Uri") == "cluster.pcluster.slurm.accounting"
    assert cluster_key("Scheduling.SlurmSettings.Database", managed_database=True) == "storage.accounting"
    assert cluster_key("Scheduling.SlurmSettings.Database.DatabaseName", managed_database=True) == "storage.accounting"
    # Only the Database itself: the other Slurm settings keep their keys.
    assert cluster_key("Scheduling.SlurmSettings.ScaledownIdletime", managed_database=True) == (
        "cluster.pcluster.slurm.scaledown_idle_minutes"
    )


def _database_replaced(name: str) -> tuple[Environment, Snapshot, Snapshot, tuple[str, str]]:
    """The example ``name`` as locked, the same with its accounting database replaced (another key), and where."""
    import dataclasses

    from mlcluster.lockfile import read_lock_file

    env = load_environment(ENVIRONMENTS / f"{name}.yaml")
    locked = read_lock_file(ENVIRONMENTS / f"{name}.lock.json", name).snapshot
    edited = copy.deepcopy(locked)
    ((stack, lid),) = [
        (stack, lid) for stack, state in edited.items() for lid, r in state.resources.items()
        if r.type == "AWS::RDS::DBCluster"
    ]  # fmt: skip
    database = edited[stack].resources[lid]
    edited[stack].resources[lid] = dataclasses.replace(
        database, create_only={**database.create_only, "KmsKeyId": "another key"}, digest="edited"
    )
    return env, locked, edited, (stack, lid)


def test_a_replaced_accounting_database_under_a_kept_cluster_is_noted() -> None:
    """Whole-diff data-loss review: the cluster's Database.Uri reads the Storage stack's output, so a replaced
    database (its allowance given) changed nothing the configuration compare could see. The synth now says the old
    database goes (final snapshot), the new endpoint needs the fleet stopped, and how to carry the history."""
    import dataclasses

    from mlcluster.deploy_outcomes import outcome_checks

    env, locked, edited, (stack, lid) = _database_replaced("pcluster-accounting")
    database = locked[stack].resources[lid]
    _, notes = outcome_checks(env, locked, edited)
    (note,) = [n for n in notes if "replaces the accounting database" in n]
    assert "deletes the old database (keeping a final snapshot, which bills until deleted)" in note
    assert "only with the compute fleet stopped" in note and "'mlcluster update pcluster-accounting' cannot see" in note
    # slurmdbd stopped before the dump (what it wrote after would go with the old database), loaded sandboxed.
    assert (
        "In order: before the deploy, stop the compute fleet ('pcluster update-compute-fleet --status "
        "STOP_REQUESTED'), stop slurmdbd on the head node and dump the database (slurm_acct_db); deploy the Storage "
        "stack alone ('cdk deploy pcluster-accounting/Storage'); load the dump into the new database (mysql "
        "--sandbox, over TLS checked against the RDS roots); deploy the rest (ParallelCluster starts slurmdbd on the "
        "loaded database) and start the compute fleet; only then lock and remove the allowance (the way, step by "
        "step, with the commands: docs/contributing/design.md, 'A replaced accounting database under a kept "
        "cluster')"
    ) in note
    # The database named is the one slurmdbd keeps its tables in (storage.accounting.database_name).
    storage = dataclasses.replace(
        env.config.storage,
        accounting=dataclasses.replace(env.config.storage.accounting, database_name="team_acct"),
    )
    renamed_env = dataclasses.replace(env, config=dataclasses.replace(env.config, storage=storage))
    (named,) = [n for n in outcome_checks(renamed_env, locked, edited)[1] if "replaces the accounting database" in n]
    assert "dump the database (team_acct)" in named
    # A replacement applies UpdateReplacePolicy: unless the deployed and the new template both say Snapshot, no
    # snapshot is promised (data-loss review: the edit may switch retention.on_delete to destroy as well).
    no_snapshot = "deletes the old database (perhaps with no final snapshot: the UpdateReplacePolicy is not Snapshot"
    for before, after in (("Delete", "Snapshot"), ("Snapshot", "Delete")):
        old_state, new_state = copy.deepcopy(locked), copy.deepcopy(edited)
        old_state[stack].resources[lid] = dataclasses.replace(database, update_replace_policy=before)
        new_state[stack].resources[lid] = dataclasses.replace(
            new_state[stack].resources[lid], update_replace_policy=after
        )
        (gone,) = [n for n in outcome_checks(env, old_state, new_state)[1] if "replaces the accounting database" in n]
        assert no_snapshot in gone and "take a manual snapshot first" in gone
    # The edge: the database as locked, no note.
    assert not [n for n in outcome_checks(env, locked, locked)[1] if "replaces the accounting database" in n]


def test_a_replaced_accounting_database_under_a_kept_hyperpod_cluster_says_the_controller_keeps_the_old_host() -> None:
    """Review: the note counted ParallelCluster clusters only. On HyperPod the lifecycle step wrote StorageHost into
    the controller's slurmdbd.conf at creation; nothing re-runs it, so the operator must point slurmdbd at the new
    endpoint (and no compute fleet is stopped: HyperPod has none to stop for this)."""
    import dataclasses

    from mlcluster.deploy_outcomes import outcome_checks

    env, locked, edited, _ = _database_replaced("hyperpod-accounting")
    (note,) = [n for n in outcome_checks(env, locked, edited)[1] if "replaces the accounting database" in n]
    assert "that slurmdbd of the cluster in hyperpod-accounting-Cluster uses" in note
    assert "its slurmdbd.conf keeps the old host (StorageHost" in note
    assert "lifecycle scripts run on new nodes and on a patch, not on a deploy" in note
    assert (
        "In order: before the deploy, stop slurmdbd on the controller and dump the database (slurm_acct_db); deploy "
        "the Storage stack alone ('cdk deploy hyperpod-accounting/Storage'); load the dump into the new database "
        "(mysql --sandbox, over TLS checked against the RDS roots); deploy the rest; set StorageHost to the host "
        "part of the Storage stack's AccountingDatabaseEndpoint output (StoragePort stays); start slurmdbd; only "
        "then lock and remove the allowance"
    ) in note
    assert "compute fleet" not in note and "SlurmSettings" not in note
    assert not [n for n in outcome_checks(env, locked, locked)[1] if "replaces the accounting database" in n]
    # A cluster the same edit creates anew (another name) gets the new host from its lifecycle steps: no note.
    renamed = copy.deepcopy(edited)
    ((cluster_stack, cluster_id),) = [
        (name, lid) for name, state in renamed.items() for lid, r in state.resources.items()
        if r.type == "AWS::SageMaker::Cluster"
    ]  # fmt: skip
    cluster = renamed[cluster_stack].resources[cluster_id]
    renamed[cluster_stack].resources[cluster_id] = dataclasses.replace(
        cluster, create_only={**cluster.create_only, "ClusterName": "renamed"}, digest="renamed"
    )
    assert not [n for n in outcome_checks(env, locked, renamed)[1] if "replaces the accounting database" in n]
