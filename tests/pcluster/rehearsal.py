"""Build the rehearsal document for tools/pcluster_validate.py from synthesized templates.

Every CloudFormation reference in an example's ``ClusterConfiguration`` is
resolved to a symbol ``@{<stack>/<logical id>}``, and the resources our
stacks would have created before ParallelCluster's provider runs (VPC,
subnets, route tables with their IGW and NAT routes, security groups with
their rules, FSx file systems, the node-script bucket with its objects, IAM
managed policies, capacity reservation groups, the accounting database's
endpoint and secrets) become the ``world`` that
moto serves under those symbols. Nothing is hand-picked per example: a
change to the templates changes the rehearsal.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcluster.lifecycle.pcluster import PCLUSTER_DIR
from tests.pcluster.cfn_resolve import Resolver
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON, cluster_resource
from tests.support import ROOT

VALIDATE_TOOL = ROOT / "tools" / "pcluster_validate.py"
CR_ID = re.compile(r"cr-[0-9a-f]{17}")


def node_script_keys(prefix: str = "pcluster/") -> list[str]:
    """The object keys the node-script bucket holds after the deployment (files of the lifecycle folder)."""
    return sorted(
        prefix + str(p.relative_to(PCLUSTER_DIR))
        for p in PCLUSTER_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p.name != "__init__.py"
    )


def region_of(zone: str) -> str:
    """``us-east-2a`` -> ``us-east-2``."""
    return zone[:-1]


class ExampleWorld:
    """Collects the world of one example while resolving its cluster configuration to symbols."""

    def __init__(self, templates: Mapping[str, Mapping[str, Any]], example: str, region: str) -> None:
        self.example = example
        self.templates = {k: v for k, v in templates.items() if k.startswith(f"{example}/")}
        self.resolver = Resolver(self.templates, physical=self.physical, region=region)
        self.world: dict[str, list[dict[str, Any]]] = {}

    def symbol(self, stack: str, logical: str) -> str:
        return f"{stack}/{logical}"

    def physical(self, stack: str, logical: str, resource: Mapping[str, Any], attribute: str | None) -> str:
        kind = resource["Type"]
        if kind == "AWS::FSx::FileSystem" and attribute == "RootVolumeId":
            return "@{" + self.symbol(stack, logical) + ".RootVolumeId}"
        return "@{" + self.symbol(stack, logical) + "}"

    def sym(self, stack: str, value: Any) -> str:
        """A reference inside a template, as the bare symbol it resolves to."""
        resolved = self.resolver.resolve(stack, value)
        match = re.fullmatch(r"@\{([^}]+)\}", str(resolved))
        if match is None:
            raise ValueError(f"{stack}: {value!r} is not a reference to a resource")
        return match[1]

    def add(self, kind: str, item: dict[str, Any]) -> None:
        self.world.setdefault(kind, []).append(item)

    def build(self) -> None:
        """Walk the example's Network, Storage and Cluster templates and record what they create."""
        network = f"{self.example}/Network"
        for stack, template in self.templates.items():
            resources = template["Resources"]
            for logical, resource in resources.items():
                props = resource.get("Properties", {})
                me = self.symbol(stack, logical)
                kind = resource["Type"]
                if kind == "AWS::EC2::VPC":
                    self.add("vpcs", {"id": me, "cidr": props["CidrBlock"]})
                elif kind == "AWS::EC2::Subnet":
                    zone = props.get("AvailabilityZone") or f"{self.resolver.region}a"
                    self.add(
                        "subnets",
                        {
                            "id": me,
                            "vpc": self.sym(stack, props["VpcId"]),
                            "cidr": props["CidrBlock"],
                            "az": zone,
                            "map_public_ip": bool(props.get("MapPublicIpOnLaunch")),
                        },
                    )
                elif kind == "AWS::EC2::VPCGatewayAttachment" and "InternetGatewayId" in props:
                    self.add(
                        "internet_gateways",
                        {"id": self.sym(stack, props["InternetGatewayId"]), "vpc": self.sym(stack, props["VpcId"])},
                    )
                elif kind == "AWS::EC2::NatGateway":
                    self.add("nat_gateways", {"id": me, "subnet": self.sym(stack, props["SubnetId"])})
                elif kind == "AWS::EC2::RouteTable":
                    subnets = [
                        self.sym(stack, r["Properties"]["SubnetId"])
                        for r in resources.values()
                        if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation"
                        and r["Properties"]["RouteTableId"] == {"Ref": logical}
                    ]
                    routes = []
                    for r in resources.values():
                        rp = r.get("Properties", {})
                        if r["Type"] != "AWS::EC2::Route" or rp.get("RouteTableId") != {"Ref": logical}:
                            continue
                        if "GatewayId" in rp:
                            routes.append(
                                {"cidr": rp["DestinationCidrBlock"], "gateway": self.sym(stack, rp["GatewayId"])}
                            )
                        elif "NatGatewayId" in rp:
                            routes.append(
                                {"cidr": rp["DestinationCidrBlock"], "nat": self.sym(stack, rp["NatGatewayId"])}
                            )
                    self.add(
                        "route_tables",
                        {"id": me, "vpc": self.sym(stack, props["VpcId"]), "subnets": subnets, "routes": routes},
                    )
                elif kind == "AWS::EC2::SecurityGroup":
                    self.add("security_groups", self._security_group(stack, logical, resources))
                elif kind == "AWS::FSx::FileSystem":
                    item = {
                        "id": me,
                        "type": props["FileSystemType"],
                        "subnet": self.sym(stack, props["SubnetIds"][0]),
                        "security_groups": [self.sym(stack, g) for g in props["SecurityGroupIds"]],
                    }
                    if props["FileSystemType"] == "OPENZFS":
                        item["volume"] = f"{me}.RootVolumeId"
                    self.add("file_systems", item)
                elif kind == "AWS::S3::Bucket" and stack.endswith("/Cluster"):
                    name = re.sub(r"[^a-z0-9-]", "-", f"mlc-{self.example}-{logical}".lower())[:63].strip("-")
                    self.add("buckets", {"id": me, "name": name, "keys": node_script_keys()})
                elif kind == "AWS::IAM::ManagedPolicy":
                    self.add(
                        "policies",
                        {
                            "id": me,
                            "name": f"{self.example}-{logical}"[:128],
                            "path": props.get("Path", "/"),
                            "document": {
                                "Version": "2012-10-17",
                                "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}],
                            },
                        },
                    )
                elif kind == "AWS::RDS::DBCluster":
                    # storage.accounting: the configuration names its endpoint (SlurmSettings.Database.Uri).
                    self.add("databases", {"id": me, "name": f"{self.example}-{logical}".lower()[:63]})
                elif kind == "AWS::SecretsManager::Secret":
                    # slurmdbd's password (SlurmSettings.Database.PasswordSecretArn): DescribeSecret must find it.
                    self.add("secrets", {"id": me, "name": f"{self.example}-{logical}"[:512]})
                elif kind == "AWS::ResourceGroups::Group":
                    ids = CR_ID.findall(json.dumps(props.get("Resources", [])))
                    self.add("resource_groups", {"id": me, "name": props["Name"], "reservations": []})
                    self._pending_group = (me, ids)
        assert network in self.templates

    def _security_group(self, stack: str, logical: str, resources: Mapping[str, Any]) -> dict[str, Any]:
        props = resources[logical]["Properties"]
        me = self.symbol(stack, logical)
        rules: dict[str, list[dict[str, Any]]] = {"ingress": [], "egress": []}

        def port(value: Any) -> int:
            """A rule's port; CDK's rotation rule reads the accounting database's ``Endpoint.Port``: its ``Port``."""
            if isinstance(value, dict) and "Fn::GetAtt" in value:
                target, attribute = value["Fn::GetAtt"]
                assert resources[target]["Type"] == "AWS::RDS::DBCluster" and attribute == "Endpoint.Port", value
                return int(resources[target]["Properties"]["Port"])
            return int(value)

        def rule(spec: Mapping[str, Any], peer_key: str) -> dict[str, Any]:
            out: dict[str, Any] = {"protocol": str(spec.get("IpProtocol", "-1"))}
            if out["protocol"] != "-1":
                out["from"], out["to"] = port(spec["FromPort"]), port(spec["ToPort"])
            if "CidrIp" in spec:
                out["cidr"] = spec["CidrIp"]
            if peer_key in spec:
                out["group"] = self.sym(stack, spec[peer_key])
            return out

        for spec in props.get("SecurityGroupIngress", []):
            rules["ingress"].append(rule(spec, "SourceSecurityGroupId"))
        for spec in props.get("SecurityGroupEgress", []):
            rules["egress"].append(rule(spec, "DestinationSecurityGroupId"))
        for r in resources.values():
            rp = r.get("Properties", {})
            if (
                r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
                and self.sym(stack, rp["GroupId"]) == me
            ):
                if r["Type"].endswith("Ingress"):
                    rules["ingress"].append(rule(rp, "SourceSecurityGroupId"))
                else:
                    rules["egress"].append(rule(rp, "DestinationSecurityGroupId"))
        return {"id": me, "vpc": self.sym(stack, props["VpcId"]), "description": props["GroupDescription"], **rules}

    def config(self) -> tuple[str, dict[str, Any]]:
        """The cluster name and the configuration with every reference a symbol; adds the reservations it targets."""
        stack, cluster = cluster_resource(dict(self.templates), self.example)
        config = self.resolver.resolve(stack, cluster["Properties"]["ClusterConfiguration"])
        zone = next(s["az"] for s in self.world["subnets"])
        for queue in config["Scheduling"]["SlurmQueues"]:
            for cr in queue["ComputeResources"]:
                target = cr.get("CapacityReservationTarget", {})
                if "CapacityReservationId" in target:
                    self.add(
                        "capacity_reservations",
                        {"id": target["CapacityReservationId"], "instance_type": cr["InstanceType"], "az": zone},
                    )
                if "CapacityReservationResourceGroupArn" in target:
                    symbol = target["CapacityReservationResourceGroupArn"][2:-1]
                    (group,) = [g for g in self.world["resource_groups"] if g["id"] == symbol]
                    group_id, ids = self._pending_group
                    assert group_id == symbol
                    group["reservations"] = [{"id": i, "instance_type": cr["InstanceType"], "az": zone} for i in ids]
        return cluster["Properties"]["ClusterName"], config


def example_document(templates: Mapping[str, Mapping[str, Any]], example: str, region: str) -> dict[str, Any]:
    """The rehearsal document for one example."""
    world = ExampleWorld(templates, example, region)
    world.build()
    cluster_name, config = world.config()
    return {
        "region": region,
        "world": world.world,
        "configs": {example: {"cluster_name": cluster_name, "config": config}},
    }


def run_rehearsal(documents: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Run tools/pcluster_validate.py once for every document; findings by configuration name."""
    path = folder / "rehearsal.json"
    path.write_text(json.dumps(documents), encoding="utf-8")
    proc = subprocess.run(
        [str(PCLUSTER_PYTHON), str(VALIDATE_TOOL), str(path)], capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"pcluster_validate.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    results: dict[str, Any] = json.loads(proc.stdout)
    return results
