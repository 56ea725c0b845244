"""A moto-backed AWS for the operator command, with every request checked against botocore's model.

moto serves CloudFormation, SageMaker clusters and nodes, EC2, FSx file systems,
SSM SendCommand and S3. What it does not serve (FSx DRAs and data repository
tasks, SSM CancelCommand, SageMaker
UpdateClusterSoftware) is answered by :meth:`Aws.answer` with responses that
are validated against the operation's output shape, as botocore's Stubber does.
A :class:`FakeNode` says what the head node prints for each script, behind
moto's Run Command or a stand-in for ``aws ssm start-session``.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters
from click.testing import CliRunner, Result

from mlcluster.cli import context, patch, runcommand
from mlcluster.cli.main import cli

ACCOUNT = "123456789012"
#: The patch backup bucket's KMS key (stack output PatchBackupKeyArn).
BACKUP_KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
REPO = Path(__file__).resolve().parents[2]
TRANSCRIPTS = Path(__file__).parent / "transcripts"

Answer = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def error(code: str, message: str, status: int = 400) -> dict[str, Any]:
    """A recorded-shape AWS error response."""
    return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


@dataclass
class Aws:
    """Every request the command made (validated), and answers for operations moto does not serve."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    answers: dict[tuple[str, str], list[Answer]] = field(default_factory=lambda: defaultdict(list))
    sticky: dict[tuple[str, str], Answer] = field(default_factory=dict)

    def answer(self, service: str, operation: str, *responses: Answer, always: Answer | None = None) -> None:
        """Queue ``responses`` for ``operation`` (one per call), or answer every call with ``always``."""
        self.answers[(service, operation)].extend(responses)
        if always is not None:
            self.sticky[(service, operation)] = always

    def operations(self, service: str | None = None) -> list[str]:
        return [op for svc, op, _ in self.calls if service is None or svc == service]

    def params(self, operation: str) -> list[dict[str, Any]]:
        return [params for _, op, params in self.calls if op == operation]

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        events = client.meta.events

        def validate(params: dict[str, Any], model: Any, **_: Any) -> None:
            validate_parameters(params, model.input_shape)  # raises ParamValidationError on a bad request
            self.calls.append((service, model.name, dict(params)))

        def respond(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            key = (service, model.name)
            if self.answers.get(key):
                answer = self.answers[key].pop(0)
            elif key in self.sticky:
                answer = self.sticky[key]
            else:
                return None
            response = answer(self.calls[-1][2]) if callable(answer) else answer  # the request validate() saw
            if "Error" in response:
                status = response["ResponseMetadata"]["HTTPStatusCode"]
                return AWSResponse("https://stub", status, {}, None), response  # type: ignore[arg-type]
            if model.output_shape is not None:
                validate_parameters(response, model.output_shape)
            return AWSResponse("https://stub", 200, {}, None), {"ResponseMetadata": {"HTTPStatusCode": 200}, **response}  # type: ignore[arg-type]

        events.register_first(f"before-parameter-build.{service}.*", validate)
        events.register_first(f"before-call.{service}.*", respond)


@dataclass
class FakeNode:
    """What the head node or controller prints for each script SSM runs: (status, exit code, output)."""

    replies: list[tuple[str, tuple[str, int, str]]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    sessions: list[list[str]] = field(default_factory=list)

    def on(self, fragment: str, output: str, code: int = 0, status: str | None = None) -> None:
        """Reply to the first script containing ``fragment`` (later registrations win)."""
        self.replies.insert(0, (fragment, (status or ("Success" if code == 0 else "Failed"), code, output)))

    def reply(self, script: str) -> tuple[str, int, str]:
        self.scripts.append(script)
        for fragment, reply in self.replies:
            if fragment in script:
                return reply
        raise AssertionError(f"the fake node has no reply for:\n{script}")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """moto for every AWS call the command makes, with request validation and the recorded answers."""
    from moto import mock_aws
    from moto.fsx import models as fsx_models
    from moto.ssm import models as ssm_models

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("COLUMNS", "110")
    # moto would build ~1,300 stand-in AMIs per region on EC2's first call; no test here reads an image.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    monkeypatch.setattr(runcommand, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(patch, "POLL_SECONDS", 0.0)
    # moto leaves out what the real API always returns, or cannot resolve HyperPod SSM targets.
    to_dict = fsx_models.FileSystem.to_dict
    monkeypatch.setattr(fsx_models.FileSystem, "to_dict", lambda self: {"Lifecycle": "AVAILABLE", **to_dict(self)})
    monkeypatch.setattr(
        ssm_models.Command,
        "_get_instance_ids_from_targets",
        lambda self: [v for t in self.targets if t["Key"] == "InstanceIds" for v in t["Values"]],
    )
    from moto.sagemaker import models as sagemaker_models

    summary = sagemaker_models.ClusterNode.summary

    def node_summary(self: Any) -> dict[str, Any]:
        described = summary(self)
        described["InstanceStatus"] = {"Status": self.status, "Message": getattr(self, "message", "")}
        return described

    monkeypatch.setattr(sagemaker_models.ClusterNode, "summary", node_summary)
    recorder = Aws()
    original = context.Target.client

    def client(self: context.Target, service: str) -> Any:
        fresh = service not in self._clients
        made = original(self, service)
        if fresh:
            recorder.attach(made)
        return made

    monkeypatch.setattr(context.Target, "client", client)
    with mock_aws():
        yield recorder


@pytest.fixture
def node(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    """The head node or controller: answers moto's Run Command (EC2 ids) and Session Manager sessions (HyperPod).

    For Run Command, moto records SendCommand and serves GetCommandInvocation; the fake node fills in the
    output. For HyperPod, ``aws ssm start-session`` is replaced by a fake process that decodes the script
    from the parameters file, as the node's shell would, and prints what the node would print.
    """
    import base64
    import subprocess

    from moto.ssm import models as ssm_models

    from mlcluster.cli import runcommand

    fake = FakeNode()
    invocation = ssm_models.Command.invocation_response

    def run_command_output(self: Any, instance_id: str, plugin_name: str) -> dict[str, Any]:
        answer = invocation(self, instance_id, plugin_name)
        status, code, output = fake.reply(self.parameters["commands"][0])
        answer.update(Status=status, StatusDetails=status, ResponseCode=code, StandardOutputContent=output)
        return answer

    def session(argv: list[str], timeout: float, **_: Any) -> subprocess.CompletedProcess[str]:
        fake.sessions.append(argv)
        aws.calls.append(("session", "start-session", {"target": argv[argv.index("--target") + 1]}))
        parameters = json.loads(Path(argv[argv.index("--parameters") + 1].removeprefix("file://")).read_text())
        encoded = parameters["command"][0].split("echo ", 1)[1].split(" |", 1)[0]
        script = base64.b64decode(encoded).decode()
        status, code, output = fake.reply(script)
        if status == "InProgress":
            raise subprocess.TimeoutExpired(argv, timeout)
        stdout = f"\r\nStarting session with SessionId: ops-0a1b2c3d4e5f6\r\n{output}MLCLUSTER_EXIT={code}\r\n\r\n"
        stdout += "\r\nExiting session with sessionId: ops-0a1b2c3d4e5f6.\r\n\r\n"
        return subprocess.CompletedProcess(argv, 0, stdout, "")

    monkeypatch.setattr(ssm_models.Command, "invocation_response", run_command_output)
    monkeypatch.setattr(runcommand.subprocess, "run", session)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    aws.answer("ssm", "CancelCommand", always={})  # moto does not serve CancelCommand
    return fake


def transcript(name: str) -> str:
    return (TRANSCRIPTS / name).read_text(encoding="utf-8")


@dataclass
class World:
    """A deployed environment in moto: its folder, region and the names the command will look up."""

    environments: Path
    env: str
    region: str
    cluster: str
    bucket: str
    file_system: str = ""
    cluster_arn: str = ""
    head_node: str = ""
    backup_bucket: str = ""

    def run(self, *args: str, input: str | None = None) -> Result:
        return invoke(*args, "--environments", str(self.environments), input=input)


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@functools.cache
def aws_client(service: str, region: str) -> Any:
    """A test-side client, made once per run: making one costs about 25 ms, and moto serves every
    client while a mock is active (its reset at each test's mock clears the state, not the clients)."""
    import boto3

    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.client(service, region_name=region)  # type: ignore[call-overload]


def _copy_env(tmp_path: Path, name: str, region: str) -> Path:
    folder = tmp_path / "environments"
    folder.mkdir(exist_ok=True)
    data = yaml.safe_load((REPO / "environments" / f"{name}.yaml").read_text())
    data["region"] = region
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return folder


def _stack(region: str, name: str, outputs: dict[str, str]) -> None:

    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    aws_client("cloudformation", region).create_stack(StackName=name, TemplateBody=json.dumps(template))


def _network(region: str) -> tuple[str, str]:

    ec2 = aws_client("ec2", region)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="mlcluster", Description="cluster", VpcId=vpc)["GroupId"]
    return subnet, group


def _storage(env: str, region: str, subnet: str) -> tuple[str, str]:

    bucket = f"{env}-data-{ACCOUNT}"
    s3 = aws_client("s3", region)
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    fs = aws_client("fsx", region).create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=2400,
        SubnetIds=[subnet],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
    )["FileSystem"]
    _stack(
        region,
        f"{env}-Storage",
        {
            "DataBucketName": bucket,
            "LustreFileSystemId": fs["FileSystemId"],
            "LustreDnsName": fs["DNSName"],
            "LustreMountName": "abcdefgh",
        },
    )
    return bucket, fs["FileSystemId"]


#: The GrafanaUrl output of an Observability stack with Amazon Managed Grafana on (p5 turns it on).
GRAFANA_URL = "https://g-0123456789.grafana-workspace.{region}.amazonaws.com"


def _observability(region: str, env: str, cluster: str | None = None, *, grafana: bool = False) -> None:
    console = f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard/"
    outputs = {
        "DashboardUrl": f"{console}mlcluster-{env}-{region}",
        "AlarmTopicArn": f"arn:aws:sns:{region}:{ACCOUNT}:a",
    }
    if cluster is not None:
        outputs["ClusterDashboardUrl"] = f"{console}{cluster}-{region}"
    if grafana:
        outputs["GrafanaUrl"] = GRAFANA_URL.format(region=region)
    _stack(region, f"{env}-Observability", outputs)


@pytest.fixture
def hyperpod(aws: Aws, tmp_path: Path) -> World:
    """environments/hyperpod.yaml deployed in us-west-2: stacks, a 2 x p5 HyperPod cluster, FSx, the bucket."""
    from moto.sagemaker.models import sagemaker_backends

    region, env, name = "us-west-2", "hyperpod", "ml-hyperpod"
    folder = _copy_env(tmp_path, env, region)
    subnet, group = _network(region)
    _stack(region, f"{env}-Network", {"VpcId": "vpc-1", "SecurityGroupId": group})
    bucket, fs_id = _storage(env, region, subnet)
    _observability(region, env)

    def instance_group(group_name: str, instance_type: str, count: int) -> dict[str, Any]:
        return {
            "InstanceGroupName": group_name,
            "InstanceType": instance_type,
            "InstanceCount": count,
            "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": f"s3://sagemaker-{env}-lifecycle/", "OnCreate": "on_create.sh"},
            "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/{env}-execution",
        }

    arn = aws_client("sagemaker", region).create_cluster(
        ClusterName=name,
        InstanceGroups=[
            instance_group("controller-machine", "ml.m5.12xlarge", 1),
            instance_group("login-group", "ml.m5.4xlarge", 1),
            instance_group("worker-group-1", "ml.p5.48xlarge", 2),
        ],
        VpcConfig={"SecurityGroupIds": [group], "Subnets": [subnet]},
    )["ClusterArn"]
    # moto puts the name in the ARN and names nodes after their group; HyperPod uses a cluster id
    # and EC2 instance ids, which the SSM targets are built from.
    cluster = sagemaker_backends[ACCOUNT][region].clusters[name]
    arn = cluster.arn = arn.replace(f"cluster/{name}", "cluster/k3x9q2a1b2c3")
    ids = iter(["i-0c0a1b2c3d4e5f601", "i-0b1a2b3c4d5e6f702", "i-0f1e2d3c4b5a69803", "i-0e1d2c3b4a5968704"])
    for cluster_node in cluster.nodes.values():
        cluster_node.instance_id = next(ids)
        cluster_node.message = ""
    backup_bucket = f"{env}-patch-backups-{ACCOUNT}"
    aws_client("s3", region).create_bucket(
        Bucket=backup_bucket, CreateBucketConfiguration={"LocationConstraint": region}
    )
    _stack(
        region,
        f"{env}-Cluster",
        {
            "ClusterName": name,
            "ClusterArn": arn,
            "PatchBackupBucketName": backup_bucket,
            "PatchBackupKeyArn": BACKUP_KEY_ARN,
            "ControllerSsmCommand": (
                f'aws ssm start-session --region {region} --target "sagemaker-cluster:k3x9q2a1b2c3_controller-machine-'
                f"$(aws sagemaker list-cluster-nodes --region {region} --cluster-name {name} --query "
                '"ClusterNodeSummaries[?InstanceGroupName==\'controller-machine\'].InstanceId | [0]" --output text)"'
            ),
        },
    )
    return World(folder, env, region, name, bucket, fs_id, arn, backup_bucket=backup_bucket)


