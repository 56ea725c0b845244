"""Draw a picture of each environment from its synthesized stacks, and write the docs page that shows them.

Usage: ``python tools/environment_pictures.py [--synth] CDK_OUT DOCS_DIR``: reads the cloud assembly
at ``CDK_OUT`` (every stage; with ``--synth``, first synthesizes every example there, as ``app.py``
does), writes ``DOCS_DIR/environments/<env>.svg`` (Graphviz ``dot``, from
Debian's ``graphviz``) and ``DOCS_DIR/environments/index.md``. ``make docs`` runs it on a fresh synth
of the examples.

Nothing is drawn by hand: the network (VPC ranges, zones, public and private subnets, NAT and
internet gateways, the S3 gateway endpoint), the file systems and their data repository
associations, the buckets, the cluster's node groups, the observability pieces, and who reaches
what come from the templates; the last from the reachability analysis
(``mlcluster/analysis/reachability.py``), the same proof ``make synth`` prints: each node group's
way to the internet and to S3, and its file systems when no security group, zone or export stops
it. Every resource type of a stack must be in :data:`DRAWN` or :data:`FOLDED` (drawn as part of
another, or not a place or a path); a type in neither stops the drawing with its name
(:class:`UnknownKindError`), so a stack that gains a resource kind cannot leave the picture silently
behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlcluster.analysis.assembly import Assembly, Resource, load_assembly
from mlcluster.analysis.reachability import Report, check_environment, databases, file_systems

#: Resource types that appear in the picture, and as what.
DRAWN: dict[str, str] = {
    "AWS::EC2::VPC": "the network's outline and its first range",
    "AWS::EC2::VPCCidrBlock": "a secondary range, in the network's label",
    "AWS::EC2::Subnet": "a subnet, inside its zone",
    "AWS::EC2::NatGateway": "a NAT gateway, in its subnet",
    "AWS::EC2::InternetGateway": "the internet gateway",
    "AWS::EC2::VPCEndpoint": "a gateway endpoint (S3, DynamoDB)",
    "AWS::EC2::FlowLog": "the network's label says its traffic is logged",
    "AWS::FSx::FileSystem": "a file system, in its subnet",
    "AWS::FSx::DataRepositoryAssociation": "an arrow from the file system's path to its bucket",
    "AWS::S3::Bucket": "a bucket",
    "AWS::Backup::BackupVault": "the backup vault",
    "AWS::SageMaker::Cluster": "the HyperPod cluster's node groups, in their subnets",
    "AWS::RDS::DBCluster": "the Slurm accounting database, in its first subnet",
    "Custom::PclusterCluster": "the ParallelCluster cluster's node groups, in their subnets",
    "AWS::CloudWatch::Dashboard": "an observability piece",
    "AWS::CloudWatch::Alarm": "an observability piece (counted)",
    "AWS::SNS::Topic": "an observability piece (the alarm topic)",
    "AWS::APS::Workspace": "an observability piece (Amazon Managed Service for Prometheus)",
    "AWS::Grafana::Workspace": "an observability piece (Amazon Managed Grafana)",
    "AWS::Events::Rule": "an observability piece (counted)",
    "AWS::Logs::LogGroup": "the log groups (counted)",
    "AWS::KMS::Key": "the keys (counted)",
}
#: Resource types drawn as part of another, or that are neither a place nor a path (why, each).
FOLDED: dict[str, str] = {
    "AWS::EC2::Route": "drawn as the node groups' paths to the internet",
    "AWS::EC2::RouteTable": "drawn as the node groups' paths to the internet",
    "AWS::EC2::SubnetRouteTableAssociation": "drawn as the node groups' paths to the internet",
    "AWS::EC2::VPCGatewayAttachment": "the internet gateway's attachment",
    "AWS::EC2::EIP": "the NAT gateway's address",
    "AWS::EC2::SecurityGroup": "drawn as who reaches which file system",
    "AWS::EC2::SecurityGroupIngress": "drawn as who reaches which file system",
    "AWS::EC2::SecurityGroupEgress": "drawn as who reaches which file system",
    "AWS::IAM::Role": "permissions: the security model page",
    "AWS::IAM::Policy": "permissions: the security model page",
    "AWS::IAM::ManagedPolicy": "permissions: the security model page",
    "AWS::S3::BucketPolicy": "permissions: the security model page",
    "AWS::SNS::TopicPolicy": "permissions: the security model page",
    "AWS::SNS::Subscription": "who the alarm topic mails",
    "AWS::SSM::Parameter": "values for the operator command and the consumer stacks",
    "AWS::Lambda::Function": "the code behind a custom resource or a bucket deployment",
    "AWS::Lambda::LayerVersion": "the code behind a bucket deployment",
    "AWS::CloudFormation::Stack": "ParallelCluster's provider stack, part of its cluster",
    "AWS::ResourceGroups::Group": "the capacity reservation group of a queue",
    "AWS::Backup::BackupPlan": "the schedule of the backup vault",
    "AWS::Backup::BackupSelection": "what the backup vault holds",
    "AWS::APS::RuleGroupsNamespace": "the Prometheus workspace's alert rules",
    "Custom::CDKBucketDeployment": "uploads the node scripts into their bucket",
    "Custom::S3AutoDeleteObjects": "empties a bucket on delete (throw-away environments)",
    "Custom::HyperPodPreflight": "the HyperPod cluster's read-only check before it",
    "Custom::HyperPodNodesReady": "the HyperPod cluster's node check after it",
    "Custom::GrafanaProvisioning": "the Grafana workspace's dashboards and data source",
    "Custom::AccountingDatabaseUser": "slurmdbd's own database user (RDS Data API, no network path): the security "
    "model page",
    "AWS::RDS::DBInstance": "the accounting database's writer, drawn as its cluster",
    "AWS::RDS::DBClusterParameterGroup": "the accounting database's settings (TLS only)",
    "AWS::RDS::DBSubnetGroup": "the accounting database's subnets, drawn as where it sits",
    "AWS::SecretsManager::Secret": "the accounting database's master secret (and slurmdbd's on ParallelCluster): "
    "the security model page",
    "AWS::SecretsManager::SecretTargetAttachment": "ties the master secret to its database",
    "AWS::SecretsManager::RotationSchedule": "the master secret's rotation: the security model page",
    "AWS::SecretsManager::ResourcePolicy": "permissions: the security model page",
    "AWS::Serverless::Application": "the master secret's rotation function (Serverless Application Repository)",
}
_HASH = re.compile(r"[0-9A-F]{8}$")


class UnknownKindError(Exception):
    """A stack holds a resource type the picture does not know."""


def unknown_kinds(assembly: Assembly, environment: str) -> list[str]:
    """``stack: type`` for each resource type of ``environment`` in neither :data:`DRAWN` nor :data:`FOLDED`."""
    return sorted(
        {
            f"{r.stack}: {r.type}"
            for r in assembly.resources(environment)
            if r.type not in DRAWN and r.type not in FOLDED
        }
    )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _short(logical_id: str) -> str:
    """A readable name from a logical id: ``DataBucketB1A7365C`` -> ``DataBucket``."""
    return _HASH.sub("", logical_id) or logical_id


@dataclass
class _Graph:
    """dot statements with stable node ids."""

    ids: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def node(self, key: str, label: str, indent: str, **attrs: str) -> str:
        node_id = self.ids.setdefault(key, f"n{len(self.ids)}")
        extra = "".join(f", {k}={_quote(v)}" for k, v in attrs.items())
        self.lines.append(f"{indent}{node_id} [label={_quote(label)}{extra}];")
        return node_id

    def edge(self, a: str, b: str, label: str = "", **attrs: str) -> None:
        extra = "".join(f", {k}={_quote(v)}" for k, v in attrs.items())
        self.lines.append(f"  {self.ids[a]} -> {self.ids[b]} [label={_quote(label)}{extra}];")


def _props(assembly: Assembly, resource: Resource) -> dict[str, Any]:
    rendered = assembly.render(resource.stack, dict(resource.properties))
    return rendered if isinstance(rendered, dict) else {}


def dot_source(assembly: Assembly, environment: str, report: Report | None = None) -> str:
    """The Graphviz source of ``environment``'s picture; raises :class:`UnknownKindError` on a type it does not know."""
    unknown = unknown_kinds(assembly, environment)
    if unknown:
        raise UnknownKindError(
            f"{environment}: the picture does not know {', '.join(unknown)}: add each to DRAWN (and draw it) or "
            "FOLDED (with the reason) in tools/environment_pictures.py"
        )
    report = report or check_environment(assembly, environment)
    graph = _Graph()
    out = graph.lines
    out += [
        f"digraph {_quote(environment)} {{",
        # size: at most 13 x 10 inches (it only shrinks), so a picture fits a browser window whole.
        '  graph [rankdir=LR, compound=true, size="13,10", fontname="Helvetica", fontsize=11, ranksep=0.6];',
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
    ]
    res = lambda *types: list(assembly.resources(environment, *types))  # noqa: E731

    # Where things sit: subnets by zone, and what each subnet holds.
    subnets = {s.name: _props(assembly, s) for s in res("AWS::EC2::Subnet")}
    public = _public_subnets(assembly, environment)
    inside: dict[str, list[tuple[str, str, dict[str, str]]]] = defaultdict(list)
    for nat in res("AWS::EC2::NatGateway"):
        inside[str(_props(assembly, nat).get("SubnetId"))].append((nat.name, "NAT gateway", {"shape": "diamond"}))
    fs_by_name = {fs.resource.name: fs for fs in file_systems(assembly, environment)}
    for fs in fs_by_name.values():
        props = _props(assembly, fs.resource)
        label = f"FSx for {'Lustre' if fs.kind == 'LUSTRE' else 'OpenZFS'}\n{props.get('StorageCapacity', '?')} GiB"
        if fs.efa:
            label += ", EFA"
        inside[fs.subnets[0] if fs.subnets else ""].append((fs.resource.name, label, {"fillcolor": "#e8f0fe"}))
    for db in databases(assembly, environment):
        label = "Aurora MySQL Serverless v2\n(Slurm accounting)"
        inside[db.subnets[0] if db.subnets else ""].append((db.resource.name, label, {"fillcolor": "#e8f0fe"}))
    for group in report.groups:
        label = group.name + ("\nEFA" if group.efa else "")
        if len(group.subnets) > 1:
            label += f"\n(+{len(group.subnets) - 1} more subnet(s))"
        attrs = {"fillcolor": "#fff4e0", "shape": "box3d"}
        inside[group.subnets[0] if group.subnets else ""].append((f"group:{group.name}", label, attrs))

    vpcs = res("AWS::EC2::VPC")
    for vpc in vpcs:
        props = _props(assembly, vpc)
        ranges = [str(props.get("CidrBlock", "?"))]
        ranges += [str(_props(assembly, c).get("CidrBlock")) for c in res("AWS::EC2::VPCCidrBlock")]
        flow = " (flow logs on)" if res("AWS::EC2::FlowLog") else ""
        out.append(f"  subgraph cluster_vpc {{ label={_quote('VPC ' + ', '.join(ranges) + flow)}; style=rounded;")
        zones: dict[str, list[str]] = defaultdict(list)
        for name, props in subnets.items():
            zones[str(props.get("AvailabilityZone") or props.get("AvailabilityZoneId") or "?")].append(name)
        for z, (zone, names) in enumerate(sorted(zones.items())):
            out.append(f"    subgraph cluster_zone{z} {{ label={_quote('zone ' + zone)}; style=dashed;")
            for s, name in enumerate(sorted(names, key=lambda n: str(subnets[n].get("CidrBlock")))):
                kind = "public" if name in public else "private"
                label = f"{kind} subnet {subnets[name].get('CidrBlock', '?')}"
                color = "#eaf7ea" if kind == "public" else "#f4f4f4"
                style = f"style=filled; fillcolor={_quote(color)};"
                out.append(f"      subgraph cluster_z{z}s{s} {{ label={_quote(label)}; {style}")
                items = inside.pop(name, [])
                if not items:  # an empty subnet still needs a node to be drawn
                    graph.node(name, "(no nodes)", "        ", shape="plaintext", style="")
                for key, text, attrs in items:
                    graph.node(key, text, "        ", **attrs)
                out.append("      }")
            out.append("    }")
        for endpoint in res("AWS::EC2::VPCEndpoint"):
            service = str(_props(assembly, endpoint).get("ServiceName", "")).rsplit(".", 1)[-1]
            graph.node(endpoint.name, f"{service.upper()} gateway endpoint", "    ", shape="cds")
        out.append("  }")
    for key, text, attrs in (item for items in inside.values() for item in items):  # not in a drawn subnet
        graph.node(key, text, "  ", **attrs)

    for igw in res("AWS::EC2::InternetGateway"):
        graph.node(igw.name, "internet gateway", "  ", shape="diamond")
    graph.node("internet", "internet", "  ", shape="ellipse")
    graph.node("s3", "Amazon S3", "  ", shape="ellipse")
    for igw in res("AWS::EC2::InternetGateway"):
        graph.edge(igw.name, "internet")
    for nat in res("AWS::EC2::NatGateway"):
        if res("AWS::EC2::InternetGateway"):
            graph.edge(nat.name, res("AWS::EC2::InternetGateway")[0].name, style="dashed")

    # Buckets, the backup vault and the links of the file systems to them.
    for bucket in res("AWS::S3::Bucket"):
        name = _props(assembly, bucket).get("BucketName")
        label = _short(bucket.logical_id) + (f"\n{name}" if isinstance(name, str) else "")
        graph.node(bucket.name, label, "  ", shape="cylinder", fillcolor="#fdf0f0")
        graph.edge(bucket.name, "s3", style="dotted", arrowhead="none")
    for vault in res("AWS::Backup::BackupVault"):
        graph.node(vault.name, "AWS Backup vault", "  ", shape="cylinder", fillcolor="#fdf0f0")
    for dra in res("AWS::FSx::DataRepositoryAssociation"):
        props = _props(assembly, dra)
        target = str(props.get("DataRepositoryPath", ""))
        bucket_key = next((b.name for b in res("AWS::S3::Bucket") if b.name in target), "s3")
        fs_key = next((k for k in fs_by_name if k in str(props.get("FileSystemId", ""))), None)
        if fs_key is not None:
            graph.edge(fs_key, bucket_key, f"DRA {props.get('FileSystemPath', '?')}", color="#1a73e8")

    # Who reaches what: the reachability analysis.
    endpoint_s3 = next((e.name for e in res("AWS::EC2::VPCEndpoint") if "s3" in str(e.properties)), None)
    if endpoint_s3 and any(report.paths.get(g.name, {}).get("s3") == "gateway endpoint" for g in report.groups):
        graph.edge(endpoint_s3, "s3", color="#188038")
    default_route = _default_routes(assembly, environment)
    for group in report.groups:
        key = f"group:{group.name}"
        path = report.paths.get(group.name, {})
        target = default_route.get(group.subnets[0], "") if group.subnets else ""
        if path.get("internet") == "NAT" and target in graph.ids:
            graph.edge(key, target, "internet", color="#188038")
        elif path.get("internet"):
            graph.edge(key, "internet", f"internet via {path['internet']}", color="#188038")
        if path.get("s3") == "gateway endpoint" and endpoint_s3:
            graph.edge(key, endpoint_s3, "S3", color="#188038")
        elif path.get("s3"):
            graph.edge(key, "s3", f"S3 via {path['s3']}", color="#188038")
        refused = " ".join(p for p in report.problems if group.name in p)
        for fs_key, fs in fs_by_name.items():
            if fs.kind != "LUSTRE" and not group.mounts_openzfs:
                continue
            what = "Lustre" if fs.kind == "LUSTRE" else "NFS"
            if refused:
                graph.edge(key, fs_key, f"{what}: refused", color="#d93025", style="dashed")
            else:
                graph.edge(key, fs_key, what, color="#188038")

    # Observability.
    counts = Counter(r.type for r in assembly.resources(environment))
    pieces = [
        ("AWS::CloudWatch::Dashboard", "CloudWatch dashboard"),
        ("AWS::CloudWatch::Alarm", "CloudWatch alarm"),
        ("AWS::SNS::Topic", "SNS alarm topic"),
        ("AWS::APS::Workspace", "Amazon Managed Service for Prometheus"),
        ("AWS::Grafana::Workspace", "Amazon Managed Grafana"),
        ("AWS::Events::Rule", "EventBridge rule"),
        ("AWS::Logs::LogGroup", "CloudWatch log group"),
        ("AWS::KMS::Key", "KMS key"),
    ]
    shown = [(t, text) for t, text in pieces if counts[t]]
    if shown:
        out.append(f"  subgraph cluster_obs {{ label={_quote('observability, logs and keys')}; style=rounded;")
        for kind, text in shown:
            graph.node(f"obs:{kind}", f"{counts[kind]} x {text}" if counts[kind] > 1 else text, "    ")
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


