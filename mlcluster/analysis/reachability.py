"""Can every node group reach what it needs? Proved over the synthesized templates.

For each node group of a ParallelCluster cluster (head node, login pools,
queues: read from the ``ClusterConfiguration`` of ``Custom::PclusterCluster``)
or a HyperPod cluster (each instance group: ``VpcConfig`` or its
``OverrideVpcConfig``), its subnets are followed through their route table
associations, routes, NAT gateways (and the NAT's own subnet's route to an
attached internet gateway), public-IP settings and gateway endpoints, and its
security groups are matched against the file systems' groups:

- **internet**: a default route to a NAT gateway that itself reaches an
  internet gateway, or to an internet gateway with a public IP on the node
  (``MapPublicIpOnLaunch``, ``HeadNode.Networking.ElasticIp``, a queue's
  ``AssignPublicIp``);
- **S3**: an S3 gateway endpoint on the subnet's route table, or the internet;
- **Lustre**: TCP 988 and 1018-1023 out of one of the node's groups to the
  file system and into one of the file system's groups from the node (and out
  of them to the node: ParallelCluster's ``ExistingFsxNetworkingValidator``
  checks both directions), and the
  file system's group admitting those ports from itself (an EFA-enabled file
  system: all traffic both ways and within its group, as the FSx for Lustre
  guide's "EFA-enabled security groups" asks); the node's subnets in the file
  system's zone (Lustre is single-AZ, and EFA does not cross zones);
- **OpenZFS** (ParallelCluster nodes that mount it): NFS (TCP and UDP 111,
  2049, 20001-20003) the same way, and an NFS export covering the node's subnet;
- **the Slurm accounting database** (``storage.accounting``, the HyperPod
  controller): its port both ways between the controller's groups and the
  database's groups, none from the other instance groups' groups, the
  same for its secret's rotation function (whose subnets must also reach the
  internet for Secrets Manager, with TCP 443 out), no database ingress from an
  address range and no database subnet routing to an internet gateway.

A security group without a ``SecurityGroupEgress`` property keeps the
default allow-all egress rule, as EC2 creates it. ParallelCluster adds groups
of its own to every node unless ``SecurityGroups`` replaces them; they allow
all egress (``cli/src/pcluster/templates`` in aws-parallelcluster 3.16), and
no file system refers to them, so only our groups can admit a node to a file
system.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlcluster.analysis.assembly import Assembly, Resource

#: Metadata key on an accounting database's cluster resource: true when every node's group is admitted on purpose
#: (``storage.accounting.admit_node_group``, the upgrade bridge); the gate then accepts the workers' path.
ADMITS_NODE_GROUP = "mlcluster:admitsNodeGroup"

ANY = "0.0.0.0/0"
#: LNet (988) and the Lustre client's privileged source ports (1018-1023).
LUSTRE_PORTS: tuple[tuple[str, int, int], ...] = (("tcp", 988, 988), ("tcp", 1018, 1023))
#: FSx for OpenZFS NFS: portmapper, nfsd, mountd/lockd/statd, over TCP and UDP.
NFS_PORTS: tuple[tuple[str, int, int], ...] = tuple(
    (proto, low, high) for low, high in ((111, 111), (2049, 2049), (20001, 20003)) for proto in ("tcp", "udp")
)
#: An Aurora MySQL cluster's port when its template names none.
MYSQL_PORT = 3306
_PROTOCOLS = {"6": "tcp", "17": "udp", "1": "icmp", "-1": "-1", "all": "-1"}


@dataclass(frozen=True)
class NodeGroup:
    """Nodes launched alike: one subnet list, one set of security groups, one public-IP setting."""

    environment: str
    backend: str
    name: str
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...]
    #: ParallelCluster's own groups (all egress) are attached too.
    managed_egress: bool = False
    #: An Elastic IP (head node) or ``AssignPublicIp`` (queue); the subnet's own setting counts too.
    public_ip: bool = False
    #: The group's nodes use EFA (a ParallelCluster queue with Efa.Enabled; every HyperPod group): drawn on the
    #: environment pictures (tools/environment_pictures.py).
    efa: bool = False
    mounts_openzfs: bool = False
    #: The node that runs slurmctld and slurmdbd (HyperPod: the controller group, ``SlurmConfig.NodeType``
    #: ``Controller`` when given, else the first group, as ``HyperPodCluster`` lists it first).
    slurm_controller: bool = False


@dataclass(frozen=True)
class FileSystem:
    """An FSx file system: where it is and which groups guard it."""

    resource: Resource
    kind: str
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...]
    efa: bool
    export_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One security group rule, in or out; ``peer`` is a CIDR or a group's canonical name."""

    protocol: str
    low: int
    high: int
    peer: str

    def covers(self, protocol: str, low: int, high: int) -> bool:
        """Does this rule allow every port ``low``-``high`` of ``protocol``?"""
        if self.protocol == "-1":
            return True
        return self.protocol == protocol and (self.low == -1 or (self.low <= low and high <= self.high))


