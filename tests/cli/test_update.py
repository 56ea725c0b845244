"""``mlcluster update`` against moto (CloudFormation, EC2, SSM, DynamoDB), a stateful ParallelCluster and Slurm.

The fakes keep state the way the real services do:

- :class:`Cloud` holds the deployed ``ClusterConfiguration`` of ``p4de-Cluster`` (served as ``GetTemplate``,
  validated against botocore's output shape), and its ``deploy`` stands in for the CDK CLI: like
  ParallelCluster's custom resource, it fails the update (stack ``UPDATE_ROLLBACK_COMPLETE``) when a change
  needs the compute fleet stopped and the fleet is not ``STOPPED``; other failure modes set the states a
  failed update leaves (``UPDATE_ROLLBACK_FAILED``, still ``UPDATE_IN_PROGRESS`` after a timeout, another
  stack rolled back);
- the compute fleet is ParallelCluster's ``COMPUTE_FLEET`` item in a moto DynamoDB table
  ``parallelcluster-p4de-train``; each poll's sleep moves it on as clustermgtd does
  (``STOP_REQUESTED`` -> ``STOPPING`` -> ``STOPPED``, ``START_REQUESTED`` -> ``STARTING`` -> ``RUNNING``),
  or keeps it stuck, or ends a start in ``PROTECTED``;
- the head node answers ``squeue`` in Slurm's own ``--format`` output.

The configurations are rendered from ``environments/p4de.yaml`` by mlcluster's renderer, and the changes
are classified by the real update rules (:mod:`mlcluster.pcluster.update_policy`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.cli import update as update_module
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SETUP, EXIT_TIMEOUT, CliError
from mlcluster.config import load_environment
from mlcluster.pcluster.render import ZoneSubnet, render_cluster_config
from mlcluster.pcluster.update_policy import cluster_changes
from tests.cli.conftest import (
    ACCOUNT,
    REPO,
    Aws,
    FakeNode,
    World,
    _copy_env,
    _network,
    _stack,
    _storage,
    aws_client,
    error,
    invoke,
    launch_pcluster_nodes,
)
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON, inputs

REGION, ENV, CLUSTER = "us-west-2", "p4de", "p4de-train"
#: The real synthesis and lock-file guard, before the ``cloud`` fixture replaces them.
SYNTHESIZE, GUARD = update_module.synthesize_assembly, update_module.guard_assembly
#: The real ``subprocess.run`` for the synthesis process (the ``node`` fixture fakes Session Manager through it).
RUN = subprocess.run
TABLE = f"parallelcluster-{CLUSTER}"
#: The record mark of every squeue read in these tests (``record_mark`` draws a fresh one per read).
MARK = "mlc0123456789abcdef01234567:"
#: ``squeue --all --noheader --format 'MARK%i|%P|%u|%T|%D|%M|%j'`` on a busy p4de cluster.
SQUEUE = (
    f"{MARK}1042|compute-gpu|alice|RUNNING|4|2-03:11:09|llama-70b-pretrain\n"
    f"{MARK}1043|inference-gpu|bob|RUNNING|1|5:02|vllm-serve\n"
    f"{MARK}1044|compute-gpu|alice|PENDING|4|0:00|llama-eval\n"
    f"{MARK}1045|inference-gpu|carol|PENDING|1|0:00|batch-embed|nightly\n"
)


def rendered(environments: Path) -> dict[str, Any]:
    """The ClusterConfiguration mlcluster renders for ``environments/p4de.yaml`` (plain IDs for the tokens)."""
    cfg = load_environment(environments / f"{ENV}.yaml").config.cluster.pcluster
    assert cfg is not None
    subnets = (ZoneSubnet(zone="us-west-2b", subnet_id="subnet-0aaaaaaaaaaaaaaa1"),)
    return render_cluster_config(cfg, inputs(region=REGION, private_subnets=subnets, openzfs_volume_id=None))


def edited(environments: Path, edit: Any) -> dict[str, Any]:
    """Apply ``edit`` to the environment file's data and render the result (the "new" configuration)."""
    path = environments / f"{ENV}.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    return rendered(environments)


def drop_inference_queue(data: dict[str, Any]) -> None:
    data["cluster"]["pcluster"]["queues"] = [
        q for q in data["cluster"]["pcluster"]["queues"] if q["name"] != "inference-gpu"
    ]


class FakeTime:
    """``update.time``: each sleep advances a clock and lets the fleet and its watcher move on."""

    def __init__(self, cloud: Cloud) -> None:
        self.now = 0.0
        self.cloud = cloud

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 1.0)
        self.cloud.tick()


class Cloud:
    """The deployed cluster stack, ParallelCluster's fleet item, and the CDK CLI's deploy."""

    def __init__(self, world: World, aws: Aws, monkeypatch: pytest.MonkeyPatch, old: dict[str, Any]) -> None:
        self.world = world
        self.aws = aws
        self.deployed = old
        self.new = old
        self.deploys: list[list[str]] = []
        self.fleet_at_deploy: list[str] = []
        self.deploy_mode = "ok"
        self.stop_mode = "ok"
        self.start_mode = "ok"
        #: clustermgtd's loops left before it terminates the compute instances under a forged STOPPED (None: never).
        self.terminate_in: int | None = None
        self.terminate_after = 3
        #: Compute instances pending, running or stopping at each deploy (what ran under the new configuration).
        self.live_at_deploy: list[int] = []
        #: Called once when clustermgtd (or an adversary) writes STOPPED.
        self.when_stopped: list[Any] = []
        self.assembly = world.environments.parent / "assembly"
        aws.answer("cloudformation", "GetTemplate", always=self.get_template)
        ddb = aws_client("dynamodb", REGION)
        ddb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "Id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "Id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.set_fleet("RUNNING")
        #: The other stacks' templates, as their digest covers them (an edit there changes the run's plan).
        self.other_stacks = "as locked"
        #: What the lock-file guard says; tests of the real guard synthesize for real instead.
        self.guard_refusal: str | None = None
        monkeypatch.setattr(update_module, "synthesize_assembly", self.synthesize)
        monkeypatch.setattr(update_module, "guard_assembly", self.guard)
        monkeypatch.setattr(update_module, "run_deploy", self.deploy)
        # The world fakes subprocess for Session Manager: the CDK CLI's --version answers as the pinned one.
        monkeypatch.setattr(update_module, "cdk_version", lambda cli, folder: "2.1148.1 (build test)")
        monkeypatch.setattr(update_module, "time", FakeTime(self))

    # -- CloudFormation
    def get_template(self, params: dict[str, Any]) -> dict[str, Any]:
        assert params == {"StackName": f"{ENV}-Cluster", "TemplateStage": "Original"}
        return {"TemplateBody": json.dumps(self.template(self.deployed))}

    @staticmethod
    def template(config: dict[str, Any]) -> dict[str, Any]:
        return {
            "Resources": {
                "ClusterPcluster1A2B3C4D": {
                    "Type": "Custom::PclusterCluster",
                    "Properties": {"ServiceToken": "arn", "ClusterName": CLUSTER, "ClusterConfiguration": config},
                }
            }
        }

    def set_stack(self, name: str, status: str) -> None:
        from moto.cloudformation.models import cloudformation_backends

        for stack in cloudformation_backends[ACCOUNT][REGION].stacks.values():
            if stack.name == name:
                stack.status = status

    # -- the compute fleet
    def fleet(self) -> str:
        item = aws_client("dynamodb", REGION).get_item(TableName=TABLE, Key={"Id": {"S": "COMPUTE_FLEET"}})
        return str(item["Item"]["Data"]["M"]["status"]["S"])

    def set_fleet(self, status: str) -> None:
        aws_client("dynamodb", REGION).put_item(
            TableName=TABLE,
            Item={
                "Id": {"S": "COMPUTE_FLEET"},
                "Data": {"M": {"status": {"S": status}, "lastStatusUpdatedTime": {"S": "2026-11-27 10:00:00+00:00"}}},
            },
        )

    def tick(self) -> None:
        """clustermgtd's loop: one step of the requested transition per poll.

        ``stop_mode`` ``forged``: a job on a compute node writes STOPPED over the STOP_REQUESTED before
        clustermgtd acts on it, and clustermgtd then never terminates the instances (it is down, say);
        ``forged-ends``: the same, but clustermgtd, which terminates compute nodes on every loop while the
        status is a stop status (STOPPED included), terminates them ``terminate_in`` loops later.
        """
        if self.terminate_in is not None:
            self.terminate_in -= 1
            if self.terminate_in <= 0:
                self.terminate_in = None
                aws_client("ec2", REGION).terminate_instances(InstanceIds=compute_instances())
        status = self.fleet()
        if status == "STOP_REQUESTED" and self.stop_mode in {"forged", "forged-ends"}:
            self.set_fleet("STOPPED")
            self.terminate_in = self.terminate_after if self.stop_mode == "forged-ends" else None
            self.stopped()
            return
        following = {
            "STOP_REQUESTED": "STOPPING",
            "STOPPING": "STOPPING" if self.stop_mode == "stuck" else "STOPPED",
            "START_REQUESTED": "STARTING",
            "STARTING": "PROTECTED" if self.start_mode == "protected" else "RUNNING",
        }
        if status in following:
            self.set_fleet(following[status])
        if status == "STOPPING" and self.fleet() == "STOPPED":
            if compute_instances():
                # clustermgtd terminates the compute instances before it reports STOPPED.
                aws_client("ec2", REGION).terminate_instances(InstanceIds=compute_instances())
            self.stopped()

    def stopped(self) -> None:
        while self.when_stopped:
            self.when_stopped.pop(0)()

    # -- synthesis and the CDK CLI
    def synthesize(self, folder: Path, environment: str, outdir: Path) -> tuple[Path, dict[str, Any], str]:
        assert (folder, environment) == (self.world.environments, ENV)
        stacks = json.dumps([self.template(self.new), self.other_stacks])
        return self.assembly, self.template(self.new), hashlib.sha256(stacks.encode()).hexdigest()

    def guard(self, folder: Path, environment: str, assembly: Path) -> list[str]:
        assert (folder, environment, assembly) == (self.world.environments, ENV, self.assembly)
        if self.guard_refusal is not None:
            raise CliError(self.guard_refusal, EXIT_FAILED)
        return []

    def needs_stop(self) -> bool:
        return any(c.outcome == "fleet_stop" for c in cluster_changes(self.deployed, self.new))

    def deploy(self, argv: list[str], timeout: int, region: str | None = None) -> int:
        self.deploys.append(argv)
        self.fleet_at_deploy.append(self.fleet())
        self.live_at_deploy.append(len(live_compute_instances()))
        if self.deploy_mode == "silent":
            return 0  # exits 0 but the cluster stack keeps its configuration
        if self.deploy_mode == "timeout":
            self.set_stack(f"{ENV}-Cluster", "UPDATE_IN_PROGRESS")
            return -1
        if self.deploy_mode == "timeout-new-template":
            # Out of time while CloudFormation applies the new template: GetTemplate already shows it.
            self.deployed = copy.deepcopy(self.new)
            self.set_stack(f"{ENV}-Cluster", "UPDATE_IN_PROGRESS")
            self.set_stack(CLUSTER, "UPDATE_IN_PROGRESS")
            return -1
        if self.deploy_mode == "rolling-back-new-template":
            # The deploy failed and CloudFormation is rolling the Cluster stack back (template still the new one).
            self.deployed = copy.deepcopy(self.new)
            self.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_IN_PROGRESS")
            self.set_stack(CLUSTER, "UPDATE_IN_PROGRESS")
            return 1
        if self.deploy_mode == "stuck":
            # aws-parallelcluster#5686: ParallelCluster's own update failed and rolled back (its stack
            # UPDATE_ROLLBACK_COMPLETE, the cluster UPDATE_FAILED on its old configuration); the provider fails
            # CloudFormation's rollback too, which stops in UPDATE_ROLLBACK_FAILED.
            self.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_FAILED")
            self.set_stack(CLUSTER, "UPDATE_ROLLBACK_COMPLETE")
            return 1
        if self.deploy_mode == "stuck-in-progress":
            # A rollback stuck while ParallelCluster's own stack is still moving: no resource may be skipped yet.
            self.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_FAILED")
            self.set_stack(CLUSTER, "UPDATE_IN_PROGRESS")
            return 1
        if self.deploy_mode == "fail" or (self.needs_stop() and self.fleet() != "STOPPED"):
            # ParallelCluster refuses the update; CloudFormation rolls the stack back to the old configuration.
            self.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_COMPLETE")
            return 1
        self.deployed = copy.deepcopy(self.new)
        self.set_stack(f"{ENV}-Cluster", "UPDATE_COMPLETE")
        self.set_stack(CLUSTER, "UPDATE_COMPLETE")
        if self.deploy_mode == "other-stack":
            self.set_stack(f"{ENV}-Storage", "UPDATE_ROLLBACK_COMPLETE")
            return 1
        return 0


