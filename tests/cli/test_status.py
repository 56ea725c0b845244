"""``mlcluster status`` against moto: stacks, cluster and nodes, FSx for Lustre, DRAs and their tasks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlcluster.cli import status as status_module
from tests.cli.conftest import ACCOUNT, GRAFANA_URL, Aws, World, error


def dras(world: World, lifecycle: str = "AVAILABLE") -> dict[str, Any]:
    return {
        "Associations": [
            {
                "AssociationId": "dra-0a1b2c3d4e5f60718",
                "FileSystemId": world.file_system,
                "Lifecycle": lifecycle,
                "FileSystemPath": "/data",
                "DataRepositoryPath": f"s3://{world.bucket}/",
                "BatchImportMetaDataOnCreate": True,
                "ImportedFileChunkSize": 1024,
                "S3": {
                    "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                    "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                },
                "CreationTime": datetime(2026, 11, 20, 9, 12, tzinfo=UTC),
            }
        ]
    }


def tasks(world: World, lifecycle: str = "EXECUTING") -> dict[str, Any]:
    return {
        "DataRepositoryTasks": [
            {
                "TaskId": "task-0123456789abcdef0",
                "Lifecycle": "SUCCEEDED",
                "Type": "EXPORT_TO_REPOSITORY",
                "CreationTime": datetime(2026, 11, 19, 8, 0, tzinfo=UTC),
                "FileSystemId": world.file_system,
                "Paths": ["data/checkpoints"],
                "Status": {"TotalCount": 12, "SucceededCount": 12, "FailedCount": 0},
            },
            {
                "TaskId": "task-0fedcba9876543210",
                "Lifecycle": lifecycle,
                "Type": "IMPORT_METADATA_FROM_REPOSITORY",
                "CreationTime": datetime(2026, 11, 20, 9, 13, tzinfo=UTC),
                "FileSystemId": world.file_system,
                "Paths": [],
                "Status": {
                    "TotalCount": 184320,
                    "SucceededCount": 92160,
                    "FailedCount": 0,
                    "LastUpdatedTime": datetime(2026, 11, 20, 9, 40, tzinfo=UTC),
                },
            },
        ]
    }


@pytest.fixture
def fsx_answers(aws: Aws, hyperpod: World) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(hyperpod))
    aws.answer("fsx", "DescribeDataRepositoryTasks", tasks(hyperpod))


def test_status_shows_stacks_cluster_nodes_lustre_dras_and_outputs(
    hyperpod: World, fsx_answers: None, aws: Aws
) -> None:
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "hyperpod-Network",
        "hyperpod-Storage",
        "hyperpod-Cluster",
        "CREATE_COMPLETE",
        "Cluster ml-hyperpod: InService",
        "worker-group-1",
        "ml.p5.48xlarge",
        "2 Running",
        "/aws/sagemaker/Clusters/ml-hyperpod/k3x9q2a1b2c3",
        f"FSx for Lustre {hyperpod.file_system}",
        "600 MB/s (250 MB/s/TiB)",
        "2400 GiB",
        "/data",
        "92160/184320, 0 failed",
        "import EXECUTING",
        "mlcluster smoke hyperpod",
        hyperpod.bucket,
        "hyperpod-Observability",
        "DashboardUrl",
    ):
        assert text in out, text
    assert aws.operations() == [
        "DescribeStacks",
        "DescribeStacks",
        "DescribeStacks",
        "DescribeStacks",
        "DescribeCluster",
        "ListClusterNodes",
        "ListObjectsV2",  # the controller's daily copies
        "DescribeFileSystems",
        "DescribeDataRepositoryAssociations",
        "DescribeDataRepositoryTasks",
        # What the app left behind: every stack for the tag, the live stacks' resources, tagged resources.
        "DescribeStacks",
        "ListStackResources",
        "ListStackResources",
        "ListStackResources",
        "ListStackResources",
        "ListStackResources",
        "ListStackResources",
        "GetResources",
    ]
    assert aws.params("DescribeDataRepositoryTasks") == [
        {"Filters": [{"Name": "file-system-id", "Values": [hyperpod.file_system]}]}
    ]
    assert aws.params("DescribeCluster") == [{"ClusterName": "ml-hyperpod"}]


def test_status_json_is_the_same_data(hyperpod: World, fsx_answers: None) -> None:
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["healthy"] is True
    assert [s["status"] for s in data["stacks"]] == ["CREATE_COMPLETE"] * 4
    (observability,) = [s for s in data["stacks"] if s["stack"] == "hyperpod-Observability"]
    assert set(observability["outputs"]) == {"DashboardUrl", "AlarmTopicArn"}
    cluster = data["cluster"]
    assert cluster["status"] == "InService"
    assert {g["group"]: (g["current"], g["target"], g["nodes"]) for g in cluster["groups"]} == {
        "controller-machine": (1, 1, {"Running": 1}),
        "login-group": (1, 1, {"Running": 1}),
        "worker-group-1": (2, 2, {"Running": 2}),
    }
    lustre = data["lustre"]
    assert (lustre["lifecycle"], lustre["capacity_gib"], lustre["throughput_mbps"]) == ("AVAILABLE", 2400, 600)
    [dra] = lustre["dras"]
    assert dra["latest_task"]["task"] == "task-0fedcba9876543210"  # the newest task covering /data
    assert (dra["latest_task"]["succeeded"], dra["latest_task"]["total"]) == (92160, 184320)


def test_status_failing_node_names_message_and_log_group(hyperpod: World, fsx_answers: None) -> None:
    from moto.sagemaker.models import sagemaker_backends

    cluster = sagemaker_backends[ACCOUNT][hyperpod.region].clusters[hyperpod.cluster]
    failing = next(n for n in cluster.nodes.values() if n.instance_group_name == "worker-group-1")
    failing.status = "Failure"
    failing.message = "Node failed deep health check InstanceConnectivity: EFA loopback test failed"
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 1
    assert "Nodes needing attention" in result.output
    assert failing.instance_id in result.stdout
    assert (
        f"node {failing.instance_id} (worker-group-1) is Failure: Node failed deep health check "
        "InstanceConnectivity: EFA loopback test failed" in result.stderr
    )
    assert "/aws/sagemaker/Clusters/ml-hyperpod/k3x9q2a1b2c3" in result.output


def test_status_dra_not_available_needs_attention(aws: Aws, hyperpod: World) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(hyperpod, lifecycle="MISCONFIGURED"))
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"] == ["DRA /data is MISCONFIGURED"]


def test_status_cluster_stack_not_deployed(aws: Aws, hyperpod: World) -> None:
    import boto3

    boto3.client("cloudformation", region_name=hyperpod.region).delete_stack(StackName="hyperpod-Cluster")
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 1
    assert "NOT_DEPLOYED" in result.output
    assert "hyperpod-Cluster is NOT_DEPLOYED" in result.stderr
    assert "sagemaker" not in {svc for svc, _, _ in aws.calls}


def test_status_pcluster_head_and_queue(aws: Aws, pcluster: World) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = pcluster.run("status", "p5", "--json")
    assert result.exit_code == 0, result.output
    cluster = json.loads(result.stdout)["cluster"]
    assert (cluster["backend"], cluster["status"]) == ("pcluster", "CREATE_COMPLETE")
    assert {g["group"]: (g["current"], g["target"]) for g in cluster["groups"]} == {
        "compute-gpu": (4, 4),
        "head-node": (1, 1),
    }
    assert aws.params("DescribeInstances")[0]["Filters"][0] == {
        "Name": "tag:parallelcluster:cluster-name",
        "Values": ["p5-train"],
    }


def test_status_prints_the_dashboard_links(aws: Aws, pcluster: World) -> None:
    for _ in range(2):  # the table, then the JSON
        aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
        aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = pcluster.run("status", "p5")
    assert result.exit_code == 0, result.output
    assert "DashboardUrl" in result.output and "ClusterDashboardUrl" in result.output
    data = json.loads(pcluster.run("status", "p5", "--json").stdout)
    (observability,) = [s for s in data["stacks"] if s["stack"] == "p5-Observability"]
    console = "https://us-east-2.console.aws.amazon.com/cloudwatch/home?region=us-east-2#dashboards/dashboard/"
    assert observability["outputs"]["DashboardUrl"] == f"{console}mlcluster-p5-us-east-2"
    assert observability["outputs"]["ClusterDashboardUrl"] == f"{console}p5-train-us-east-2"


def test_status_prints_the_grafana_url(aws: Aws, pcluster: World) -> None:
    """p5 turns Amazon Managed Grafana on: its workspace URL is shown with the other Observability links."""
    for _ in range(2):  # the table, then the JSON
        aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
        aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = pcluster.run("status", "p5")
    assert result.exit_code == 0, result.output
    url = GRAFANA_URL.format(region="us-east-2")
    (line,) = [line for line in result.output.splitlines() if "GrafanaUrl" in line]
    assert url in line
    data = json.loads(pcluster.run("status", "p5", "--json").stdout)
    (observability,) = [s for s in data["stacks"] if s["stack"] == "p5-Observability"]
    assert observability["outputs"]["GrafanaUrl"] == url
    assert list(observability["outputs"]) == ["DashboardUrl", "ClusterDashboardUrl", "GrafanaUrl", "AlarmTopicArn"]


def test_status_observability_stack_not_deployed_needs_attention(aws: Aws, pcluster: World) -> None:
    import boto3

    boto3.client("cloudformation", region_name=pcluster.region).delete_stack(StackName="p5-Observability")
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    result = pcluster.run("status", "p5")
    assert result.exit_code == 1
    assert "p5-Observability is NOT_DEPLOYED" in result.stderr
    assert "DashboardUrl" not in result.output


def test_status_watch_redraws_until_interrupted(hyperpod: World, aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", always=dras(hyperpod))
    aws.answer("fsx", "DescribeDataRepositoryTasks", tasks(hyperpod), always=tasks(hyperpod, lifecycle="SUCCEEDED"))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(status_module.time, "sleep", sleep)
    result = hyperpod.run("status", "hyperpod", "--watch", "--interval", "10", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["lustre"]["dras"][0]["latest_task"]["lifecycle"] for d in lines] == ["EXECUTING", "SUCCEEDED"]
    assert sleeps == [10, 10]


def test_status_throttled_reports_call_and_advice(aws: Aws, hyperpod: World) -> None:
    aws.answer("sagemaker", "DescribeCluster", error("ThrottlingException", "Rate exceeded"))
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 3
    assert "DescribeCluster for ml-hyperpod failed: ThrottlingException: Rate exceeded" in result.stderr
    assert "wait a minute" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_status_shows_the_accounting_database_endpoint(hyperpod: World, fsx_answers: None) -> None:
    """With storage.accounting the Storage stack outputs the database's endpoint; status lists it."""
    from tests.cli.conftest import aws_client

    cfn = aws_client("cloudformation", hyperpod.region)
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in cfn.describe_stacks(StackName="hyperpod-Storage")["Stacks"][0]["Outputs"]
    }
    endpoint = "acct.cluster-c0ffee.us-west-2.rds.amazonaws.com:3306"
    outputs["AccountingDatabaseEndpoint"] = endpoint
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    cfn.update_stack(StackName="hyperpod-Storage", TemplateBody=json.dumps(template))
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    (storage,) = [s for s in json.loads(result.output)["stacks"] if s["stack"] == "hyperpod-Storage"]
    assert storage["outputs"]["AccountingDatabaseEndpoint"] == endpoint