def _default_routes(assembly: Assembly, environment: str) -> dict[str, str]:
    """Subnet -> the target of its route table's default route (a NAT or internet gateway's name)."""
    targets = {}
    for route in assembly.resources(environment, "AWS::EC2::Route"):
        if route.properties.get("DestinationCidrBlock") == "0.0.0.0/0":
            target = route.properties.get("NatGatewayId") or route.properties.get("GatewayId")
            targets[str(assembly.render(route.stack, route.properties.get("RouteTableId")))] = str(
                assembly.render(route.stack, target)
            )
    return {
        str(assembly.render(a.stack, a.properties.get("SubnetId"))): targets.get(
            str(assembly.render(a.stack, a.properties.get("RouteTableId"))), ""
        )
        for a in assembly.resources(environment, "AWS::EC2::SubnetRouteTableAssociation")
    }


def _public_subnets(assembly: Assembly, environment: str) -> set[str]:
    """Subnets whose route table sends traffic to an internet gateway."""
    igws = {r.name for r in assembly.resources(environment, "AWS::EC2::InternetGateway")}
    to_igw = {
        str(assembly.render(r.stack, r.properties.get("RouteTableId")))
        for r in assembly.resources(environment, "AWS::EC2::Route")
        if str(assembly.render(r.stack, r.properties.get("GatewayId"))) in igws
    }
    return {
        str(assembly.render(a.stack, a.properties.get("SubnetId")))
        for a in assembly.resources(environment, "AWS::EC2::SubnetRouteTableAssociation")
        if str(assembly.render(a.stack, a.properties.get("RouteTableId"))) in to_igw
    }