@pytest.fixture
def p4de(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """environments/p4de.yaml deployed in us-west-2: stacks, a head node, 4 p4de and 2 g5 nodes, FSx, the bucket."""
    folder = _copy_env(tmp_path, ENV, REGION)
    subnet, group = _network(REGION)
    _stack(REGION, f"{ENV}-Network", {"VpcId": "vpc-1", "SecurityGroupId": group})
    bucket, fs_id = _storage(ENV, REGION, subnet)
    head = launch_pcluster_nodes(REGION, CLUSTER, subnet, "HeadNode", "m5.8xlarge", 1)[0]
    launch_pcluster_nodes(REGION, CLUSTER, subnet, "Compute", "p4de.24xlarge", 4, "compute-gpu")
    launch_pcluster_nodes(REGION, CLUSTER, subnet, "Compute", "g5.12xlarge", 2, "inference-gpu")
    _stack(REGION, CLUSTER, {})  # ParallelCluster's own stack, named after the cluster
    _stack(REGION, f"{ENV}-Cluster", {"ClusterName": CLUSTER, "HeadNodeInstanceId": head})
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return World(folder, ENV, REGION, CLUSTER, bucket, fs_id, head_node=head)


@pytest.fixture
def cloud(p4de: World, aws: Aws, monkeypatch: pytest.MonkeyPatch, node: FakeNode) -> Cloud:
    made = Cloud(p4de, aws, monkeypatch, rendered(p4de.environments))
    monkeypatch.setattr(update_module, "record_mark", lambda: MARK)
    node.on(f"squeue --all --noheader --format '{MARK}", SQUEUE)
    return made


def state_path(world: World) -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "mlcluster" / "update" / REGION / f"{ENV}.json"


def stored(world: World) -> dict[str, Any]:
    return dict(json.loads(state_path(world).read_text()))


def fleet_writes(aws: Aws) -> list[str]:
    return [p["ExpressionAttributeValues"][":s"]["S"] for p in aws.params("UpdateItem")]


PLAN = """\
mlcluster update p4de: plan (nothing has been changed yet)
cluster p4de-train (ParallelCluster), stack p4de-Cluster in us-west-2

changes to the cluster configuration (1):
  fleet_stop    Scheduling.SlurmQueues[inference-gpu]  (ParallelCluster policy RESIZE_UPDATE_STRATEGY_ON_REMOVE)
                old: {"CapacityType": "ONDEMAND", "ComputeResources": [{"CustomSlurmSett...
                new: -

what stops: the whole compute fleet (6 running nodes), as ParallelCluster requires for the changes marked \
fleet_stop; the head node, login nodes and file systems keep running:
  queue compute-gpu: 4 running; p4de (p4de.24xlarge, 4..4 nodes)
  queue inference-gpu: 2 running; g5 (g5.12xlarge, 0..10 nodes)  (removed by this update)

jobs that would be killed (2, from squeue on the head node):
  1042     compute-gpu      alice        RUNNING      4 nodes  2-03:11:09  llama-70b-pretrain
  1043     inference-gpu    bob          RUNNING      1 nodes        5:02  vllm-serve
jobs left pending: 1 (they wait for the fleet to start again); 1 pending in removed queues (1045) never run: \
cancel or move them (`scontrol update job=ID partition=...`)

compute outage: about 40 minutes (stop 5, deploy 20, start and node boot 15) - an estimate from typical times, \
not a measurement

steps: 1 stop the compute fleet, 2 cdk deploy, 3 start the fleet, 4 verify
"""


#: The question after the plan (stderr), answered ``n``.
QUESTION = "stop the compute fleet of p4de-train, deploy and start it again? [y/N]: n\n"


def test_plan_only_shows_a_queue_removal_and_changes_nothing(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert result.stdout == PLAN
    assert fleet_writes(aws) == [] and cloud.deploys == []
    assert not state_path(p4de).exists()
    assert cloud.fleet() == "RUNNING"


def test_docs_show_the_plan_the_command_prints() -> None:
    """The day-two page's sample is this module's PLAN and QUESTION, word for word (``mlcluster update p4de``)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "use-cases" / "day-two.md").read_text()
    # The console script (main()) reports click's Abort as "mlcluster: aborted" (exit 130).
    assert "$ mlcluster update p4de\n" + PLAN + QUESTION + "mlcluster: aborted\n```" in page


def test_update_stops_deploys_the_planned_assembly_starts_and_verifies(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]
    # Every write is conditional on the status read before it, as ParallelCluster's own manager writes it.
    assert [p["ExpressionAttributeValues"][":current"]["S"] for p in aws.params("UpdateItem")] == ["RUNNING", "STOPPED"]
    assert cloud.fleet_at_deploy == ["STOPPED"]
    (argv,) = cloud.deploys
    assert argv[0].endswith("node_modules/.bin/cdk") and Path(argv[0]).exists()
    assert argv[1:] == [
        "deploy",
        "--app",
        str(cloud.assembly),
        "p4de/*",
        "--require-approval",
        "never",
        "--progress",
        "events",
    ]
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"
    saved = stored(p4de)
    assert list(saved["steps"]) == ["stop", "deploy", "start", "verify"] and saved["complete"]
    assert saved["fleet_before"] == "RUNNING" and saved["stop"] is True
    assert result.stdout.splitlines()[-2] == f"updated p4de (run {saved['run']}): stop, deploy, start, verify"
    assert result.stdout.splitlines()[-1].startswith("next: `mlcluster lock p4de` and commit p4de.lock.json")
    # Only the operator can read or write the state.
    assert state_path(p4de).stat().st_mode & 0o777 == 0o600
    assert state_path(p4de).parent.stat().st_mode & 0o777 == 0o700


def test_without_the_stop_a_plain_deploy_would_fail(p4de: World, cloud: Cloud) -> None:
    """The fake is ParallelCluster's rule: the queue removal with the fleet running rolls the stack back."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    assert cloud.deploy(["cdk", "deploy"], 60) == 1
    assert cloud.deployed != cloud.new


def test_an_in_place_change_deploys_with_the_fleet_running(p4de: World, cloud: Cloud, aws: Aws, node: FakeNode) -> None:
    """A change in place both ways (log retention; its rollback too) deploys with the fleet running."""
    new = copy.deepcopy(cloud.deployed)
    new["Monitoring"]["Logs"]["CloudWatch"]["RetentionInDays"] = 30
    cloud.new = new
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert "in_place      Monitoring.Logs.CloudWatch.RetentionInDays" in result.stdout
    assert "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)" in result.stdout
    assert fleet_writes(aws) == [] and cloud.fleet_at_deploy == ["RUNNING"]
    assert node.scripts == []  # no job is killed, so Slurm is not asked
    assert cloud.deployed == cloud.new


def add_debug_queue(data: dict[str, Any]) -> None:
    data["cluster"]["pcluster"]["queues"].append(
        {"name": "debug", "compute_resources": [{"name": "c5", "instance_type": "c5.xlarge", "efa": False}]}
    )


def grow_inference(data: dict[str, Any]) -> None:
    for queue in data["cluster"]["pcluster"]["queues"]:
        if queue["name"] == "inference-gpu":
            for resource in queue["compute_resources"]:
                resource["max_count"] = 20


@pytest.mark.parametrize(
    ("edit", "path", "back"),
    [
        (add_debug_queue, "Scheduling.SlurmQueues[debug]", "Scheduling.SlurmQueues[debug] back to -"),
        (
            grow_inference,
            "Scheduling.SlurmQueues[inference-gpu].ComputeResources[g5].MaxCount",
            "Scheduling.SlurmQueues[inference-gpu].ComputeResources[g5].MaxCount back to 10",
        ),
    ],
)
def test_an_in_place_change_whose_rollback_needs_the_fleet_stopped_stops_it(
    p4de: World, cloud: Cloud, aws: Aws, edit: Any, path: str, back: str
) -> None:
    """Added queue, raised MaxCount: in place forward, but the rollback (removal, lowering) needs the fleet
    stopped; deployed with it running, a failure later in the deploy leaves the stack UPDATE_ROLLBACK_FAILED."""
    cloud.new = edited(p4de.environments, edit)
    assert all(c.outcome == "in_place" for c in cluster_changes(cloud.deployed, cloud.new))
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert f"in_place      {path}" in result.stdout
    assert "These changes apply with it running, but should the deploy fail after the cluster took them" in (
        result.stdout
    )
    assert back in result.stdout
    assert "To keep the fleet running and accept that risk, deploy with `npx cdk deploy 'p4de/*'` instead." in (
        result.stdout
    )
    assert "steps: 1 stop the compute fleet, 2 cdk deploy, 3 start the fleet, 4 verify" in result.stdout
    assert cloud.fleet_at_deploy == ["STOPPED"] and fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"


def test_a_refused_change_prints_the_safe_way_and_changes_nothing(p4de: World, cloud: Cloud, aws: Aws) -> None:
    def head_node(data: dict[str, Any]) -> None:
        data["cluster"]["pcluster"]["head_node"] = {"instance_type": "m5.16xlarge"}

    cloud.new = edited(p4de.environments, head_node)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "REFUSED" in result.stdout
    assert (
        "  HeadNode.InstanceType: ParallelCluster never changes this on an existing cluster. Safe way:" in result.stdout
    )
    assert "cannot be made by an update of p4de-train; nothing was changed" in result.stderr
    assert "Traceback" not in result.output
    assert fleet_writes(aws) == [] and cloud.deploys == [] and not state_path(p4de).exists()


def test_answering_no_changes_nothing(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, input="n\n")
    assert result.exit_code != 0
    assert result.stdout == PLAN and QUESTION in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == [] and not state_path(p4de).exists()


def test_a_failed_deploy_restarts_the_fleet_names_each_stack_and_resumes(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "fail"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "the deploy failed: cdk deploy exited 1" in result.stderr
    assert "was started again: the cluster runs its previous configuration" in result.stderr
    assert "p4de-Cluster: UPDATE_ROLLBACK_COMPLETE" in result.stderr
    assert "p4de-Network: CREATE_COMPLETE" in result.stderr and "p4de-Observability: not found" in result.stderr
    assert "`mlcluster update p4de --resume`" in result.stderr
    assert "Traceback" not in result.output
    assert cloud.fleet() == "RUNNING" and fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]
    assert stored(p4de)["steps"] == {} and stored(p4de)["complete"] is None
    # A plain re-run does not start a second run over the first.
    again = p4de.run("update", ENV, "--yes")
    assert again.exit_code == EXIT_FAILED and "did not finish" in again.stderr and len(cloud.deploys) == 1
    cloud.deploy_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet_at_deploy == ["STOPPED", "STOPPED"] and cloud.deployed == cloud.new
    assert cloud.fleet() == "RUNNING" and stored(p4de)["complete"]


#: The command that clears aws-parallelcluster#5686: the custom resource skipped (its id from GetTemplate).
SKIP = (
    "p4de-Cluster: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback --region us-west-2 "
    "--stack-name p4de-Cluster --resources-to-skip ClusterPcluster1A2B3C4D` (safe: ParallelCluster's stack "
    "p4de-train rolled back, the cluster already runs its old configuration"
)


def test_a_stuck_rollback_prints_the_skip_that_clears_it_and_resumes(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "stuck"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "the compute fleet stays STOPPED: p4de-Cluster is UPDATE_ROLLBACK_FAILED, not settled" in result.stderr
    assert "p4de-train: UPDATE_ROLLBACK_COMPLETE" in result.stderr
    assert SKIP in result.stderr
    assert cloud.fleet() == "STOPPED" and fleet_writes(aws) == ["STOP_REQUESTED"]
    # A resume before the skip refuses (the stack is stuck) and repeats the way out.
    refused = p4de.run("update", ENV, "--resume", "--yes")
    assert refused.exit_code == EXIT_FAILED and SKIP in refused.stderr and len(cloud.deploys) == 1
    # The operator runs the printed continue-update-rollback; --resume then stops (already), deploys and starts.
    cloud.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_COMPLETE")
    cloud.deploy_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet_at_deploy == ["STOPPED", "STOPPED"] and cloud.deployed == cloud.new
    assert cloud.fleet() == "RUNNING" and fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]


def test_a_stuck_rollback_while_parallelcluster_still_moves_skips_nothing(p4de: World, cloud: Cloud) -> None:
    """The skip is safe only once ParallelCluster's stack rolled back; otherwise the plain command is printed."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "stuck-in-progress"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "the compute fleet stays STOPPED: ParallelCluster's stack p4de-train is UPDATE_IN_PROGRESS" in result.stderr
    assert (
        "p4de-Cluster: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback --region us-west-2 "
        "--stack-name p4de-Cluster`\n" in result.stderr
    )
    assert "--resources-to-skip" not in result.stderr and cloud.fleet() == "STOPPED"


def test_the_skip_names_the_resource_in_words_when_gettemplate_is_denied(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "stuck"
    deploy = cloud.deploy

    def deploy_then_deny(argv: list[str], timeout: int, region: str | None = None) -> int:
        code = deploy(argv, timeout)
        aws.answer("cloudformation", "GetTemplate", always=error("AccessDenied", "denied", 403))
        return code

    monkeypatch.setattr(update_module, "run_deploy", deploy_then_deny)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED and "Traceback" not in result.output
    assert "--resources-to-skip <logical id of the Custom::PclusterCluster>` (safe:" in result.stderr


def test_abandon_starts_the_fleet_only_once_the_stacks_settled(p4de: World, cloud: Cloud) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "stuck"
    p4de.run("update", ENV, "--yes")
    result = p4de.run("update", ENV, "--abandon")
    assert result.exit_code == EXIT_FAILED
    assert "p4de-Cluster is UPDATE_ROLLBACK_FAILED, not settled: the fleet is not started" in result.stderr
    assert SKIP in result.stderr
    assert cloud.fleet() == "STOPPED" and state_path(p4de).exists()
    cloud.set_stack(CLUSTER, "UPDATE_IN_PROGRESS")
    cloud.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_COMPLETE")
    busy = p4de.run("update", ENV, "--abandon")
    assert busy.exit_code == EXIT_FAILED and "ParallelCluster's stack p4de-train is UPDATE_IN_PROGRESS" in busy.stderr
    assert cloud.fleet() == "STOPPED"
    # The operator continued the rollback and ParallelCluster settled: --abandon starts the fleet, forgets the run.
    cloud.set_stack(CLUSTER, "UPDATE_ROLLBACK_COMPLETE")
    abandoned = p4de.run("update", ENV, "--abandon")
    assert abandoned.exit_code == 0, abandoned.output
    assert cloud.fleet() == "RUNNING" and not state_path(p4de).exists()


def test_a_deploy_that_runs_out_of_time_reports_the_stack_in_progress(p4de: World, cloud: Cloud) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "timeout"
    result = p4de.run("update", ENV, "--yes", "--deploy-timeout", "300")
    assert result.exit_code == EXIT_FAILED
    assert "cdk deploy did not finish in 300 s" in result.stderr
    assert "p4de-Cluster: UPDATE_IN_PROGRESS  -> CloudFormation is still working" in result.stderr
    # The update may still be applying the new configuration: the fleet is not started under it.
    assert "the compute fleet stays STOPPED: p4de-Cluster is UPDATE_IN_PROGRESS, not settled" in result.stderr
    assert cloud.fleet() == "STOPPED"
    # A resume waits for CloudFormation: it refuses while the stack is in progress, and goes on once it settled.
    refused = p4de.run("update", ENV, "--resume", "--yes")
    assert refused.exit_code == EXIT_FAILED and "these stacks are not settled" in refused.stderr
    assert len(cloud.deploys) == 1
    cloud.deploy_mode = "ok"
    cloud.set_stack(f"{ENV}-Cluster", "UPDATE_ROLLBACK_COMPLETE")
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"


@pytest.mark.parametrize(
    ("mode", "reason", "blocker"),
    [
        (
            "timeout-new-template",
            "cdk deploy did not finish in 300 s",
            "the compute fleet stays STOPPED: ParallelCluster's stack p4de-train is UPDATE_IN_PROGRESS",
        ),
        (
            "rolling-back-new-template",
            "cdk deploy exited 1; the compute fleet stays STOPPED: ParallelCluster's stack p4de-train is "
            "UPDATE_IN_PROGRESS",
            "the compute fleet was left as it is",
        ),
    ],
)
def test_a_deploy_that_ends_with_the_new_template_still_moving_keeps_the_fleet_stopped(
    p4de: World, cloud: Cloud, aws: Aws, mode: str, reason: str, blocker: str
) -> None:
    """The new template in place is not a finished update: no start while either cluster stack still moves."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = mode
    result = p4de.run("update", ENV, "--yes", "--deploy-timeout", "300")
    assert result.exit_code == EXIT_FAILED
    # The failure names the step it is about (update _carry_out mutant 107 of the cli seed-4 sample).
    assert f"the deploy failed: {reason}" in result.stderr and blocker in result.stderr
    assert "`mlcluster update p4de --resume`" in result.stderr
    assert cloud.fleet() == "STOPPED" and fleet_writes(aws) == ["STOP_REQUESTED"]
    assert "deploy" not in stored(p4de)["steps"]
    # Once CloudFormation settled, --resume redeploys (nothing left to change) and starts the fleet.
    cloud.set_stack(CLUSTER, "UPDATE_COMPLETE")
    cloud.set_stack(f"{ENV}-Cluster", "UPDATE_COMPLETE")
    cloud.deploy_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet() == "RUNNING" and fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]


def test_a_timed_out_deploy_that_settled_on_the_new_configuration_says_so(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of time, but CloudFormation finished just after: the fleet starts again, and the message does not claim
    the old configuration; --resume then redeploys (nothing to change) and verifies."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    deploy = cloud.deploy

    def finished_late(argv: list[str], timeout: int, region: str | None = None) -> int:
        assert deploy(argv, timeout) == 0
        return -1

    monkeypatch.setattr(update_module, "run_deploy", finished_late)
    result = p4de.run("update", ENV, "--yes", "--deploy-timeout", "300")
    assert result.exit_code == EXIT_FAILED
    assert "cdk deploy did not finish in 300 s" in result.stderr
    assert "the compute fleet of p4de-train was started again (its stack has the new configuration)" in result.stderr
    assert "runs its previous configuration" not in result.stderr
    assert cloud.fleet() == "RUNNING" and stored(p4de)["steps"] == {}
    monkeypatch.setattr(update_module, "run_deploy", deploy)
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"


def test_another_stack_failing_after_the_cluster_update_still_starts_the_fleet(p4de: World, cloud: Cloud) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "other-stack"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "after the cluster took the new configuration" in result.stderr
    assert "p4de-Storage: UPDATE_ROLLBACK_COMPLETE" in result.stderr
    assert cloud.fleet() == "RUNNING" and cloud.deployed == cloud.new
    assert list(stored(p4de)["steps"]) == ["stop", "deploy", "start"]


def test_a_stop_that_runs_out_of_time_starts_the_fleet_again(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "stuck"
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "60")
    assert result.exit_code == EXIT_TIMEOUT
    assert "stopping the compute fleet failed: the compute fleet of p4de-train was still STOPPING after 60 s" in (
        result.stderr
    )
    assert cloud.deploys == [] and cloud.fleet() == "RUNNING"
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]
    assert stored(p4de)["steps"] == {}
    cloud.stop_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"


def test_a_resume_never_overwrites_a_start_under_way(p4de: World, cloud: Cloud, aws: Aws) -> None:
    """A failed run's restore asked for a start; a --resume while it is under way refuses instead of writing
    STOP_REQUESTED over it (the before-stop table's rule, on a resume too; final user review)."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "stuck"
    assert p4de.run("update", ENV, "--yes", "--stop-timeout", "60").exit_code == EXIT_TIMEOUT
    cloud.stop_mode = "ok"
    cloud.set_fleet("START_REQUESTED")
    written = fleet_writes(aws)
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == EXIT_FAILED
    assert "the compute fleet of p4de-train is START_REQUESTED: a start or stop is under way" in resumed.stderr
    assert fleet_writes(aws) == written and cloud.deploys == []


def test_a_squeue_listing_cut_by_run_command_is_refused(p4de: World, cloud: Cloud, aws: Aws, node: FakeNode) -> None:
    """Run Command keeps 24000 characters and squeue lists pending jobs first: a cut listing would hide the
    running jobs a stop kills, so the plan is refused (final user review)."""
    pending = "".join(f"{MARK}{2000 + n}|compute-gpu|dave|PENDING|1|0:00|sweep-{n}\n" for n in range(400))
    node.on(f"squeue --all --noheader --format '{MARK}", pending[:24000])
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "squeue's listing on the head node was cut at Run Command's 24000 characters" in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == []


def test_a_start_that_fails_keeps_the_deploy_and_resumes_at_the_start(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.start_mode = "protected"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "starting the compute fleet failed" in result.stderr and "went PROTECTED" in result.stderr
    assert "bootstrap failures" in result.stderr
    assert list(stored(p4de)["steps"]) == ["stop", "deploy"]
    cloud.start_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert len(cloud.deploys) == 1  # the deploy is not run again
    assert cloud.fleet() == "RUNNING" and list(stored(p4de)["steps"]) == ["stop", "deploy", "start", "verify"]


def test_a_second_run_after_success_has_nothing_to_stop(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    assert p4de.run("update", ENV, "--yes").exit_code == 0
    again = p4de.run("update", ENV, "--yes")
    assert again.exit_code == 0, again.output
    assert "cluster configuration: no change" in again.stdout
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]  # nothing more
    assert cloud.fleet_at_deploy == ["STOPPED", "RUNNING"]


@pytest.mark.parametrize(
    ("service", "operation", "code", "exit_code"),
    [
        ("cloudformation", "GetTemplate", "AccessDenied", EXIT_AWS),
        ("cloudformation", "GetTemplate", "Throttling", EXIT_AWS),
        ("ec2", "DescribeInstances", "UnauthorizedOperation", EXIT_AWS),
        ("ssm", "SendCommand", "AccessDeniedException", EXIT_AWS),
        ("dynamodb", "GetItem", "AccessDeniedException", EXIT_AWS),
        ("dynamodb", "GetItem", "ThrottlingException", EXIT_AWS),
        ("dynamodb", "UpdateItem", "AccessDeniedException", EXIT_AWS),
        ("dynamodb", "UpdateItem", "ConditionalCheckFailedException", EXIT_FAILED),
        ("cloudformation", "DescribeStacks", "AccessDenied", EXIT_AWS),
    ],
)
def test_a_failed_aws_call_before_the_deploy_is_never_read_as_success(
    p4de: World,
    cloud: Cloud,
    aws: Aws,
    monkeypatch: pytest.MonkeyPatch,
    service: str,
    operation: str,
    code: str,
    exit_code: int,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    if operation == "DescribeStacks":
        # The first DescribeStacks finds the cluster's name; the pre-deploy check of every stack is refused.
        original = update_module.stack_states

        def refused(target: Any, cluster: str) -> dict[str, str]:
            aws.answer(service, operation, always=error(code, "denied", 403))
            return original(target, cluster)

        monkeypatch.setattr(update_module, "stack_states", refused)
    else:
        aws.answer(service, operation, always=error(code, "refused", 400))
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert cloud.deploys == [] and cloud.fleet() == "RUNNING"
    # A conditional write that lost is a changed fleet (exit 1, its own words); every other error is AWS's code.
    assert ("changed status" if code == "ConditionalCheckFailedException" else code) in result.stderr


def test_a_denied_start_after_the_deploy_keeps_the_run_for_resume(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    deploy = cloud.deploy

    def deploy_then_deny(argv: list[str], timeout: int, region: str | None = None) -> int:
        code = deploy(argv, timeout)
        aws.answer("dynamodb", "UpdateItem", error("AccessDeniedException", "not allowed: dynamodb:UpdateItem"))
        return code

    monkeypatch.setattr(update_module, "run_deploy", deploy_then_deny)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_AWS
    assert "UpdateItem COMPUTE_FLEET in DynamoDB table parallelcluster-p4de-train (STOPPED -> START_REQUESTED)" in (
        result.stderr
    )
    assert "--resume" in result.stderr and cloud.fleet() == "STOPPED"
    assert list(stored(p4de)["steps"]) == ["stop", "deploy"]
    resumed = p4de.run("update", ENV, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet() == "RUNNING" and len(cloud.deploys) == 1


def test_a_missing_cdk_cli_stops_before_anything_changes(p4de: World, cloud: Cloud, aws: Aws, tmp_path: Path) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    app = tmp_path / "app"
    app.mkdir()
    os.environ["PATH"], path = str(tmp_path / "no-bin"), os.environ["PATH"]
    try:
        result = invoke("--app-dir", str(app), "update", ENV, "--yes", "--environments", str(p4de.environments))
    finally:
        os.environ["PATH"] = path
    assert result.exit_code == EXIT_SETUP
    assert "the CDK CLI is not installed" in result.stderr and "npm ci" in result.stderr
    assert fleet_writes(aws) == [] and not state_path(p4de).exists()


def test_unsettled_stacks_stop_the_update_before_the_fleet(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_stack(f"{ENV}-Storage", "UPDATE_ROLLBACK_FAILED")
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "p4de-Storage: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback" in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == []


@pytest.mark.parametrize("fleet", ["STOPPING", "START_REQUESTED", "UNKNOWN"])
def test_a_fleet_already_moving_is_left_alone(p4de: World, cloud: Cloud, aws: Aws, fleet: str) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet(fleet)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert f"the compute fleet of p4de-train is {fleet}" in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == []
    # Nothing was changed, so nothing is kept to resume: the next run plans afresh.
    assert not state_path(p4de).exists() and "--resume" not in result.stderr


def compute_instances() -> list[str]:
    ec2 = aws_client("ec2", REGION)
    filters = [{"Name": "tag:parallelcluster:node-type", "Values": ["Compute"]}]
    return [i["InstanceId"] for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def live_compute_instances() -> list[str]:
    ec2 = aws_client("ec2", REGION)
    filters = [
        {"Name": "tag:parallelcluster:node-type", "Values": ["Compute"]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping"]},
    ]
    return [i["InstanceId"] for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def test_a_forged_stopped_over_five_instances_or_fewer_lists_them_all(p4de: World, cloud: Cloud, aws: Aws) -> None:
    """The message lists up to five live instances and marks more with ", ..." (update ``Run
    .wait_compute_instances_ended`` mutant 27 of the cli seed-4 sample): four left running are listed whole."""
    ec2 = aws_client("ec2", REGION)
    ec2.terminate_instances(InstanceIds=compute_instances()[:2])
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "forged"
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "120")
    assert result.exit_code == EXIT_TIMEOUT, result.output
    live = sorted(live_compute_instances())
    assert len(live) == 4
    message = " ".join(result.stderr.split())
    listed = message.split("pending, running or stopping (", 1)[1].split("): clustermgtd", 1)[0]
    assert sorted(item.split(" ")[0] for item in listed.split(", ")) == live
    assert ", ..." not in listed
    cloud.stop_mode = "ok"


def test_a_stopped_written_during_the_stop_wait_while_instances_run_is_not_deployed_on(
    p4de: World, cloud: Cloud, aws: Aws
) -> None:
    """A job writes STOPPED over update's own STOP_REQUESTED; the six compute instances keep running: the EC2
    wait runs out, nothing is deployed, the fleet is started again and the run resumes (attacker review)."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "forged"
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "120")
    assert result.exit_code == EXIT_TIMEOUT, result.output
    assert cloud.deploys == [] and cloud.deployed != cloud.new
    assert (
        "stopping the compute fleet failed: the status item of p4de-train says STOPPED but after --stop-timeout "
        "120 s EC2 still shows 6 compute instance(s) pending, running or stopping"
    ) in result.stderr
    assert "nothing was deployed" in result.stderr and "DynamoDB table parallelcluster-p4de-train" in result.stderr
    assert "mlcluster update p4de --resume" in result.stderr
    # The stop did not finish, so it is undone like any failed stop: the fleet is started again.
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"] and cloud.fleet() == "RUNNING"
    assert stored(p4de)["steps"] == {}
    ec2_reads = aws.params("DescribeInstances")
    assert len(ec2_reads) >= 3  # the plan's read, then the wait's polls until the deadline
    assert ec2_reads[-1]["Filters"][0] == {"Name": "tag:parallelcluster:cluster-name", "Values": [CLUSTER]}
    cloud.stop_mode = "ok"
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.live_at_deploy == [0]
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"


