"""``mlcluster smoke`` against moto's SSM Run Command, with the head node's answers from transcripts."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml

from mlcluster.cli import runcommand
from tests.cli.conftest import Aws, FakeNode, World, error, invoke, transcript

CONTROLLER = "sagemaker-cluster:k3x9q2a1b2c3_controller-machine-i-0c0a1b2c3d4e5f601"
CONTAINER = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\n'
HOSTS = "ip-10-1-4-190\nip-10-1-5-138\n"


def healthy_hyperpod(node: FakeNode) -> None:
    node.on("sinfo", transcript("sinfo_hyperpod.txt"))
    node.on(" hostname", HOSTS)
    node.on("--container-image", "pyxis: importing docker image: ubuntu:22.04\n" + CONTAINER)
    node.on("mlcluster-precheck", transcript("precheck_ok.txt"))
    node.on("all_reduce_perf", transcript("all_reduce_p5.txt"))


def test_smoke_hyperpod_passes_every_step(hyperpod: World, node: FakeNode, aws: Aws) -> None:
    healthy_hyperpod(node)
    result = hyperpod.run("smoke", "hyperpod")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "PASS sinfo", "PASS srun", "PASS container", "PASS precheck", "PASS nccl",
    ]  # fmt: skip
    assert lines[0] == "PASS sinfo: partition p5: 2 of 2 nodes usable"
    assert lines[3] == "PASS precheck: all 2 nodes passed every check"
    assert lines[4] == (
        "PASS nccl: peak busbw 474.4 GB/s at 8 GiB across 2 x ml.p5.48xlarge over efa "
        "(pass >= 383.42 GB/s: 80% of the published 479.28 GB/s on 2 x p5.48xlarge at 8 GiB; "
        "nccl 2.27.7+cuda12.8, aws_ofi_nccl 1.16.3, efa_installer 1.43.2)"
    )
    # HyperPod targets take no Run Command: every step is a non-interactive Session Manager session.
    assert aws.operations("ssm") == []
    assert len(node.sessions) == 5
    for argv in node.sessions:
        assert argv[:5] == ["/usr/local/bin/aws", "ssm", "start-session", "--region", "us-west-2"]
        assert argv[argv.index("--target") + 1] == CONTROLLER
        assert argv[argv.index("--document-name") + 1] == "AWS-StartNonInteractiveCommand"
    for script in node.scripts:
        assert re.match(r"sudo -iu ubuntu bash -s <<'(MLCLUSTER_SCRIPT_[0-9a-f]{16})'\nset -o pipefail\n", script)
        assert script.endswith("code=$?; printf '\\nMLCLUSTER_EXIT=%s\\n' \"$code\"\n")
    nccl = node.scripts[4]
    assert (
        "timeout 900 srun -N 2 -p p5 --ntasks-per-node=8 --mpi=pmix /opt/mlcluster/nccl-tests/bin/all_reduce_perf"
        in nccl
    )
    assert "export FI_PROVIDER=efa NCCL_DEBUG=INFO" in nccl
    assert "grep -h 'EFA installer version' /opt/amazon/efa_installed_packages" in nccl
    assert "/NCCL version/" in nccl and "/Initializing aws-ofi-nccl/" in nccl  # the filter keeps the versions
    assert "srun -N 2 -p p5 --ntasks-per-node=1 mlcluster-precheck" in node.scripts[3]


def test_smoke_json(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    result = hyperpod.run("smoke", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["passed"], data["partition"], data["nodes"]) == (True, "p5", 2)
    assert data["node"]["ssm_target"] == CONTROLLER
    nccl = data["steps"][-1]["data"]
    assert nccl["peak_busbw_gbytes"] == 474.39
    assert nccl["avg_busbw_gbytes"] == 452.14
    assert (nccl["judged_size_bytes"], nccl["judged_busbw_gbytes"]) == (2**33, 474.39)
    assert (nccl["published_busbw_gbytes"], nccl["pass_busbw_gbytes"]) == (479.28, 383.42)
    assert nccl["source"].startswith("https://github.com/aws-samples/awsome-distributed-training/blob/")
    assert nccl["versions"] == {"nccl": "2.27.7+cuda12.8", "aws_ofi_nccl": "1.16.3", "efa_installer": "1.43.2"}


def test_smoke_p5_at_76_percent_of_the_published_run_fails(hyperpod: World, node: FakeNode) -> None:
    """Issue 26: 362 GB/s at 8 GiB passed half the line rate (200 GB/s); the published run reaches 479 GB/s there."""
    healthy_hyperpod(node)
    node.on("all_reduce_perf", transcript("all_reduce_p5_degraded.txt"))
    result = hyperpod.run("smoke", "hyperpod")
    assert result.exit_code == 1, result.output
    assert "FAIL nccl: peak busbw 362.4 GB/s at 8 GiB" in result.stdout
    assert "362.4 GB/s at 8 GiB is below 383.42 GB/s" in result.stdout
    assert "nccl unknown, aws_ofi_nccl unknown, efa_installer unknown" in result.stdout


def test_smoke_pcluster_socket_fallback_fails_nccl(pcluster: World, node: FakeNode, aws: Aws) -> None:
    node.on("sinfo", transcript("sinfo_pcluster.txt"))
    node.on(" hostname", "compute-gpu-st-p5-1\ncompute-gpu-st-p5-2\n")
    node.on("--container-image", CONTAINER)
    node.on("all_reduce_perf", transcript("all_reduce_socket.txt"))
    result = pcluster.run("smoke", "p5", "--nodes", "2")
    assert result.exit_code == 1
    out = result.stdout
    assert "PASS sinfo: partition compute-gpu: 3 of 4 nodes usable (not usable: 1 down* (compute-gpu-st-p5-4))" in out
    assert "SKIP precheck: the runtime pre-check is a HyperPod lifecycle tool" in out
    assert "FAIL nccl: peak busbw 2.8 GB/s at 4 GiB across 2 x p5.48xlarge over socket" in out
    assert "NCCL used socket, not EFA; 2.8 GB/s at 8 GiB is below 383.42 GB/s" in out
    assert "look at: `aws ssm get-command-invocation --region us-east-2 --command-id" in out
    assert f"--instance-id {pcluster.head_node}`" in out
    assert "NET/OFI Selected provider is efa" in out
    assert "smoke test failed: nccl" in result.stderr
    sent = aws.params("SendCommand")
    assert len(sent) == 4  # the pre-check is skipped
    for params in sent:
        assert params["InstanceIds"] == [pcluster.head_node]
        assert params["DocumentName"] == "AWS-RunShellScript"
        assert re.match(
            r"sudo -iu ec2-user bash -s <<'MLCLUSTER_SCRIPT_[0-9a-f]{16}'\n", params["Parameters"]["commands"][0]
        )
    assert sent[3]["Parameters"]["executionTimeout"] == ["900"]
    assert {p["InstanceId"] for p in aws.params("GetCommandInvocation")} == {pcluster.head_node}
    assert node.sessions == []


def test_smoke_precheck_failure_names_hosts_and_checks(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    node.on("mlcluster-precheck", transcript("precheck_fail.txt"), code=1)
    result = hyperpod.run("smoke", "hyperpod", "--json")
    assert result.exit_code == 1
    step = json.loads(result.stdout)["steps"][3]
    assert step["outcome"] == "FAIL"
    assert step["summary"].startswith("1 of 2 nodes passed; ip-10-1-5-138: fsx_mounted: /fsx is not a Lustre mount.")
    assert "slurmd_running" in step["summary"]
    assert "follow each FAIL line's mitigation" in step["look_at"]


def test_smoke_drained_node_fails_sinfo(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    node.on("sinfo", transcript("sinfo_drained.txt"))
    result = hyperpod.run("smoke", "hyperpod")
    assert result.exit_code == 1
    assert (
        "FAIL sinfo: partition p5: 1 of 2 nodes usable, 2 needed; not usable: 1 drain (ip-10-1-5-138)" in result.stdout
    )


def test_smoke_run_command_that_times_out_is_cancelled(
    pcluster: World, node: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.on("sinfo", transcript("sinfo_pcluster.txt"))
    node.on(" hostname", "compute-gpu-st-p5-1\ncompute-gpu-st-p5-2\n")
    node.on("--container-image", "", code=-1, status="InProgress")
    node.on("all_reduce_perf", transcript("all_reduce_p5.txt"))
    clock = itertools.count(0, 20)
    monkeypatch.setattr(runcommand.time, "monotonic", lambda: float(next(clock)))
    result = pcluster.run("smoke", "p5", "--step-timeout", "60")
    assert result.exit_code == 1
    assert "FAIL container: timed out (no result after 120 s; cancelled)" in result.stdout
    assert "PASS nccl:" in result.stdout  # later steps still run
    assert len(aws.params("CancelCommand")) == 1


def test_smoke_session_that_times_out_is_stopped(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    node.on("all_reduce_perf", "", code=-1, status="InProgress")
    result = hyperpod.run("smoke", "hyperpod", "--step-timeout", "60")
    assert result.exit_code == 1
    assert "FAIL nccl: timed out (no result after 120 s; session stopped)" in result.stdout
    assert "look at: `mlcluster ssh hyperpod` and run the step by hand" in result.stdout


def test_smoke_hyperpod_needs_the_session_manager_plugin(
    hyperpod: World, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/aws" if name == "aws" else None)
    result = hyperpod.run("smoke", "hyperpod")
    assert result.exit_code == 4
    assert "the Session Manager plugin is not installed" in result.stderr
    assert node.sessions == []


def test_smoke_single_node_skips_nccl(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    node.on(" hostname", "ip-10-1-4-190\n")
    result = hyperpod.run("smoke", "hyperpod", "--nodes", "1")
    assert result.exit_code == 0, result.output
    assert "SKIP nccl: all_reduce across nodes needs --nodes 2 or more" in result.stdout


def test_smoke_send_command_denied(pcluster: World, node: FakeNode, aws: Aws) -> None:
    aws.answer(
        "ssm", "SendCommand", error("AccessDeniedException", "User is not authorized to perform: ssm:SendCommand")
    )
    result = pcluster.run("smoke", "p5")
    assert result.exit_code == 3
    assert f"SendCommand (AWS-RunShellScript) to {pcluster.head_node} failed: AccessDeniedException" in result.stderr
    assert "lack this permission" in result.stderr


def test_smoke_unknown_partition(hyperpod: World) -> None:
    result = hyperpod.run("smoke", "hyperpod", "--partition", "gpu")
    assert result.exit_code == 1
    assert "--partition gpu: not a partition of hyperpod (allowed: p5)" in result.stderr


def test_smoke_needs_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # credentials are checked first, when the session opens
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "dev.yaml").write_text(
        yaml.safe_dump({"region": "us-east-1", "network": {"availability_zone": "us-east-1a"}})
    )
    result = invoke("smoke", "dev", "--environments", str(folder))
    assert result.exit_code == 1
    assert "environment dev has cluster.backend 'none'; this command needs 'pcluster' or 'hyperpod'" in result.stderr