@dataclass
class Report:
    """What was proved for one environment, and every failure with its reason."""

    environment: str
    groups: list[NodeGroup] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Per group: how it reaches the internet ("NAT", "internet gateway") and S3 ("gateway endpoint", ...).
    paths: dict[str, dict[str, str]] = field(default_factory=dict)


def node_groups(assembly: Assembly, environment: str) -> list[NodeGroup]:
    """Every node group of the environment's cluster (none without one)."""
    groups: list[NodeGroup] = []
    for resource in assembly.resources(environment, "Custom::PclusterCluster"):
        config = assembly.render(resource.stack, resource.properties.get("ClusterConfiguration", {}))
        groups += _pcluster_groups(environment, config)
    for resource in assembly.resources(environment, "AWS::SageMaker::Cluster"):
        groups += _hyperpod_groups(environment, assembly.render(resource.stack, dict(resource.properties)))
    return groups


def _security_groups(networking: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    if networking.get("SecurityGroups"):
        return tuple(networking["SecurityGroups"]), False
    return tuple(networking.get("AdditionalSecurityGroups", [])), True


#: The name of ParallelCluster's head node group: it runs slurmctld and slurmdbd.
HEAD_NODE = "head node"


def _pcluster_groups(environment: str, config: dict[str, Any]) -> list[NodeGroup]:
    storage = {s.get("StorageType") for s in config.get("SharedStorage", [])}
    zfs = "FsxOpenZfs" in storage
    head = config.get("HeadNode", {}).get("Networking", {})
    groups, managed = _security_groups(head)
    elastic = head.get("ElasticIp", False)
    out = [
        NodeGroup(
            environment,
            "pcluster",
            HEAD_NODE,
            (head["SubnetId"],),
            groups,
            managed_egress=managed,
            public_ip=elastic not in (False, "false", None),
            mounts_openzfs=zfs,
        )
    ]
    for pool in config.get("LoginNodes", {}).get("Pools", []):
        net = pool.get("Networking", {})
        groups, managed = _security_groups(net)
        out.append(
            NodeGroup(
                environment,
                "pcluster",
                f"login pool {pool['Name']}",
                tuple(net.get("SubnetIds", [])),
                groups,
                managed_egress=managed,
                mounts_openzfs=zfs,
            )
        )
    for queue in config.get("Scheduling", {}).get("SlurmQueues", []):
        net = queue.get("Networking", {})
        groups, managed = _security_groups(net)
        efa = any(cr.get("Efa", {}).get("Enabled") for cr in queue.get("ComputeResources", []))
        out.append(
            NodeGroup(
                environment,
                "pcluster",
                f"queue {queue['Name']}",
                tuple(net.get("SubnetIds", [])),
                groups,
                managed_egress=managed,
                public_ip=net.get("AssignPublicIp") in (True, "true"),
                efa=bool(efa),
                mounts_openzfs=zfs,
            )
        )
    return out


def _hyperpod_groups(environment: str, spec: dict[str, Any]) -> list[NodeGroup]:
    vpc = spec.get("VpcConfig", {})
    out = []
    groups = spec.get("InstanceGroups", [])
    typed = [g for g in groups if g.get("SlurmConfig", {}).get("NodeType")]
    for index, group in enumerate(groups):
        own = group.get("OverrideVpcConfig") or vpc
        node_type = group.get("SlurmConfig", {}).get("NodeType")
        controller = node_type == "Controller" if typed else index == 0
        out.append(
            NodeGroup(
                environment,
                "hyperpod",
                f"instance group {group['InstanceGroupName']}",
                tuple(own.get("Subnets", [])),
                tuple(own.get("SecurityGroupIds", [])),
                efa=True,
                slurm_controller=controller,
            )
        )
    return out


def file_systems(assembly: Assembly, environment: str) -> list[FileSystem]:
    """Every FSx file system of the environment."""
    out = []
    for fs in assembly.resources(environment, "AWS::FSx::FileSystem"):
        props = assembly.render(fs.stack, dict(fs.properties))
        lustre = props.get("LustreConfiguration", {})
        exports = props.get("OpenZFSConfiguration", {}).get("RootVolumeConfiguration", {}).get("NfsExports", [])
        cidrs = tuple(c["Clients"] for e in exports for c in e.get("ClientConfigurations", []))
        out.append(
            FileSystem(
                fs,
                props.get("FileSystemType", ""),
                tuple(props.get("SubnetIds", [])),
                tuple(assembly.identity(g) for g in props.get("SecurityGroupIds", [])),
                lustre.get("EfaEnabled") in (True, "true"),
                cidrs,
            )
        )
    return out


class _Network:
    """Route tables, routes, gateways, endpoints and security group rules of one environment."""

    def __init__(self, assembly: Assembly, environment: str) -> None:
        self.a = assembly
        self.env = environment
        self.tables: dict[str, str] = {}
        for assoc in assembly.resources(environment, "AWS::EC2::SubnetRouteTableAssociation"):
            subnet = assembly.identity(assembly.text(assoc.stack, assoc.properties.get("SubnetId")))
            self.tables[subnet] = assembly.identity(assembly.text(assoc.stack, assoc.properties.get("RouteTableId")))
        self.routes: dict[str, list[dict[str, Any]]] = {}
        for route in assembly.resources(environment, "AWS::EC2::Route"):
            props = assembly.render(route.stack, dict(route.properties))
            self.routes.setdefault(assembly.identity(props.get("RouteTableId", "")), []).append(props)
        self.attached: set[tuple[str, str]] = set()
        for att in assembly.resources(environment, "AWS::EC2::VPCGatewayAttachment"):
            props = assembly.render(att.stack, dict(att.properties))
            self.attached.add(
                (assembly.identity(props.get("VpcId", "")), assembly.identity(props.get("InternetGatewayId", "")))
            )
        self.endpoints = [
            assembly.render(e.stack, dict(e.properties))
            for e in assembly.resources(environment, "AWS::EC2::VPCEndpoint")
        ]
        self.ingress: dict[str, list[Rule]] = {}
        self.egress: dict[str, list[Rule]] = {}
        for sg in assembly.resources(environment, "AWS::EC2::SecurityGroup"):
            props = assembly.render(sg.stack, dict(sg.properties))
            self.ingress.setdefault(sg.name, []).extend(
                self._rule(r, "in") for r in props.get("SecurityGroupIngress", [])
            )
            egress = props.get("SecurityGroupEgress")
            default = [Rule("-1", -1, -1, ANY)] if egress is None else []
            self.egress.setdefault(sg.name, []).extend(default + [self._rule(r, "out") for r in egress or []])
        for kind, table in (
            ("AWS::EC2::SecurityGroupIngress", self.ingress),
            ("AWS::EC2::SecurityGroupEgress", self.egress),
        ):
            for rule in assembly.resources(environment, kind):
                props = assembly.render(rule.stack, dict(rule.properties))
                group = assembly.identity(props.get("GroupId", ""))
                table.setdefault(group, []).append(self._rule(props, "in" if "Ingress" in kind else "out"))

    def _rule(self, props: dict[str, Any], direction: str) -> Rule:
        protocol = _PROTOCOLS.get(str(props.get("IpProtocol", "-1")).lower(), str(props.get("IpProtocol")).lower())
        keys = ("SourceSecurityGroupId",) if direction == "in" else ("DestinationSecurityGroupId",)
        peer = next((self.a.identity(props[k]) for k in keys if props.get(k)), None)
        if peer is None:
            peer = props.get("CidrIp") or props.get("DestinationPrefixListId") or props.get("SourcePrefixListId") or ""
        return Rule(protocol, self._port(props.get("FromPort", -1)), self._port(props.get("ToPort", -1)), str(peer))

    def _port(self, value: Any) -> int:
        """A rule's port: a number, or an Aurora cluster's ``Endpoint.Port`` (CDK's rotation rules refer to it).

        That attribute is the cluster's ``Port`` property (3306 for MySQL engines when absent); any other
        attribute cannot be proved here and raises.
        """
        if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
            return int(value)
        text = str(value)
        found = self.a.resource(text)
        if found is not None and found.type == "AWS::RDS::DBCluster" and text.endswith(".Endpoint.Port}"):
            return int(found.properties.get("Port", MYSQL_PORT))
        raise ValueError(f"{self.env}: a security group rule's port {text} is not a number this gate can read")

    def subnet(self, name: str) -> Resource | None:
        found = self.a.resource(name)
        return found if found is not None and found.type == "AWS::EC2::Subnet" else None

    def default_target(self, subnet: str) -> tuple[str, Resource | None]:
        """The subnet's route table and the resource its 0.0.0.0/0 route points at."""
        table = self.tables.get(subnet, "")
        for route in self.routes.get(table, []):
            if route.get("DestinationCidrBlock") != ANY:
                continue
            for key in ("NatGatewayId", "GatewayId", "TransitGatewayId", "VpcPeeringConnectionId"):
                if route.get(key):
                    return table, self.a.resource(self.a.identity(route[key]))
        return table, None

    def via_igw(self, subnet: Resource, target: Resource | None) -> bool:
        if target is None or target.type != "AWS::EC2::InternetGateway":
            return False
        vpc = self.a.identity(self.a.text(subnet.stack, subnet.properties.get("VpcId")))
        return (vpc, target.name) in self.attached

    def internet(self, subnet: Resource, public_ip: bool) -> tuple[str | None, str]:
        """How the subnet reaches the internet (``None`` and the reason when it cannot)."""
        table, target = self.default_target(subnet.name)
        if not table:
            return None, "has no route table association"
        if target is None:
            return None, f"route table {table} has no default route (0.0.0.0/0) to a NAT or internet gateway"
        if target.type == "AWS::EC2::NatGateway":
            nat = self.a.render(target.stack, dict(target.properties))
            if nat.get("ConnectivityType", "public") != "public" or not nat.get("AllocationId"):
                return None, f"NAT gateway {target.name} is private (no Elastic IP)"
            nat_subnet = self.subnet(self.a.identity(nat.get("SubnetId", "")))
            if nat_subnet is None or not self.via_igw(nat_subnet, self.default_target(nat_subnet.name)[1]):
                return (
                    None,
                    f"NAT gateway {target.name} sits in a subnet without a route to an attached internet gateway",
                )
            return "NAT", ""
        if self.via_igw(subnet, target):
            mapped = subnet.properties.get("MapPublicIpOnLaunch") in (True, "true")
            if public_ip or mapped:
                return "internet gateway", ""
            return None, (
                "routes to an internet gateway but the node gets no public IP (MapPublicIpOnLaunch is false and "
                "no ElasticIp/AssignPublicIp): it reaches only the VPC and its gateway endpoints"
            )
        return None, f"default route goes to {target.type} {target.name}, not to a NAT or attached internet gateway"

    def s3(self, subnet: Resource, internet: str | None) -> str | None:
        table = self.tables.get(subnet.name, "")
        for endpoint in self.endpoints:
            service = str(endpoint.get("ServiceName", ""))
            tables = [self.a.identity(t) for t in endpoint.get("RouteTableIds", [])]
            if endpoint.get("VpcEndpointType") == "Gateway" and service.endswith(".s3") and table in tables:
                return "gateway endpoint"
        return internet

    def allows(
        self,
        rules: dict[str, list[Rule]],
        groups: Iterable[str],
        port: tuple[str, int, int],
        peers: Sequence[str],
        peer_cidrs: Sequence[str],
    ) -> bool:
        """Does one of ``groups`` have a rule for ``port`` whose peer is one of ``peers`` or covers a CIDR?"""
        for group in groups:
            for rule in rules.get(self.a.identity(group), []):
                if not rule.covers(*port):
                    continue
                if rule.peer in peers or any(_covers(rule.peer, cidr) for cidr in peer_cidrs):
                    return True
        return False

    def cidrs(self, subnets: Iterable[str]) -> list[str]:
        out = []
        for name in subnets:
            found = self.subnet(name)
            if found is not None and isinstance(found.properties.get("CidrBlock"), str):
                out.append(found.properties["CidrBlock"])
        return out

    def zone(self, subnet: Resource) -> str:
        props = subnet.properties
        return str(props.get("AvailabilityZoneId") or props.get("AvailabilityZone") or "")


def _covers(peer: str, cidr: str) -> bool:
    try:
        return ipaddress.ip_network(cidr).subnet_of(ipaddress.ip_network(peer))  # type: ignore[arg-type]
    except ValueError:
        return False


def check_environment(assembly: Assembly, environment: str) -> Report:
    """Prove every node group of ``environment`` reaches the internet, S3 and its file systems."""
    report = Report(environment, node_groups(assembly, environment))
    net = _Network(assembly, environment)
    systems = file_systems(assembly, environment)
    for group in report.groups:
        where = f"{environment}: {group.name}"
        paths = report.paths.setdefault(group.name, {})
        if not group.subnets:
            report.problems.append(f"{where}: no subnet")
        for name in group.subnets:
            subnet = net.subnet(name)
            if subnet is None:
                report.problems.append(f"{where}: subnet {name} is not a subnet of this environment; cannot prove")
                continue
            internet, reason = net.internet(subnet, group.public_ip)
            if internet is None:
                report.problems.append(f"{where}: no way to the internet: subnet {subnet.name} {reason}")
            paths["internet"] = internet or "none"
            s3 = net.s3(subnet, internet)
            if s3 is None:
                report.problems.append(
                    f"{where}: cannot reach S3: no S3 gateway endpoint on the route table of "
                    f"{subnet.name} and no way to the internet"
                )
            paths["s3"] = s3 or "none"
        for fs in systems:
            if fs.kind == "LUSTRE" or (fs.kind == "OPENZFS" and group.mounts_openzfs):
                report.problems += _file_system_problems(net, group, fs, where)
    # The accounting database (storage.accounting): the node that runs slurmdbd is the only client (the
    # HyperPod controller, ParallelCluster's head node); the other node groups must not be admitted.
    clients = [g for g in report.groups if _runs_slurmdbd(g)]
    others = [g for g in report.groups if not _runs_slurmdbd(g)]
    report.problems += database_problems(assembly, environment, clients, others)
    return report


def _file_system_problems(net: _Network, group: NodeGroup, fs: FileSystem, where: str) -> list[str]:
    problems: list[str] = []
    name = f"{fs.kind.lower()} file system {fs.resource.name}"
    node_groups_ = [net.a.identity(g) for g in group.security_groups]
    node_cidrs = net.cidrs(group.subnets)
    fs_cidrs = net.cidrs(fs.subnets)
    if fs.kind == "OPENZFS":
        ports = NFS_PORTS
        for cidr in node_cidrs:
            if not any(_covers(export, cidr) for export in fs.export_cidrs):
                problems.append(f"{where}: {name} exports /home to {list(fs.export_cidrs)}, not to subnet {cidr}")
    elif fs.efa:
        ports = (("-1", -1, -1),)
    else:
        ports = LUSTRE_PORTS
    for port in ports:
        label = (
            "all traffic"
            if port[0] == "-1"
            else f"{port[0].upper()} {port[1]}" + (f"-{port[2]}" if port[2] != port[1] else "")
        )
        out_ok = group.managed_egress or net.allows(net.egress, node_groups_, port, fs.security_groups, fs_cidrs)
        if not out_ok:
            problems.append(f"{where}: no egress rule of its security groups allows {label} to {name}")
        if not net.allows(net.ingress, fs.security_groups, port, node_groups_, node_cidrs):
            problems.append(f"{where}: {name}'s security groups admit no {label} from the node's groups or subnets")
        if not net.allows(net.egress, fs.security_groups, port, node_groups_, node_cidrs):
            # ParallelCluster's ExistingFsxNetworkingValidator wants the file system's groups open both ways.
            problems.append(f"{where}: {name}'s security groups send no {label} to the node's groups or subnets")
        if fs.kind == "LUSTRE" and not net.allows(net.ingress, fs.security_groups, port, fs.security_groups, []):
            problems.append(f"{where}: {name}'s security groups do not admit {label} from themselves (self rule)")
        if fs.efa and not net.allows(net.egress, fs.security_groups, port, [*fs.security_groups, *node_groups_], []):
            problems.append(f"{where}: EFA-enabled {name}'s groups do not send all traffic to the nodes")
    if fs.kind == "LUSTRE":
        fs_zones = {net.zone(s) for s in (net.subnet(n) for n in fs.subnets) if s is not None}
        for subnet in (net.subnet(n) for n in group.subnets):
            if subnet is not None and net.zone(subnet) not in fs_zones:
                problems.append(
                    f"{where}: subnet {subnet.name} is in zone {net.zone(subnet)!r}, {name} in {sorted(fs_zones)}: "
                    "every I/O would cross zones (EFA does not)"
                )
    return problems


@dataclass(frozen=True)
class Database:
    """An Aurora cluster (the Slurm accounting database): its port, groups and subnets."""

    resource: Resource
    port: int
    security_groups: tuple[str, ...]
    subnets: tuple[str, ...]


@dataclass(frozen=True)
class RotationFunction:
    """A Secrets Manager rotation function from the Serverless Application Repository, in the VPC."""

    resource: Resource
    security_groups: tuple[str, ...]
    subnets: tuple[str, ...]


def databases(assembly: Assembly, environment: str) -> list[Database]:
    """Every Aurora cluster of the environment, with its DB subnet group's subnets."""
    out = []
    for db in assembly.resources(environment, "AWS::RDS::DBCluster"):
        props = assembly.render(db.stack, dict(db.properties))
        subnet_group = assembly.resource(str(props.get("DBSubnetGroupName", "")))
        subnets: list[str] = []
        if subnet_group is not None:
            rendered = assembly.render(subnet_group.stack, dict(subnet_group.properties))
            subnets = [assembly.identity(s) for s in rendered.get("SubnetIds", [])]
        out.append(
            Database(
                db,
                int(props.get("Port", MYSQL_PORT)),
                tuple(assembly.identity(g) for g in props.get("VpcSecurityGroupIds", [])),
                tuple(subnets),
            )
        )
    return out


def rotation_functions(assembly: Assembly, environment: str) -> list[RotationFunction]:
    """Every rotation application CDK's ``add_rotation_single_user`` deploys (its VPC parameters)."""
    out = []
    for app in assembly.resources(environment, "AWS::Serverless::Application"):
        parameters = assembly.render(app.stack, dict(app.properties)).get("Parameters", {})
        if "vpcSecurityGroupIds" not in parameters:
            continue
        groups = str(parameters.get("vpcSecurityGroupIds", "")).split(",")
        subnets = str(parameters.get("vpcSubnetIds", "")).split(",")
        out.append(
            RotationFunction(
                app,
                tuple(assembly.identity(g) for g in groups if g),
                tuple(assembly.identity(s) for s in subnets if s),
            )
        )
    return out


def _runs_slurmdbd(group: NodeGroup) -> bool:
    """The HyperPod controller or ParallelCluster's head node: the one node group the database admits."""
    return group.slurm_controller or (group.backend == "pcluster" and group.name == HEAD_NODE)


def database_problems(
    assembly: Assembly, environment: str, clients: Sequence[NodeGroup], others: Sequence[NodeGroup] = ()
) -> list[str]:
    """The accounting database is reached by ``clients`` and its rotation function, and by nothing wider.

    Reached: one of the client's groups lets the database's port out to the database's groups (or
    subnets), and one of the database's groups admits it from one of the client's groups (a group,
    never an address range). The rotation function the same way, and its subnets reach the internet
    (Secrets Manager's API through NAT) with TCP 443 out. Nothing wider: no database group admits
    anything from an address range or prefix list, no database subnet routes to an internet gateway, and
    no group of ``others`` (the cluster's nodes that do not run slurmdbd) is admitted to its port, unless
    the database's resource carries :data:`ADMITS_NODE_GROUP` (admitted knowingly, for an upgrade).
    """
    found = databases(assembly, environment)
    if not found:
        return []
    net = _Network(assembly, environment)
    problems: list[str] = []
    for db in found:
        name = f"{environment}: accounting database {db.resource.name}"
        port = ("tcp", db.port, db.port)
        db_cidrs = net.cidrs(db.subnets)
        if len(db.subnets) < 2:
            problems.append(f"{name}: its subnet group has {len(db.subnets)} subnet(s); Aurora needs two zones")
        for subnet in db.subnets:
            _, target = net.default_target(subnet)
            if target is not None and target.type == "AWS::EC2::InternetGateway":
                problems.append(f"{name}: subnet {subnet} routes to an internet gateway (a public subnet)")
        for group in db.security_groups:
            for rule in net.ingress.get(group, []):
                if _is_cidr_peer(rule.peer):
                    problems.append(f"{name}: security group {group} admits {rule.peer}, an address range")
        peers: list[tuple[str, tuple[str, ...], tuple[str, ...], bool]] = [
            (c.name, c.security_groups, c.subnets, c.managed_egress) for c in clients
        ]
        peers += [
            (f"rotation function {f.resource.name}", f.security_groups, f.subnets, False)
            for f in rotation_functions(assembly, environment)
        ]
        for label, groups, _, managed in peers:
            identities = [assembly.identity(g) for g in groups]
            if not managed and not net.allows(net.egress, identities, port, db.security_groups, db_cidrs):
                problems.append(f"{name}: no security group of {label} lets TCP {db.port} out to it")
            if not net.allows(net.ingress, db.security_groups, port, identities, []):
                problems.append(f"{name}: its security groups admit no TCP {db.port} from {label}'s groups")
        if _admits_node_group(assembly, db):
            continue
        for other in others:
            identities = [assembly.identity(g) for g in other.security_groups]
            if net.allows(net.ingress, db.security_groups, port, identities, []):
                problems.append(
                    f"{name}: its security groups admit TCP {db.port} from {other.name}, which does not run slurmdbd"
                )
        for function in rotation_functions(assembly, environment):
            label = f"{environment}: rotation function {function.resource.name}"
            identities = [assembly.identity(g) for g in function.security_groups]
            if not net.allows(net.egress, identities, ("tcp", 443, 443), [], [ANY]):
                problems.append(f"{label}: no security group lets HTTPS out to Secrets Manager")
            for subnet_name in function.subnets:
                resource = net.subnet(subnet_name)
                internet = net.internet(resource, False)[0] if resource is not None else None
                if internet is None:
                    problems.append(f"{label}: subnet {subnet_name} has no way to Secrets Manager's endpoint")
    return problems


def _admits_node_group(assembly: Assembly, db: Database) -> bool:
    """The database admits every node on purpose: ``storage.accounting.admit_node_group`` marked its cluster
    resource (``mlcluster:admitsNodeGroup`` in its ``Metadata``), the bridge for a cluster created before the
    controller had a client group of its own. Only that mark accepts the workers' path to the port."""
    resource = assembly.templates[db.resource.stack]["Resources"].get(db.resource.logical_id, {})
    return resource.get("Metadata", {}).get(ADMITS_NODE_GROUP) is True


def check_assembly(assembly: Assembly) -> list[Report]:
    """A report for every environment of the assembly."""
    return [check_environment(assembly, env) for env in assembly.environments]


def _is_cidr_peer(peer: str) -> bool:
    """A rule's peer that is an address range or a prefix list, not a security group."""
    try:
        ipaddress.ip_network(peer, strict=False)
    except ValueError:
        return peer.startswith("pl-")
    return True


def exporter_problems(assembly: Assembly, environment: str, collector: str, ports: Sequence[int]) -> list[str]:
    """The metrics collector's node group reaches every exporter port of every node group, and nothing wider does.

    ``collector`` names the collector's node group (``head node``, or the
    controller's ``instance group <name>``). Reached: one of the target group's
    security groups admits the TCP port from a security group the collector's
    nodes hold, and one of the collector's groups lets the port out to that
    group or to an address range covering the target's subnets (the collector
    also scrapes its own node, on localhost). Nothing wider: no security group
    of any node admits a port from an address range or prefix list (the VPC's
    CIDR, ``0.0.0.0/0``). ParallelCluster's own groups are not in the
    templates; in ParallelCluster 3.16 they admit traffic from the cluster's
    own groups and SSH only, so they open no exporter port wider either.
    """
    groups = node_groups(assembly, environment)
    net = _Network(assembly, environment)
    problems = []
    sources = [g for g in groups if g.name == collector]
    if not sources:
        return [f"{environment}: no node group named {collector!r}; groups: {[g.name for g in groups]}"]
    source = sources[0]
    source_groups = [assembly.identity(g) for g in source.security_groups]
    for port in ports:
        wanted = ("tcp", port, port)
        for target in groups:
            if target is source:
                continue
            where = f"{environment}: {target.name} port {port}"
            if not net.allows(net.ingress, target.security_groups, wanted, source_groups, []):
                problems.append(f"{where}: no security group of it admits the collector's groups {source_groups}")
            target_groups = [assembly.identity(g) for g in target.security_groups]
            if not net.allows(net.egress, source.security_groups, wanted, target_groups, net.cidrs(target.subnets)):
                problems.append(f"{where}: no security group of {collector} lets the collector out to it")
        attached = {assembly.identity(g) for group in groups for g in group.security_groups}
        for name in sorted(attached):
            for rule in net.ingress.get(name, []):
                if rule.covers(*wanted) and _is_cidr_peer(rule.peer):
                    problems.append(
                        f"{environment}: security group {name} admits port {port} from {rule.peer}, wider than the "
                        "cluster's own security groups"
                    )
    return problems