def _pcluster_stack_status(world: World, status: str) -> None:
    from moto.cloudformation.models import cloudformation_backends

    for stack in cloudformation_backends[ACCOUNT][world.region].stacks.values():
        if stack.name == world.cluster:
            stack.status = status


@pytest.mark.parametrize(
    ("stack_status", "healthy", "reason"),
    [
        ("UPDATE_COMPLETE", True, ""),
        ("UPDATE_ROLLBACK_COMPLETE", False, "confirm it did in /var/log/chef-client.log on the head node"),
        ("UPDATE_IN_PROGRESS", False, "ParallelCluster is updating the cluster"),
        ("ROLLBACK_COMPLETE", False, "delete the cluster stack, then deploy"),
    ],
)
def test_status_reads_the_parallelcluster_stack_by_its_table(
    aws: Aws, pcluster: World, stack_status: str, healthy: bool, reason: str
) -> None:
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    _pcluster_stack_status(pcluster, stack_status)
    result = pcluster.run("status", "p5", "--json")
    data = json.loads(result.stdout)
    assert (data["cluster"]["status"], data["healthy"], result.exit_code) == (
        stack_status,
        healthy,
        0 if healthy else 1,
    )
    problems = [p for p in data["problems"] if p.startswith("cluster p5-train")]
    assert problems == ([] if healthy else [f"cluster p5-train is {stack_status}: {data['cluster']['failure']}"])
    assert reason in data["cluster"]["failure"]


