"""Gate: every node group of every example reaches the internet, S3 and its file systems.

Proved over the synthesized templates (mlcluster/analysis/reachability.py);
then each way to break a path is made on a copy of the templates and must
fail the proof with a message naming what broke.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from mlcluster.analysis.assembly import Assembly, load_assembly
from mlcluster.analysis.reachability import NFS_PORTS, check_environment, file_systems, node_groups
from mlcluster.app import build_app
from tests.gates.gate_support import Templates, one, resources
from tests.support import ENVIRONMENTS, EXAMPLES, cfn_lint, write_env

Change = Callable[[Templates], object]


def _pcluster(templates: Templates, env: str) -> dict[str, Any]:
    cluster = one(templates, f"{env}/Cluster", "Custom::PclusterCluster")
    config: dict[str, Any] = cluster["Properties"]["ClusterConfiguration"]
    return config


def _subnet_ref(templates: Templates, env: str, prefix: str) -> dict[str, Any]:
    """A reference from the cluster stack to the network stack's subnet ``prefix...``, as CDK writes weak ones."""
    network = templates[f"{env}/Network"]
    (logical_id,) = [
        k for k, r in network["Resources"].items() if k.startswith(prefix) and r["Type"] == "AWS::EC2::Subnet"
    ]
    network.setdefault("Outputs", {})[f"Test{logical_id}"] = {"Value": {"Ref": logical_id}}
    return {"Fn::GetStackOutput": {"StackName": f"{env}-Network", "OutputName": f"Test{logical_id}"}}


def head_node_in_public_subnet(elastic_ip: bool | None) -> Change:
    def change(t: Templates) -> None:
        networking = _pcluster(t, "p5")["HeadNode"]["Networking"]
        networking["SubnetId"] = _subnet_ref(t, "p5", "NetworkPublic1Subnet")
        networking.pop("ElasticIp", None)
        if elastic_ip is not None:
            networking["ElasticIp"] = elastic_ip

    return change


def head_node_in_private_subnet(t: Templates) -> None:
    networking = _pcluster(t, "p5")["HeadNode"]["Networking"]
    networking["SubnetId"] = _subnet_ref(t, "p5", "NetworkPrivate1Subnet")
    networking.pop("ElasticIp", None)


def drop(stack: str, kind: str, where: Callable[[str, dict[str, Any]], bool]) -> Change:
    def change(t: Templates) -> None:
        found = [k for k, r in resources(t, stack, kind).items() if where(k, r)]
        assert found, f"nothing to drop in {stack}"
        for key in found:
            del t[stack]["Resources"][key]

    return change


def both(*changes: Change) -> Change:
    def change(t: Templates) -> None:
        for c in changes:
            c(t)

    return change


def _props(key: str) -> Callable[[str, dict[str, Any]], bool]:
    return lambda k, r: k.startswith(key)


def map_public_ip(t: Templates) -> None:
    one(t, "p5/Network", "AWS::EC2::Subnet", _props("NetworkPublic1Subnet"))["Properties"]["MapPublicIpOnLaunch"] = True


def no_endpoint_route(stack: str) -> Change:
    def change(t: Templates) -> None:
        endpoint = one(t, stack, "AWS::EC2::VPCEndpoint", _props("NetworkS3Endpoint"))
        endpoint["Properties"]["RouteTableIds"] = [
            r for r in endpoint["Properties"]["RouteTableIds"] if "Private" not in r["Ref"]
        ]

    return change


def lustre_rule(env: str, direction: str, peer: str, port: int) -> Change:
    """Drop the Lustre group's rule for ``port`` from itself (``self``) or from the nodes (``nodes``)."""
    kind = f"AWS::EC2::SecurityGroup{direction}"

    def where(key: str, rule: dict[str, Any]) -> bool:
        props = rule["Properties"]
        source = props.get("SourceSecurityGroupId") or props.get("DestinationSecurityGroupId")
        from_self = isinstance(source, dict) and "Fn::GetAtt" in source and source["Fn::GetAtt"][0].startswith("Lustre")
        return (
            key.startswith("LustreSecurityGroup")
            and props.get("FromPort") == port
            and (from_self if peer == "self" else not from_self)
        )

    return drop(f"{env}/Storage", kind, where)


def node_group_without_egress(t: Templates) -> None:
    group = one(t, "hyperpod/Network", "AWS::EC2::SecurityGroup")
    group["Properties"]["SecurityGroupEgress"] = [
        {"CidrIp": "255.255.255.255/32", "IpProtocol": "icmp", "FromPort": 252, "ToPort": 86, "Description": "none"}
    ]
    drop("hyperpod/Network", "AWS::EC2::SecurityGroupEgress", lambda k, r: True)(t)


