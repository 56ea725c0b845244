"""Rehearse ``pcluster create-cluster --dryrun`` offline: ParallelCluster's schema and its full validator suite.

Run it with the ParallelCluster virtualenv (``aws-parallelcluster`` pins CDK
v1; ``moto`` is installed there from ``requirements/pcluster.in``)::

    .venv-pcluster/bin/python tools/pcluster_validate.py rehearsal.json

The input is a JSON list of rehearsals, each::

    {"region": "us-east-1",
     "world": {...the deploy-time resources our stacks create...},
     "configs": {"<name>": {"cluster_name": "...", "config": {...}}}}

All rehearsals run in this one process (ParallelCluster imports slowly),
each against a fresh moto account.

``world`` lists, by symbol (any string), what CloudFormation would have
created before ParallelCluster's provider runs: ``vpcs``, ``subnets``,
``internet_gateways``, ``nat_gateways``, ``route_tables`` (with routes and
associated subnets), ``security_groups`` (with their rules),
``buckets`` (with object keys), ``policies`` (managed policies with path
and document), ``file_systems`` (FSx for Lustre and OpenZFS, with a volume),
``capacity_reservations``, ``resource_groups``, ``placement_groups``,
``images`` (custom AMIs) and ``key_pairs``.
Configurations refer to them as ``@{symbol}`` inside any string (``s3://@{bucket}/key``).

moto serves EC2 (VPC, subnets, route tables, gateways, security groups,
network interfaces, instance types, images, placement groups), S3 and IAM;
the calls moto lacks are answered with realistic data by filling
ParallelCluster's own client caches or replacing single client methods:
capacity reservations, resource groups, placement groups, FSx file systems
and volumes (with network interfaces moto does create), the official
ParallelCluster image (one of moto's Amazon x86_64 images; none for
rocky8/rocky9, as in 3.16), key pair types, and RunInstances dry runs with
instance-store mappings (moto refuses them, EC2 does not).

For each configuration this does what ``pcluster create-cluster --dryrun``
does (``Cluster._validate_and_parse_config``): load it with
``ClusterSchema(cluster_name=...)`` and run ``validate()`` on the model.
It prints one JSON document: per configuration, ``schema`` errors (key path
and message) and ``failures`` (level, validator, message). Exit status 0
always when the input could be read (the caller judges the findings); 2 on
bad usage.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

#: Offline: dummy credentials, no shared config, no metadata service.
OFFLINE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "1",
}
#: The ParallelCluster version this rehearsal runs (the one pinned in requirements/pcluster.in).
PCLUSTER_VERSION = "3.16.1"
#: Operating systems ParallelCluster publishes official images for (3.16: none for rocky8/rocky9).
OFFICIAL_IMAGE_OSES = ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9")
SYMBOL = re.compile(r"@\{([^}]+)\}")
ACCOUNT = "123456789012"


def _shared() -> Any:
    """``mlcluster/pcluster/live_validate.py``, loaded by path (this venv does not install mlcluster)."""
    path = Path(__file__).resolve().parents[1] / "mlcluster" / "pcluster" / "live_validate.py"
    spec = importlib.util.spec_from_file_location("mlcluster_live_validate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The same schema-then-validators run ``mlcluster preflight`` makes live (one implementation for both).
LIVE = _shared()


class World:
    """The deploy-time resources, created in moto; ``ids`` maps each symbol to its physical ID or name."""

    def __init__(self, region: str, spec: dict[str, Any]) -> None:
        import boto3

        self.region = region
        self.spec = spec
        self.ids: dict[str, str] = {}
        # Typed loosely: this runs in .venv-pcluster, whose boto3 has no stubs; requests mirror the templates.
        self.ec2: Any = boto3.client("ec2", region_name=region)
        self.s3: Any = boto3.client("s3", region_name=region)
        self.iam: Any = boto3.client("iam", region_name=region)
        self.file_systems: dict[str, dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self.reservations: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, list[str]] = {}
        self.placement_groups: dict[str, dict[str, Any]] = {}
        self.key_types: dict[str, str] = {}

    def sub(self, value: Any) -> Any:
        """``value`` with every ``@{symbol}`` replaced by the physical ID."""
        if isinstance(value, str):
            return SYMBOL.sub(lambda m: self.ids[m[1]], value)
        if isinstance(value, list):
            return [self.sub(v) for v in value]
        if isinstance(value, dict):
            return {k: self.sub(v) for k, v in value.items()}
        return value

    def build(self) -> None:
        s = self.spec
        for vpc in s.get("vpcs", []):
            vpc_id = self.ec2.create_vpc(CidrBlock=vpc["cidr"])["Vpc"]["VpcId"]
            self.ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
            self.ids[vpc["id"]] = vpc_id
        for subnet in s.get("subnets", []):
            created = self.ec2.create_subnet(
                VpcId=self.ids[subnet["vpc"]], CidrBlock=subnet["cidr"], AvailabilityZone=subnet["az"]
            )["Subnet"]
            if subnet.get("map_public_ip"):
                self.ec2.modify_subnet_attribute(SubnetId=created["SubnetId"], MapPublicIpOnLaunch={"Value": True})
            self.ids[subnet["id"]] = created["SubnetId"]
        for igw in s.get("internet_gateways", []):
            igw_id = self.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
            self.ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=self.ids[igw["vpc"]])
            self.ids[igw["id"]] = igw_id
        for nat in s.get("nat_gateways", []):
            allocation = self.ec2.allocate_address(Domain="vpc")["AllocationId"]
            nat_id = self.ec2.create_nat_gateway(SubnetId=self.ids[nat["subnet"]], AllocationId=allocation)
            self.ids[nat["id"]] = nat_id["NatGateway"]["NatGatewayId"]
        for table in s.get("route_tables", []):
            table_id = self.ec2.create_route_table(VpcId=self.ids[table["vpc"]])["RouteTable"]["RouteTableId"]
            self.ids[table["id"]] = table_id
            for subnet in table.get("subnets", []):
                self.ec2.associate_route_table(RouteTableId=table_id, SubnetId=self.ids[subnet])
            for route in table.get("routes", []):
                target = (
                    {"GatewayId": self.ids[route["gateway"]]}
                    if "gateway" in route
                    else {"NatGatewayId": self.ids[route["nat"]]}
                )
                self.ec2.create_route(RouteTableId=table_id, DestinationCidrBlock=route["cidr"], **target)
        for group in s.get("security_groups", []):
            self.ids[group["id"]] = self.ec2.create_security_group(
                GroupName=group["id"].replace("/", "-")[-200:],
                Description=group.get("description", "mlcluster"),
                VpcId=self.ids[group["vpc"]],
            )["GroupId"]
        for group in s.get("security_groups", []):
            group_id = self.ids[group["id"]]
            default_egress = self.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
            if default_egress.get("IpPermissionsEgress"):
                self.ec2.revoke_security_group_egress(
                    GroupId=group_id, IpPermissions=default_egress["IpPermissionsEgress"]
                )
            for direction, call in (
                ("ingress", self.ec2.authorize_security_group_ingress),
                ("egress", self.ec2.authorize_security_group_egress),
            ):
                rules = [self._permission(rule) for rule in group.get(direction, [])]
                if rules:
                    call(GroupId=group_id, IpPermissions=rules)
        for bucket in s.get("buckets", []):
            name = bucket["name"]
            kwargs = (
                {} if self.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": self.region}}
            )
            self.s3.create_bucket(Bucket=name, **kwargs)
            for key in bucket.get("keys", []):
                self.s3.put_object(Bucket=name, Key=key, Body=b"#!/bin/bash\n")
            self.ids[bucket["id"]] = name
        for policy in s.get("policies", []):
            arn = self.iam.create_policy(
                PolicyName=policy["name"], Path=policy.get("path", "/"), PolicyDocument=json.dumps(policy["document"])
            )["Policy"]["Arn"]
            self.ids[policy["id"]] = arn
        for database in s.get("databases", []):
            # An Aurora cluster's endpoint name: the configuration holds only the name (no RDS call is made).
            self.ids[database["id"]] = f"{database['name']}.cluster-c0ffee.{self.region}.rds.amazonaws.com"
        if s.get("secrets"):
            import boto3

            secrets: Any = boto3.client("secretsmanager", region_name=self.region)
            for secret in s["secrets"]:
                self.ids[secret["id"]] = secrets.create_secret(Name=secret["name"], SecretString="p" * 32)["ARN"]
        for group in s.get("placement_groups", []):
            self.placement_groups[group["name"]] = {
                "GroupName": group["name"],
                "State": "available",
                "Strategy": "cluster",
                "GroupId": f"pg-{abs(hash(group['id'])) % 16**17:017x}",
                "GroupArn": f"arn:aws:ec2:{self.region}:{ACCOUNT}:placement-group/{group['name']}",
            }
            self.ids[group["id"]] = group["name"]
        for reservation in s.get("capacity_reservations", []):
            self._reservation(reservation)
        for group in s.get("resource_groups", []):
            arn = f"arn:aws:resource-groups:{self.region}:{ACCOUNT}:group/{group['name']}"
            self.groups[arn] = [self._reservation(r) for r in group["reservations"]]
            self.ids[group["id"]] = arn
        for fs in s.get("file_systems", []):
            self._file_system(fs)
        for image in s.get("images", []):
            # A custom image built with pcluster build-image: a copy tagged with the ParallelCluster version.
            copy = self.ec2.copy_image(
                Name=image["id"].replace("/", "-"), SourceImageId=self.stand_in_image, SourceRegion=self.region
            )["ImageId"]
            tags = [
                {"Key": "parallelcluster:version", "Value": PCLUSTER_VERSION},
                {"Key": "parallelcluster:build_status", "Value": "available"},
                {"Key": "parallelcluster:os", "Value": image["os"]},
            ]
            self.ec2.create_tags(Resources=[copy], Tags=tags)
            self.ids[image["id"]] = copy
        for key in s.get("key_pairs", []):
            self.key_types[key["name"]] = key.get("type", "ed25519")
            self.ec2.create_key_pair(KeyName=key["name"], KeyType=self.key_types[key["name"]])

    @functools.cached_property
    def stand_in_image(self) -> str:
        """One of moto's Amazon-owned x86_64 EBS images: the official image, or a custom one built from it.

        Chosen with moto's own DescribeImages filter, asked in-process: through
        the API, moto would serialize all of its ~1,300 stand-in images into
        one response, seconds of work per region for a single id.
        """
        from moto.ec2.models import ec2_backends

        images = ec2_backends[ACCOUNT][self.region].describe_images(
            owners=["amazon"], filters={"architecture": ["x86_64"], "root-device-type": ["ebs"]}
        )
        return str(min(image.id for image in images))

    def _permission(self, rule: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"IpProtocol": rule.get("protocol", "-1")}
        if out["IpProtocol"] != "-1":
            out["FromPort"], out["ToPort"] = rule["from"], rule["to"]
        if "cidr" in rule:
            out["IpRanges"] = [{"CidrIp": rule["cidr"]}]
        if "group" in rule:
            out["UserIdGroupPairs"] = [{"GroupId": self.ids[rule["group"]]}]
        return out

    def _reservation(self, reservation: dict[str, Any]) -> str:
        """A targeted On-Demand Capacity Reservation as DescribeCapacityReservations returns it (moto has none)."""
        cr_id = reservation["id"]
        self.reservations[cr_id] = {
            "CapacityReservationId": cr_id,
            "CapacityReservationArn": f"arn:aws:ec2:{self.region}:{ACCOUNT}:capacity-reservation/{cr_id}",
            "OwnerId": ACCOUNT,
            "InstanceType": reservation["instance_type"],
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": reservation["az"],
            "Tenancy": "default",
            "TotalInstanceCount": reservation.get("count", 4),
            "AvailableInstanceCount": reservation.get("count", 4),
            "State": "active",
            "InstanceMatchCriteria": "targeted",
            "ReservationType": reservation.get("type", "default"),
            **(
                {"PlacementGroupArn": self.placement_groups[self.ids[reservation["placement_group"]]]["GroupArn"]}
                if "placement_group" in reservation
                else {}
            ),
        }
        return str(cr_id)

    def _file_system(self, fs: dict[str, Any]) -> None:
        """An FSx file system (and OpenZFS root volume) with network interfaces moto creates in its subnet."""
        subnet = self.ids[fs["subnet"]]
        groups = [self.ids[g] for g in fs["security_groups"]]
        eni = self.ec2.create_network_interface(SubnetId=subnet, Groups=groups)["NetworkInterface"]
        fs_id = f"fs-{abs(hash(fs['id'])) % 16**17:017x}"
        vpc = self.ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["VpcId"]
        data: dict[str, Any] = {
            "FileSystemId": fs_id,
            "FileSystemType": fs["type"],
            "Lifecycle": "AVAILABLE",
            "VpcId": vpc,
            "SubnetIds": [subnet],
            "NetworkInterfaceIds": [eni["NetworkInterfaceId"]],
            "DNSName": f"{fs_id}.fsx.{self.region}.amazonaws.com",
            "StorageCapacity": 1200,
        }
        if fs["type"] == "LUSTRE":
            data["LustreConfiguration"] = {"DeploymentType": "PERSISTENT_2", "MountName": "abcdefgh"}
            data["FileSystemTypeVersion"] = "2.15"
        else:
            data["OpenZFSConfiguration"] = {"DeploymentType": "SINGLE_AZ_HA_2", "RootVolumeId": "fsvol-x"}
        self.file_systems[fs_id] = data
        self.ids[fs["id"]] = fs_id
        if "volume" in fs:
            vol_id = f"fsvol-{abs(hash(fs['volume'])) % 16**17:017x}"
            self.volumes[vol_id] = {
                "FileSystemId": fs_id,
                "VolumeId": vol_id,
                "VolumeType": "OPENZFS",
                "Lifecycle": "AVAILABLE",
                "OpenZFSConfiguration": {"VolumePath": "/fsx"},
            }
            self.ids[fs["volume"]] = vol_id


def patch_missing_calls(world: World) -> None:
    """Answer, with realistic data, the calls moto does not implement."""
    from pcluster.aws.aws_api import AWSApi
    from pcluster.aws.aws_resources import CapacityReservationInfo, FsxStorageInfo
    from pcluster.aws.common import AWSClientError

    api = AWSApi.instance()
    for cr_id, data in world.reservations.items():
        api.ec2.capacity_reservations_cache[cr_id] = CapacityReservationInfo(data)
    for fs_id, data in world.file_systems.items():
        api.fsx.cache[fs_id] = FsxStorageInfo(data)
    for vol_id, data in world.volumes.items():
        api.fsx.volume_cache[vol_id] = data
    image = world.stand_in_image

    def get_official_image_id(os: str, architecture: str, filters: Any = None) -> str:
        if os not in OFFICIAL_IMAGE_OSES:
            raise AWSClientError("describe_images", "Cannot find official ParallelCluster AMI")
        return image

    api.ec2.get_official_image_id = get_official_image_id
    # RunInstances dry runs: moto refuses instance-store mappings (VirtualName, no Ebs) that EC2 accepts.
    run_instances = api.ec2._client.run_instances

    def run_instances_dry(**kwargs: Any) -> Any:
        kwargs["BlockDeviceMappings"] = [m for m in kwargs.get("BlockDeviceMappings", []) if "Ebs" in m]
        return run_instances(**kwargs)

    api.ec2._client.run_instances = run_instances_dry

    def describe_placement_group(group_name: str) -> dict[str, Any]:
        if group_name not in world.placement_groups:
            raise AWSClientError("describe_placement_groups", f"The Placement Group '{group_name}' is unknown.")
        return {"PlacementGroups": [world.placement_groups[group_name]]}

    api.ec2.describe_placement_group = describe_placement_group
    describe_key_pair = api.ec2.describe_key_pair

    def describe_key_pair_with_type(key_name: str) -> Any:
        # moto leaves out KeyType, which EC2 always returns.
        found = describe_key_pair(key_name)
        for pair in found["KeyPairs"]:
            pair.setdefault("KeyType", world.key_types[pair["KeyName"]])
        return found

    api.ec2.describe_key_pair = describe_key_pair_with_type
    api.resource_groups.get_capacity_reservation_ids_from_group_resources = lambda group: world.groups[group]
    api.resource_groups.get_group_configuration = lambda group: {
        "GroupConfiguration": {
            "Configuration": [
                {"Type": "AWS::EC2::CapacityReservationPool"},
                {
                    "Type": "AWS::ResourceGroups::Generic",
                    "Parameters": [{"Name": "allowed-resource-types", "Values": ["AWS::EC2::CapacityReservation"]}],
                },
            ]
        }
    }


def validate(name: str, cluster_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """What ``pcluster create-cluster --dryrun`` finds in ``config``: schema errors, then validator failures."""
    result: dict[str, Any] = LIVE.validate(cluster_name, config)
    return result


def speed_up_moto_and_pcluster() -> None:
    """Patches for this process that change no finding, only what is computed again and again or thrown away.

    - moto's reset, when a mock starts or stops, runs ``__init__`` again on every backend made so far
      (an EC2 backend loads its ~1,300 stand-in images, an IAM backend its managed policies) and then
      drops them all; here it only drops them, so each rehearsal builds just the backends it asks for,
      fresh, as before.
    - ParallelCluster asks for the region (``get_region``) about 200 times a rehearsal run, each time
      through a new boto3 session (all of botocore's handlers registered again); the answer depends only
      on ``AWS_DEFAULT_REGION`` here (no profile, no config file), so it is asked once per region.
    - moto parses its ~1,600 AWS-managed IAM policies (a JSON text of megabytes) for every IAM backend
      it makes (one per account and partition it looks through). The text is parsed once here; the
      backend of the rehearsal's partition still builds its own policy objects from it, as moto does, and
      the backends of the other partitions (made only when moto looks for an access key in each) none.
    - ParallelCluster logs every boto3 call at INFO from a handler that makes a new boto3 session (all of
      botocore's handlers registered again) for the region in its message, even when INFO is not logged;
      logging is off in this process, so the handler runs only when its logger would write the line.
    """
    import moto.core.base_backend as base_backend
    import moto.iam.models as moto_iam
    import pcluster.aws.common as pcluster_common
    import pcluster.schemas.cluster_schema  # noqa: F401  (imports every module that uses get_region)
    from moto.core.base_backend import BackendDict
    from moto.utilities.utils import get_partition

    managed_policies = json.loads(moto_iam.aws_managed_policies_data)

    def init_aws_policies(self: Any) -> list[Any]:
        if not moto_iam.load_iam_aws_managed_policies():
            return []
        if self.partition != get_partition(os.environ["AWS_DEFAULT_REGION"]):
            return []  # a backend moto makes only to look for an access key in every partition
        return [
            moto_iam.AWSManagedPolicy.from_data(name, self.account_id, self.region_name, data)
            for name, data in managed_policies.items()
        ]

    log_boto3_calls = pcluster_common._log_boto3_calls

    def log_boto3_calls_when_logged(params: Any, **kwargs: Any) -> None:
        if pcluster_common.LOGGER.isEnabledFor(logging.INFO):
            log_boto3_calls(params, **kwargs)

    def reset_without_rebuilding(cls: type[BackendDict[Any]]) -> None:
        with base_backend.backend_lock:
            for backend in BackendDict._instances:
                backend.clear()
            BackendDict._instances.clear()

    get_region = pcluster_common.get_region
    regions: dict[str | None, str] = {}

    def get_region_once() -> str:
        region = os.environ.get("AWS_DEFAULT_REGION")
        if region not in regions:
            regions[region] = get_region()
        return regions[region]

    moto_iam.IAMBackend._init_aws_policies = init_aws_policies
    pcluster_common._log_boto3_calls = log_boto3_calls_when_logged
    BackendDict.reset = classmethod(reset_without_rebuilding)
    for module in list(sys.modules.values()):  # every module that imported it by name
        if getattr(module, "__name__", "").startswith("pcluster") and getattr(module, "get_region", None) is get_region:
            module.get_region = get_region_once


def main(argv: list[str] | None = None) -> int:
    """Build the world once, then rehearse every configuration; print the findings as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("input", type=Path, help="the rehearsal document (JSON)")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.input.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{args.input}: cannot be read: {exc}", file=sys.stderr)
        return 2
    os.environ.update(OFFLINE_ENV)
    os.environ.pop("AWS_PROFILE", None)
    logging.disable(logging.CRITICAL)

    import botocore.loaders
    import botocore.session
    from moto import mock_aws
    from pcluster.aws.aws_api import AWSApi

    # moto resets boto3's default session on every mock, and each session's own loader would parse
    # the service models (megabytes of JSON) again: one loader serves every rehearsal in this process.
    botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)
    speed_up_moto_and_pcluster()

    results: dict[str, Any] = {}
    for rehearsal in document:
        os.environ["AWS_DEFAULT_REGION"] = rehearsal["region"]
        AWSApi._instance = None  # a fresh client set (and caches) per account and region
        with mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
            world = World(rehearsal["region"], rehearsal["world"])
            world.build()
            patch_missing_calls(world)
            for name, item in rehearsal["configs"].items():
                results[name] = validate(name, item["cluster_name"], world.sub(item["config"]))
    json.dump(results, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