def test_status_a_stopped_pcluster_node_needs_attention(aws: Aws, pcluster: World) -> None:
    from mlcluster.cli.nodes import Node

    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    stopped = Node("compute-gpu", "i-0stopped", "p5.48xlarge", "stopped", "", "i-0stopped")
    pending = Node("compute-gpu", "i-0pending", "p5.48xlarge", "pending", "", "i-0pending")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_module, "pcluster_nodes", lambda target: [stopped, pending])
        result = pcluster.run("status", "p5", "--json")
    failing = {n["instance_id"]: n["message"] for n in json.loads(result.stdout)["cluster"]["failing_nodes"]}
    assert failing == {"i-0stopped": "the instance is stopped: nothing in a cluster stops nodes"}


def test_status_a_scaling_fleet_is_no_problem(aws: Aws, pcluster: World) -> None:
    """pending and shutting-down compute nodes are Slurm scaling a dynamic fleet: information, not problems;
    the head node in those states is one."""
    from mlcluster.cli.nodes import Node

    aws.answer("fsx", "DescribeDataRepositoryAssociations", always={"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", always={"DataRepositoryTasks": []})
    head = Node("head-node", "i-0head", "m5.2xlarge", "running", "", "i-0head")
    starting = Node("compute-gpu", "i-0pending", "p5.48xlarge", "pending", "", "i-0pending")
    stopping = Node("compute-gpu", "i-0stopping", "p5.48xlarge", "shutting-down", "", "i-0stopping")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_module, "pcluster_nodes", lambda target: [head, starting, stopping])
        result = pcluster.run("status", "p5", "--json")
        text = pcluster.run("status", "p5")
    data = json.loads(result.stdout)
    assert (data["healthy"], data["problems"], data["cluster"]["failing_nodes"]) == (True, [], [])
    assert {n["instance_id"]: n["message"] for n in data["cluster"]["scaling_nodes"]} == {
        "i-0pending": "the instance is starting (Slurm scales up)",
        "i-0stopping": "the instance is terminating (Slurm scales down, or replaces a failed node)",
    }
    assert "Scaling nodes (no problem)" in text.stdout and "i-0stopping" in text.stdout

    head = Node("head-node", "i-0head", "m5.2xlarge", "shutting-down", "", "i-0head")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_module, "pcluster_nodes", lambda target: [head])
        result = pcluster.run("status", "p5", "--json")
    data = json.loads(result.stdout)
    assert data["healthy"] is False
    assert data["problems"] == [
        "node i-0head (head-node) is shutting-down: the head node is shutting-down: the cluster has no head node "
        "while it is"
    ]


