"""Fixtures for the HyperPod check tests: a moto world and a stateful fake of SageMaker.

``world`` builds, in moto, what a real deployment has before the checks run:
a VPC with a public and a private subnet (NAT), node security groups and the
lifecycle bucket with its scripts. ``fake`` stands in for SageMaker's
DescribeCluster and ListClusterNodes (moto's clusters cannot be busy, and
moto refuses lifecycle buckets not named ``sagemaker-``, which the service
does not): clusters move through the statuses the service reports, one step
per poll, and calls can be answered with the service's error codes. Every
request is validated against botocore's model. ``clock`` replaces the
handler's sleep and clock so bounded waits are walked without sleeping.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import types
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.botocore_stubber import MockRawResponse

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.aws import Clients

REGION = "us-east-1"
BUCKET = "mlc-lifecycle-test"
PREFIX = "lifecycle/v1/"
PARAMS_KEY = PREFIX + "provisioning_parameters.json"
ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/hyperpod-exec"


#: One session for the whole run: moto resets boto3's default session on every
#: mock, which would make each test parse the large service models again.
SESSION = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)


@functools.cache
def client(service: str) -> Any:
    """A test-side client (moto intercepts every client while a mock is active)."""
    return SESSION.client(service)  # type: ignore[call-overload]


@functools.cache
def handler_clients() -> Clients:
    """The handler's clients, kept for the whole run: building a SageMaker client costs half a second.

    Fixtures add their botocore hooks with a ``unique_id`` and remove them
    at teardown, so no test sees another's hooks.
    """
    return Clients(SESSION)


def group(name: str, instance_type: str, count: int | str, **extra: Any) -> dict[str, Any]:
    """One CreateCluster instance group as the construct writes it."""
    return {
        "InstanceGroupName": name,
        "InstanceType": instance_type,
        "InstanceCount": count,
        "LifeCycleConfig": {"SourceS3Uri": f"s3://{BUCKET}/{PREFIX}", "OnCreate": "on_create.sh"},
        "ExecutionRole": ROLE,
        "ThreadsPerCore": 1,
        "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
        **extra,
    }


@dataclasses.dataclass
class FakeCloudFormation:
    """DescribeStacks of the handler's own stack: its status, or the service's errors, oldest first.

    Update events ask it whether the stack is rolling back; every request is
    kept (``calls``) and validated against botocore's model by ``world``.
    """

    status: str = "UPDATE_IN_PROGRESS"
    errors: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def answer(self, model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        if model.name != "DescribeStacks":
            return service_error("AccessDenied", f"the checks may not call {model.name}", status=403)
        request = {k: v for k, v in params["body"].items() if k not in ("Action", "Version")}
        self.calls.append(request)
        if self.errors:
            code, message = self.errors.pop(0)
            return service_error(code, message, status=403 if code == "AccessDenied" else 400)
        stack = {
            "StackId": request["StackName"],
            "StackName": request["StackName"].split("/")[1],
            "CreationTime": 0,
            "StackStatus": self.status,
        }
        parsed = {"Stacks": [stack], "ResponseMetadata": {"HTTPStatusCode": 200}}
        return AWSResponse("https://stub.invalid/", 200, {}, None), parsed  # type: ignore[arg-type]


@dataclasses.dataclass
class World:
    """Ids of the moto resources and helpers to build resource properties."""

    vpc: str
    public_subnet: str
    private_subnet: str
    main_table_subnet: str
    main_table: str
    igw: str
    sg: str
    sg_ingress_only: str
    sg_no_rules: str
    #: The handler's stack as DescribeStacks reports it (``UPDATE_IN_PROGRESS`` unless a test says otherwise).
    stack: FakeCloudFormation = dataclasses.field(default_factory=FakeCloudFormation)

    @property
    def name(self) -> str:
        """The name of the cluster of the default ``spec()``."""
        return str(self.spec()["ClusterName"])

    def spec(self, name: str = "ml-cluster", workers: int | str = 2, **changes: Any) -> dict[str, Any]:
        """A CreateCluster request: controller, login and one worker group."""
        spec: dict[str, Any] = {
            "ClusterName": name,
            "InstanceGroups": [
                group("controller-machine", "ml.m5.12xlarge", 1),
                group("login", "ml.m5.4xlarge", 1),
                group("workers", "ml.p5.48xlarge", workers, OnStartDeepHealthChecks=["InstanceStress"]),
            ],
            "VpcConfig": {"SecurityGroupIds": [self.sg], "Subnets": [self.private_subnet]},
            "NodeRecovery": "Automatic",
            "Tags": [{"Key": "project", "Value": "mlcluster"}],
        }
        spec.update(changes)
        return spec

    def props(self, spec: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
        """The pre-flight's ResourceProperties as CloudFormation delivers them."""
        props: dict[str, Any] = {
            "ServiceToken": f"arn:aws:lambda:{REGION}:{DEFAULT_ACCOUNT_ID}:function:provider",
            "ClusterSpec": json.dumps(spec if spec is not None else self.spec()),
            "ProvisioningParametersKey": PARAMS_KEY,
        }
        props.update(changes)
        return props