def test_a_stopped_written_early_waits_for_the_instances_to_end_then_deploys(
    p4de: World, cloud: Cloud, aws: Aws
) -> None:
    """clustermgtd terminates compute nodes on each loop while the status is STOPPED too: once EC2 shows them
    ended (within the bound), the update goes on, and never deploys while one still runs."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "forged-ends"
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "120")
    assert result.exit_code == 0, result.output
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.live_at_deploy == [0]
    assert cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]


def test_a_resume_after_an_interrupted_instance_wait_waits_again(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while EC2 still shows the instances under a forged STOPPED: the resume finds the item STOPPED and
    the stop this run asked for not done, so it waits on EC2 again before deploying (it does not trust the item)."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "forged"
    real = update_module.Run.live_compute_instances
    reads = 0

    def interrupted(run: Any) -> Any:
        nonlocal reads
        reads += 1
        if reads == 3:  # the wait's third poll (the plan reads EC2 through pcluster_nodes, not here)
            raise KeyboardInterrupt
        return real(run)

    monkeypatch.setattr(update_module.Run, "live_compute_instances", interrupted)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert "interrupted; done: nothing" in result.stderr and cloud.deploys == []
    assert cloud.fleet() == "STOPPED" and len(live_compute_instances()) == 6
    monkeypatch.setattr(update_module.Run, "live_compute_instances", real)
    cloud.terminate_in = 2  # clustermgtd's next loops terminate them
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.live_at_deploy == [0]
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]


@pytest.mark.parametrize(("loops", "exit_code"), [(3, 0), (4, EXIT_TIMEOUT)])
def test_the_instance_wait_ends_at_the_stop_timeout(
    p4de: World, cloud: Cloud, aws: Aws, loops: int, exit_code: int
) -> None:
    """The edge of the bound: --stop-timeout 60 covers the status item's wait (one 15 s poll) and EC2's. Instances
    ended by the read at 60 s are accepted; ended one poll later, the update stops before deploying."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode, cloud.terminate_after = "forged-ends", loops
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "60")
    assert result.exit_code == exit_code, result.output
    assert cloud.live_at_deploy == ([0] if exit_code == 0 else [])


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("UnauthorizedOperation", "UnauthorizedOperation: not allowed"),
        ("RequestLimitExceeded", "RequestLimitExceeded: not allowed"),
        ("read-timeout", "Read timeout on endpoint URL"),
        ("no-endpoint", "Could not connect to the endpoint URL"),
    ],
)
def test_a_failed_ec2_read_after_stopped_is_never_read_as_stopped(
    p4de: World, cloud: Cloud, aws: Aws, code: str, shown: str
) -> None:
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    def fail(params: dict[str, Any]) -> dict[str, Any]:
        url = "https://ec2.us-west-2.amazonaws.com/"
        if code == "read-timeout":
            raise ReadTimeoutError(endpoint_url=url)
        if code == "no-endpoint":
            raise EndpointConnectionError(endpoint_url=url)
        return error(code, "not allowed", 403)

    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.when_stopped.append(lambda: aws.answer("ec2", "DescribeInstances", always=fail))
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_AWS, result.output
    assert "Traceback" not in result.output
    assert f"stopping the compute fleet failed: DescribeInstances for cluster {CLUSTER} failed:" in result.stderr
    assert shown in result.stderr and "mlcluster update p4de --resume" in result.stderr
    assert cloud.deploys == [] and cloud.fleet() == "RUNNING" and stored(p4de)["steps"] == {}
    del aws.sticky[("ec2", "DescribeInstances")]
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.live_at_deploy == [0] and cloud.deployed == cloud.new


