"""Fixtures for the HyperPod cluster handler tests: a moto world and request recording.

``world`` builds, in moto, what a real deployment has before the custom
resource runs: a VPC with a public and a private subnet (NAT), node security
groups, the lifecycle bucket with its scripts, and the watcher state
machine. ``sagemaker_calls`` records every request the handler sends to
SageMaker and, at teardown, validates each against botocore's model.
moto has no UpdateCluster: ``world`` answers it with a botocore
``before-call`` hook that applies the request to moto's cluster (as
botocore's Stubber does, but leaving the other operations to moto).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import io
import json
import types
import urllib.error
import urllib.request
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
from moto.sagemaker.models import ClusterNode, sagemaker_backends

from mlcluster.handlers.hyperpod_cluster import app, waitsignal
from mlcluster.handlers.hyperpod_cluster.aws import Clients

REGION = "us-east-1"
BUCKET = "sagemaker-mlcluster-lifecycle-test"
PREFIX = "lifecycle/v1/"
PARAMS_KEY = PREFIX + "provisioning_parameters.json"
ROLE = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/hyperpod-exec"
HANDLE = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation/{}?X-Amz-Signature=secret"


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


def handle_url(tag: str) -> str:
    """A presigned-looking wait handle URL, distinct per ``tag``."""
    return HANDLE.format(tag)


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


def expected_name(spec: dict[str, Any]) -> str:
    """The physical name the handler must give ``spec``'s cluster, worked out here from the documented rule.

    ``<ClusterName>-<first 6 hex digits of sha256>`` over the compact, key-sorted
    JSON of VpcConfig and, per group (sorted by name), its name, instance
    type, execution role and threads per core (an integer once coerced).
    """
    groups = [
        {
            "InstanceGroupName": g["InstanceGroupName"],
            "InstanceType": g["InstanceType"],
            "ExecutionRole": g["ExecutionRole"],
            "ThreadsPerCore": int(g["ThreadsPerCore"]),
        }
        for g in sorted(spec["InstanceGroups"], key=lambda g: str(g["InstanceGroupName"]))
    ]
    fields = json.dumps(
        {"InstanceGroups": groups, "VpcConfig": spec["VpcConfig"]}, sort_keys=True, separators=(",", ":")
    )
    return f"{spec['ClusterName']}-{hashlib.sha256(fields.encode()).hexdigest()[:6]}"


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
    state_machine: str

    @property
    def name(self) -> str:
        """The physical name of the cluster created from the default ``spec()``."""
        return expected_name(self.spec())

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

    def props(self, spec: dict[str, Any] | None = None, handle: str = "create", **changes: Any) -> dict[str, Any]:
        """ResourceProperties as CloudFormation delivers them (numbers as strings)."""
        props: dict[str, Any] = {
            "ServiceToken": f"arn:aws:lambda:{REGION}:{DEFAULT_ACCOUNT_ID}:function:provider",
            "ClusterSpec": json.dumps(spec if spec is not None else self.spec()),
            "WaitHandleUrl": handle_url(handle),
            "CreateTimeoutSeconds": "43200",
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


def moto_cluster(name: str) -> Any:
    """moto's cluster object, to move it between states as the service would."""
    return sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION].clusters[name]


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
    sfn = client("stepfunctions")
    machine = sfn.create_state_machine(
        name="hyperpod-watcher",
        definition=json.dumps({"StartAt": "Watch", "States": {"Watch": {"Type": "Pass", "End": True}}}),
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/watcher",
    )["stateMachineArn"]
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
        state_machine=machine,
    )