def provisioning_parameters(*workers: str, login: str | None = "login") -> dict[str, Any]:
    """provisioning_parameters.json naming the controller, login and worker groups."""
    params: dict[str, Any] = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller-machine",
        "worker_groups": [{"instance_group_name": w, "partition_name": w} for w in workers or ("workers",)],
        "fsx_dns_name": "fs-0123.fsx.us-east-1.amazonaws.com",
        "fsx_mountname": "abcdefgh",
    }
    if login:
        params["login_group"] = login
    return params


def put_parameters(params: dict[str, Any]) -> None:
    """Upload provisioning_parameters.json to the lifecycle prefix."""
    client("s3").put_object(Bucket=BUCKET, Key=PARAMS_KEY, Body=json.dumps(params).encode())


def _self_rule(sg: str) -> list[dict[str, Any]]:
    return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]}]


def _build_world() -> World:
    ec2 = client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    main_only = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.2.0/24")["Subnet"]["SubnetId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    public_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    ec2.associate_route_table(RouteTableId=public_rt, SubnetId=public)
    eip = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=eip)["NatGateway"]["NatGatewayId"]
    private_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=private_rt, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    ec2.associate_route_table(RouteTableId=private_rt, SubnetId=private)
    main_table = ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
    )["RouteTables"][0]["RouteTableId"]

    def security_group(name: str, ingress: bool, egress: bool) -> str:
        sg = ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
        if ingress:
            ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=_self_rule(sg))
        if egress:
            ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=_self_rule(sg))
        return sg

    s3 = client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "on_create.sh", Body=b"#!/bin/bash\n")
    put_parameters(provisioning_parameters())
    return World(
        vpc=vpc,
        public_subnet=public,
        private_subnet=private,
        main_table_subnet=main_only,
        main_table=main_table,
        igw=igw,
        sg=security_group("nodes", ingress=True, egress=True),
        sg_ingress_only=security_group("ingress-only", ingress=True, egress=False),
        sg_no_rules=security_group("no-rules", ingress=False, egress=False),
    )


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A moto account with the network and the lifecycle bucket."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(app, "clients", handler_clients)
    cloudformation = app.clients().cloudformation
    with mock_aws():
        world = _build_world()
        cloudformation.meta.events.register_first(
            "before-call.cloudformation", world.stack.answer, unique_id="fake-cloudformation"
        )
        try:
            yield world
        finally:
            cloudformation.meta.events.unregister("before-call.cloudformation", unique_id="fake-cloudformation")
    shape = cloudformation.meta.service_model.operation_model("DescribeStacks").input_shape
    for params in world.stack.calls:
        validate_parameters(params, shape)


@pytest.fixture
def sagemaker_calls(world: World) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every SageMaker request the handler makes, as ``(operation, params)``.

    At teardown every request (including those a test cleared from the
    list) is validated against its operation's input shape in botocore's
    SageMaker model.
    """
    calls: list[tuple[str, dict[str, Any]]] = []
    every: list[tuple[str, dict[str, Any]]] = []
    model = app.clients().sagemaker.meta.service_model

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls.append((model.name, copy.deepcopy(params)))
        every.append(calls[-1])

    events = app.clients().sagemaker.meta.events
    events.register("before-parameter-build.sagemaker", record, unique_id="record-calls")
    yield calls
    events.unregister("before-parameter-build.sagemaker", unique_id="record-calls")
    for operation, params in every:
        validate_parameters(params, model.operation_model(operation).input_shape)


def operations(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The operation names, in order."""
    return [op for op, _ in calls]


def requests_of(calls: list[tuple[str, dict[str, Any]]], operation: str) -> list[dict[str, Any]]:
    """The params of every call to ``operation``."""
    return [params for op, params in calls if op == operation]