def page(assembly: Assembly, reports: dict[str, Report]) -> str:
    """The docs page: per environment its picture, its stacks and what the reachability analysis proved."""
    lines = [
        "# The example environments",
        "",
        "Drawn by `make docs` from the synthesized app (`tools/environment_pictures.py`), one picture per",
        "file in `environments/`: the network with its ranges, zones and subnets, the file systems and",
        "buckets (blue arrows: data repository associations), the cluster's node groups, the observability",
        "pieces, and, in green, who reaches what according to the reachability analysis",
        "(`mlcluster/analysis/reachability.py`): each node group's way to the internet and to S3, and the",
        "file systems its security groups, zone and exports let it mount. A red dashed arrow is a path the",
        "analysis refused; the problem is listed under the picture.",
        "",
    ]
    for environment in assembly.environments:
        report = reports[environment]
        lines += [f"## {environment}", "", f"![{environment}]({environment}.svg)", ""]
        lines += ["| stack | resources | outputs |", "|---|---:|---:|"]
        for stack in assembly.stacks(environment):
            template = assembly.templates[stack]
            lines.append(f"| `{stack}` | {len(template.get('Resources', {}))} | {len(template.get('Outputs', {}))} |")
        lines.append("")
        if report.groups:
            lines += ["| node group | internet | S3 |", "|---|---|---|"]
            for group in report.groups:
                path = report.paths.get(group.name, {})
                lines.append(f"| {group.name} | {path.get('internet', 'none')} | {path.get('s3', 'none')} |")
            lines.append("")
        lines += [f"- problem: {problem}" for problem in report.problems]
        if report.problems:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write(cdk_out: Path, docs: Path) -> list[Path]:
    """Draw every environment of the assembly at ``cdk_out`` into ``docs/environments``; return the files."""
    assembly = load_assembly(cdk_out)
    folder = docs / "environments"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    reports = {}
    for environment in assembly.environments:
        reports[environment] = check_environment(assembly, environment)
        svg = folder / f"{environment}.svg"
        source = dot_source(assembly, environment, reports[environment])
        subprocess.run(["dot", "-Tsvg", "-o", str(svg)], input=source, text=True, check=True)
        written.append(svg)
    index = folder / "index.md"
    index.write_text(page(assembly, reports), encoding="utf-8")
    return [*written, index]


def synthesize(outdir: Path) -> None:
    """Synthesize every environment of ``environments/`` into ``outdir`` (a fresh folder), as ``app.py`` does."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from mlcluster.app import build_app

    shutil.rmtree(outdir, ignore_errors=True)
    app, _ = build_app(Path(__file__).resolve().parent.parent / "environments", outdir=str(outdir))
    app.synth()


def main(argv: list[str]) -> int:
    """``environment_pictures.py [--synth] CDK_OUT DOCS_DIR``."""
    synth = "--synth" in argv
    argv = [a for a in argv if a != "--synth"]
    if len(argv) != 2:
        print("usage: environment_pictures.py [--synth] CDK_OUT DOCS_DIR", file=sys.stderr)
        return 2
    if synth:
        synthesize(Path(argv[0]))
    try:
        for path in write(Path(argv[0]), Path(argv[1])):
            print(f"{path}: written")
    except UnknownKindError as error:
        print(f"environment_pictures: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