def launch_pcluster_nodes(
    region: str, cluster: str, subnet: str, node_type: str, instance_type: str, count: int, queue: str | None = None
) -> list[str]:
    """``count`` EC2 instances tagged as ParallelCluster tags its nodes (cluster name, node type, queue)."""
    tags = [
        {"Key": "parallelcluster:cluster-name", "Value": cluster},
        {"Key": "parallelcluster:node-type", "Value": node_type},
    ]
    if queue:
        tags.append({"Key": "parallelcluster:queue-name", "Value": queue})
    made = aws_client("ec2", region).run_instances(
        ImageId="ami-12c6146b",
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [i["InstanceId"] for i in made["Instances"]]


@pytest.fixture
def pcluster(aws: Aws, tmp_path: Path) -> World:
    """environments/p5.yaml deployed in us-east-2: stacks, a head node and 4 p5 compute nodes, FSx, the bucket."""

    region, env, name = "us-east-2", "p5", "p5-train"
    folder = _copy_env(tmp_path, env, region)
    subnet, group = _network(region)
    _stack(region, f"{env}-Network", {"VpcId": "vpc-1", "SecurityGroupId": group})
    bucket, fs_id = _storage(env, region, subnet)
    _observability(region, env, name, grafana=True)
    head = launch_pcluster_nodes(region, name, subnet, "HeadNode", "m5.8xlarge", 1)[0]
    launch_pcluster_nodes(region, name, subnet, "Compute", "p5.48xlarge", 4, "compute-gpu")
    _stack(region, name, {})  # ParallelCluster's own stack, named after the cluster
    _stack(
        region,
        f"{env}-Cluster",
        {
            "ClusterName": name,
            "HeadNodeInstanceId": head,
            "HeadNodePrivateIp": "10.0.0.10",
            "HeadNodeSsmCommand": f"aws ssm start-session --region {region} --target {head}",
            "ValidationMessages": "[]",
        },
    )
    return World(folder, env, region, name, bucket, fs_id, head_node=head)


@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the AWS CLI nor the Session Manager plugin on PATH."""
    monkeypatch.setattr(shutil, "which", lambda _name: None)
