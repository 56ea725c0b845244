"""``mlcluster update`` end to end: the whole of what the operator reads after each way a run can end, and what
the next command says (issue 27, cli sweep of ``mlcluster/cli/update.py``).

Driven like ``test_update``: moto's CloudFormation, EC2 and DynamoDB, a fake clustermgtd and CDK CLI. Only
what varies between runs is normalised: the temporary paths, the CDK CLI's path and the run id.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from mlcluster.cli import update as update_module
from mlcluster.cli.errors import EXIT_AWS, EXIT_SETUP, CliError
from tests.cli.conftest import Aws, FakeNode, World, error, hyperpod  # noqa: F401 (the fixture)
from tests.cli.test_update import (
    ENV,
    MARK,
    PLAN,
    Cloud,
    cloud,  # noqa: F401 (the fixture)
    drop_inference_queue,
    edited,
    fleet_writes,
    p4de,  # noqa: F401 (the fixture)
    state_path,
    stored,
)

STACKS_BEFORE = """\
  p4de-Network: CREATE_COMPLETE
  p4de-Storage: CREATE_COMPLETE
  p4de-DataRepository: not found
  p4de-Observability: not found
"""
RESUME = (
    "  resume: `mlcluster update p4de --resume`; give up: `mlcluster update p4de --abandon` (starts the fleet if "
    "this run stopped it, forgets the run; state in STATE)\n"
)
STOPPED = (
    "requested STOP_REQUESTED for the compute fleet of p4de-train (was RUNNING)\n"
    "the compute fleet of p4de-train is STOPPED\n"
    "deploying: CDK deploy --app ASSEMBLY 'p4de/*' --require-approval never --progress events\n"
)
STARTED = "requested START_REQUESTED for the compute fleet of p4de-train\nthe compute fleet of p4de-train is RUNNING\n"
SKIP = (
    "  p4de-Cluster: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback --region us-west-2 "
    "--stack-name p4de-Cluster --resources-to-skip ClusterPcluster1A2B3C4D` (safe: ParallelCluster's stack "
    "p4de-train rolled back, the cluster already runs its old configuration; its provider cannot finish the "
    "rollback by itself)\n"
)


def said(text: str, world: World, cloud: Cloud) -> str:  # noqa: F811
    """``text`` with the temporary paths, the CDK CLI's path and the run id replaced by names."""
    text = text.replace(str(state_path(world)), "STATE").replace(str(cloud.assembly), "ASSEMBLY")
    text = re.sub(r"deploying: \S+/cdk deploy", "deploying: CDK deploy", text)
    if state_path(world).exists():
        text = text.replace(stored(world)["run"], "RUN")
    return text


def run(world: World, cloud: Cloud, *args: str) -> tuple[int, str, str]:  # noqa: F811
    result = world.run("update", ENV, *args)
    assert "Traceback" not in result.output
    return result.exit_code, said(result.stdout, world, cloud), said(result.stderr, world, cloud)