def test_ec2_denied_from_the_start_stops_the_plan_before_the_fleet_is_touched(
    p4de: World, cloud: Cloud, aws: Aws
) -> None:
    """AWS review: DescribeInstances is needed after the stop (the EC2 wait), and the stop itself ends every static
    node (clustermgtd terminates them on STOP_REQUESTED). The plan of a fleet-stopping edit reads EC2 first (its
    queues' nodes), so a role without the read, or an unreachable endpoint, is found before anything changes."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    aws.answer("ec2", "DescribeInstances", always=lambda params: error("UnauthorizedOperation", "not allowed", 403))
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_AWS, result.output
    assert f"DescribeInstances for cluster {CLUSTER} failed:" in result.stderr and "Traceback" not in result.output
    assert "requested STOP_REQUESTED" not in result.output
    assert cloud.deploys == [] and cloud.fleet() == "RUNNING"


def flip_during_the_instance_wait(cloud: Cloud, monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Once the item reads STOPPED with compute instances live (the EC2 wait has begun), ``change`` runs after
    the next clustermgtd loop (someone writes the item, or its reads start failing), before update's next poll."""
    real = cloud.tick
    done = False

    def tick() -> None:
        nonlocal done
        due = not done and cloud.fleet() == "STOPPED" and bool(live_compute_instances())
        real()
        if due:
            done = True
            change()

    monkeypatch.setattr(cloud, "tick", tick)


