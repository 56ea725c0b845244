"""The day-two guard's lock file (mlcluster/lockfile.py): behaviour `make mutation` showed no test asserted.

Each test says which surviving mutant it kills; all of them assert what an operator reads or relies on.
"""

from __future__ import annotations

import hashlib
import json
import locale
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.lockfile import (
    Lock,
    UnreadableLockError,
    allowances_in_flight,
    allowed,
    git_path,
    guard,
    guard_assembly,
    in_flight_path,
    load_lock,
    lock_path,
    missing_lock,
    notices,
    orphan_locks,
    read_lock,
    read_lock_file,
    record_in_flight,
    stale_allowances,
    training_plan_refusal,
    write_lock,
)
from mlcluster.replacement import HYPERPOD_TYPE, Change, ResourceState, StackState
from tests.support import ENVIRONMENTS


def test_the_missing_lock_refusal_reads_as_a_sentence_not_as_an_empty_value(tmp_path: Path) -> None:
    """missing_lock: the problem carries no value, so it is not rendered as 'no value (empty or missing)'."""
    shutil.copy(ENVIRONMENTS / "dev.yaml", tmp_path / "dev.yaml")
    environment = load_environment(tmp_path / "dev.yaml")
    rendered = missing_lock(environment).render()
    assert rendered == (
        f"(lock file): {tmp_path / 'dev.lock.json'} is missing, so nothing tells the guard what is deployed (stacks "
        "of dev may exist: a file renamed back, a clone without the lock). Run 'mlcluster lock dev' with credentials "
        "for its account (it records the deployed stacks, none for a new environment), or 'mlcluster lock dev --new' "
        "to declare that nothing of it is deployed, and commit the lock file."
    )


def dev(tmp_path: Path, allow: str | None = None) -> Environment:
    """dev.yaml in ``tmp_path``, with ``allow`` (a flow list's items) as retention.allow_replacement."""
    text = (ENVIRONMENTS / "dev.yaml").read_text()
    if allow is not None:
        text = text.replace("retention:\n", f"retention:\n  allow_replacement: [{allow}]\n", 1)
    (tmp_path / "dev.yaml").write_text(text)
    return load_environment(tmp_path / "dev.yaml")


def test_a_lock_reads_back_as_written_with_its_account_and_region(tmp_path: Path) -> None:
    """write_lock/lock_document: every field an operator's next `mlcluster lock` or the guard reads comes back."""
    environment = dev(tmp_path)
    lock = Lock({}, "deployed", ("Cluster/HyperPod",), ("a change",), "123456789012", "us-west-2")
    path = write_lock(environment, lock)
    assert read_lock_file(path, "dev") == lock
    assert json.loads(path.read_text())["environment"] == "dev"
    without = Lock({}, "templates")
    assert set(json.loads(write_lock(environment, without).read_text())) == {
        "format",
        "environment",
        "source",
        "allowances_used",
        "accepted",
        "stacks",
    }
    assert read_lock_file(path, "dev") == without


@pytest.mark.parametrize("name", ["dev", "prod", "p5"])
def test_rewriting_a_committed_lock_changes_no_byte(tmp_path: Path, name: str) -> None:
    """write_lock: one key per line, sorted, so a refreshed lock diffs only where the deployment changed."""
    shutil.copy(ENVIRONMENTS / f"{name}.yaml", tmp_path / f"{name}.yaml")
    environment = load_environment(tmp_path / f"{name}.yaml")
    committed = (ENVIRONMENTS / f"{name}.lock.json").read_text(encoding="utf-8")
    lock = read_lock_file(ENVIRONMENTS / f"{name}.lock.json", name)
    assert write_lock(environment, lock).read_text(encoding="utf-8") == committed


def test_the_training_plan_refusal_names_every_group_plan_and_the_allowance_the_guard_accepts(tmp_path: Path) -> None:
    """training_plan_refusal: the groups with their counts, each plan once, and an allowance `allowed` takes."""
    environment = dev(tmp_path)
    change = Change(
        "dev-Cluster", "HyperPod1234", HYPERPOD_TYPE, "Cluster/HyperPod/Resource", "replace", ("X: a -> b",)
    )
    groups = [("gpu", 1, "arn:plan/a"), ("big", 4, "arn:plan/b"), ("more", 2, "arn:plan/a")]
    problem = training_plan_refusal(environment, change, groups)
    assert problem.value is NOT_A_VALUE
    text = problem.render()
    assert text.startswith(
        "cluster: this edit replaces dev-Cluster/Cluster/HyperPod/Resource (AWS::SageMaker::Cluster, logical id "
        "HyperPod1234): X: a -> b. Groups gpu (1 instance), big (4 instances), more (2 instances) draw on training "
        "plan arn:plan/a, arn:plan/b. CloudFormation creates"
    )
    assert "(1) set instance_count: 0 on gpu, big, more and deploy" in text
    assert "add 'Cluster/HyperPod' to retention.allow_replacement" in text
    assert allowed(change, ["Cluster/HyperPod"])
    assert "(3) remove the allowance, set the counts back and deploy. Or, when a group cannot go to 0" in text
    assert text.endswith(
        "destroy the cluster stack first (npx cdk destroy 'dev/Cluster'; the storage stacks keep the data), make the "
        "edit, run 'mlcluster lock dev', then deploy."
    )


