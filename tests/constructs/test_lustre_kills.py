"""LustreStorage: behaviour `make mutation MODULE=constructs-security` showed no test asserted.

tests/constructs/test_lustre.py checks most of this on one module fixture, which mutmut maps to the first test
that builds it only; each test here builds its own file system, so every mutant meets all of them.

- The non-EFA group's whole rule set, the client group's rules with both ports of each range, and the
  placeholder egress that keeps EC2's allow-all egress off (``_security_group`` mutant 85,
  ``deny_default_egress`` mutant 22).
- ``connections`` is the file system's group with Lustre's port 988 by default, as documented: a consumer's
  ``allow_default_port_from`` opens exactly that (``__init__`` mutants 133, 134).
- An EFA file system passes the compliance packs: the all-traffic rules between its group and the clients'
  are acknowledged as EC2RestrictedCommonPorts with their reasons (``_security_group`` mutants 117, 122).
- An SSE-KMS data bucket's key lets this file system's FSx role in, and the DRA waits for the key policy
  (``__init__`` mutant 262).
- A refused removal policy is named in the error (``_check_file_system`` mutant 277).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.lustre import LustreStorage
from tests.constructs.test_lustre import CLUSTER_SG, ENV, network

PEER_SG = "sg-0fedcba9876543210"


def rules(t: Template) -> set[tuple[str, str, str, str, int | None, int | None]]:
    """Every separate rule as (kind, group, peer, protocol, from, to); ``fs`` names the file system's group."""
    (group_id,) = t.find_resources("AWS::EC2::SecurityGroup")
    me = {"Fn::GetAtt": [group_id, "GroupId"]}
    found = set()
    for kind, peer_key in (
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
        ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId"),
    ):
        for rule in t.find_resources(kind).values():
            p = rule["Properties"]
            group, peer = ("fs" if ref == me else ref for ref in (p["GroupId"], p[peer_key]))
            found.add((kind.rsplit(":", 1)[1], group, peer, p["IpProtocol"], p.get("FromPort"), p.get("ToPort")))
    return found


def test_the_lustre_group_and_the_clients_admit_lustre_only_on_both_port_ranges() -> None:
    stack = cdk.Stack(cdk.App(), "Fs", env=ENV)
    LustreStorage(stack, "Lustre", **network(stack))
    t = Template.from_stack(stack)
    ports = ((988, 988), (1018, 1023))
    assert rules(t) == {
        *(
            (kind, "fs", peer, "tcp", low, high)
            for kind in ("SecurityGroupIngress", "SecurityGroupEgress")
            for peer in ("fs", CLUSTER_SG)
            for low, high in ports
        ),
        *(("SecurityGroupIngress", CLUSTER_SG, "fs", "tcp", low, high) for low, high in ports),
    }
    (group,) = t.find_resources("AWS::EC2::SecurityGroup").values()
    # The group's own egress list must hold a rule, or EC2 adds its default allow-all egress: one that
    # matches no packet (ICMP type 252, code 86, to the broadcast address).
    assert group["Properties"]["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "IpProtocol": "icmp",
            "FromPort": 252,
            "ToPort": 86,
        }
    ]


def test_connections_open_the_file_systems_group_on_lustres_port() -> None:
    stack = cdk.Stack(cdk.App(), "Fs", env=ENV)
    lustre = LustreStorage(stack, "Lustre", **network(stack))
    assert lustre.connections.security_groups == [lustre.security_group]
    peer = ec2.SecurityGroup.from_security_group_id(stack, "Peer", PEER_SG)
    lustre.connections.allow_default_port_from(peer, "a library user's clients")
    added = {r for r in rules(Template.from_stack(stack)) if PEER_SG in r}
    assert added == {("SecurityGroupIngress", "fs", PEER_SG, "tcp", 988, 988)}


EFA: dict[str, Any] = {"efa_enabled": True, "storage_capacity_gib": 4800, "throughput_mbps_per_tib": 1000}


@pytest.mark.parametrize("efa", [False, True], ids=["tcp", "efa"])
def test_clients_in_a_stack_that_mounts_it_open_every_client_port_from_their_side(efa: bool) -> None:
    """The constructs guide's recipe: a library user's own instances, in a stack that reads the file system's
    DNS name, get every port of ``client_ports`` both ways (TCP 988 and 1018-1023; all traffic with EFA),
    asked from the clients' side so CDK puts every rule in the clients' stack (asked from the file system's
    side, the Storage stack would refer to the clients' group: a dependency cycle)."""
    app = cdk.App()
    storage = cdk.Stack(app, "Storage", env=ENV)
    lustre = LustreStorage(storage, "Lustre", **network(storage), **(EFA if efa else {}))
    notebooks = cdk.Stack(app, "Notebooks", env=ENV)
    vpc = ec2.Vpc.from_vpc_attributes(
        notebooks, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"]
    )
    group = ec2.SecurityGroup(notebooks, "Notebooks", vpc=vpc, allow_all_outbound=False)
    cdk.CfnOutput(notebooks, "Mount", value=lustre.dns_name)
    for port in lustre.client_ports:
        group.connections.allow_to(lustre.connections, port, "Lustre to the file system")
        group.connections.allow_from(lustre.connections, port, "Lustre from the file system")
    app.synth()  # no dependency cycle
    assert notebooks.dependencies == [storage]
    ports = [("-1", None, None)] if efa else [("tcp", 988, 988), ("tcp", 1018, 1023)]
    assert len(lustre.client_ports) == len(ports)
    found: set[tuple[str, str, str, int | None, int | None]] = set()
    template = Template.from_stack(notebooks)
    for kind in ("SecurityGroupIngress", "SecurityGroupEgress"):
        for rule in template.find_resources(f"AWS::EC2::{kind}").values():
            p = rule["Properties"]
            side = "notebooks" if "Fn::GetAtt" in p["GroupId"] else "fs"
            found.add((kind, side, p["IpProtocol"], p.get("FromPort"), p.get("ToPort")))
    for resource in template.find_resources("AWS::EC2::SecurityGroup").values():
        for rule in resource["Properties"].get("SecurityGroupEgress", []):
            if "DestinationSecurityGroupId" in rule:
                found.add(
                    ("SecurityGroupEgress", "notebooks", rule["IpProtocol"], rule.get("FromPort"), rule.get("ToPort"))
                )
    assert found == {
        (kind, side, protocol, low, high)
        for kind, side in (
            ("SecurityGroupIngress", "fs"),
            ("SecurityGroupEgress", "fs"),
            ("SecurityGroupIngress", "notebooks"),
            ("SecurityGroupEgress", "notebooks"),
        )
        for protocol, low, high in ports
    }
    # The Storage stack gained no rule that names the clients.
    assert "Notebooks" not in json.dumps(Template.from_stack(storage).to_json())