@pytest.mark.parametrize(
    "written", ["START_REQUESTED", "RUNNING", "STOP_REQUESTED", "UNKNOWN", "STOPPED\n\x1b[2J\x1b[Hall clear"]
)
def test_a_status_item_that_leaves_stopped_during_the_instance_wait_stops_the_update(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    """Issue 30: while update waits for EC2 after a STOPPED, someone writes the item again (a start, a stop
    request, or a status ParallelCluster reads as not knowing, or a job's text with a newline and terminal
    escapes, shown escaped). clustermgtd then terminates the instances a few loops later, so an EC2-only wait
    would end and deploy under a fleet that is starting; the item is read on each poll, and anything but
    STOPPED stops the update before the deploy, with the way to resume."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode, cloud.terminate_after = "forged-ends", 3

    flip_during_the_instance_wait(cloud, monkeypatch, lambda: cloud.set_fleet(written))
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "300")
    assert result.exit_code == EXIT_FAILED, result.output
    assert cloud.deploys == [] and cloud.deployed != cloud.new
    assert (
        f"stopping the compute fleet failed: the compute fleet of {CLUSTER} went {written!r} while mlcluster waited "
        "for EC2 to show its compute instances ended"
    ) in result.stderr
    # A job can write the item: its text reaches the terminal escaped (no newline of its own, no ESC).
    assert "\x1b" not in result.output and "all clear" not in result.stderr.replace(repr(written), "")
    assert "nothing was deployed" in result.stderr and f"DynamoDB table parallelcluster-{CLUSTER}" in result.stderr
    assert "mlcluster update p4de --resume" in result.stderr and "Traceback" not in result.output
    # The stop did not finish: undone like any failed stop (the fleet started), and --resume stops it again.
    assert cloud.fleet() == "RUNNING" and stored(p4de)["steps"] == {}
    cloud.stop_mode = "ok"  # the wrapped tick changes the item once only
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.live_at_deploy == [0] and cloud.deployed == cloud.new


def test_a_status_item_that_stays_stopped_is_read_after_every_ec2_read_then_deployed(
    p4de: World, cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item stays STOPPED while clustermgtd terminates the instances: each EC2 read of the wait is followed
    by a read of the item, the last read before the deploy is the item's STOPPED, and the update deploys."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode, cloud.terminate_after = "forged-ends", 3
    reads: list[str] = []
    real_status, real_live = update_module.Fleet.status, update_module.Run.live_compute_instances

    def status(fleet: Any) -> str:
        found = real_status(fleet)
        reads.append(f"item {found}")
        return found

    def live(run: Any) -> Any:
        found = real_live(run)
        reads.append(f"ec2 {len(found)}")
        return found

    def deploy(argv: list[str], timeout: int, region: str | None = None) -> int:
        reads.append("deploy")
        return original_deploy(argv, timeout)

    original_deploy = update_module.run_deploy
    monkeypatch.setattr(update_module.Fleet, "status", status)
    monkeypatch.setattr(update_module.Run, "live_compute_instances", live)
    monkeypatch.setattr(update_module, "run_deploy", deploy)
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "300")
    assert result.exit_code == 0, result.output
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.live_at_deploy == [0]
    wait = reads[reads.index("ec2 6") : reads.index("deploy")]
    assert wait[-2:] == ["ec2 0", "item STOPPED"]
    assert [r.split()[0] for r in wait] == ["ec2", "item"] * (len(wait) // 2)
    assert all(r == "item STOPPED" for r in wait[1::2]) and len(wait) >= 4


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("AccessDeniedException", "AccessDeniedException: not allowed"),
        ("ThrottlingException", "ThrottlingException: not allowed"),
        ("ResourceNotFoundException", "ResourceNotFoundException: not allowed"),
        ("read-timeout", "Read timeout on endpoint URL"),
    ],
)
def test_a_failed_read_of_the_status_item_during_the_instance_wait_is_never_read_as_stopped(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch, code: str, shown: str
) -> None:
    from botocore.exceptions import ReadTimeoutError

    def fail(params: dict[str, Any]) -> dict[str, Any]:
        if code == "read-timeout":
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-west-2.amazonaws.com/")
        return error(code, "not allowed", 400)

    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode, cloud.terminate_after = "forged-ends", 3
    flip_during_the_instance_wait(cloud, monkeypatch, lambda: aws.answer("dynamodb", "GetItem", always=fail))
    result = p4de.run("update", ENV, "--yes", "--stop-timeout", "300")
    assert result.exit_code == EXIT_AWS, result.output
    assert "Traceback" not in result.output
    assert f"stopping the compute fleet failed: GetItem COMPUTE_FLEET from DynamoDB table {TABLE}" in result.stderr
    assert shown in result.stderr and "mlcluster update p4de --resume" in result.stderr
    assert cloud.deploys == [] and stored(p4de)["steps"] == {}


def test_every_ec2_instance_state_has_a_decision() -> None:
    """The table covers exactly EC2's InstanceStateName enum (botocore's model); a state it does not know is live."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    assert set(update_module.COMPUTE_INSTANCE_STATES) == set(model.shape_for("InstanceStateName").enum)
    assert {s for s, d in update_module.COMPUTE_INSTANCE_STATES.items() if d == "live"} == {
        "pending",
        "running",
        "stopping",
    }