def test_an_environment_without_a_lock_file_has_no_locked_snapshot(tmp_path: Path) -> None:
    """read_lock: no lock file reads as None (the guard then refuses with missing_lock), not as an error."""
    environment = dev(tmp_path)
    assert load_lock(environment) is None
    assert read_lock(environment) is None
    write_lock(environment, Lock({}, "new"))
    assert read_lock(environment) == {}


def state(kind: str, path: str, policy: str) -> ResourceState:
    return ResourceState(kind, path, {}, "digest", deletion_policy=policy)


def test_notices_name_each_retained_resource_an_accepted_edit_leaves_running(tmp_path: Path) -> None:
    """notices: every removed resource whose policy keeps it, in a stack that stays, unless the guard refuses it.

    A skipped change (a dropped stack, a deleted resource) comes first, so a loop that stopped there would
    report nothing after it; the DRA gets its own way to delete it.
    """
    text = (ENVIRONMENTS / "dev.yaml").read_text()
    text = text.replace("retention:\n", "retention:\n  allow_replacement: [Storage/Allowed]\n", 1)
    (tmp_path / "dev.yaml").write_text(text)
    environment = load_environment(tmp_path / "dev.yaml")
    resources = {
        "Deleted": state("AWS::Logs::LogGroup", "Storage/Deleted/Resource", "Delete"),
        "Refused": state("AWS::FSx::FileSystem", "Storage/Refused/Resource", "Retain"),
        "Allowed": state("AWS::FSx::FileSystem", "Storage/Allowed/Resource", "Retain"),
        "Group": state("AWS::EC2::SecurityGroup", "Storage/Group/Resource", "RetainExceptOnCreate"),
        "Dra": state("AWS::FSx::DataRepositoryAssociation", "DataRepository/Dra/Resource", "Retain"),
    }
    locked = {"dev-Storage": StackState(resources, {}), "dev-Gone": StackState({}, {})}
    after = {"dev-Storage": StackState({}, {})}

    def removed(logical_id: str, stack: str = "dev-Storage") -> Change:
        old = resources.get(logical_id) or state("AWS::Logs::LogGroup", "Gone/X/Resource", "Retain")
        return Change(stack, logical_id, old.type, old.path, "remove")

    changes = [removed("X", "dev-Gone"), removed("Deleted"), removed("Refused")]
    changes += [removed("Allowed"), removed("Group"), removed("Dra")]
    found = notices(environment, locked, after, changes)
    source = environment.source
    keeps = "leaves the template but DeletionPolicy"
    assert found == [
        f"{source}: (see the reasons): dev-Storage/Storage/Allowed/Resource (AWS::FSx::FileSystem) {keeps} Retain keeps "
        "it running outside the stack: delete it by hand when it is no longer needed ('mlcluster status' lists it)",
        f"{source}: (see the reasons): dev-Storage/Storage/Group/Resource (AWS::EC2::SecurityGroup) {keeps} "
        "RetainExceptOnCreate keeps it running outside the stack: delete it by hand when it is no longer needed "
        "('mlcluster status' lists it)",
        f"{source}: storage.lustre.data_repository_associations: dev-Storage/DataRepository/Dra/Resource "
        f"(AWS::FSx::DataRepositoryAssociation) {keeps} Retain keeps it running outside the stack: it keeps "
        "importing from and exporting to the bucket (deletions too), and the path cannot be associated again until "
        "it is gone; delete it with 'aws fsx delete-data-repository-association --association-id ID "
        "--no-delete-data-in-file-system' (files and objects stay)",
    ]


# Survivors of the seeded sample (`make mutation MODULE=lockfile SAMPLE=200 SEED=1`): the lock file and the record
# of allowances in flight as read from disk.