def lustre_in_another_zone(t: Templates) -> None:
    network = t["hyperpod/Network"]["Resources"]
    subnet = next(
        r for k, r in network.items() if k.startswith("NetworkPrivate1Subnet") and r["Type"] == "AWS::EC2::Subnet"
    )
    network["OtherZoneSubnet"] = {
        "Type": "AWS::EC2::Subnet",
        "Properties": {**subnet["Properties"], "AvailabilityZoneId": "use1-az6", "CidrBlock": "10.0.240.0/20"},
    }
    t["hyperpod/Network"]["Outputs"]["OtherZone"] = {
        "Value": {"Ref": "OtherZoneSubnet"},
        "Export": {"Name": "hyperpod-OtherZone"},
    }
    lustre = one(t, "hyperpod/Storage", "AWS::FSx::FileSystem")
    lustre["Properties"]["SubnetIds"] = [{"Fn::ImportValue": "hyperpod-OtherZone"}]


def efa_enabled_lustre(t: Templates) -> None:
    lustre = one(t, "hyperpod/Storage", "AWS::FSx::FileSystem")
    lustre["Properties"]["LustreConfiguration"]["EfaEnabled"] = True


def openzfs_exported_elsewhere(t: Templates) -> None:
    zfs = one(t, "trn1/Storage", "AWS::FSx::FileSystem", lambda k, r: r["Properties"]["FileSystemType"] == "OPENZFS")
    exports = zfs["Properties"]["OpenZFSConfiguration"]["RootVolumeConfiguration"]["NfsExports"]
    exports[0]["ClientConfigurations"] = [{"Clients": "10.9.0.0/16", "Options": ["rw"]}]


def openzfs_without_port(port: int, protocol: str) -> Change:
    def where(key: str, rule: dict[str, Any]) -> bool:
        props = rule["Properties"]
        return key.startswith("OpenZfsSecurityGroup") and props["FromPort"] == port and props["IpProtocol"] == protocol

    return drop("trn1/Storage", "AWS::EC2::SecurityGroupIngress", where)


def nat_without_ip(t: Templates) -> None:
    nat = one(t, "hyperpod/Network", "AWS::EC2::NatGateway")
    nat["Properties"].pop("AllocationId")
    nat["Properties"]["ConnectivityType"] = "private"


BREAKS: list[tuple[str, str, Change, str]] = [
    (
        "no NAT route",
        "hyperpod",
        drop("hyperpod/Network", "AWS::EC2::Route", _props("NetworkPrivate1DefaultRoute")),
        "instance group worker-group-1: no way to the internet: subnet ${hyperpod/Network|NetworkPrivate1Subnet",
    ),
    (
        "NAT without a route to the internet gateway",
        "hyperpod",
        drop("hyperpod/Network", "AWS::EC2::Route", _props("NetworkPublic1DefaultRoute")),
        "without a route to an attached internet gateway",
    ),
    (
        "internet gateway not attached",
        "hyperpod",
        drop("hyperpod/Network", "AWS::EC2::VPCGatewayAttachment", lambda k, r: True),
        "without a route to an attached internet gateway",
    ),
    ("private NAT gateway", "hyperpod", nat_without_ip, "is private (no Elastic IP)"),
    (
        "subnet without route table",
        "hyperpod",
        drop("hyperpod/Network", "AWS::EC2::SubnetRouteTableAssociation", _props("NetworkPrivate1")),
        "has no route table association",
    ),
    (
        "public subnet without public IP",
        "p5",
        head_node_in_public_subnet(elastic_ip=None),
        "head node: no way to the internet",
    ),
    (
        "public subnet, ElasticIp false",
        "p5",
        head_node_in_public_subnet(elastic_ip=False),
        "routes to an internet gateway but the node gets no public IP",
    ),
    (
        "no S3 endpoint route and no NAT",
        "hyperpod",
        both(
            no_endpoint_route("hyperpod/Network"),
            drop("hyperpod/Network", "AWS::EC2::Route", _props("NetworkPrivate1DefaultRoute")),
        ),
        "cannot reach S3: no S3 gateway endpoint",
    ),
    (
        "Lustre group without 988 from nodes",
        "hyperpod",
        lustre_rule("hyperpod", "Ingress", "nodes", 988),
        "admit no TCP 988 from the node's groups",
    ),
    (
        "Lustre group without 1018-1023 from nodes",
        "p5",
        lustre_rule("p5", "Ingress", "nodes", 1018),
        "admit no TCP 1018-1023 from the node's groups",
    ),
    (
        "Lustre group sending nothing to the nodes",
        "hyperpod",
        lustre_rule("hyperpod", "Egress", "nodes", 988),
        "send no TCP 988 to the node's groups",
    ),
    (
        "Lustre group without self rule",
        "hyperpod",
        lustre_rule("hyperpod", "Ingress", "self", 988),
        "do not admit TCP 988 from themselves (self rule)",
    ),
    ("node groups without egress", "hyperpod", node_group_without_egress, "no egress rule of its security groups"),
    ("Lustre in another zone", "hyperpod", lustre_in_another_zone, "every I/O would cross zones"),
    (
        "EFA-enabled Lustre with Lustre ports only",
        "hyperpod",
        efa_enabled_lustre,
        "admit no all traffic from the node's groups",
    ),
    ("OpenZFS exported to other addresses", "trn1", openzfs_exported_elsewhere, "exports /home to ['10.9.0.0/16']"),
    ("OpenZFS group without NFS 2049/udp", "trn1", openzfs_without_port(2049, "udp"), "admit no UDP 2049"),
    ("OpenZFS group without 20001-20003/tcp", "trn1", openzfs_without_port(20001, "tcp"), "admit no TCP 20001-20003"),
]