PACKS = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")


def test_an_efa_file_system_passes_the_compliance_packs_with_its_reasons(tmp_path: Path) -> None:
    """Synthesis fails on any finding not acknowledged: the EFA group's all-traffic rules meet the packs'
    EC2RestrictedCommonPorts, acknowledged on the group (its own rules) and on the clients' rule."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Efa", env=ENV)
    LustreStorage(
        stack,
        "Lustre",
        **network(stack),
        efa_enabled=True,
        storage_capacity_gib=4800,
        throughput_mbps_per_tib=1000,
        log_level="DISABLED",
    )
    cdk.Validations.of(app).add_plugins(
        AwsSolutionsChecks(app), NIST80053R5Checks(app), HIPAASecurityChecks(app), PCIDSS321Checks(app)
    )
    app.synth()  # raises on an unacknowledged finding
    found: dict[str, dict[str, str]] = {}
    for path, entries in json.loads((tmp_path / "Efa.metadata.json").read_text()).items():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                found.setdefault(path, {}).update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    assert found == {
        "/Efa/Lustre/SecurityGroup": dict.fromkeys(
            (f"{pack}-EC2RestrictedCommonPorts" for pack in PACKS),
            "The sources are this file system's group and the cluster nodes' group, not address ranges; the "
            "FSx for Lustre guide requires all traffic between them for EFA.",
        ),
        "/Efa/Lustre/ClientIngress1": dict.fromkeys(
            (f"{pack}-EC2RestrictedCommonPorts" for pack in PACKS),
            "The source is the EFA-enabled Lustre file system's own security group, not an address range; the "
            "FSx for Lustre guide requires all traffic from it to the client group.",
        ),
    }


def test_an_sse_kms_data_bucket_lets_this_file_system_in_before_the_association() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Kms", env=ENV)
    bucket = DataBucket(stack, "Data", encryption="kms")
    LustreStorage(stack, "Lustre", **network(stack), data_bucket=bucket.bucket)
    t = Template.from_stack(stack)
    (fs_id,) = t.find_resources("AWS::FSx::FileSystem")
    (key_id, key) = next(iter(t.find_resources("AWS::KMS::Key").items()))
    (fsx,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "ArnLike" in s.get("Condition", {})]
    # This file system's FSx service-linked role only (created by FSx when it links the bucket).
    assert fsx["Condition"]["ArnLike"]["aws:PrincipalArn"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":iam::",
                {"Ref": "AWS::AccountId"},
                ":role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_",
                {"Ref": fs_id},
            ],
        ]
    }
    (association,) = t.find_resources("AWS::FSx::DataRepositoryAssociation").values()
    assert key_id in association["DependsOn"]


def test_a_refused_removal_policy_is_named() -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    props: dict[str, Any] = {"removal_policy": cdk.RemovalPolicy.SNAPSHOT}
    with pytest.raises(
        ValueError,
        match=r"removal_policy: 'RemovalPolicy.SNAPSHOT' is not allowed; use RemovalPolicy.RETAIN, "
        r"RETAIN_ON_UPDATE_OR_DELETE or DESTROY$",
    ):
        LustreStorage(stack, "Lustre", **network(stack), **props)


def test_the_file_systems_group_says_what_it_admits_under_its_logical_id() -> None:
    """The group whole, under its logical id. ``GroupDescription`` is what an operator auditing the VPC reads
    of a group, and it is create-only: a changed one replaces the group the file system's interfaces are in
    (``_security_group`` mutant 5 of the second sample)."""
    stack = cdk.Stack(cdk.App(), "Fs", env=ENV)
    LustreStorage(stack, "Lustre", **network(stack))
    assert Template.from_stack(stack).find_resources("AWS::EC2::SecurityGroup") == {
        "LustreSecurityGroupA46A9855": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": "mlcluster FSx for Lustre: Lustre (TCP 988, 1018-1023) with cluster nodes and itself",
                "SecurityGroupEgress": [
                    {
                        "CidrIp": "255.255.255.255/32",
                        "Description": "Disallow all traffic",
                        "IpProtocol": "icmp",
                        "FromPort": 252,
                        "ToPort": 86,
                    }
                ],
                "VpcId": "vpc-0123456789abcdef0",
            },
        }
    }