def test_a_forged_stopped_status_with_compute_instances_running_is_refused(p4de: World, cloud: Cloud, aws: Aws) -> None:
    """Any compute node's job may write the status item; EC2's ParallelCluster tags it cannot."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet("STOPPED")  # forged: the 6 compute instances run
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "says STOPPED but EC2 shows 6 compute instance(s) not stopped" in result.stderr
    assert "the status item disagrees with EC2; nothing was deployed" in result.stderr
    assert cloud.deploys == [] and fleet_writes(aws) == []


def test_a_stopped_fleet_whose_last_instances_are_shutting_down_is_trusted(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge of the EC2 check: instances being terminated run no job (final AWS re-review)."""
    real = update_module.pcluster_nodes

    def terminating(target: Any) -> Any:
        return [
            node if node.group in {"head-node", "LoginNode"} else dataclasses.replace(node, status="shutting-down")
            for node in real(target)
        ]

    monkeypatch.setattr(update_module, "pcluster_nodes", terminating)
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet("STOPPED")
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert fleet_writes(aws) == [] and cloud.deployed == cloud.new


def test_a_stopped_fleet_stays_stopped(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet("STOPPED")
    aws_client("ec2", REGION).terminate_instances(InstanceIds=compute_instances())
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert fleet_writes(aws) == [] and cloud.fleet() == "STOPPED" and cloud.deployed == cloud.new


def test_compute_instances_of_a_queue_named_like_the_head_node_group_are_seen(
    p4de: World, cloud: Cloud, aws: Aws
) -> None:
    """Attacker review: the kind comes from the node-type tag, not the group label, so a queue named ``head-node``
    (a valid queue name) cannot hide its running nodes behind a forged STOPPED."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet("STOPPED")
    aws_client("ec2", REGION).terminate_instances(InstanceIds=compute_instances())
    subnet = aws_client("ec2", REGION).describe_subnets()["Subnets"][0]["SubnetId"]
    launch_pcluster_nodes(REGION, CLUSTER, subnet, "Compute", "g5.12xlarge", 1, "head-node")
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED, result.output
    assert "says STOPPED but EC2 shows 1 compute instance(s) not stopped" in result.stderr
    assert cloud.deploys == [] and fleet_writes(aws) == []


# ------------------------------------------------------------------------------------------ the state file


def plant(world: World, data: Any, mode: int = 0o600) -> Path:
    path = state_path(world)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
        folder.chmod(0o700)
    path.write_text(json.dumps(data))
    path.chmod(mode)
    return path


def a_state(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": 1,
        "run": "20261127T100000Z",
        "environment": ENV,
        "cluster": CLUSTER,
        "region": REGION,
        "plan_sha256": "0" * 64,
        "stacks_sha256": "0" * 64,
        "stop": True,
        "fleet_before": "RUNNING",
        "steps": {"stop": {"at": "2026-11-27T10:00:00Z"}},
        "complete": None,
    }
    return data | changes


def test_a_state_file_writable_by_others_is_refused(p4de: World, cloud: Cloud, aws: Aws) -> None:
    path = plant(p4de, a_state(), mode=0o666)
    result = p4de.run("update", ENV, "--resume", "--yes")
    assert result.exit_code == EXIT_FAILED
    assert f"{path}: writable by group or others (mode 0666)" in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == []


def test_a_linked_state_file_is_refused(p4de: World, cloud: Cloud, tmp_path: Path) -> None:
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(a_state()))
    path = plant(p4de, {})
    path.unlink()
    path.symlink_to(elsewhere)
    result = p4de.run("update", ENV, "--resume")
    assert result.exit_code == EXIT_FAILED and "a link or another kind of file" in result.stderr


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cluster": "someone-else"}, "cluster:"),
        ({"steps": {"deploy": {"at": "2026-11-27T10:00:00Z", "extra": 1}}}, "steps.deploy:"),
        ({"fleet_before": "HALF"}, "fleet_before:"),
        ({"plan_sha256": "xyz"}, "plan_sha256:"),
        ({"stacks_sha256": None}, "stacks_sha256:"),
        ({"owner": "me"}, "owner:"),
    ],
)
def test_a_state_this_command_did_not_write_is_refused(
    p4de: World, cloud: Cloud, change: dict[str, Any], named: str
) -> None:
    plant(p4de, a_state(**change))
    result = p4de.run("update", ENV, "--resume")
    assert result.exit_code == EXIT_FAILED
    assert "is not a state this command wrote; nothing was run" in result.stderr and f"  {named}" in result.stderr
    assert cloud.deploys == []


def test_resume_refuses_an_environment_edited_since_the_plan(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "fail"
    p4de.run("update", ENV, "--yes")
    cloud.new = rendered(p4de.environments) | {"Region": "us-west-2", "Tags": [{"Key": "x", "Value": "y"}]}
    result = p4de.run("update", ENV, "--resume", "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "the environment changed since run" in result.stderr
    assert len(cloud.deploys) == 1


def test_resume_refuses_an_edit_to_another_stack_since_the_plan(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "fail"
    p4de.run("update", ENV, "--yes")
    cloud.deploy_mode = "ok"
    cloud.other_stacks = "p4de-Storage edited"  # the cluster configuration is the planned one
    result = p4de.run("update", ENV, "--resume", "--yes")
    assert result.exit_code == EXIT_FAILED
    assert "the environment changed since run" in result.stderr and "the synthesized templates differ" in result.stderr
    assert len(cloud.deploys) == 1
    cloud.other_stacks = "as locked"
    assert p4de.run("update", ENV, "--resume", "--yes").exit_code == 0 and len(cloud.deploys) == 2


def test_a_refusal_of_the_lock_files_changes_nothing(p4de: World, cloud: Cloud, aws: Aws) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.guard_refusal = "the lock files refuse the synthesized p4de"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED and "the lock files refuse the synthesized p4de" in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == [] and not state_path(p4de).exists()


def test_the_lock_files_guard_what_update_deploys(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real synthesis and guard: a weakening `cdk synth` refuses is refused; an in-place edit plans.

    The cluster configuration stays as deployed, so without the guard the weakening would be deployed.
    """
    # The project's file and its lock as they are (the world's copy pins the region, which the lock does not).
    for name in (f"{ENV}.yaml", f"{ENV}.lock.json"):
        shutil.copy(REPO / "environments" / name, p4de.environments)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)

    def synthesized_and_deployed(folder: Path, environment: str, outdir: Path) -> tuple[Path, dict[str, Any], str]:
        # The fake GetTemplate answers the synthesized configuration: the plan compares like with like.
        assembly, template, digest = SYNTHESIZE(folder, environment, outdir)
        cloud.deployed = update_module.cluster_configuration(template, "the synthesized p4de-Cluster")
        return assembly, template, digest

    monkeypatch.setattr(update_module, "synthesize_assembly", synthesized_and_deployed)
    monkeypatch.setattr(update_module, "guard_assembly", GUARD)
    monkeypatch.setattr(subprocess, "run", RUN)  # p4de's nodes answer through Run Command, not sessions
    edited(p4de.environments, lambda data: data.update(retention={"on_delete": "destroy"}))
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED, result.output
    assert "the lock files refuse the synthesized p4de (the check `cdk synth` runs); nothing was changed" in (
        result.stderr
    )
    assert "retention" in result.stderr and "Traceback" not in result.stderr
    assert fleet_writes(aws) == [] and cloud.deploys == [] and not state_path(p4de).exists()

    def in_place(data: dict[str, Any]) -> None:
        data.pop("retention")
        data["cluster"]["pcluster"]["queues"][1]["compute_resources"][0]["max_count"] = 12

    edited(p4de.environments, in_place)
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert "lock files refuse" not in result.stderr and "plan (nothing has been changed yet)" in result.stdout