@pytest.fixture
def throttle(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, int], list[float]]]:
    """``throttle(operation, times)``: SageMaker answers ``operation`` with throttling ``times`` times.

    Injected at the HTTP layer (``before-send``), below botocore's retry
    handler, so the client's own retries are what recover. Returns the
    back-off delays botocore asked for (sleeping is skipped).
    """
    delays: list[float] = []
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=delays.append))
    armed: list[str] = []

    def arm(operation: str, times: int) -> list[float]:
        left = [times]

        def answer(request: Any, **_: Any) -> AWSResponse | None:
            if left[0] == 0:
                return None
            left[0] -= 1
            body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
            return AWSResponse(request.url, 400, {"x-amzn-RequestId": "throttled"}, MockRawResponse(body))

        event = f"before-send.sagemaker.{operation}"
        app.clients().sagemaker.meta.events.register_first(event, answer, unique_id=f"throttle-{operation}")
        armed.append(operation)
        return delays

    yield arm
    for operation in armed:
        app.clients().sagemaker.meta.events.unregister(
            f"before-send.sagemaker.{operation}", unique_id=f"throttle-{operation}"
        )


def service_error(code: str, message: str, status: int = 400) -> tuple[AWSResponse, dict[str, Any]]:
    """A parsed service error, as a botocore ``before-call`` hook returns it."""
    parsed = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return AWSResponse("https://stub.invalid/", status, {}, None), parsed  # type: ignore[arg-type]