def test_a_refused_deploy_restarts_the_fleet_and_the_next_runs_say_where_it_stands(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "fail"
    assert run(p4de, cloud, "--yes") == (
        1,
        PLAN,
        STOPPED + STARTED + "mlcluster: the deploy failed: cdk deploy exited 1\n"
        "  the compute fleet of p4de-train was started again: the cluster runs its previous configuration\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: UPDATE_ROLLBACK_COMPLETE\n"
        "  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )
    assert stored(p4de)["steps"] == {} and stored(p4de)["fleet_before"] == "RUNNING"
    assert run(p4de, cloud, "--yes") == (
        1,
        "",
        "mlcluster: an update of p4de (run RUN) did not finish: done nothing; nothing was run\n" + RESUME,
    )
    assert run(p4de, cloud, "--resume", "--abandon") == (
        2,
        "",
        "mlcluster: --plan-only, --resume and --abandon exclude each other\n",
    )
    run_id = stored(p4de)["run"]
    assert run(p4de, cloud, "--abandon") == (
        0,
        f"abandoned update run {run_id} of p4de; the fleet is as it was before it\n",
        "",
    )
    assert not state_path(p4de).exists() and fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]
    assert run(p4de, cloud, "--abandon") == (
        1,
        "",
        "mlcluster: no unfinished update of p4de to abandon (STATE)\n",
    )
    assert run(p4de, cloud, "--resume") == (
        1,
        "",
        "mlcluster: no unfinished update of p4de to resume (STATE); run without --resume\n",
    )


def test_a_stuck_rollback_keeps_the_fleet_stopped_and_abandon_waits_for_it(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "stuck"
    stacks = STACKS_BEFORE + SKIP + "  p4de-train: UPDATE_ROLLBACK_COMPLETE\n"
    assert run(p4de, cloud, "--yes") == (
        1,
        PLAN,
        STOPPED + "mlcluster: the deploy failed: cdk deploy exited 1\n"
        "  the compute fleet stays STOPPED: p4de-Cluster is UPDATE_ROLLBACK_FAILED, not settled\n"
        "  stacks now:\n" + stacks + RESUME,
    )
    assert run(p4de, cloud, "--yes") == (
        1,
        "",
        "mlcluster: an update of p4de (run RUN) did not finish: done stop; nothing was run\n" + RESUME,
    )
    assert run(p4de, cloud, "--abandon") == (
        1,
        "",
        "mlcluster: p4de-Cluster is UPDATE_ROLLBACK_FAILED, not settled: the fleet is not started from there; the "
        "run is kept\n" + stacks,
    )
    assert run(p4de, cloud, "--resume", "--yes") == (
        1,
        "",
        "mlcluster: these stacks are not settled; nothing was changed:\n"
        + SKIP
        + "  what to do: let them settle (or fix them as shown), then run `mlcluster update p4de`\n",
    )
    assert cloud.fleet() == "STOPPED" and len(cloud.deploys) == 1


def test_a_deploy_out_of_time_leaves_the_fleet_stopped_under_a_stack_still_moving(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "timeout"
    moving = (
        STACKS_BEFORE
        + "  p4de-Cluster: UPDATE_IN_PROGRESS  -> CloudFormation is still working: wait for it to settle\n"
        "  p4de-train: CREATE_COMPLETE\n"
    )
    assert run(p4de, cloud, "--yes", "--deploy-timeout", "300") == (
        1,
        PLAN,
        STOPPED + "mlcluster: the deploy failed: cdk deploy did not finish in 300 s\n"
        "  the compute fleet stays STOPPED: p4de-Cluster is UPDATE_IN_PROGRESS, not settled\n"
        "  stacks now:\n" + moving + RESUME,
    )
    assert run(p4de, cloud, "--abandon") == (
        1,
        "",
        "mlcluster: p4de-Cluster is UPDATE_IN_PROGRESS, not settled: the fleet is not started from there; the run is "
        "kept\n" + moving,
    )
    # The same while ParallelCluster's own stack moves: its state is the reason.
    cloud.set_stack(f"{ENV}-Cluster", "UPDATE_COMPLETE")
    cloud.set_stack("p4de-train", "UPDATE_ROLLBACK_IN_PROGRESS")
    code, _, err = run(p4de, cloud, "--abandon")
    assert (code, err.splitlines()[0]) == (
        1,
        "mlcluster: ParallelCluster's stack p4de-train is UPDATE_ROLLBACK_IN_PROGRESS, and a fleet starts only from "
        "CREATE_COMPLETE, UPDATE_COMPLETE, UPDATE_ROLLBACK_COMPLETE: the fleet is not started from there; the run is "
        "kept",
    )
    cloud.set_stack("p4de-train", "UPDATE_ROLLBACK_COMPLETE")
    assert run(p4de, cloud, "--abandon")[0] == 0
    assert cloud.fleet() == "RUNNING" and not state_path(p4de).exists()


def test_another_stack_failing_after_the_cluster_update_says_what_to_redeploy(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "other-stack"
    assert run(p4de, cloud, "--yes") == (
        1,
        PLAN,
        STOPPED
        + STARTED
        + "mlcluster: the deploy failed: cdk deploy exited 1 after the cluster took the new configuration: another "
        "stack failed (redeploy it with `npx cdk deploy 'p4de/*'`)\n"
        "  the compute fleet was left as it is\n"
        "  stacks now:\n"
        "  p4de-Network: CREATE_COMPLETE\n"
        "  p4de-Storage: UPDATE_ROLLBACK_COMPLETE\n"
        "  p4de-DataRepository: not found\n"
        "  p4de-Observability: not found\n"
        "  p4de-Cluster: UPDATE_COMPLETE\n"
        "  p4de-train: UPDATE_COMPLETE\n" + RESUME,
    )
    assert run(p4de, cloud, "--yes") == (
        1,
        "",
        "mlcluster: an update of p4de (run RUN) did not finish: done stop, deploy, start; nothing was run\n" + RESUME,
    )


def test_a_finished_update_says_what_it_did_and_what_to_lock(p4de: World, cloud: Cloud, aws: Aws) -> None:  # noqa: F811
    cloud.new = edited(p4de.environments, drop_inference_queue)
    code, out, err = run(p4de, cloud, "--yes")
    assert (code, err) == (0, STOPPED + STARTED)
    assert out == PLAN + (
        "updated p4de (run RUN): stop, deploy, start, verify\n"
        "next: `mlcluster lock p4de` and commit p4de.lock.json (the next synth compares with the deployed state)\n"
    )
    first = stored(p4de)
    assert set(first) == {
        "format", "run", "environment", "cluster", "region", "plan_sha256", "stacks_sha256", "stop",
        "fleet_before", "steps", "complete",
    }  # fmt: skip
    assert (first["format"], first["environment"], first["cluster"], first["region"]) == (
        1,
        "p4de",
        "p4de-train",
        "us-west-2",
    )
    # A second run has no cluster change: it deploys the other stacks with the fleet running, asking nothing.
    code, out, err = run(p4de, cloud, "--yes")
    assert code == 0
    assert err == "deploying: CDK deploy --app ASSEMBLY 'p4de/*' --require-approval never --progress events\n"
    assert out.splitlines()[3:] == [
        "cluster configuration: no change (the deploy applies the other stacks' changes, if any)",
        "",
        "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)",
        "updated p4de (run RUN): deploy, start, verify",
        "next: `mlcluster lock p4de` and commit p4de.lock.json (the next synth compares with the deployed state)",
    ]
    second = stored(p4de)
    assert second["stop"] is False and second["fleet_before"] is None and second["run"] >= first["run"]
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]


def test_a_deploy_that_did_not_apply_the_plan_is_caught_by_the_verification(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "silent"
    assert run(p4de, cloud, "--yes")[1:] == (
        PLAN,
        STOPPED
        + STARTED
        + "mlcluster: verifying the update failed: the deployed configuration of p4de-Cluster is not the planned one\n"
        "  the compute fleet was left as it is\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )


@pytest.mark.parametrize(
    ("stacks", "fleet", "problems"),
    [
        ({}, "RUNNING", None),
        ({"p4de-Storage": "UPDATE_ROLLBACK_FAILED"}, "RUNNING", "p4de-Storage is UPDATE_ROLLBACK_FAILED"),
        (
            {"p4de-Storage": "UPDATE_IN_PROGRESS", "p4de-train": "DELETE_FAILED"},
            "STOPPED",
            "p4de-Storage is UPDATE_IN_PROGRESS; p4de-train is DELETE_FAILED; the compute fleet is STOPPED, expected "
            "RUNNING",
        ),
        ({"p4de-Storage": "IMPORT_ROLLBACK_COMPLETE"}, "RUNNING", None),
        ({}, "PROTECTED", "the compute fleet is PROTECTED, expected RUNNING"),
    ],
)
def test_the_verification_names_every_unsettled_stack_and_a_fleet_not_as_it_was(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    stacks: dict[str, str],
    fleet: str,
    problems: str | None,
) -> None:
    from mlcluster.cli import update

    for name, status in stacks.items():
        cloud.set_stack(name, status)
    cloud.set_fleet(fleet)
    target = update.Target.load(ENV, p4de.environments, None, None)
    run_ = update.Run(
        target, "p4de-train", update.Fleet(target, "p4de-train"), update.UpdateState(ENV, "us-west-2"), None
    )  # type: ignore[arg-type]
    run_.state.data = {"fleet_before": "RUNNING"}
    planned = update.config_digest(cloud.deployed)
    if problems is None:
        update._verify(run_, planned)
        return
    with pytest.raises(update.CliError) as raised:
        update._verify(run_, planned)
    assert raised.value.message == problems
    with pytest.raises(update.CliError) as both:
        update._verify(run_, "0" * 64)
    assert both.value.message == f"the deployed configuration of p4de-Cluster is not the planned one; {problems}"


def test_a_fleet_that_was_stopped_is_verified_stopped(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    from mlcluster.cli import update

    target = update.Target.load(ENV, p4de.environments, None, None)
    run_ = update.Run(
        target, "p4de-train", update.Fleet(target, "p4de-train"), update.UpdateState(ENV, "us-west-2"), None
    )  # type: ignore[arg-type]
    planned = update.config_digest(cloud.deployed)
    run_.state.data = {"fleet_before": "STOPPED"}
    with pytest.raises(update.CliError) as raised:
        update._verify(run_, planned)
    assert raised.value.message == "the compute fleet is RUNNING, expected STOPPED"
    cloud.set_fleet("STOPPED")
    update._verify(run_, planned)
    run_.state.data = {"fleet_before": None}
    cloud.set_fleet("UNKNOWN")
    update._verify(run_, planned)  # the fleet was never read: nothing to compare


def test_a_stop_out_of_time_starts_the_fleet_and_a_resume_reports_a_failed_start(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "stuck"
    assert run(p4de, cloud, "--yes", "--stop-timeout", "60") == (
        5,
        PLAN,
        "requested STOP_REQUESTED for the compute fleet of p4de-train (was RUNNING)\n"
        + STARTED
        + "mlcluster: stopping the compute fleet failed: the compute fleet of p4de-train was still STOPPING after 60 s "
        "(waiting for STOPPED)\n"
        "  the compute fleet of p4de-train was started again: the cluster runs its previous configuration\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )
    cloud.stop_mode = "ok"
    cloud.start_mode = "protected"
    code, out, err = run(p4de, cloud, "--resume")
    assert (code, out) == (1, "")
    assert err == (
        "resuming update run RUN (done: nothing)\n"
        + STOPPED
        + "requested START_REQUESTED for the compute fleet of p4de-train\n"
        "mlcluster: starting the compute fleet failed: the compute fleet of p4de-train went PROTECTED while "
        "mlcluster waited for RUNNING: clustermgtd put queues with repeated bootstrap failures out of service\n"
        "  the compute fleet was left as it is\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: UPDATE_COMPLETE\n  p4de-train: UPDATE_COMPLETE\n" + RESUME
    )
    assert list(stored(p4de)["steps"]) == ["stop", "deploy"]


def no_ids(text: str) -> str:
    return re.sub(r"i-[0-9a-f]{17}", "i-X", text)


@pytest.mark.parametrize(
    ("fleet", "why"),
    [
        ("STOPPING", "a start or stop is under way"),
        ("START_REQUESTED", "a start or stop is under way"),
        ("UNKNOWN", "mlcluster cannot tell its state"),
    ],
)
def test_a_fleet_already_moving_or_unreadable_is_left_alone_and_nothing_kept(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
    fleet: str,
    why: str,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet(fleet)
    assert run(p4de, cloud, "--yes")[::2] == (
        1,
        f"mlcluster: stopping the compute fleet failed: the compute fleet of p4de-train is {fleet}: {why}; nothing "
        "was changed\n  what to do: `mlcluster status p4de`; run again once it is RUNNING or STOPPED\n",
    )
    assert fleet_writes(aws) == [] and not state_path(p4de).exists()


def test_a_stopped_item_contradicted_by_ec2_before_the_run_is_refused_and_kept(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
) -> None:
    """The item said STOPPED before this run asked anything, yet six compute instances run: five are named."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_fleet("STOPPED")
    code, _, err = run(p4de, cloud, "--yes")
    assert (code, no_ids(err)) == (
        1,
        "mlcluster: stopping the compute fleet failed: the status item of p4de-train says STOPPED but EC2 shows 6 "
        "compute instance(s) not stopped (i-X running, i-X running, i-X running, i-X running, i-X running): the "
        "status item disagrees with EC2; nothing was deployed\n"
        "  what to do: check who wrote the item (DynamoDB table parallelcluster-p4de-train) and `mlcluster status "
        "p4de`\n"
        "  the compute fleet was not stopped by this run\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )
    assert fleet_writes(aws) == [] and stored(p4de)["fleet_before"] == "STOPPED" and stored(p4de)["steps"] == {}


def test_a_forged_stopped_over_six_instances_names_five_and_marks_the_rest(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "forged"
    code, _, err = run(p4de, cloud, "--yes", "--stop-timeout", "60")
    assert (code, no_ids(err)) == (
        5,
        "requested STOP_REQUESTED for the compute fleet of p4de-train (was RUNNING)\n"
        + STARTED
        + "mlcluster: stopping the compute fleet failed: the status item of p4de-train says STOPPED but after "
        "--stop-timeout 60 s EC2 still shows 6 compute instance(s) pending, running or stopping (i-X running, i-X "
        "running, i-X running, i-X running, i-X running, ...): clustermgtd did not terminate them, or someone else "
        "wrote STOPPED; nothing was deployed\n"
        "  what to do: check who wrote the item (DynamoDB table parallelcluster-p4de-train), clustermgtd's log on "
        "the head node (/var/log/parallelcluster/clustermgtd) and `mlcluster status p4de`\n"
        "  the compute fleet of p4de-train was started again: the cluster runs its previous configuration\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )


def test_ctrl_c_then_an_edit_the_resume_refuses_until_the_edit_is_undone(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    deploy = cloud.deploy

    def interrupted(argv: list[str], timeout: int, region: str | None = None) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(update_module, "run_deploy", interrupted)
    assert run(p4de, cloud, "--yes")[::2] == (
        130,
        STOPPED + "mlcluster: interrupted; done: stop (the fleet and stacks are as the last step left them: "
        "`mlcluster status p4de`)\n" + RESUME,
    )
    monkeypatch.setattr(update_module, "run_deploy", deploy)
    cloud.other_stacks = "edited"
    assert run(p4de, cloud, "--resume", "--yes") == (
        1,
        "",
        "mlcluster: the environment changed since run RUN planned it (the synthesized templates differ); nothing "
        "was run\n  what to do: undo the edit and --resume, or `mlcluster update p4de --abandon` and plan again\n",
    )
    cloud.other_stacks = "as locked"
    code, out, err = run(p4de, cloud, "--resume", "--yes")
    assert (code, out.splitlines()[0]) == (0, "updated p4de (run RUN): stop, deploy, start, verify")
    assert err == (
        "resuming update run RUN (done: stop)\n"
        # The stop is checked again (EC2 included) before the deploy, without a second request.
        "the compute fleet of p4de-train is STOPPED\n"
        "deploying: CDK deploy --app ASSEMBLY 'p4de/*' --require-approval never --progress events\n" + STARTED
    )


def test_an_update_with_the_fleet_running_asks_only_to_deploy(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    new = copy.deepcopy(cloud.deployed)
    new["Monitoring"]["Logs"]["CloudWatch"]["RetentionInDays"] = 30
    cloud.new = new
    result = p4de.run("update", ENV, input="n\n")
    assert (result.exit_code, result.stderr) == (1, "deploy p4de? [y/N]: n\nAborted!\n")
    assert cloud.deploys == [] and not state_path(p4de).exists()


def test_unsettled_stacks_are_each_named_with_their_way_on(p4de: World, cloud: Cloud, aws: Aws) -> None:  # noqa: F811
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.set_stack(f"{ENV}-Storage", "UPDATE_ROLLBACK_FAILED")
    cloud.set_stack(f"{ENV}-Network", "UPDATE_IN_PROGRESS")
    assert run(p4de, cloud, "--yes")[::2] == (
        1,
        "mlcluster: these stacks are not settled; nothing was changed:\n"
        "  p4de-Network: UPDATE_IN_PROGRESS  -> CloudFormation is still working: wait for it to settle\n"
        "  p4de-Storage: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback --region us-west-2 "
        "--stack-name p4de-Storage`\n"
        "  what to do: let them settle (or fix them as shown), then run `mlcluster update p4de`\n",
    )
    assert fleet_writes(aws) == [] and not state_path(p4de).exists()


def test_a_squeue_listing_cut_by_run_command_says_what_to_do(p4de: World, cloud: Cloud, node: FakeNode) -> None:  # noqa: F811
    node.on(f"squeue --all --noheader --format '{MARK}", "x" * 30000)
    cloud.new = edited(p4de.environments, drop_inference_queue)
    assert run(p4de, cloud, "--plan-only") == (
        1,
        "",
        "mlcluster: squeue's listing on the head node was cut at Run Command's 24000 characters: the plan cannot say "
        "which jobs a fleet stop would kill (squeue lists pending jobs before running ones); nothing was changed\n"
        "  what to do: cancel pending jobs (held ones are listed too) until the listing fits, or stop the fleet "
        "yourself (docs: day two, mlcluster update)\n",
    )


def test_a_hyperpod_environment_is_sent_to_its_own_way(hyperpod: World) -> None:  # noqa: F811
    result = hyperpod.run("update", "hyperpod", "--plan-only")
    assert (result.exit_code, result.stdout, result.stderr) == (
        1,
        "",
        "mlcluster: environment hyperpod is a HyperPod environment: `mlcluster update` does not apply to it. "
        "HyperPod's AWS::SageMaker::Cluster updates in place (UpdateCluster) with no compute fleet to stop\n"
        "  what to do: `mlcluster diff hyperpod` (replacements are refused at synth), then `npx cdk deploy "
        "'hyperpod/*'`; platform software: `mlcluster patch hyperpod`\n",
    )


def test_a_stop_request_that_loses_the_race_leaves_the_running_fleet_as_it_was(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    aws.answer("dynamodb", "UpdateItem", error("ConditionalCheckFailedException", "The conditional request failed"))
    assert run(p4de, cloud, "--yes")[::2] == (
        1,
        "mlcluster: stopping the compute fleet failed: the compute fleet of p4de-train changed status while "
        "mlcluster asked for STOP_REQUESTED (it was RUNNING): someone else is starting or stopping it\n"
        "  what to do: `mlcluster status p4de`; run the command again once the fleet is settled\n"
        "  the compute fleet of p4de-train is RUNNING (it was not stopped)\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )
    assert stored(p4de)["steps"] == {} and cloud.deploys == []


def test_a_restart_that_fails_after_a_failed_stop_says_so_and_keeps_the_run(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.stop_mode = "stuck"
    request = update_module.Fleet.request

    def no_start(fleet: update_module.Fleet, current: str, wanted: str) -> None:
        if wanted == "START_REQUESTED":
            raise CliError("UpdateItem failed: AccessDeniedException: no start\n  what to do: ask", EXIT_AWS)
        request(fleet, current, wanted)

    monkeypatch.setattr(update_module.Fleet, "request", no_start)
    assert run(p4de, cloud, "--yes", "--stop-timeout", "60")[::2] == (
        5,
        "requested STOP_REQUESTED for the compute fleet of p4de-train (was RUNNING)\n"
        "mlcluster: stopping the compute fleet failed: the compute fleet of p4de-train was still STOPPING after 60 s "
        "(waiting for STOPPED)\n"
        "  starting the compute fleet again failed too: UpdateItem failed: AccessDeniedException: no start\n"
        "  stacks now:\n" + STACKS_BEFORE + "  p4de-Cluster: CREATE_COMPLETE\n  p4de-train: CREATE_COMPLETE\n" + RESUME,
    )
    assert stored(p4de)["steps"] == {} and cloud.fleet() == "STOPPING"


def test_a_failure_before_anything_changed_forgets_the_run(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change with the fleet running: nothing is recorded before the deploy, so a failure there (the folder
    check made again before the deploy) leaves no run to resume."""
    new = copy.deepcopy(cloud.deployed)
    new["Monitoring"]["Logs"]["CloudWatch"]["RetentionInDays"] = 30
    cloud.new = new
    checks: list[int] = []
    check = update_module.deploy_folder

    def planted_meanwhile() -> Path:
        checks.append(1)
        if len(checks) == 2:
            raise CliError("a cdk.json was planted", EXIT_SETUP)
        return check()

    monkeypatch.setattr(update_module, "deploy_folder", planted_meanwhile)
    assert run(p4de, cloud, "--yes")[::2] == (EXIT_SETUP, "mlcluster: the deploy failed: a cdk.json was planted\n")
    assert not state_path(p4de).exists() and cloud.deploys == []


def test_an_unfinished_run_still_lets_the_plan_be_shown_and_its_resume_asks_squeue_nothing(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    node: FakeNode,
) -> None:
    cloud.new = edited(p4de.environments, drop_inference_queue)
    cloud.deploy_mode = "fail"
    assert run(p4de, cloud, "--yes")[0] == 1
    squeue_reads = sum("squeue" in script for script in node.scripts)
    assert squeue_reads == 1
    # The failed run's stop ended the compute instances (the fake clustermgtd does not launch them again).
    idle = PLAN.replace("(6 running nodes)", "(0 running nodes)").replace(": 4 running;", ": 0 running;")
    assert run(p4de, cloud, "--plan-only") == (0, idle.replace(": 2 running;", ": 0 running;"), "")
    assert sum("squeue" in script for script in node.scripts) == 2
    cloud.deploy_mode = "ok"
    assert run(p4de, cloud, "--resume", "--yes")[0] == 0
    assert sum("squeue" in script for script in node.scripts) == 2