def test_resume_without_a_run_and_hyperpod_are_refused(p4de: World, cloud: Cloud) -> None:
    result = p4de.run("update", ENV, "--resume")
    assert result.exit_code == EXIT_FAILED and "no unfinished update of p4de to resume" in result.stderr


def test_hyperpod_environments_are_refused_with_the_way(hyperpod: World) -> None:
    result = hyperpod.run("update", "hyperpod", "--plan-only")
    assert result.exit_code == EXIT_FAILED
    assert "HyperPod environment" in result.stderr and "npx cdk deploy 'hyperpod/*'" in result.stderr


# ------------------------------------------------------------------------------------------ contracts


def test_every_fleet_status_of_parallelcluster_has_a_decision() -> None:
    """The three decision tables cover exactly ParallelCluster's ComputeFleetStatus enum (the pinned package)."""
    if not PCLUSTER_PYTHON.exists():
        pytest.skip(".venv-pcluster is not installed (make setup)")
    code = (
        "import json, types, botocore.session; "
        "from pcluster.models.compute_fleet_status_manager import ComputeFleetStatus as S; "
        "from pcluster.models.compute_fleet_status_manager import JsonComputeFleetStatusManager as M; "
        "from pcluster.constants import PCLUSTER_DYNAMODB_PREFIX as P; "
        "from pcluster.aws.aws_resources import StackInfo; "
        "model = botocore.session.get_session().get_service_model('cloudformation'); "
        "states = model.shape_for('StackStatus').enum; "
        "working = [s for s in states if StackInfo.is_working_status.fget(types.SimpleNamespace(status=s))]; "
        "print(json.dumps({'statuses': [s.value for s in S], 'key': M.DB_KEY, 'prefix': P, 'working': working}))"
    )
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([str(PCLUSTER_PYTHON), "-c", code], capture_output=True, text=True, check=True, env=env)
    facts = json.loads(done.stdout)
    for table in (update_module.BEFORE_STOP, update_module.STOP_WAIT, update_module.START_WAIT):
        assert set(table) == set(facts["statuses"])
    assert (facts["key"], facts["prefix"]) == (update_module.FLEET_KEY, update_module.FLEET_TABLE_PREFIX)
    # The stack states ParallelCluster starts and stops a fleet from, run over every CloudFormation StackStatus.
    assert set(facts["working"]) == update_module.WORKING_STACK_STATES


def test_every_outcome_of_the_update_rules_has_a_decision() -> None:
    from mlcluster.pcluster.update_policy import OUTCOMES

    assert set(update_module.OUTCOMES) == set(OUTCOMES)