# -- the HyperPod controller's daily copy (review of issue 33, item 6) -----------------------------------------

COPIES = "mlcluster/patch/ml-hyperpod/scheduled/"


def copies(world: World, *ages_hours: float) -> dict[str, Any]:
    """A ListObjectsV2 page: one weekday folder per age, each with its archive and its SHA256SUMS."""
    now = datetime.now(UTC)
    contents = []
    for day, age in zip(("Mon", "Tue", "Wed"), ages_hours, strict=False):
        when = now - timedelta(hours=age)
        for name in ("slurmctld-state.tar.gz", "SHA256SUMS"):
            contents.append({"Key": f"{COPIES}{day}/{name}", "LastModified": when, "Size": 10})
    return {"Name": world.backup_bucket, "Prefix": COPIES, "KeyCount": len(contents), "Contents": contents}


def test_status_shows_the_age_of_the_last_daily_copy(aws: Aws, hyperpod: World, fsx_answers: None) -> None:
    from tests.cli.conftest import aws_client

    aws_client("s3", hyperpod.region).put_object(
        Bucket=hyperpod.backup_bucket, Key=f"{COPIES}Tue/SHA256SUMS", Body=b"x"
    )
    aws_client("s3", hyperpod.region).put_object(Bucket=hyperpod.backup_bucket, Key=f"{COPIES}Tue/a.gz", Body=b"x")
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 0, result.output
    assert "daily copy of the controller's Slurm state: last 0.0 h ago" in result.output
    assert f"s3://{hyperpod.backup_bucket}/{COPIES}Tue/SHA256SUMS" in result.output.replace("\n", "")
    assert aws.params("ListObjectsV2") == [{"Bucket": hyperpod.backup_bucket, "Prefix": COPIES}]