@pytest.mark.parametrize(("label", "env", "change", "expected"), BREAKS, ids=[b[0] for b in BREAKS])
def test_every_break_fails_the_proof(
    broken: Callable[[Change], Assembly], label: str, env: str, change: Change, expected: str
) -> None:
    problems = check_environment(broken(change), env).problems
    assert any(expected in p for p in problems), f"{label}: {problems}"


EDGES: list[tuple[str, str, Change]] = [
    ("public subnet with an Elastic IP", "p5", head_node_in_public_subnet(elastic_ip=True)),
    ("public subnet mapping public IPs", "p5", both(head_node_in_public_subnet(elastic_ip=None), map_public_ip)),
    ("private subnet behind NAT", "p5", head_node_in_private_subnet),
    ("S3 through NAT when the endpoint is not on the route table", "hyperpod", no_endpoint_route("hyperpod/Network")),
    (
        "ParallelCluster's own groups carry the egress",
        "p5",
        both(
            head_node_in_private_subnet,
            lambda t: one(t, "p5/Network", "AWS::EC2::SecurityGroup")["Properties"].update(
                SecurityGroupEgress=[
                    {"CidrIp": "255.255.255.255/32", "IpProtocol": "icmp", "FromPort": 252, "ToPort": 86}
                ]
            ),
        ),
    ),
]


@pytest.mark.parametrize(("label", "env", "change"), EDGES, ids=[e[0] for e in EDGES])
def test_edges_that_still_work(broken: Callable[[Change], Assembly], label: str, env: str, change: Change) -> None:
    report = check_environment(broken(change), env)
    assert report.problems == [], label


@pytest.mark.parametrize("env", EXAMPLES)
def test_every_example_reaches_internet_s3_and_file_systems(examples: Assembly, env: str) -> None:
    assert check_environment(examples, env).problems == []


def test_every_cluster_example_has_node_groups_of_its_backend(examples: Assembly) -> None:
    names = {env: [g.name for g in node_groups(examples, env)] for env in examples.environments}
    assert names["dev"] == []
    assert names["hyperpod"] == [
        "instance group controller-machine",
        "instance group login-group",
        "instance group worker-group-1",
    ]
    assert "head node" in names["p4de"] and "login pool login" in names["p4de"]
    assert "queue compute-gpu" in names["p4de"] and "queue inference-gpu" in names["p4de"]
    paths = check_environment(examples, "hyperpod").paths
    assert paths["instance group worker-group-1"] == {"internet": "NAT", "s3": "gateway endpoint"}


def test_nfs_ports_cover_tcp_and_udp() -> None:
    assert {(p, low) for p, low, _ in NFS_PORTS} == {(p, n) for p in ("tcp", "udp") for n in (111, 2049, 20001)}


@pytest.fixture(scope="module")
def efa_assembly(tmp_path_factory: pytest.TempPathFactory, examples: Assembly) -> Assembly:
    """The HyperPod example with an EFA-enabled Lustre file system.

    Only the network and storage stacks are synthesized (cdk-nag on, no cluster: seconds, not a minute);
    the same network gives the same logical ids, so the example's cluster stack is reused as is.
    """
    tmp = tmp_path_factory.mktemp("efa")
    data = yaml.safe_load((ENVIRONMENTS / "hyperpod.yaml").read_text())
    data["cluster"] = {"backend": "none"}
    data.pop("observability", None)  # no cluster: its Prometheus workspace is refused (observability is off)
    data.setdefault("storage", {})["lustre"] = {
        **data.get("storage", {}).get("lustre", {}),
        "efa_enabled": True,
        "storage_capacity_gib": 4800,
        "throughput_mbps_per_tib": 1000,
    }
    write_env(tmp / "envs", "hyperpod", data)
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()  # cdk-nag: the all-traffic rules EFA needs are acknowledged with their reason
    synthesized = load_assembly(tmp / "out")
    assert synthesized.templates["hyperpod/Network"] == examples.templates["hyperpod/Network"]
    templates = {**examples.templates, "hyperpod/Storage": synthesized.templates["hyperpod/Storage"]}
    return Assembly(templates, assets=tmp / "out")


def test_efa_enabled_lustre_rules_satisfy_the_proof(efa_assembly: Assembly) -> None:
    (fs,) = [f for f in file_systems(efa_assembly, "hyperpod") if f.kind == "LUSTRE"]
    assert fs.efa
    assert check_environment(efa_assembly, "hyperpod").problems == []


def test_efa_enabled_lustre_templates_are_cfn_lint_clean(efa_assembly: Assembly) -> None:
    assert efa_assembly.assets is not None
    files = sorted(str(p) for p in (efa_assembly.assets / "assembly-hyperpod").glob("*Storage*.template.json"))
    assert files
    assert cfn_lint(files) == {f: [] for f in files}