@pytest.fixture
def intercept(world: World) -> Iterator[Callable[..., None]]:
    """``intercept(client, operation, answer, times=None)``: the handler's client gets ``answer`` instead.

    ``answer`` (from ``service_error``) is returned for the next ``times``
    calls (all calls when None); later calls go to moto.
    """
    registered: list[tuple[Any, str, str]] = []

    def arm(
        service_client: Any, operation: str, answer: tuple[AWSResponse, dict[str, Any]], times: int | None = None
    ) -> None:
        left = [times]

        def reply(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            if left[0] == 0:
                return None
            if left[0] is not None:
                left[0] -= 1
            return answer

        service_id = service_client.meta.service_model.service_id.hyphenize()
        event, unique = f"before-call.{service_id}.{operation}", f"intercept-{operation}"
        service_client.meta.events.register_first(event, reply, unique_id=unique)
        registered.append((service_client, event, unique))

    yield arm
    for service_client, event, unique in registered:
        service_client.meta.events.unregister(event, unique_id=unique)


def create_event(props: dict[str, Any], resource_type: str = app.PREFLIGHT) -> dict[str, Any]:
    """A Provider-framework Create event."""
    return {
        "RequestType": "Create",
        "RequestId": "req-1",
        "StackId": f"arn:aws:cloudformation:{REGION}:{DEFAULT_ACCOUNT_ID}:stack/dev/1",
        "LogicalResourceId": "ClusterPreflight" if resource_type == app.PREFLIGHT else "ClusterNodesReady",
        "ResourceType": resource_type,
        "ResourceProperties": props,
    }


def update_event(
    physical_id: str, props: dict[str, Any], old: dict[str, Any], resource_type: str = app.PREFLIGHT
) -> dict[str, Any]:
    """A Provider-framework Update event (a rollback is one with the old properties as the new)."""
    return {
        **create_event(props, resource_type),
        "RequestType": "Update",
        "PhysicalResourceId": physical_id,
        "OldResourceProperties": old,
    }


def delete_event(physical_id: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Provider-framework Delete event."""
    return {**create_event(props or {}), "RequestType": "Delete", "PhysicalResourceId": physical_id}


def nodes_event(
    arn: str, counts: dict[str, int], request: str = "Create", old: dict[str, int] | None = None
) -> dict[str, Any]:
    """An event for the node check, as CloudFormation sends it after the cluster resource."""
    props = {"ClusterArn": arn, "ExpectedCounts": json.dumps(counts), "SpecDigest": json.dumps(counts)}
    if request == "Create":
        return create_event(props, app.NODES_READY)
    assert old is not None
    old_props = {**props, "ExpectedCounts": json.dumps(old), "SpecDigest": json.dumps(old)}
    return update_event("ml-cluster-nodes", props, old_props, app.NODES_READY)


@dataclasses.dataclass
class FakeNode:
    """One node as ListClusterNodes reports it."""

    instance_id: str
    group: str
    status: str = "Running"
    message: str | None = None


@dataclasses.dataclass
class FakeCluster:
    """One cluster as DescribeCluster reports it, with the statuses it will show at the next polls."""

    name: str
    status: str
    targets: dict[str, int]
    nodes: list[FakeNode]
    #: Status per future poll (one entry is used per sleep of the handler); the last one stays.
    upcoming: list[str] = dataclasses.field(default_factory=list)
    #: Node changes per future poll: ``{instance id: status}``.
    node_changes: list[dict[str, str]] = dataclasses.field(default_factory=list)
    node_recovery: str = "Automatic"
    failure_message: str | None = None

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:{REGION}:{DEFAULT_ACCOUNT_ID}:cluster/{self.name[:12].lower():0<12}"

    def describe(self) -> dict[str, Any]:
        groups = []
        for group, target in self.targets.items():
            current = sum(1 for n in self.nodes if n.group == group and n.status != "ShuttingDown")
            groups.append({"InstanceGroupName": group, "TargetCount": target, "CurrentCount": current})
        return {
            "ClusterArn": self.arn,
            "ClusterName": self.name,
            "ClusterStatus": self.status,
            "InstanceGroups": groups,
            "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
            "NodeRecovery": self.node_recovery,
            **({"FailureMessage": self.failure_message} if self.failure_message else {}),
        }

    def tick(self) -> None:
        if self.upcoming:
            self.status = self.upcoming.pop(0)
        if self.node_changes:
            for node_id, status in self.node_changes.pop(0).items():
                found = [n for n in self.nodes if n.instance_id == node_id]
                if found:
                    found[0].status = status
                else:
                    group = node_id.rsplit("-", 1)[0]
                    self.nodes.append(FakeNode(node_id, group, status))


class FakeSageMaker:
    """DescribeCluster and ListClusterNodes answered from clusters that change as the service's do.

    Installed as a ``before-call`` hook on the handler's SageMaker client, after
    botocore built (and validated) the request. Any other SageMaker operation is
    refused: the checks must never change a cluster.
    """

    def __init__(self) -> None:
        self.clusters: dict[str, FakeCluster] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: Errors to answer per operation, oldest first: ``(code, message)``.
        self.errors: dict[str, list[tuple[str, str]]] = {}

    def add(
        self, name: str, counts: dict[str, int], status: str = "InService", node_status: str = "Running"
    ) -> FakeCluster:
        nodes = [FakeNode(f"{g}-{i}", g, node_status) for g, n in counts.items() for i in range(n)]
        cluster = FakeCluster(name, status, dict(counts), nodes)
        self.clusters[name] = cluster
        return cluster

    def find(self, name_or_arn: str) -> FakeCluster | None:
        for cluster in self.clusters.values():
            if name_or_arn in (cluster.name, cluster.arn):
                return cluster
        return None

    def tick(self) -> None:
        for cluster in self.clusters.values():
            cluster.tick()

    def answer(self, model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        operation = model.name
        params = json.loads(params["body"])
        self.calls.append((operation, copy.deepcopy(params)))
        queued = self.errors.get(operation)
        if queued:
            code, message = queued.pop(0)
            return service_error(code, message)
        if operation not in ("DescribeCluster", "ListClusterNodes"):
            return service_error("AccessDeniedException", f"the checks may not call {operation}", status=403)
        cluster = self.find(params["ClusterName"])
        if cluster is None:
            return service_error("ResourceNotFound", f"Cluster {params['ClusterName']} not found.")
        if operation == "DescribeCluster":
            parsed = cluster.describe()
        else:
            parsed = {
                "ClusterNodeSummaries": [
                    {
                        "InstanceGroupName": n.group,
                        "InstanceId": n.instance_id,
                        "InstanceType": "ml.p5.48xlarge",
                        "LaunchTime": 0,
                        "InstanceStatus": {"Status": n.status, **({"Message": n.message} if n.message else {})},
                    }
                    for n in cluster.nodes
                ]
            }
        parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
        return AWSResponse("https://stub.invalid/", 200, {}, None), parsed  # type: ignore[arg-type]


@pytest.fixture
def fake(world: World) -> Iterator[FakeSageMaker]:
    """The stateful SageMaker; every request it saw is validated against botocore's model at teardown."""
    service = FakeSageMaker()
    events = app.clients().sagemaker.meta.events
    events.register_first("before-call.sagemaker", service.answer, unique_id="fake-sagemaker")
    yield service
    events.unregister("before-call.sagemaker", unique_id="fake-sagemaker")
    model = app.clients().sagemaker.meta.service_model
    for operation, params in service.calls:
        validate_parameters(params, model.operation_model(operation).input_shape)


@dataclasses.dataclass
class Clock:
    """The handler's clock: ``sleep`` moves time on and lets the fake service take one step."""

    now: float = 0.0
    sleeps: list[float] = dataclasses.field(default_factory=list)


@pytest.fixture
def clock(fake: FakeSageMaker, monkeypatch: pytest.MonkeyPatch) -> Clock:
    state = Clock()

    def sleep(seconds: float) -> None:
        state.sleeps.append(seconds)
        state.now += seconds
        fake.tick()

    monkeypatch.setattr(app, "sleep", sleep)
    monkeypatch.setattr(app, "clock", lambda: state.now)
    return state
