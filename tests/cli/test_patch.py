"""``mlcluster patch`` against moto (SageMaker, S3, SSM) and a recorded-shape UpdateClusterSoftware.

Besides the fake node that answers by script, the composed session commands also run under a real
``sh`` (:func:`shell_node`), with a stand-in for mlcluster-backup that records the arguments it got:
what reaches the tool is what the shell parsed, not what the test decoded.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from mlcluster.cli import patch as patch_module
from mlcluster.cli import runcommand
from tests.cli.conftest import ACCOUNT, BACKUP_KEY_ARN, Aws, FakeNode, World, error

STATE_KEY = "mlcluster/patch/ml-hyperpod/state.json"
STATE_SHA = "a" * 64
DB_SHA = "b" * 64
BACKUP_OUTPUT = (
    "backed up 4 paths to S3\n"
    f"MLCLUSTER_SHA256 {DB_SHA} accounting.sql.gz\nMLCLUSTER_SHA256 {STATE_SHA} slurmctld-state.tar.gz\n"
)
#: The real ``subprocess.run``; the fixtures replace the module attribute runcommand uses.
REAL_RUN = subprocess.run


class Cluster:
    """Drives the moto cluster through an update: SystemUpdating on request, InService after some polls."""

    def __init__(self, world: World, aws: Aws, polls_updating: int = 1, end: str = "InService") -> None:
        from moto.sagemaker.models import sagemaker_backends

        self.cluster = sagemaker_backends[ACCOUNT][world.region].clusters[world.cluster]
        self.polls = polls_updating
        self.end = end
        self.arn = world.cluster_arn
        aws.answer("sagemaker", "UpdateClusterSoftware", always=self.update)

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        self.set("SystemUpdating", "SystemUpdating")
        return {"ClusterArn": self.arn}

    def set(self, cluster: str, nodes: str) -> None:
        self.cluster.status = cluster
        for node in self.cluster.nodes.values():
            node.status = nodes

    def sleep(self, _seconds: float) -> None:
        self.polls -= 1
        if self.polls <= 0 and self.cluster.status == "SystemUpdating":
            self.set(self.end, "Running")
            if self.end == "Failed":
                self.cluster.failure_message = "Software update failed on 1 node"


def state(world: World) -> dict[str, Any]:
    s3 = boto3.client("s3", region_name=world.region)
    body = s3.get_object(Bucket=world.backup_bucket, Key=STATE_KEY)["Body"]
    return dict(json.loads(body.read()))


def plant(world: World, data: Any) -> None:
    """Write ``data`` as the state object, as anyone who can write the backup location could."""
    s3 = boto3.client("s3", region_name=world.region)
    s3.put_object(Bucket=world.backup_bucket, Key=STATE_KEY, Body=json.dumps(data).encode())


@pytest.fixture
def tool(node: FakeNode) -> FakeNode:
    node.on("mlcluster-backup backup", BACKUP_OUTPUT)
    node.on("mlcluster-backup restore", "restored 4 paths from S3\n")
    return node


def test_patch_backs_up_updates_waits_restores(
    hyperpod: World, tool: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(hyperpod, aws, polls_updating=2)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 0, result.output
    saved = state(hyperpod)
    run = saved["run"]
    uri = f"s3://{hyperpod.backup_bucket}/mlcluster/patch/ml-hyperpod/{run}/"
    assert saved["backup_uri"] == uri
    assert saved["steps"]["backup"]["digests"] == {
        "slurmctld-state.tar.gz": STATE_SHA,
        "accounting.sql.gz": DB_SHA,
    }
    assert list(saved["steps"]) == ["backup", "update", "wait", "restore"]
    assert saved["complete"]
    assert result.stdout.splitlines()[0] == f"patched ml-hyperpod (run {run}); backup kept at {uri}"
    backup, restore = tool.scripts
    assert f"/usr/local/sbin/mlcluster-backup backup {uri} {BACKUP_KEY_ARN}" in backup
    # Every state write names SSE-KMS and the bucket's key (the bucket policy refuses any other upload).
    puts = aws.params("PutObject")
    assert puts and all((p["ServerSideEncryption"], p["SSEKMSKeyId"]) == ("aws:kms", BACKUP_KEY_ARN) for p in puts), (
        puts
    )
    assert (
        f"/usr/local/sbin/mlcluster-backup restore {uri} accounting.sql.gz={DB_SHA} slurmctld-state.tar.gz={STATE_SHA}"
        in restore
    )
    assert "sudo -iu" not in backup  # the tool runs as root (a non-interactive session's user)
    controller = "sagemaker-cluster:k3x9q2a1b2c3_controller-machine-i-0c0a1b2c3d4e5f601"
    assert [argv[argv.index("--target") + 1] for argv in tool.sessions] == [controller, controller]
    ops = [op for op in aws.operations() if op in {"start-session", "UpdateClusterSoftware"}]
    assert ops == ["start-session", "UpdateClusterSoftware", "start-session"]
    assert aws.params("UpdateClusterSoftware") == [{"ClusterName": "ml-hyperpod"}]


def test_patch_resumes_after_the_wait_ran_out(
    hyperpod: World, tool: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(hyperpod, aws, polls_updating=1000)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    clock = itertools.count(0, 30)
    monkeypatch.setattr(patch_module.time, "monotonic", lambda: float(next(clock)))
    first = hyperpod.run("patch", "hyperpod", "--yes", "--timeout", "120")
    assert first.exit_code == 5
    assert "the update did not finish within 120 s (cluster SystemUpdating, nodes 4 SystemUpdating)" in first.stderr
    assert "run `mlcluster patch hyperpod` again" in first.stderr
    assert list(state(hyperpod)["steps"]) == ["backup", "update"]

    cluster.polls = 1
    run = state(hyperpod)["run"]
    second = hyperpod.run("patch", "hyperpod", "--yes", "--json", input=f"{run}\n")
    assert second.exit_code == 0, second.output
    assert "resuming patch run" in second.stderr
    # Another process wrote the digests: --yes does not skip typing the run id.
    assert f"patch run {run} resumes at the restore with a state this process did not write" in second.stderr
    data = json.loads(second.stdout)
    assert data["state_object"] == f"s3://{hyperpod.backup_bucket}/{STATE_KEY}"
    assert list(data["steps"]) == ["backup", "update", "wait", "restore"]
    assert len(aws.params("UpdateClusterSoftware")) == 1  # not requested twice
    assert [s.split("mlcluster-backup ")[1].split()[0] for s in tool.scripts] == ["backup", "restore"]


def test_patch_backup_failure_stops_before_update(
    hyperpod: World, tool: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(hyperpod, aws)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    tool.on(
        "mlcluster-backup backup", "upload failed: An error occurred (AccessDenied) when calling PutObject\n", code=1
    )
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1
    assert "backup to s3://hyperpod-patch-backups-123456789012/mlcluster/patch/ml-hyperpod/" in result.stderr
    assert "AccessDenied" in result.stderr
    assert "nothing was updated" in result.stderr
    assert aws.params("UpdateClusterSoftware") == []
    assert state(hyperpod)["steps"] == {}

    tool.on("mlcluster-backup backup", BACKUP_OUTPUT)
    again = hyperpod.run("patch", "hyperpod", "--yes")
    assert again.exit_code == 0, again.output
    assert len(aws.params("UpdateClusterSoftware")) == 1


def test_patch_update_failed(hyperpod: World, tool: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(hyperpod, aws, end="Failed")
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1
    assert "cluster ml-hyperpod is Failed: Software update failed on 1 node" in result.stderr
    assert "the backup stays at s3://" in result.stderr
    assert list(state(hyperpod)["steps"]) == ["backup", "update"]


def test_patch_update_conflict_keeps_the_backup(hyperpod: World, tool: FakeNode, aws: Aws) -> None:
    aws.answer("sagemaker", "UpdateClusterSoftware", error("ConflictException", "Cluster is being updated"))
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 3
    assert "UpdateClusterSoftware for ml-hyperpod failed: ConflictException: Cluster is being updated" in result.stderr
    assert list(state(hyperpod)["steps"]) == ["backup"]


def test_patch_needs_an_in_service_cluster(hyperpod: World, aws: Aws) -> None:
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[ACCOUNT][hyperpod.region].clusters[hyperpod.cluster].status = "Updating"
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1
    assert "cluster ml-hyperpod is Updating; patching starts from InService" in result.stderr
    assert "start-session" not in aws.operations()


def test_patch_asks_first(hyperpod: World, tool: FakeNode, aws: Aws) -> None:
    result = hyperpod.run("patch", "hyperpod", input="n\n")
    assert result.exit_code == 1
    assert "replaces the root volumes of every node of ml-hyperpod; continue?" in result.output
    assert tool.sessions == []


def test_patch_is_hyperpod_only(pcluster: World) -> None:
    result = pcluster.run("patch", "p5", "--yes")
    assert result.exit_code == 1
    assert "this command needs 'hyperpod'" in result.stderr


class ShellNode:
    """The controller as a real ``sh``: each session's command runs, and a stand-in mlcluster-backup
    records the arguments the shell handed it (one JSON list per call) and prints the backup's lines."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.tmp = folder / "tmp"
        self.tmp.mkdir(mode=0o1777)
        self.calls_file = folder / "calls.jsonl"
        self.canary = folder / "canary"
        tool = folder / "mlcluster-backup"
        tool.write_text(
            "#!/usr/bin/env python3\n"
            "import json, sys\n"
            f"open({str(self.calls_file)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
            f"print({BACKUP_OUTPUT!r} if sys.argv[1] == 'backup' else 'restored 4 paths from S3', end='')\n"
        )
        tool.chmod(0o755)
        monkeypatch.setattr(patch_module, "BACKUP_TOOL", str(tool))
        monkeypatch.setattr(runcommand.subprocess, "run", self.session)
        monkeypatch.setattr("mlcluster.cli.ssh.require_tools", lambda: "aws")
        self.commands: list[str] = []

    def session(self, argv: list[str], timeout: float, **_: Any) -> subprocess.CompletedProcess[str]:
        parameters = json.loads(Path(argv[argv.index("--parameters") + 1].removeprefix("file://")).read_text())
        command = parameters["command"][0]
        self.commands.append(command)
        done = REAL_RUN(
            ["sh", "-c", command],
            env={"PATH": os.environ["PATH"], "TMPDIR": str(self.tmp)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        stdout = (
            f"\r\nStarting session with SessionId: ops-1\r\n{done.stdout}\r\nExiting session with sessionId: ops-1.\r\n"
        )
        return subprocess.CompletedProcess(argv, 0, stdout, done.stderr)

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]


@pytest.fixture
def shell_node(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ShellNode:
    return ShellNode(tmp_path, monkeypatch)


def test_the_composed_session_scripts_run_under_a_real_shell(
    hyperpod: World, shell_node: ShellNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole run, each root step run by ``sh``: fails on a script glued to the exit line (`2000echo`)."""
    cluster = Cluster(hyperpod, aws, polls_updating=1)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 0, result.output
    uri = state(hyperpod)["backup_uri"]
    assert shell_node.calls() == [
        ["backup", uri, BACKUP_KEY_ARN],
        ["restore", uri, f"accounting.sql.gz={DB_SHA}", f"slurmctld-state.tar.gz={STATE_SHA}"],
    ]


def valid_state(world: World, run: str = "20261127T101500Z") -> dict[str, Any]:
    """A state this command writes after backup, update and wait: the next step is the restore."""
    uri = f"s3://{world.backup_bucket}/mlcluster/patch/ml-hyperpod/{run}/"
    return {
        "run": run,
        "cluster": "ml-hyperpod",
        "backup_uri": uri,
        "steps": {
            "backup": {"at": "2026-11-27T10:15:00Z", "uri": uri, "digests": {"slurmctld-state.tar.gz": STATE_SHA}},
            "update": {"at": "2026-11-27T10:16:00Z"},
            "wait": {"at": "2026-11-27T11:16:00Z", "status": "InService"},
        },
        "complete": None,
    }


INJECT = "x; id > {canary} #"
#: (field, how the planted state differs from a valid one, the key the error names)
PLANTED = [
    ("run", lambda s, bad: s.update(run=bad), "run"),
    ("cluster", lambda s, bad: s.update(cluster=bad), "cluster"),
    ("backup_uri", lambda s, bad: s.update(backup_uri=f"s3://x/y; {bad}"), "backup_uri"),
    ("steps", lambda s, bad: s.update(steps={bad: {}}), "steps"),
    ("steps-order", lambda s, bad: s["steps"].pop("update"), "steps"),
    ("backup.uri", lambda s, bad: s["steps"]["backup"].update(uri=bad), "steps.backup.uri"),
    ("backup.at", lambda s, bad: s["steps"]["backup"].update(at=bad), "steps.backup.at"),
    ("digest-name", lambda s, bad: s["steps"]["backup"]["digests"].update({bad: STATE_SHA}), "steps.backup.digests"),
    (
        "digest-value",
        lambda s, bad: s["steps"]["backup"]["digests"].update({"slurmctld-state.tar.gz": bad}),
        "steps.backup.digests",
    ),
    ("no-digests", lambda s, bad: s["steps"]["backup"].pop("digests"), "steps.backup.digests"),
    ("update.at", lambda s, bad: s["steps"]["update"].update(at=bad), "steps.update.at"),
    ("update.note", lambda s, bad: s["steps"]["update"].update(note=[bad]), "steps.update.note"),
    ("wait.status", lambda s, bad: s["steps"]["wait"].update(status=bad), "steps.wait.status"),
    ("wait.extra", lambda s, bad: s["steps"]["wait"].update(command=bad), "steps.wait.command"),
    ("complete", lambda s, bad: s.update(complete=bad), "complete"),
    ("extra-key", lambda s, bad: s.update(hook=bad), "hook"),
]


@pytest.mark.parametrize(("field", "change", "key"), PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_state_runs_nothing(
    hyperpod: World, shell_node: ShellNode, aws: Aws, field: str, change: Any, key: str
) -> None:
    """Injection in every field of a state that would resume at the restore: refused, nothing run as root."""
    planted = valid_state(hyperpod)
    change(planted, INJECT.format(canary=shell_node.canary))
    plant(hyperpod, planted)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1, result.output
    assert f"s3://{hyperpod.backup_bucket}/{STATE_KEY} is not a state this command wrote; nothing was run" in (
        result.stderr
    )
    assert f"\n  {key}: " in result.stderr
    assert shell_node.commands == [] and shell_node.calls() == []
    assert not shell_node.canary.exists()
    assert "UpdateClusterSoftware" not in aws.operations()


def test_a_valid_resumed_state_restores_with_the_kept_digests(hyperpod: World, shell_node: ShellNode, aws: Aws) -> None:
    """The edge on the good side: a state exactly as this command writes it resumes at the restore, once confirmed."""
    plant(hyperpod, valid_state(hyperpod))
    result = hyperpod.run("patch", "hyperpod", "--yes", input="20261127T101500Z\n")
    assert result.exit_code == 0, result.output
    uri = valid_state(hyperpod)["backup_uri"]
    assert shell_node.calls() == [["restore", uri, f"slurmctld-state.tar.gz={STATE_SHA}"]]
    # What the operator saw before typing: the stored times and digests.
    assert "  backup   2026-11-27T10:15:00Z\n" in result.stderr
    assert f"  slurmctld-state.tar.gz  sha256 {STATE_SHA}\n" in result.stderr


@pytest.mark.parametrize("answer", ["", "y", "20261127T101500", "20261127T101500Z x"])
def test_yes_does_not_skip_confirming_a_stored_restore(
    hyperpod: World, shell_node: ShellNode, aws: Aws, answer: str
) -> None:
    """A restore with digests this process did not receive from the backup needs the run id typed, --yes or not."""
    plant(hyperpod, valid_state(hyperpod))
    result = hyperpod.run("patch", "hyperpod", "--yes", input=f"{answer}\n")
    assert result.exit_code == 1, result.output
    assert "the restore of run 20261127T101500Z was not confirmed; nothing was run" in result.stderr
    assert shell_node.calls() == []
    assert "restore" not in state(hyperpod)["steps"]


def test_a_stored_run_before_its_update_is_not_resumed(
    hyperpod: World, shell_node: ShellNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that stops after the backup: its digests are not used; a new run takes a fresh backup."""
    planted = valid_state(hyperpod)
    for step in ("update", "wait"):
        del planted["steps"][step]
    planted["steps"]["backup"]["digests"] = {"slurmctld-state.tar.gz": "c" * 64}
    plant(hyperpod, planted)
    cluster = Cluster(hyperpod, aws)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 0, result.output
    assert "patch run 20261127T101500Z never reached the update: starting a new run with a new backup" in (
        result.stderr
    )
    saved = state(hyperpod)
    assert saved["run"] != "20261127T101500Z"
    calls = shell_node.calls()
    assert [c[0] for c in calls] == ["backup", "restore"]
    assert calls[0][1] == saved["backup_uri"] and "c" * 64 not in str(calls)
    assert "does not skip" not in result.stderr and "did not write" not in result.stderr


@pytest.mark.parametrize("answer", ["n", "y"])
def test_resuming_asks_before_the_root_restore_without_yes(
    hyperpod: World, shell_node: ShellNode, aws: Aws, answer: str
) -> None:
    plant(hyperpod, valid_state(hyperpod))
    result = hyperpod.run("patch", "hyperpod", input=f"{answer}\n20261127T101500Z\n")
    assert "patch run 20261127T101500Z will now run as root on the controller of ml-hyperpod: restore" in (
        result.stderr
    )
    if answer == "n":
        assert result.exit_code == 1
        assert shell_node.calls() == []
    else:
        assert result.exit_code == 0, result.output
        assert [call[0] for call in shell_node.calls()] == ["restore"]


def test_a_backup_without_digests_stops_before_the_update(hyperpod: World, tool: FakeNode, aws: Aws) -> None:
    """An old mlcluster-backup (no MLCLUSTER_SHA256 lines) cannot be restored safely: no update is made."""
    tool.on("mlcluster-backup backup", "backup complete\n")
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1
    assert "the backup printed no valid digests" in result.stderr
    assert aws.params("UpdateClusterSoftware") == []


@pytest.mark.parametrize(
    "uri",
    [
        "s3://x/y; id > /tmp/canary #/",
        "s3://bucket-name/$(id)/",
        "s3://bucket-name/`id`/",
        "s3://bucket-name/a b/",
        "s3://bucket-name/a/../b/",
        "s3://bucket-name/a\n/",
        "/etc/passwd",
        "s3://bucket-name/x",
    ],
)
def test_tool_script_refuses_a_location_that_is_not_a_plain_s3_prefix(uri: str) -> None:
    with pytest.raises(ValueError, match=r"uri: .* is not allowed; allowed: s3://BUCKET/PREFIX/"):
        patch_module.tool_script("backup", uri, 60, key_arn=BACKUP_KEY_ARN)


def test_tool_script_quotes_and_ends_in_a_newline(tmp_path: Path) -> None:
    """What the shell hands the tool is exactly the validated values; the script ends its last line."""
    uri = "s3://hyperpod-patch-backups-1/mlcluster/patch/ml-hyperpod/20261127T101500Z/"
    script = patch_module.tool_script("restore", uri, 60, {"slurmctld-state.tar.gz": STATE_SHA})
    assert script.endswith(" 2>&1 | tail -c 2000\n")
    stand_in = tmp_path / "tool"
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stand_in.chmod(0o755)
    done = REAL_RUN(
        ["bash", "-c", script.replace(patch_module.BACKUP_TOOL, str(stand_in)) + 'echo "EXIT=$?"\n'],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.splitlines() == ["restore", uri, f"slurmctld-state.tar.gz={STATE_SHA}", "EXIT=0"]
    with pytest.raises(ValueError, match="digests"):
        patch_module.tool_script("restore", uri, 60, {"slurmctld-state.tar.gz": "$(id)"})
    with pytest.raises(ValueError, match="digests"):
        patch_module.tool_script("backup", uri, 60, {"slurmctld-state.tar.gz": STATE_SHA}, key_arn=BACKUP_KEY_ARN)


@pytest.mark.parametrize(
    "key_arn",
    [None, "alias/patch-backups", f"{BACKUP_KEY_ARN}; id", "arn:aws:kms:us-east-1:1:key/x", f"{BACKUP_KEY_ARN}\n"],
)
def test_tool_script_backup_takes_a_plain_key_arn(key_arn: str | None) -> None:
    uri = "s3://hyperpod-patch-backups-1/mlcluster/patch/ml-hyperpod/20261127T101500Z/"
    with pytest.raises(ValueError, match="key_arn"):
        patch_module.tool_script("backup", uri, 60, key_arn=key_arn)
    # The edge: the key ARN the stack outputs, as the last argument.
    assert (
        patch_module.tool_script("backup", uri, 60, key_arn=BACKUP_KEY_ARN)
        .split(" 2>&1")[0]
        .endswith(f"{uri} {BACKUP_KEY_ARN}")
    )