def test_a_lock_of_the_earlier_format_is_told_to_be_rewritten_from_the_deployed_stacks(tmp_path: Path) -> None:
    """read_lock_file mutants 70, 73, 74, 76: a format-1 lock (before policies were recorded) is the one unreadable
    lock `mlcluster lock ENV` may replace; a format-2 lock missing a key is not (it may be the only record)."""
    environment = dev(tmp_path)
    path = write_lock(environment, Lock({}, "templates"))
    data = json.loads(path.read_text())
    path.write_text(json.dumps({"format": 1, "environment": "dev", "stacks": {}}))
    with pytest.raises(UnreadableLockError) as raised:
        read_lock_file(path, "dev")
    assert raised.value.earlier_format is True
    assert str(raised.value) == (
        f"{path}: (lock file): cannot be read (format 1, expected 2); rewrite it with 'mlcluster lock dev', which "
        "reads the deployed stacks"
    )
    del data["accepted"]
    path.write_text(json.dumps(data))
    with pytest.raises(UnreadableLockError) as raised:
        read_lock_file(path, "dev")
    assert raised.value.earlier_format is False
    assert "rewrite it with" not in str(raised.value)


def test_an_unreadable_lock_names_the_bad_value_and_the_way_back_from_git(tmp_path: Path) -> None:
    """read_lock_file mutant 21, UnreadableLockError mutants 4, 22: the refusal shows the bad source as written;
    `why` (which `mlcluster lock` prints when it refuses to overwrite the file) says the same; the way keeps
    the earlier allowances and acceptances in mind."""
    environment = dev(tmp_path)
    path = write_lock(environment, Lock({}, "templates"))
    path.write_text(path.read_text().replace('"source": "templates"', '"source": "deployd"'))
    with pytest.raises(UnreadableLockError) as raised:
        read_lock_file(path, "dev")
    why = "source 'deployd', expected one of deployed, templates, new"
    assert raised.value.why == why
    assert raised.value.path == path
    assert str(raised.value) == (
        f"{path}: (lock file): cannot be read ({why}); restore it from git (git log -- {git_path(path)}); if there is "
        "no good copy, move the file aside and run 'mlcluster lock dev', which reads the deployed stacks (a first "
        "lock has none of the earlier allowances_used and accepted records: take out of "
        "retention.allow_replacement every entry the set-aside copy lists as used)"
    )


def test_a_lock_with_characters_beyond_ascii_reads_the_same_under_any_locale(tmp_path: Path) -> None:
    """read_lock_file mutant 5: a lock file is UTF-8 JSON (RFC 8259). An editor or `jq` writes a character beyond
    ASCII as it is, not escaped; read under a locale whose encoding is ASCII (LANG=C in a CI job or a cron
    shell where Python's UTF-8 mode is off), the locale's encoding would refuse the lock or misread it."""
    environment = dev(tmp_path)
    path = write_lock(environment, Lock({}, "templates", accepted=("dev-Storage: moved by Zoë",)))
    path.write_bytes(path.read_bytes().replace(b"\\u00eb", "ë".encode()))
    assert "ë".encode() in path.read_bytes()
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        lock = read_lock_file(path, "dev")
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert lock.accepted == ("dev-Storage: moved by Zoë",)


def lustre(**create_only: Any) -> ResourceState:
    return ResourceState("AWS::FSx::FileSystem", "Storage/Lustre/Resource", dict(create_only), "d", "Retain")


def test_a_synth_over_a_lock_changed_since_its_record_is_refused_and_the_record_kept(tmp_path: Path) -> None:
    """_read_in_flight mutants 18, 29: the refusal names the record file and both digests at the same length
    (the record's and the lock file's now), and the record stays on disk (its replacements may be deployed)."""
    environment = dev(tmp_path, allow="Storage/Lustre")
    write_lock(environment, Lock({"dev-Storage": StackState({"Lustre": lustre()}, {})}, "templates"))
    locked = hashlib.sha256(lock_path(environment).read_bytes()).hexdigest()
    record_in_flight(environment, locked, {"Storage/Lustre/Resource": {"form": "f1", "allowance": "Storage/Lustre"}})
    recorded = in_flight_path(environment).read_bytes()
    write_lock(environment, Lock({"dev-Storage": StackState({"Lustre": lustre()}, {})}, "deployed"))
    now = hashlib.sha256(lock_path(environment).read_bytes()).hexdigest()
    with pytest.raises(ConfigError) as raised:
        guard(environment, {"dev-Storage": StackState({"Lustre": lustre()}, {})})
    assert [source for source, _ in raised.value.entries] == [str(in_flight_path(environment))]
    assert str(raised.value) == (
        f"{in_flight_path(environment)}: (allowances in flight): was written over another version of dev.lock.json "
        f"(SHA-256 {locked[:16]}..., now {now[:16]}...): the lock file changed since without 'mlcluster lock' (a "
        "merge, a checkout, line endings), while the replacements this file records may be deployed. Run "
        "'mlcluster lock dev' with credentials: it reads what is deployed and removes this file"
    )
    assert in_flight_path(environment).read_bytes() == recorded


