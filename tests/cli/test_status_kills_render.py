"""``mlcluster status``: what the operator reads in the tables, line for line (issue 27, the cli sample's survivors).

The rendering is driven with a small status document (the shape ``collect`` returns) and read back as the
terminal shows it; the data the tables are drawn from is read through the command against moto.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text

from mlcluster.cli import status as status_module
from tests.cli.conftest import Aws, World, aws_client
from tests.cli.test_status import _pcluster_stack_status, fsx_answers  # noqa: F401 (the fixture)


def document(**cluster: Any) -> dict[str, Any]:
    """A pcluster status with one file system; ``cluster`` replaces keys of the cluster part."""
    return {
        "environment": "p5",
        "region": "us-east-2",
        "backend": "pcluster",
        "stacks": [],
        "cluster": {
            "name": "p5-train",
            "status": "CREATE_COMPLETE",
            "groups": [],
            "failure": "",
            "failing_nodes": [],
            "scaling_nodes": [],
            "log_group": "/aws/parallelcluster/p5-train",
            "daily_copy": None,
            **cluster,
        },
        "lustre": {
            "file_system": "fs-0123456789abcdef0",
            "lifecycle": "AVAILABLE",
            "deployment_type": "PERSISTENT_2",
            "capacity_gib": 1200,
            "throughput_mbps_per_tib": None,
            "throughput_mbps": None,
            "dns_name": "fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com",
            "mount_name": "abcdefgh",
            "dras": [],
        },
        "orphans": [],
        "next": [],
        "problems": [],
    }


def shown(data: dict[str, Any]) -> list[str]:
    console = Console(record=True, width=200, color_system=None)
    console.print(status_module.render(data))
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_the_lustre_row_shows_its_lifecycle_and_a_dash_for_an_unknown_throughput() -> None:
    lines = shown(document())
    row = next(line for line in lines if "PERSISTENT_2" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == [
        "AVAILABLE",
        "PERSISTENT_2",
        "1200 GiB",
        "-",
        "fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com@tcp:/abcdefgh",
    ]


def test_a_cluster_failure_is_printed_in_red_and_a_late_daily_copy_too() -> None:
    late = {"late": True, "last": None, "where": "s3://backups/mlcluster/patch/p5-train/scheduled/"}
    data = document(status="ROLLBACK_COMPLETE", failure="delete the cluster stack, then deploy", daily_copy=late)
    assert "failure: delete the cluster stack, then deploy" in shown(data)
    texts = {part.plain: part.style for part in status_module.render(data).renderables if isinstance(part, Text)}
    assert texts["failure: delete the cluster stack, then deploy"] == "red"
    copy = "daily copy of the controller's Slurm state: none yet in s3://backups/mlcluster/patch/p5-train/scheduled/"
    assert texts[copy] == "red"
    # At the edge: a copy in time is printed plainly.
    data["cluster"]["daily_copy"] = {**late, "late": False}
    texts = {part.plain: part.style for part in status_module.render(data).renderables if isinstance(part, Text)}
    assert texts[copy] == ""


def test_a_ready_parallelcluster_cluster_shows_no_failure(aws: Aws, pcluster: World) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []}, {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []}, {"DataRepositoryTasks": []})
    _pcluster_stack_status(pcluster, "UPDATE_COMPLETE")
    result = pcluster.run("status", "p5", "--json")
    assert result.exit_code == 0, result.output
    cluster = json.loads(result.stdout)["cluster"]
    assert (cluster["decision"], cluster["failure"]) == ("ready", "")
    text = pcluster.run("status", "p5")
    assert text.exit_code == 0, text.output
    assert "failure:" not in text.output


def test_the_file_systems_dns_name_is_the_one_fsx_gives(hyperpod: World, fsx_answers: None) -> None:  # noqa: F811
    described = aws_client("fsx", hyperpod.region).describe_file_systems(FileSystemIds=[hyperpod.file_system])
    dns = described["FileSystems"][0]["DNSName"]
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    lustre = json.loads(result.stdout)["lustre"]
    assert dns and lustre["dns_name"] == dns
