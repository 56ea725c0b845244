"""``mlcluster diff``, ``smoke`` and ``status``: what an operator reads or AWS receives (issue 27, survivors of the
cli sample with seed 6).

``diff`` is driven like ``test_diff_sweep`` (botocore's Stubber with exact requests, moto for the clients the
command makes); ``smoke`` and ``status`` like ``test_smoke`` and ``test_status`` (the command against moto, the
node's and FSx's answers recorded).
"""

from __future__ import annotations

import itertools
import json
import locale
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from mlcluster.cli import diff as diff_module
from mlcluster.cli import runcommand
from mlcluster.cli.diff import change_set_verdicts
from mlcluster.cli.smoke import DEFAULT_NCCL_IMAGE
from mlcluster.config import load_environment
from tests.cli.conftest import Aws, FakeNode, World, aws_client, transcript
from tests.cli.test_diff_sweep import (
    artifact,
    big_body,
    cfn,  # noqa: F401 (the fixture)
    expect_create,
    expect_delete,
    expect_describe_stack,
    expect_page,
    page,
)
from tests.cli.test_smoke import BARE_METAL_NCCL, healthy_trn1, trn1  # noqa: F401 (the fixture)
from tests.cli.test_status import dras
from tests.support import MINIMAL, write_env


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """The process's locale encoding is ASCII (LC_CTYPE "C" with Python's UTF-8 mode off), as in a shell whose
    locale is not UTF-8: text read without an explicit encoding is decoded as the locale says."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_the_change_set_gets_the_template_cdk_wrote_whatever_the_locale(
    cfn: tuple[Any, Stubber],  # noqa: F811
    tmp_path: Path,
    ascii_locale: None,
) -> None:
    """_template_argument mutant 2: the CDK CLI writes each template as UTF-8 JSON, a character beyond ASCII (a
    tag or description naming "Zoë") as it is. Read in the locale's encoding instead, an operator whose shell is
    not UTF-8 would get a decoding error, or a change set for another template than the one deploy sends."""
    client, stubber = cfn
    body = json.dumps({"Resources": {}, "Description": "training data of team Zoë, café"}, ensure_ascii=False)
    assert not body.isascii()
    expect_describe_stack(stubber)
    expect_create(stubber, body)
    expect_page(stubber, page("CREATE_COMPLETE"))
    expect_delete(stubber)
    found = change_set_verdicts(
        client, None, artifact(tmp_path, body), region="us-east-1", account=lambda: "1", sleep=lambda _: None
    )
    assert found == []


def test_a_large_template_goes_to_the_assets_bucket_of_the_sessions_account_and_region(
    aws: Aws, tmp_path: Path
) -> None:
    """_clients mutant 19: the S3 client ``diff`` makes is the one a template over 51,200 bytes is uploaded with
    (CreateChangeSet takes it from there by URL): the object lands in the CDK assets bucket of the account STS
    names and the region of the session (us-east-1, from the file's zone), under the key the assembly gives."""
    environment = load_environment(write_env(tmp_path / "environments", "p5", MINIMAL))
    bucket = "cdk-hnb659fds-assets-123456789012-us-east-1"
    aws_client("s3", "us-east-1").create_bucket(Bucket=bucket)
    cloudformation, s3, account, region = diff_module._clients(environment, None, None)
    assert (cloudformation.meta.service_model.service_name, cloudformation.meta.region_name) == (
        "cloudformation",
        "us-east-1",
    )
    body = big_body(51_201)
    url = "s3://cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}/f00d.json"
    argument = diff_module._template_argument(s3, artifact(tmp_path, body, url), account, region)
    assert argument == {"TemplateURL": f"https://{bucket}.s3.us-east-1.amazonaws.com/f00d.json"}
    stored = aws_client("s3", "us-east-1").get_object(Bucket=bucket, Key="f00d.json")["Body"].read()
    assert stored == body.encode()


def test_a_timed_out_container_step_says_how_to_run_it_by_hand(
    pcluster: World, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Smoke.container mutant 57: the NCCL-in-a-container step on 2 x p5 runs past its bound. Its FAIL line
    (and ``--json``'s look_at) says where to read the output and what to try by hand: the same srun through Pyxis with
    ``nvidia-smi -L``, and the files to check (not "None")."""
    node.on("sinfo", transcript("sinfo_pcluster.txt"))
    node.on(" hostname", "compute-gpu-st-p5-1\ncompute-gpu-st-p5-2\n")
    node.on(BARE_METAL_NCCL, transcript("all_reduce_p5.txt"))
    node.on("--container-image", "", code=-1, status="InProgress")
    clock = itertools.count(0, 20)
    monkeypatch.setattr(runcommand.time, "monotonic", lambda: float(next(clock)))
    result = pcluster.run("smoke", "p5", "--step-timeout", "60", "--json")
    assert result.exit_code == 1
    step = next(step for step in json.loads(result.stdout)["steps"] if step["step"] == "container")
    assert (step["outcome"], step["summary"]) == ("FAIL", "timed out (no result after 120 s; cancelled)")
    where = "-N 2 -p compute-gpu --nodelist=compute-gpu-st-p5-1,compute-gpu-st-p5-2 --exclusive --immediate=60"
    assert step["look_at"] == (
        f"`aws ssm get-command-invocation --region us-east-2 --command-id {step['command_id']} "
        f"--instance-id {pcluster.head_node}`; "
        f"`srun {where} --container-image='{DEFAULT_NCCL_IMAGE}' --no-container-mount-home nvidia-smi -L` by hand; "
        "check /opt/slurm/etc/plugstack.conf, enroot's paths and that the NVIDIA container toolkit and EFA devices "
        "reach the container (/dev/infiniband)"
    )


def test_a_neuron_check_that_exits_non_zero_fails_even_with_every_device_listed(
    trn1: World,  # noqa: F811
    node: FakeNode,
) -> None:
    """Smoke.neuron mutant 75: every node answered with all 16 Neuron devices and 8 EFA devices, but the srun
    exited 1 (a node's neuron-ls failed after printing, or srun lost a task): the step fails on the exit code,
    it does not pass."""
    healthy_trn1(node)
    node.on(
        "MLC-NEURON",
        "MLC-NEURON compute-trn-st-trn1-1 devices=16 efa=8\nMLC-NEURON compute-trn-st-trn1-2 devices=16 efa=8\n",
        code=1,
    )
    result = trn1.run("smoke", "trn1")
    assert result.exit_code == 1
    assert "FAIL neuron: exited 1" in result.stdout.splitlines()
    assert "smoke test failed: neuron" in result.stderr


def test_a_one_node_trainium_smoke_skips_nccom_and_passes(trn1: World, node: FakeNode) -> None:  # noqa: F811
    """Smoke.nccom mutant 29: ``--nodes 1`` on trn1 cannot run the all-reduce across nodes: the step is
    skipped with the reason, nccom-test is not started, and the smoke passes on the steps it ran."""
    healthy_trn1(node)
    node.on(" hostname", "compute-trn-st-trn1-1\n")
    node.on("MLC-NEURON", "MLC-NEURON compute-trn-st-trn1-1 devices=16 efa=8\n")
    result = trn1.run("smoke", "trn1", "--nodes", "1", "--json")
    assert result.exit_code == 0, result.output
    steps = {step["step"]: step for step in json.loads(result.stdout)["steps"]}
    assert (steps["nccom"]["outcome"], steps["nccom"]["summary"]) == (
        "SKIP",
        "all-reduce across nodes needs --nodes 2 or more",
    )
    assert not any("nccom-test" in script for script in node.scripts)


def pending_and_failed_tasks(world: World) -> dict[str, Any]:
    """FSx's answer: an import just queued (no Status yet: FSx fills it in as the task runs) and an older
    export that failed, with the reason FSx gives in FailureDetails."""
    return {
        "DataRepositoryTasks": [
            {
                "TaskId": "task-0000000000000000e",
                "Lifecycle": "FAILED",
                "Type": "EXPORT_TO_REPOSITORY",
                "CreationTime": datetime(2026, 11, 19, 8, 0, tzinfo=UTC),
                "FileSystemId": world.file_system,
                "Paths": ["data/checkpoints"],
                "Status": {
                    "TotalCount": 12,
                    "SucceededCount": 0,
                    "FailedCount": 12,
                    "LastUpdatedTime": datetime(2026, 11, 19, 8, 5, tzinfo=UTC),
                },
                "FailureDetails": {"Message": "Access denied to the S3 bucket: check the DRA's bucket policy"},
            },
            {
                "TaskId": "task-0000000000000000f",
                "Lifecycle": "PENDING",
                "Type": "IMPORT_METADATA_FROM_REPOSITORY",
                "CreationTime": datetime(2026, 11, 20, 9, 13, tzinfo=UTC),
                "FileSystemId": world.file_system,
                "Paths": [],
            },
        ]
    }


def test_a_task_fsx_has_not_updated_yet_shows_when_it_was_created(
    aws: Aws, hyperpod: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_lustre mutants 203, 205: a queued task has no Status.LastUpdatedTime; the DRA's latest task then shows
    when it was created (CreationTime), in ``--json`` and in the DRA table, not a blank time."""
    monkeypatch.setenv("COLUMNS", "200")  # the DRA table's row on one line
    for _ in range(2):  # the JSON, then the table
        aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(hyperpod))
        aws.answer("fsx", "DescribeDataRepositoryTasks", pending_and_failed_tasks(hyperpod))
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    [dra] = json.loads(result.stdout)["lustre"]["dras"]
    task = dra["latest_task"]
    assert (task["task"], task["lifecycle"], task["total"]) == ("task-0000000000000000f", "PENDING", None)
    assert datetime.fromisoformat(task["updated"]) == datetime(2026, 11, 20, 9, 13, tzinfo=UTC)
    text = hyperpod.run("status", "hyperpod")
    assert text.exit_code == 0, text.output
    row = next(line for line in text.stdout.splitlines() if line.startswith("│ /data "))
    assert "│ import PENDING (2026-11-20 09:13 UTC) │ 0/?, 0 failed │" in row, row


def test_a_failed_tasks_reason_is_in_the_json(aws: Aws, hyperpod: World) -> None:
    """_lustre mutant 222: the DRA's latest task failed; ``--json`` gives FSx's reason (FailureDetails.Message),
    which an operator's script reads to say why an export did not reach S3."""
    answer = pending_and_failed_tasks(hyperpod)
    answer["DataRepositoryTasks"].pop()  # only the failed export
    aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(hyperpod))
    aws.answer("fsx", "DescribeDataRepositoryTasks", answer)
    result = hyperpod.run("status", "hyperpod", "--json")
    [dra] = json.loads(result.stdout)["lustre"]["dras"]
    task = dra["latest_task"]
    assert (task["task"], task["lifecycle"], task["failed"], task["failure"]) == (
        "task-0000000000000000e",
        "FAILED",
        12,
        "Access denied to the S3 bucket: check the DRA's bucket policy",
    )