def test_squeue_lines_keep_a_pipe_in_the_job_name_and_refuse_garbage() -> None:
    jobs = update_module.parse_squeue(SQUEUE, MARK)
    assert [j.name for j in jobs][-1] == "batch-embed|nightly"
    assert [j.running for j in jobs] == [True, True, False, False]
    with pytest.raises(CliError, match="squeue printed a line mlcluster cannot read"):
        update_module.parse_squeue("slurm_load_jobs error: Unable to contact slurm controller\n", MARK)
    # Text before the first record (an error, then records) is refused too, never skipped.
    with pytest.raises(CliError, match="cannot read: 'squeue: error: x'"):
        update_module.parse_squeue("squeue: error: x\n" + SQUEUE, MARK)
    with pytest.raises(CliError, match="cannot read"):
        update_module.parse_squeue(f"{MARK}1042|gpu|alice|RUNNING|many|1:00|x\n", MARK)
    assert update_module.parse_squeue("", MARK) == []


def test_a_newline_in_a_job_name_neither_blocks_the_read_nor_adds_a_job() -> None:
    """Issue 30 item 3: any cluster user names jobs; a name with lines that look like records stays one name."""
    forged = "x\n1999|compute-gpu|root|RUNNING|64|9:99:99|forged\nmore"
    text = SQUEUE + f"{MARK}1046|compute-gpu|mallory|RUNNING|1|0:01|{forged}\n"
    jobs = update_module.parse_squeue(text, MARK)
    assert [j.job_id for j in jobs] == ["1042", "1043", "1044", "1045", "1046"]
    assert jobs[-1].user == "mallory"
    assert jobs[-1].name == "x\\n1999|compute-gpu|root|RUNNING|64|9:99:99|forged\\nmore"
    # Each read draws its own mark, which the script prints before every record.
    marks = {update_module.record_mark() for _ in range(3)}
    assert len(marks) == 3
    mark = marks.pop()
    assert f"--format '{mark}%i|%P|%u|%T|%D|%M|%j'" in update_module.squeue_script(mark)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J\x1b]0;owned\x07", "\\x1b[2J\\x1b]0;owned\\x07"),  # clear screen, set title, bell
        ("ok\rDONE", "ok\\rDONE"),  # carriage return over the line
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),  # right-to-left override (a format character)
        ("[bold]ünïcödé 模型 ok[/]", "[bold]ünïcödé 模型 ok[/]"),  # printable text, markup-like too, unchanged
    ],
)
def test_every_job_field_is_shown_with_its_control_characters_escaped(raw: str, shown: str) -> None:
    (job,) = update_module.parse_squeue(f"{MARK}7|gpu{raw}|u{raw}|RUNNING|1|0:01|{raw}\n", MARK)
    assert (job.partition, job.user, job.name) == (f"gpu{shown}", f"u{shown}", shown)
    assert job.name.isprintable()


def test_the_plan_shows_a_hostile_job_name_escaped(p4de: World, cloud: Cloud, aws: Aws, node: FakeNode) -> None:
    hostile = f"{MARK}1046|compute-gpu|mallory|RUNNING|1|0:01|\x1b[2Jx\nline two\n"
    node.on(f"squeue --all --noheader --format '{MARK}", SQUEUE + hostile)
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "mallory      RUNNING      1 nodes        0:01  \\x1b[2Jx\\nline two\n" in result.stdout


@pytest.mark.parametrize(
    ("strategy", "fate"),
    [
        ("DRAIN", "each runs to its end, then ParallelCluster replaces its nodes"),
        ("TERMINATE", "ParallelCluster terminates their nodes at once: they would be killed"),
    ],
)
def test_a_queue_update_strategy_change_names_the_jobs_on_the_replaced_nodes(
    p4de: World, cloud: Cloud, aws: Aws, strategy: str, fate: str
) -> None:
    old = copy.deepcopy(cloud.deployed)
    old["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = strategy
    cloud.deployed = old
    new = copy.deepcopy(old)
    new["Scheduling"]["SlurmQueues"][1]["CustomActions"] = {}
    cloud.new = new
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == 0, result.output
    assert "in_place      Scheduling.SlurmQueues[inference-gpu].CustomActions" in result.stdout
    assert f"nodes replaced by ParallelCluster (QueueUpdateStrategy {strategy}) in: inference-gpu" in result.stdout
    assert f"jobs running there (1, from squeue on the head node): {fate}" in result.stdout
    assert "  1043     inference-gpu    bob" in result.stdout and "1042" not in result.stdout
    assert fleet_writes(aws) == [] and cloud.fleet_at_deploy == ["RUNNING"] and cloud.deployed == new


def test_ctrl_c_during_the_deploy_says_how_to_resume(
    p4de: World, cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)

    def interrupted(argv: list[str], timeout: int, region: str | None = None) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(update_module, "run_deploy", interrupted)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_INTERRUPTED
    assert "interrupted; done: stop" in result.stderr and "`mlcluster update p4de --resume`" in result.stderr
    assert cloud.fleet() == "STOPPED" and list(stored(p4de)["steps"]) == ["stop"]


def test_a_state_file_of_another_user_is_refused(p4de: World, cloud: Cloud) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = plant(p4de, a_state())
    os.chown(path, 4242, -1)
    result = p4de.run("update", ENV, "--resume")
    assert result.exit_code == EXIT_FAILED
    assert f"{path}: owned by uid 4242, not by you (uid 0)" in result.stderr and cloud.deploys == []


@pytest.mark.parametrize(("operation", "code"), [("GetTemplate", "AccessDenied"), ("GetItem", "ThrottlingException")])
def test_a_failed_read_after_the_deploy_fails_the_run_and_resumes(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch, operation: str, code: str
) -> None:
    """Denied or throttled reads after the deploy (the start's GetItem, the verification's GetTemplate)."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    deploy = cloud.deploy
    service = "cloudformation" if operation == "GetTemplate" else "dynamodb"

    def deploy_then_refuse(argv: list[str], timeout: int, region: str | None = None) -> int:
        code_ = deploy(argv, timeout)
        aws.answer(service, operation, always=error(code, "refused", 400))
        return code_

    monkeypatch.setattr(update_module, "run_deploy", deploy_then_refuse)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_AWS, result.output
    assert code in result.stderr and "Traceback" not in result.output
    assert "p4de-Cluster: UPDATE_COMPLETE" in result.stderr and "`mlcluster update p4de --resume`" in result.stderr
    assert stored(p4de)["complete"] is None and "verify" not in stored(p4de)["steps"]
    aws.sticky.pop((service, operation))
    aws.answer("cloudformation", "GetTemplate", always=cloud.get_template)
    resumed = p4de.run("update", ENV, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert len(cloud.deploys) == 1 and cloud.fleet() == "RUNNING" and stored(p4de)["complete"]


def test_verification_catches_a_deploy_that_did_not_apply_the_plan(p4de: World, cloud: Cloud) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "silent"
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_FAILED
    assert (
        "verifying the update failed: the deployed configuration of p4de-Cluster is not the planned one"
        in result.stderr
    )
    assert stored(p4de)["complete"] is None and "verify" not in stored(p4de)["steps"]


def test_an_outcome_the_command_does_not_know_stops_it_before_any_change(
    p4de: World, cloud: Cloud, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update rules come from one place (``default_classifier``): an outcome outside OUTCOMES is an error,
    never a deploy."""
    from mlcluster.pcluster.update_policy import ClusterChange

    def rules(old: dict[str, Any], new: dict[str, Any]) -> list[ClusterChange]:
        return [ClusterChange("HeadNode.InstanceType", "SUPPORTED", "maybe", "m5.8xlarge", "m5.16xlarge")]  # type: ignore[arg-type]

    monkeypatch.setattr(update_module, "default_classifier", lambda: rules)
    with pytest.raises(CliError, match="the update rules returned outcomes mlcluster does not know: maybe"):
        # The command's own function, without click's error handling, so the CliError itself is seen.
        update_module.update.callback(ENV, p4de.environments, None, None, True, False, False, False, 60, 300)  # type: ignore[misc]
    assert fleet_writes(aws) == [] and cloud.deploys == []


def test_a_failed_squeue_is_reported_with_its_output_escaped(
    p4de: World, cloud: Cloud, aws: Aws, node: FakeNode
) -> None:
    """squeue's output can hold job names: a failure quotes it with control characters escaped, changing nothing."""
    out = f"{MARK}1046|compute-gpu|mallory|RUNNING|1|0:01|\x1b]0;owned\x07\nsqueue: error: Socket timed out\n"
    node.on(f"squeue --all --noheader --format '{MARK}", out, code=1)
    cloud.new = edited(p4de.environments, drop_inference_queue)
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == EXIT_FAILED, result.output
    assert "squeue on the head node failed (Failed, exit 1)" in result.output
    assert "\\x1b]0;owned\\x07\\nsqueue: error: Socket timed out" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert fleet_writes(aws) == [] and cloud.deploys == []
