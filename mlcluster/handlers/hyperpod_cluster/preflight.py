"""Pre-flight checks run before CloudFormation creates or updates the cluster.

A HyperPod creation that fails on a missing lifecycle script, a group the
lifecycle scripts do not know, a public subnet or a security group without
its self-referencing rules fails only after nodes have booted, often an hour
or more later, with a terse message. These checks find the same mistakes in
seconds and say what to fix. Every check runs; all problems are reported in
one ``PreflightError``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from .aws import error_code, error_text
from .spec import Properties

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_s3 import S3Client

#: S3 answers 404 for a missing object only to callers allowed to list the
#: bucket; to others it answers 403.
_S3_MISSING = ("404", "NoSuchKey", "NotFound", "NoSuchBucket")
_S3_ACCESS = "the handler needs s3:GetObject on it and s3:ListBucket on the bucket (without it a missing object is 403)"

#: Default routes that make a subnet public when they point at an internet gateway.
_DEFAULT_ROUTES = (("DestinationCidrBlock", "0.0.0.0/0"), ("DestinationIpv6CidrBlock", "::/0"))


class PreflightError(RuntimeError):
    """One or more pre-flight checks failed; the message lists every problem."""

    def __init__(self, cluster_name: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"- {p}" for p in problems)
        super().__init__(f"Pre-flight checks failed for HyperPod cluster {cluster_name!r}:\n{lines}")


def check_all(s3: S3Client, ec2: EC2Client, props: Properties, *, name: str, network: bool = True) -> None:
    """Run the lifecycle checks and (unless ``network`` is false) the network checks for cluster ``name``."""
    problems = check_lifecycle(s3, props)
    if network:
        problems += check_network(ec2, props.spec)
    if problems:
        raise PreflightError(name, problems)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix/")`` (prefix '' at the bucket root)."""
    if not uri.startswith("s3://") or len(uri) <= len("s3://"):
        raise ValueError(f"{uri!r} is not an S3 URI such as 's3://bucket/prefix/'")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def check_lifecycle(s3: S3Client, props: Properties) -> list[str]:
    """The lifecycle objects exist and the provisioning parameters name only groups the spec has.

    For every distinct ``SourceS3Uri``: each group's ``OnCreate`` script exists
    (HeadObject), and ``ProvisioningParametersKey`` (the full object key) lies
    under the URI and can be read; its ``controller_group``, ``login_group``
    and ``worker_groups[].instance_group_name`` must be groups of the spec.
    """
    problems: list[str] = []
    by_uri: dict[str, list[dict[str, Any]]] = {}
    for group in props.spec["InstanceGroups"]:
        by_uri.setdefault(group["LifeCycleConfig"]["SourceS3Uri"], []).append(group)
    for uri, groups in by_uri.items():
        try:
            bucket, prefix = split_s3_uri(uri)
        except ValueError as err:
            listed = ", ".join(g["InstanceGroupName"] for g in groups)
            problems.append(f"LifeCycleConfig.SourceS3Uri of group(s) {listed}: {err}")
            continue
        scripts: dict[str, list[str]] = {}
        for group in groups:
            scripts.setdefault(group["LifeCycleConfig"]["OnCreate"], []).append(group["InstanceGroupName"])
        for script, names in scripts.items():
            problem = _head(s3, bucket, prefix + script, f"OnCreate script of group(s) {', '.join(names)}")
            if problem:
                problems.append(problem)
        problems += _check_provisioning_parameters(s3, bucket, prefix, props)
    return problems


def _head(s3: S3Client, bucket: str, key: str, what: str) -> str | None:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if error_code(err) in _S3_MISSING:
            return (
                f"{what}: s3://{bucket}/{key} does not exist; upload the lifecycle scripts before creating the cluster"
            )
        return f"{what}: cannot read s3://{bucket}/{key} ({error_text(err)}); {_S3_ACCESS}"
    return None


def _check_provisioning_parameters(s3: S3Client, bucket: str, prefix: str, props: Properties) -> list[str]:
    key = props.provisioning_parameters_key
    uri = f"s3://{bucket}/{key}"
    if not key.startswith(prefix):
        return [
            f"ProvisioningParametersKey: {key!r} is not under s3://{bucket}/{prefix}; the lifecycle scripts read "
            "provisioning_parameters.json from the same folder as the OnCreate script"
        ]
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        if error_code(err) in _S3_MISSING:
            return [f"provisioning parameters: {uri} does not exist; upload it with the lifecycle scripts"]
        return [f"provisioning parameters: cannot read {uri} ({error_text(err)}); {_S3_ACCESS}"]
    try:
        params = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return [f"provisioning parameters: {uri} is not valid JSON ({err})"]
    if not isinstance(params, dict):
        return [f"provisioning parameters: {uri} holds {type(params).__name__}; expected a JSON object"]
    named: list[tuple[str, Any]] = [("controller_group", params.get("controller_group"))]
    if params.get("login_group"):
        named.append(("login_group", params["login_group"]))
    workers = params.get("worker_groups") or []
    if not isinstance(workers, list):
        return [f"provisioning parameters: {uri}: worker_groups is {workers!r}; expected a list"]
    named += [
        (f"worker_groups[{i}].instance_group_name", (w or {}).get("instance_group_name")) for i, w in enumerate(workers)
    ]
    groups = props.groups()
    return [
        f"provisioning parameters: {uri}: {field} is {value!r}, but ClusterSpec.InstanceGroups has no such group "
        f"(groups: {', '.join(sorted(groups))})"
        for field, value in named
        if value not in groups
    ]