@pytest.mark.parametrize(("ages", "late"), [((49.0, 80.0), True), ((47.5, 80.0), False)])
def test_status_needs_attention_when_the_last_daily_copy_is_over_two_days_old(
    aws: Aws, hyperpod: World, fsx_answers: None, ages: tuple[float, ...], late: bool
) -> None:
    aws.answer("s3", "ListObjectsV2", copies(hyperpod, *ages))
    result = hyperpod.run("status", "hyperpod", "--json")
    data = json.loads(result.stdout)
    copy = data["cluster"]["daily_copy"]
    assert copy["late"] is late and copy["age_hours"] == ages[0]  # the newest copy counts
    assert copy["last_copy"] == f"s3://{hyperpod.backup_bucket}/{COPIES}Mon/SHA256SUMS"
    told = [p for p in data["problems"] if "no daily copy of the controller's Slurm state" in p]
    assert bool(told) is late and result.exit_code == (1 if late else 0)
    if late:
        assert "the last is 49.0 h old" in told[0] and "journalctl -u mlcluster-backup-scheduled" in told[0]


@pytest.mark.parametrize("order", [1, -1], ids=["as-listed", "reversed"])
def test_the_last_daily_copy_does_not_depend_on_the_order_a_tie_is_listed_in(
    aws: Aws, hyperpod: World, fsx_answers: None, order: int
) -> None:
    """Two copies finished in the same second (status ``_daily_copy`` mutant 51 of the cli seed-4 sample): the
    one named is the same whichever S3 lists first (the later key)."""
    page = copies(hyperpod, 3.0, 3.0)
    page["Contents"] = page["Contents"][1].copy(), page["Contents"][3].copy()
    page["Contents"][1]["LastModified"] = page["Contents"][0]["LastModified"]
    page["Contents"] = list(page["Contents"])[::order]
    page["KeyCount"] = 2
    aws.answer("s3", "ListObjectsV2", page)
    data = json.loads(hyperpod.run("status", "hyperpod", "--json").stdout)
    assert data["cluster"]["daily_copy"]["last_copy"] == f"s3://{hyperpod.backup_bucket}/{COPIES}Tue/SHA256SUMS"


def test_status_says_when_there_is_no_daily_copy_yet(aws: Aws, hyperpod: World, fsx_answers: None) -> None:
    """A cluster created minutes ago has none yet: said, not a problem (the alarm waits two days too)."""
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 0, result.output
    assert f"daily copy of the controller's Slurm state: none yet in s3://{hyperpod.backup_bucket}/{COPIES}" in (
        result.output.replace("\n", "")
    )


def test_status_reports_a_failed_daily_copy_lookup(aws: Aws, hyperpod: World, fsx_answers: None) -> None:
    aws.answer("s3", "ListObjectsV2", error("AccessDenied", "Access Denied", 403))
    result = hyperpod.run("status", "hyperpod")
    assert result.exit_code == 3
    assert f"ListObjectsV2 s3://{hyperpod.backup_bucket}/{COPIES} failed: AccessDenied" in result.stderr
