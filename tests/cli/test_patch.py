"""``mlcluster patch`` against moto (SageMaker, S3, SSM) and a recorded-shape UpdateClusterSoftware."""

from __future__ import annotations

import itertools
import json
from typing import Any

import boto3
import pytest

from mlcluster.cli import patch as patch_module
from tests.cli.conftest import ACCOUNT, Aws, FakeNode, World, error

STATE_KEY = "mlcluster/patch/ml-hyperpod/state.json"


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
    body = boto3.client("s3", region_name=world.region).get_object(Bucket=world.bucket, Key=STATE_KEY)["Body"]
    return dict(json.loads(body.read()))


@pytest.fixture
def tool(node: FakeNode) -> FakeNode:
    node.on("mlcluster-backup backup", "backed up 4 paths to S3\n")
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
    uri = f"s3://{hyperpod.bucket}/mlcluster/patch/ml-hyperpod/{run}/"
    assert saved["backup_uri"] == uri
    assert list(saved["steps"]) == ["backup", "update", "wait", "restore"]
    assert saved["complete"]
    assert result.stdout.splitlines()[0] == f"patched ml-hyperpod (run {run}); backup kept at {uri}"
    backup, restore = tool.scripts
    assert f"/usr/local/sbin/mlcluster-backup backup {uri}" in backup
    assert f"/usr/local/sbin/mlcluster-backup restore {uri}" in restore
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
    second = hyperpod.run("patch", "hyperpod", "--yes", "--json")
    assert second.exit_code == 0, second.output
    assert "resuming patch run" in second.stderr
    data = json.loads(second.stdout)
    assert data["state_object"] == f"s3://{hyperpod.bucket}/{STATE_KEY}"
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
    assert "backup to s3://hyperpod-data-123456789012/mlcluster/patch/ml-hyperpod/" in result.stderr
    assert "AccessDenied" in result.stderr
    assert "nothing was updated" in result.stderr
    assert aws.params("UpdateClusterSoftware") == []
    assert state(hyperpod)["steps"] == {}

    tool.on("mlcluster-backup backup", "backed up 4 paths to S3\n")
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