def test_an_unreadable_record_of_allowances_is_refused_with_the_way_and_kept(tmp_path: Path) -> None:
    """_read_in_flight mutant 80: what `mlcluster lock` does about the record, as the operator reads it."""
    environment = dev(tmp_path)
    write_lock(environment, Lock({}, "templates"))
    in_flight_path(environment).write_text('{"lock": "x", "resources": [}', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        guard(environment, {})
    (problem,) = raised.value.problems
    assert problem.render().startswith("(allowances in flight): cannot be read (Expecting value: ")
    assert problem.render().endswith(
        "); run 'mlcluster lock dev' with credentials, which records what is deployed and removes this file"
    )
    assert in_flight_path(environment).read_text(encoding="utf-8") == '{"lock": "x", "resources": [}'


def test_a_resource_allowed_out_and_still_out_is_not_stale(tmp_path: Path) -> None:
    """stale_allowances mutants 7, 10, 34: a resource an earlier synth let go is recorded as form "absent";
    this synth leaving it out too is that form (no refusal); bringing it back is another form, refused with
    what `mlcluster lock` settles."""
    environment = dev(tmp_path)
    recorded = {"Storage/Lustre/Resource": {"form": "absent", "allowance": "Storage/Lustre"}}
    assert stale_allowances(environment, recorded, {"dev-Storage": StackState({}, {})}) == []
    back = {"dev-Storage": StackState({"Lustre": lustre()}, {})}
    (problem,) = stale_allowances(environment, recorded, back)
    assert problem.render() == (
        "retention.allow_replacement: an earlier synth since the lock was written let Storage/Lustre/Resource through "
        "('Storage/Lustre', recorded in dev.allowances.json) in another form than this edit gives it. If that synth "
        "was deployed, this edit would replace, delete or weaken the resource again unseen (reverting the edit or "
        "removing the allowance too: the deployed resource is the changed one). Run 'mlcluster lock dev' with "
        "credentials: it reads what is deployed (if the earlier change was deployed, the lock records it and the "
        "next change needs an allowance again; if not, the lock is unchanged) and removes the record"
    )


def test_the_same_resource_in_another_key_order_keeps_its_form(tmp_path: Path) -> None:
    """_digest mutant 5: a HyperPod cluster's create-only values are keyed per instance group in the order of the
    groups; groups listed in another order after an allowed synth are the same cluster (compare sees no change),
    so the record of that synth must not refuse the next one."""
    environment = dev(tmp_path, allow="Cluster/HyperPod")
    path = "Cluster/HyperPod/Resource"
    first = {"ClusterName": "ml", "InstanceGroups[gpu].InstanceType": "ml.p5.48xlarge"}
    first["InstanceGroups[ctl].InstanceType"] = "ml.m5.xlarge"
    reordered = dict(reversed(first.items()))
    assert reordered == first and list(reordered) != list(first)
    locked = {
        "dev-Cluster": StackState({"HyperPod": ResourceState(HYPERPOD_TYPE, path, {"ClusterName": "old"}, "d")}, {})
    }
    allowed_synth = {"dev-Cluster": StackState({"HyperPod": ResourceState(HYPERPOD_TYPE, path, first, "d")}, {})}
    change = Change("dev-Cluster", "HyperPod", HYPERPOD_TYPE, path, "replace", ("ClusterName old -> ml",))
    in_flight = allowances_in_flight(environment, Lock(locked, "templates"), allowed_synth, [change])
    assert list(in_flight) == [path]
    next_synth = {"dev-Cluster": StackState({"HyperPod": ResourceState(HYPERPOD_TYPE, path, reordered, "d")}, {})}
    assert stale_allowances(environment, in_flight, next_synth) == []
    changed = {**reordered, "InstanceGroups[gpu].InstanceType": "ml.p4d.24xlarge"}
    other = {"dev-Cluster": StackState({"HyperPod": ResourceState(HYPERPOD_TYPE, path, changed, "d")}, {})}
    assert len(stale_allowances(environment, in_flight, other)) == 1


def test_an_orphan_lock_names_its_stacks_and_the_whole_way_to_rename(tmp_path: Path) -> None:
    """orphan_locks mutant 46: a lock whose environment file is gone, with the order of the rename's steps."""
    environment = dev(tmp_path)
    write_lock(environment, Lock({"dev-Storage": StackState({"Lustre": lustre()}, {})}, "deployed"))
    (tmp_path / "dev.yaml").unlink()
    (error,) = orphan_locks(tmp_path)
    assert str(error) == (
        f"{tmp_path / 'dev.lock.json'}: (environment file): records deployed stacks (dev-Storage) but "
        "environments/dev.yaml is gone. A renamed file is a new environment (a second network, file systems, bucket "
        "and cluster) while these stacks keep running and billing, retained and termination-protected, out of every "
        "mlcluster command's reach. Safe way: restore dev.yaml. To rename: keep dev.yaml, add the new file and deploy "
        "it, copy the data across, destroy the old stacks (npx cdk destroy 'dev/*' after turning their termination "
        "protection off), delete the retained resources you no longer need ('mlcluster status dev' lists them), run "
        "'mlcluster lock dev' with --accept for each of those stacks (it then records nothing deployed) and only then "
        "delete dev.yaml and dev.lock.json. Deleting dev.lock.json says that you leave those stacks running outside "
        "mlcluster."
    )


# Survivors of the seeded sample `make mutation MODULE=lockfile SEED=3`.


def test_the_same_allowed_removal_synthesized_again_passes(tmp_path: Path) -> None:
    """allowances_in_flight mutants 18, 21: a resource an allowance lets leave the template is recorded as form
    "absent", the form :func:`stale_allowances` gives a resource that is not there; so a second synth of the very
    same edit (a retried `cdk synth`, `mlcluster update` after `cdk diff`) passes, and bringing it back does not."""
    environment = dev(tmp_path, allow="Storage/Lustre")
    write_lock(environment, Lock({"dev-Storage": StackState({"Lustre": lustre()}, {})}, "templates"))
    removed = {"dev-Storage": StackState({}, {})}
    first_changes, first_notes = guard(environment, removed)
    assert [(c.path, c.action) for c in first_changes] == [("Storage/Lustre/Resource", "remove")]
    assert json.loads(in_flight_path(environment).read_text(encoding="utf-8"))["resources"] == {
        "Storage/Lustre/Resource": {"allowance": "Storage/Lustre", "form": "absent"}
    }
    assert guard(environment, removed) == (first_changes, first_notes)
    with pytest.raises(ConfigError) as raised:
        guard(environment, {"dev-Storage": StackState({"Lustre": lustre()}, {})})
    assert "an earlier synth since the lock was written let Storage/Lustre/Resource through" in str(raised.value)


def _stage(assembly: Path, name: str) -> None:
    """A synthesized stage ``name`` whose storage stack holds no resource."""
    nested = assembly / f"assembly-{name}"
    nested.mkdir(parents=True)
    (nested / "storage.json").write_text(json.dumps({"Resources": {}}))
    stack = {
        "type": "aws:cloudformation:stack",
        "properties": {"templateFile": "storage.json", "stackName": f"{name}-Storage"},
    }
    (nested / "manifest.json").write_text(json.dumps({"artifacts": {f"{name}Storage": stack}}))


def test_the_assembly_guard_returns_the_notices_of_every_environment(tmp_path: Path) -> None:
    """guard_assembly mutant 19: `cdk synth` of two environments, each removing a retained file system under its
    allowance, prints both notices (what each leaves running outside its stack), not only the last environment's."""
    environments = []
    for name in ("alpha", "beta"):
        text = (ENVIRONMENTS / "dev.yaml").read_text()
        text = text.replace("retention:\n", "retention:\n  allow_replacement: [Storage/Lustre]\n", 1)
        (tmp_path / f"{name}.yaml").write_text(text)
        environment = load_environment(tmp_path / f"{name}.yaml")
        write_lock(environment, Lock({f"{name}-Storage": StackState({"Lustre": lustre()}, {})}, "templates"))
        _stage(tmp_path / "cdk.out", name)
        environments.append(environment)
    assert guard_assembly(tmp_path / "cdk.out", environments) == [
        f"{tmp_path / name}.yaml: storage.lustre: {name}-Storage/Storage/Lustre/Resource (AWS::FSx::FileSystem) leaves "
        "the template but DeletionPolicy Retain keeps it running outside the stack: delete it by hand when it is no "
        "longer needed ('mlcluster status' lists it)"
        for name in ("alpha", "beta")
    ]