def check_network(ec2: EC2Client, spec: dict[str, Any]) -> list[str]:
    """The subnets are private and each VPC configuration has a group carrying the self-referencing rules.

    Covers the cluster's ``VpcConfig`` and any group's ``OverrideVpcConfig``. EFA and Slurm traffic between
    nodes needs all-protocol ingress and egress to and from a group the nodes share (HyperPod's prerequisites,
    as EFA's); an ENI's groups' rules add up, so one such group per configuration suffices. The others (the
    accounting database's client group on the controller, for one) may admit nothing.
    """
    configs = [("VpcConfig", spec["VpcConfig"])] + [
        (f"InstanceGroups[{g.get('InstanceGroupName')}].OverrideVpcConfig", g["OverrideVpcConfig"])
        for g in spec["InstanceGroups"]
        if g.get("OverrideVpcConfig")
    ]
    subnets = list(dict.fromkeys(s for _, c in configs for s in c["Subnets"]))
    problems: list[str] = []
    for subnet in subnets:
        problems += _check_subnet(ec2, subnet)
    inspected: dict[str, list[str] | str] = {}
    for group in dict.fromkeys(g for _, c in configs for g in c["SecurityGroupIds"]):
        inspected[group] = _missing_self_rules(ec2, group)
    # A group that cannot be inspected is reported once, whichever configurations name it.
    problems += [found for found in inspected.values() if isinstance(found, str)]
    reported: set[str] = set()
    for where, config in configs:
        missing = {g: inspected[g] for g in config["SecurityGroupIds"]}
        lacking = {g: m for g, m in missing.items() if not isinstance(m, str)}
        # Passes only with a group known to carry both rules (one that cannot be inspected is reported above).
        if not all(lacking.values()):
            continue
        for group, directions in lacking.items():
            if group in reported:
                continue
            reported.add(group)
            problems.append(
                f"security group {group} lacks the self-referencing {' and '.join(directions)} rule(s) (all "
                f"protocols, source/destination the group itself), and no other group of {where} has both; EFA and "
                "Slurm traffic between nodes needs both in at least one of them, or creation fails its health checks"
            )
    return problems


def _check_subnet(ec2: EC2Client, subnet_id: str) -> list[str]:
    try:
        found = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
        if not found:
            return [f"subnet {subnet_id}: not found"]
        vpc_id = found[0]["VpcId"]
        tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])
        which = "its route table"
        if not tables["RouteTables"]:
            which = "the VPC's main route table (the subnet has no explicit association)"
            tables = ec2.describe_route_tables(
                Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "association.main", "Values": ["true"]}]
            )
    except ClientError as err:
        if error_code(err).startswith("InvalidSubnetID"):
            return [f"subnet {subnet_id}: not found ({error_text(err)})"]
        return [
            f"subnet {subnet_id}: cannot inspect it ({error_text(err)}); the handler needs ec2:DescribeSubnets "
            "and ec2:DescribeRouteTables"
        ]
    problems: list[str] = []
    for table in tables["RouteTables"]:
        for route in table.get("Routes", []):
            gateway = route.get("GatewayId", "")
            for field, default in _DEFAULT_ROUTES:
                if route.get(field) == default and gateway.startswith("igw-"):
                    problems.append(
                        f"subnet {subnet_id} is public: {which} {table.get('RouteTableId')} sends {default} to "
                        f"{gateway}; HyperPod nodes need private subnets (default route through a NAT gateway)"
                    )
    return problems


def _missing_self_rules(ec2: EC2Client, group_id: str) -> list[str] | str:
    """The directions (ingress, egress) the group lacks a self rule in, or why it cannot be inspected."""
    try:
        found = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    except ClientError as err:
        if error_code(err).startswith("InvalidGroup"):
            return f"security group {group_id}: not found ({error_text(err)})"
        return (
            f"security group {group_id}: cannot inspect it ({error_text(err)}); the handler needs "
            "ec2:DescribeSecurityGroups"
        )
    if not found:
        return f"security group {group_id}: not found"
    group = found[0]
    return [
        direction
        for direction, rules in (
            ("ingress", group.get("IpPermissions", [])),
            ("egress", group.get("IpPermissionsEgress", [])),
        )
        if not _has_self_rule(rules, group_id)
    ]


def _has_self_rule(rules: Any, group_id: str) -> bool:
    return any(
        rule.get("IpProtocol") == "-1"
        and any(pair.get("GroupId") == group_id for pair in rule.get("UserIdGroupPairs", []))
        for rule in rules
    )