def _emulate_update_cluster(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    """Apply an UpdateCluster request to moto's cluster, as the service would accept it."""
    request = json.loads(params["body"])
    backend = sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION]
    cluster = backend.clusters.get(request["ClusterName"])
    if cluster is None:
        return service_error("ResourceNotFound", f"Cluster {request['ClusterName']} not found.")
    groups = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
    unknown = sorted(set(request.get("InstanceGroupsToDelete", [])) - set(groups))
    if unknown:
        return service_error("ValidationException", f"Instance groups {unknown} do not exist.")
    for spec in request.get("InstanceGroups", []):
        name, count = spec["InstanceGroupName"], spec["InstanceCount"]
        stored = {k: v for k, v in spec.items() if k != "InstanceCount"}
        groups[name] = {**groups.get(name, {}), **stored, "TargetCount": count, "CurrentCount": count}
        nodes = sorted(n for n, node in cluster.nodes.items() if node.instance_group_name == name)
        for node_id in nodes[count:]:
            del cluster.nodes[node_id]
        for i in range(len(nodes), count):
            node_id = f"{name}-{i}"
            cluster.nodes[node_id] = ClusterNode(
                REGION, DEFAULT_ACCOUNT_ID, cluster.cluster_name, name, spec["InstanceType"],
                spec["LifeCycleConfig"], spec["ExecutionRole"], node_id, spec.get("ThreadsPerCore"),
            )  # fmt: skip
    for name in request.get("InstanceGroupsToDelete", []):
        del groups[name]
        for node_id in [n for n, node in cluster.nodes.items() if node.instance_group_name == name]:
            del cluster.nodes[node_id]
    cluster.instance_groups = list(groups.values())
    cluster.status = "Updating"
    parsed = {"ClusterArn": cluster.arn, "ResponseMetadata": {"HTTPStatusCode": 200}}
    return AWSResponse("https://stub.invalid/", 200, {}, None), parsed  # type: ignore[arg-type]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A moto account with the network, lifecycle bucket and watcher state machine."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(app, "clients", handler_clients)
    events = handler_clients().sagemaker.meta.events
    with mock_aws():
        built = _build_world()
        monkeypatch.setenv(app.WATCHER_ENV, built.state_machine)
        events.register("before-call.sagemaker.UpdateCluster", _emulate_update_cluster, unique_id="emulate-update")
        yield built
        events.unregister("before-call.sagemaker.UpdateCluster", unique_id="emulate-update")


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


@dataclasses.dataclass
class Signals:
    """PUTs sent to wait handle URLs, and failures to inject into them."""

    sent: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: HTTP status codes to answer with, one per attempt, before answering 200.
    errors: list[int] = dataclasses.field(default_factory=list)
    #: Back-off pauses between attempts (not slept).
    pauses: list[float] = dataclasses.field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(s["body"]) for s in self.sent]


class _Response(io.BytesIO):
    status = 200


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> Signals:
    """Capture the handler's PUTs to the wait handle instead of sending them."""
    captured = Signals()

    def urlopen(request: urllib.request.Request, timeout: float = 0) -> _Response:
        captured.sent.append(
            {
                "url": request.full_url,
                "method": request.get_method(),
                "content_type": request.get_header("Content-type"),
                "body": request.data,
                "timeout": timeout,
            }
        )
        if captured.errors:
            code = captured.errors.pop(0)
            raise urllib.error.HTTPError(request.full_url, code, "injected", {}, None)  # type: ignore[arg-type]
        return _Response()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(waitsignal, "time", types.SimpleNamespace(sleep=captured.pauses.append))
    return captured


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


def watcher_inputs(world: World) -> list[dict[str, Any]]:
    """Inputs of the watcher executions started so far, oldest first."""
    sfn = client("stepfunctions")
    executions = sfn.list_executions(stateMachineArn=world.state_machine)["executions"]
    ordered = sorted(executions, key=lambda e: e["startDate"])
    return [json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in ordered]


def create_event(props: dict[str, Any]) -> dict[str, Any]:
    """A Provider-framework Create event."""
    return {
        "RequestType": "Create",
        "RequestId": "req-1",
        "StackId": f"arn:aws:cloudformation:{REGION}:{DEFAULT_ACCOUNT_ID}:stack/dev/1",
        "LogicalResourceId": "Cluster",
        "ResourceType": "Custom::HyperPodCluster",
        "ResourceProperties": props,
    }


def update_event(physical_id: str, props: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """A Provider-framework Update event."""
    return {
        **create_event(props),
        "RequestType": "Update",
        "PhysicalResourceId": physical_id,
        "OldResourceProperties": old,
    }


def delete_event(physical_id: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Provider-framework Delete event."""
    return {**create_event(props or {}), "RequestType": "Delete", "PhysicalResourceId": physical_id}
