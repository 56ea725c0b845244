"""``mlcluster preflight``: every check passing, failing and erroring, against moto and validated answers.

moto serves EC2 (offerings, instance types, VPCs, addresses, NAT gateways,
subnets, instances), CloudFormation, S3, SageMaker and FSx. Service Quotas
(moto knows only the vpc service), DescribeCapacityReservations and
DescribeImages of Amazon's public images are answered through the ``aws``
fixture, which validates every request and response against botocore's model
as the Stubber does.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.cli import preflight
from mlcluster.cli.plan import plan_of
from mlcluster.config import load_environment
from tests.cli.conftest import REPO, Aws, aws_client, error, invoke

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
P5_REGION = "us-east-2"
RESERVATION = "cr-0123456789abcdef0"
#: The terminal width of the docs' sample output.
README_COLUMNS = 160


def env_folder(tmp_path: Path, name: str, region: str, **changes: Any) -> Path:
    """A copy of ``environments/<name>.yaml`` with ``region`` set and top-level keys replaced."""
    folder = tmp_path / "environments"
    folder.mkdir(exist_ok=True)
    data = yaml.safe_load((REPO / "environments" / f"{name}.yaml").read_text())
    data["region"] = region
    data.update(changes)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return folder


def missing_custom_ami_rows(aws: Aws, tmp_path: Path) -> list[preflight.Result]:
    """The image check's rows for the p5 example given a custom AMI that EC2 does not know."""
    folder = env_folder(tmp_path, "p5", P5_REGION)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data["cluster"]["pcluster"]["custom_ami"] = "ami-0123456789abcdef0"
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    aws.answer("ec2", "DescribeImages", always={"Images": []})
    return preflight.check_pcluster_image(context(aws, folder, "p5", P5_REGION))


def spot_p5_folder(tmp_path: Path) -> Path:
    """The p5 example with its first queue turned Spot (no capacity reservation): an environments folder."""
    folder = env_folder(tmp_path, "p5", P5_REGION)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    queue = data["cluster"]["pcluster"]["queues"][0]
    queue["capacity_type"] = "SPOT"
    queue["compute_resources"][0].pop("capacity_reservation_id", None)
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    return folder


def quota(service: str, code: str, name: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": service, "QuotaCode": code, "QuotaName": name, "Value": value}}


def quotas(aws: Aws, *, p_vcpus: float = 800.0) -> None:
    """Applied quotas for the p5 environment (P instances, Standard, VPC, EIP, NAT) and FSx's by name."""

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        table = {
            ("ec2", "L-417A185B"): ("Running On-Demand P instances", p_vcpus),
            ("ec2", "L-1216C47A"): ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", 1152.0),
            ("vpc", "L-F678F1CE"): ("VPCs per Region", 5.0),
            ("ec2", "L-0263D0A3"): ("EC2-VPC Elastic IPs", 5.0),
            ("vpc", "L-FE5A380F"): ("NAT gateways per Availability Zone", 5.0),
        }
        name, value = table[(params["ServiceCode"], params["QuotaCode"])]
        return quota(params["ServiceCode"], params["QuotaCode"], name, value)

    aws.answer("service-quotas", "GetServiceQuota", always=answer)
    aws.answer(
        "service-quotas",
        "ListServiceQuotas",
        always={
            "Quotas": [
                {"QuotaCode": "L-8F1B9C74", "QuotaName": "Lustre Persistent_2 storage capacity", "Value": 100800.0},
                {"QuotaCode": "L-FD6F2F22", "QuotaName": "Lustre Persistent_2 file systems", "Value": 100.0},
            ]
        },
    )


def reservation(**changes: Any) -> dict[str, Any]:
    found = {
        "CapacityReservationId": RESERVATION,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-2a",
        "AvailabilityZoneId": "use2-az1",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 4,
        "State": "active",
        "EndDateType": "limited",
        "EndDate": NOW + timedelta(days=60),
        "ReservationType": "default",
    }
    found.update(changes)
    return {"CapacityReservations": [found]}


def image() -> dict[str, Any]:
    return {
        "Images": [
            {
                "ImageId": "ami-0abc1234def567890",
                "Name": "aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64-202611010000 2026-11-01T00-00-00.000Z",
                "CreationDate": "2026-11-01T00:00:00.000Z",
            }
        ]
    }


def bootstrap(version: str = "33") -> None:
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {"BootstrapVersion": {"Value": version}},
    }
    aws_client("cloudformation", P5_REGION).create_stack(StackName="CDKToolkit", TemplateBody=json.dumps(template))


def healthy_p5(aws: Aws, **quota_changes: Any) -> None:
    quotas(aws, **quota_changes)
    aws.answer("ec2", "DescribeCapacityReservations", always=reservation())
    aws.answer("ec2", "DescribeImages", always=image())
    bootstrap()


def context(aws: Aws, folder: Path, name: str, region: str) -> preflight.Context:
    env = load_environment(folder / f"{name}.yaml")
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            import boto3

            session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
            made[service] = session.client(service, region_name=region)  # type: ignore[call-overload]
            aws.attach(made[service])
        return made[service]

    return preflight.Context(
        env=env, plan=plan_of(env), region=region, client=client, margin=timedelta(days=7), now=NOW
    )


def rows(results: list[preflight.Result], check: str) -> list[tuple[str, str]]:
    return [(r.status, r.level) for r in results if r.check == check]


# --- the command as a whole -----------------------------------------------------------------------


def test_p5_passes_when_the_account_is_ready(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    healthy_p5(aws)
    monkeypatch.setattr(preflight, "datetime", _Frozen)
    result = invoke("preflight", "p5", "--environments", str(env_folder(tmp_path, "p5", P5_REGION)), "--json")
    data = json.loads(result.output)
    assert result.exit_code == 0, result.output
    assert {r["status"] for r in data["results"] if r["check"] != "pcluster-validators"} == {"pass"}
    # Before the Network and Storage stacks exist, ParallelCluster's live validators are skipped, not failed.
    (validators,) = [r for r in data["results"] if r["check"] == "pcluster-validators"]
    assert (validators["status"], validators["level"]) == ("skipped", "WARNING")
    checks = {r["check"] for r in data["results"]}
    assert checks >= {"vcpu-quota", "fsx-quota", "vpc-quota", "eip-quota", "nat-quota", "instance-offered"}
    assert checks >= {"capacity-reservation", "pcluster-image", "names", "cdk-bootstrap"}
    # The official image is looked up with ParallelCluster's own name pattern and owner.
    (images,) = aws.params("DescribeImages")
    assert images["Owners"] == ["amazon"]
    assert images["Filters"][0] == {"Name": "name", "Values": ["aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64*"]}
    # Every call was a read.
    assert all(op.startswith(("Describe", "Get", "List", "Head")) for op in aws.operations())


class _Frozen(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> _Frozen:  # type: ignore[override]
        return cls.fromtimestamp(NOW.timestamp(), tz)


def test_p5_low_quota_and_expired_reservation_fail_with_exit_1(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy_p5(aws, p_vcpus=384.0)
    aws.sticky[("ec2", "DescribeCapacityReservations")] = reservation(State="expired", EndDate=NOW - timedelta(days=2))
    monkeypatch.setattr(preflight, "datetime", _Frozen)
    monkeypatch.setenv("COLUMNS", str(README_COLUMNS))
    folder = env_folder(tmp_path, "p5", P5_REGION)
    result = invoke("preflight", "p5", "--environments", str(folder))
    assert result.exit_code == 1
    assert "3 errors, 0 warnings, 0 checks could not run, 1 skipped" in result.output
    assert "Traceback" not in result.output
    # The docs' sample (docs/use-cases/deploy.md) is this output, whole (trailing spaces aside).
    sample = "\n".join(["```", "$ mlcluster preflight p5", *(x.rstrip() for x in result.output.splitlines()), "```"])
    page = (REPO / "docs/use-cases/deploy.md").read_text(encoding="utf-8")
    assert sample in page, "docs/use-cases/deploy.md preflight sample is stale:\n" + sample
    as_json = invoke("preflight", "p5", "--environments", str(folder), "--json")
    assert as_json.exit_code == 1
    messages = [r["message"] for r in json.loads(as_json.stdout)["results"] if r["status"] == "fail"]
    assert messages == [
        "Running On-Demand P instances (L-417A185B) is 384 vCPUs; 0 run already and max_count needs 768: "
        "request 768 in Service Quotas or lower max_count",
        "cr-0123456789abcdef0: state is expired, not active: buy or renew the reservation, or remove "
        "capacity_reservation_id",
        "cr-0123456789abcdef0: it ended 2026-11-25 12:00 UTC: renew it or remove capacity_reservation_id",
    ]
    failed = {(r["check"], r["key"]) for r in json.loads(as_json.stdout)["results"] if r["status"] == "fail"}
    assert failed == {
        ("vcpu-quota", "cluster.pcluster.queues[0].compute_resources[0]"),
        ("capacity-reservation", "cluster.pcluster.queues[0].compute_resources[0].capacity_reservation_id"),
    }


def test_skip_leaves_a_check_out(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    healthy_p5(aws, p_vcpus=384.0)
    monkeypatch.setattr(preflight, "datetime", _Frozen)
    folder = env_folder(tmp_path, "p5", P5_REGION)
    result = invoke("preflight", "p5", "--environments", str(folder), "--skip", "vcpu-quota", "--json")
    assert result.exit_code == 0
    assert "vcpu-quota" not in {r["check"] for r in json.loads(result.stdout)["results"]}
    assert "L-417A185B" not in [p["QuotaCode"] for p in aws.params("GetServiceQuota")]
    bad = invoke("preflight", "p5", "--environments", str(folder), "--skip", "no-such-check")
    assert bad.exit_code == 2 and "no-such-check" in bad.output


@pytest.mark.parametrize(
    ("code", "words"),
    [("AccessDeniedException", "lack this permission"), ("ThrottlingException", "AWS throttled the calls")],
)
def test_an_aws_error_is_a_row_and_exit_3(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, words: str
) -> None:
    healthy_p5(aws)
    aws.sticky[("service-quotas", "GetServiceQuota")] = error(code, "not today")
    monkeypatch.setattr(preflight, "datetime", _Frozen)
    folder = env_folder(tmp_path, "p5", P5_REGION)
    result = invoke("preflight", "p5", "--environments", str(folder))
    assert result.exit_code == 3
    assert "AWS ERROR" in result.output and "checks could not run" in result.output
    assert "Traceback" not in result.output
    as_json = invoke("preflight", "p5", "--environments", str(folder), "--json")
    errors = [r for r in json.loads(as_json.stdout)["results"] if r["status"] == "error"]
    assert {r["check"] for r in errors} == {"vcpu-quota", "vpc-quota", "eip-quota", "nat-quota"}
    assert all(code in r["message"] and words in r["message"] for r in errors)
    # The other checks still ran.
    assert "DescribeInstanceTypeOfferings" in aws.operations()


# --- each check, passing and failing ---------------------------------------------------------------


def test_vcpu_quota_counts_other_running_instances(aws: Aws, tmp_path: Path) -> None:
    quotas(aws, p_vcpus=800.0)
    ctx = context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)
    assert rows(preflight.check_vcpu_quota(ctx), "vcpu-quota") == [("pass", "ERROR"), ("pass", "ERROR")]
    # 800 >= 768 at the edge; a Spot p5 counts against another quota, one more On-Demand p5 tips it over.
    ec2 = aws_client("ec2", P5_REGION)
    spot = {"MarketType": "spot"}
    ec2.run_instances(
        ImageId="ami-12345678", InstanceType="p5.48xlarge", MinCount=1, MaxCount=1, InstanceMarketOptions=spot
    )
    ctx = context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)
    assert rows(preflight.check_vcpu_quota(ctx), "vcpu-quota") == [("pass", "ERROR"), ("pass", "ERROR")]
    ec2.run_instances(ImageId="ami-12345678", InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)
    ctx = context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)
    results = preflight.check_vcpu_quota(ctx)
    assert ("fail", "ERROR") in rows(results, "vcpu-quota")
    assert "192 run already and max_count needs 768: request 960" in " ".join(r.message for r in results)


def test_vcpu_quota_codes_are_those_of_the_ec2_user_guide() -> None:
    """The EC2 User Guide's On-Demand and Spot quota tables, code for code (pages named in preflight.py)."""
    on_demand = {"DL": "L-6E869C2A", "F": "L-74FC7D96", "G and VT": "L-DB2E81BA", "HPC": "L-F7808C92"}
    on_demand |= {"High Memory": "L-43DA4232", "Inf": "L-1945791B", "P": "L-417A185B", "Trn": "L-2C3B7624"}
    on_demand |= {"Standard (A, C, D, H, I, M, R, T, Z)": "L-1216C47A", "X": "L-7295265B"}
    spot = {"DL": "L-85EED4F7", "F": "L-88CF9481", "G and VT": "L-3819A6DF", "Inf": "L-B5D1601B", "P": "L-7212CCBC"}
    spot |= {"Standard (A, C, D, H, I, M, R, T, Z)": "L-34B43A08", "Trn": "L-6B0D517C", "X": "L-E3A00192"}
    assert {name: code for code, name in preflight.VCPU_QUOTAS.values()} == on_demand
    assert {name: code for code, name in preflight.SPOT_VCPU_QUOTAS.values()} == spot


def test_vcpu_quota_family_mapping() -> None:
    assert preflight.family("p5.48xlarge") == "p"
    assert preflight.family("p4de.24xlarge") == "p"
    assert preflight.family("trn1.32xlarge") == "trn"
    assert preflight.family("g6e.12xlarge") == "g"
    assert preflight.family("m5.8xlarge") == "m"
    assert preflight.family("inf2.48xlarge") == "inf"
    assert preflight.family("hpc7g.16xlarge") == "hpc"


def test_sagemaker_quota_by_name(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    listed = [
        {"QuotaCode": "L-AAAA0001", "QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 2.0},
        {"QuotaCode": "L-AAAA0002", "QuotaName": "ml.m5.12xlarge for cluster usage", "Value": 4.0},
        {"QuotaCode": "L-AAAA0003", "QuotaName": "ml.m5.4xlarge for cluster usage", "Value": 0.0},
    ]
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": listed})
    results = preflight.check_sagemaker_quota(context(aws, folder, "hyperpod", "us-west-2"))
    by_type = {r.message.split()[0]: r.status for r in results if "for cluster usage" in r.message}
    assert by_type == {"ml.m5.12xlarge": "pass", "ml.m5.4xlarge": "fail", "ml.p5.48xlarge": "pass"}
    assert aws.params("ListServiceQuotas")[0]["ServiceCode"] == "sagemaker"
    aws.sticky[("service-quotas", "ListServiceQuotas")] = {"Quotas": listed[:2]}
    missing = preflight.check_sagemaker_quota(context(aws, folder, "hyperpod", "us-west-2"))
    assert [r.status for r in missing if "ml.m5.4xlarge" in r.message] == ["fail"]
    assert "not offered for HyperPod here" in " ".join(r.message for r in missing)


#: FSx quotas as Service Quotas names them, per deployment type (codes from the Service Quotas console).
FSX_QUOTAS = [
    {"QuotaCode": "L-8F1B9C74", "QuotaName": "Lustre Persistent_2 storage capacity", "Value": 3000.0},
    {"QuotaCode": "L-FD6F2F22", "QuotaName": "Lustre Persistent_2 file systems", "Value": 2.0},
    {"QuotaCode": "L-C8640C82", "QuotaName": "Lustre Persistent_1 storage capacity", "Value": 1000.0},
    {"QuotaCode": "L-AD2FC696", "QuotaName": "Lustre Scratch storage capacity", "Value": 100.0},
    {"QuotaCode": "L-736F3D6F", "QuotaName": "Lustre Persistent HDD storage capacity (per file system)", "Value": 1.0},
]


def _lustre(deployment_type: str, capacity: int, tags: list[dict[str, str]] | None = None) -> None:
    throughput = 250 if deployment_type == "PERSISTENT_2" else 200
    aws_client("fsx", P5_REGION).create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=capacity,
        SubnetIds=[_subnet(P5_REGION)],
        LustreConfiguration={"DeploymentType": deployment_type, "PerUnitStorageThroughput": throughput},
        **({"Tags": tags} if tags else {}),
    )


def test_fsx_quota_counts_only_the_same_deployment_type(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": FSX_QUOTAS})
    # Another deployment type's capacity and quota do not count against PERSISTENT_2.
    _lustre("PERSISTENT_1", 2400)
    ok = preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))
    assert [(r.status, r.message) for r in ok] == [
        ("pass", "Lustre Persistent_2 storage capacity (L-8F1B9C74) 3000 >= 0 used + 1200"),
        ("pass", "Lustre Persistent_2 file systems (L-FD6F2F22) 2 >= 0 used + 1"),
    ]
    # This environment's own file system (a redeploy) is not counted either.
    _lustre("PERSISTENT_2", 2400, [{"Key": "mlcluster:environment", "Value": "p5"}])
    assert {r.status for r in preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))} == {"pass"}
    # Another PERSISTENT_2 file system is: 2400 + 1200 > 3000, and at the edge 1 + 1 file systems fit 2.
    _lustre("PERSISTENT_2", 1800)
    results = preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))
    assert [(r.status, r.key, r.message) for r in results] == [
        (
            "pass",
            "storage.lustre.storage_capacity_gib",
            "Lustre Persistent_2 storage capacity (L-8F1B9C74) 3000 >= 1800 used + 1200",
        ),
        ("pass", "storage.lustre", "Lustre Persistent_2 file systems (L-FD6F2F22) 2 >= 1 used + 1"),
    ]
    _lustre("PERSISTENT_2", 1200)
    failed = preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))
    assert [r.message for r in failed if r.status == "fail"] == [
        "Lustre Persistent_2 storage capacity (L-8F1B9C74) is 3000; 3000 GiB used by other PERSISTENT_2 file "
        "systems and 1200 GiB needed: request an increase or make it smaller",
        "Lustre Persistent_2 file systems (L-FD6F2F22) is 2; 2 file systems used by other PERSISTENT_2 file "
        "systems and 1 file systems needed: request an increase or make it smaller",
    ]
    aws.sticky[("service-quotas", "ListServiceQuotas")] = {"Quotas": FSX_QUOTAS[2:]}
    unknown = preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))
    assert rows(unknown, "fsx-quota") == [("fail", "WARNING")]


def test_fsx_quota_per_file_system_compares_the_need_alone(aws: Aws, tmp_path: Path) -> None:
    zfs = {"deployment_type": "SINGLE_AZ_2", "storage_capacity_gib": 512, "throughput_capacity_mbps": 320}
    folder = env_folder(tmp_path, "p5", P5_REGION, storage={"openzfs": zfs})
    listed = [
        *FSX_QUOTAS[:2],
        {"QuotaCode": "L-ZFS00001", "QuotaName": "OpenZFS SSD storage capacity", "Value": 100000.0},
        {"QuotaCode": "L-ZFS00002", "QuotaName": "OpenZFS SSD storage capacity (per file system)", "Value": 512.0},
    ]
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": listed})
    ok = [r for r in preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION)) if r.key.startswith("storage.o")]
    assert [(r.status, r.message) for r in ok] == [
        ("pass", "OpenZFS SSD storage capacity (L-ZFS00001) 100000 >= 0 used + 512"),
        ("pass", "OpenZFS SSD storage capacity (per file system) (L-ZFS00002) 512 >= 512"),
    ]
    listed[3] = {**listed[3], "Value": 511.0}
    aws.sticky[("service-quotas", "ListServiceQuotas")] = {"Quotas": listed}
    failed = preflight.check_fsx_quota(context(aws, folder, "p5", P5_REGION))
    assert [(r.key, r.message) for r in failed if r.status == "fail"] == [
        (
            "storage.openzfs.storage_capacity_gib",
            "OpenZFS SSD storage capacity (per file system) (L-ZFS00002) is 511; 512 GiB needed: "
            "request an increase or make it smaller",
        )
    ]


def _subnet(region: str) -> str:
    ec2 = aws_client("ec2", region)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    return str(
        ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24", AvailabilityZone=f"{region}a")["Subnet"]["SubnetId"]
    )


def network_quotas(ctx: preflight.Context) -> list[preflight.Result]:
    return preflight.check_vpc_quota(ctx) + preflight.check_eip_quota(ctx) + preflight.check_nat_quota(ctx)


def test_network_quotas(aws: Aws, tmp_path: Path) -> None:
    quotas(aws)
    folder = env_folder(tmp_path, "p5", P5_REGION)
    ok = network_quotas(context(aws, folder, "p5", P5_REGION))
    assert {r.check: r.status for r in ok} == {"vpc-quota": "pass", "eip-quota": "pass", "nat-quota": "pass"}
    ec2 = aws_client("ec2", P5_REGION)
    subnet = _subnet(P5_REGION)  # moto starts with the default VPC; this is the second
    for _ in range(5):
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)
    for _ in range(3):
        ec2.create_vpc(CidrBlock="10.8.0.0/16")
    bad = network_quotas(context(aws, folder, "p5", P5_REGION))
    assert {r.check: r.status for r in bad} == {"vpc-quota": "fail", "eip-quota": "fail", "nat-quota": "fail"}
    assert "5 in us-east-2a, 1 needed" in " ".join(r.message for r in bad)


def _full_zone(region: str, zone: str, cidr: str) -> None:
    """Five NAT gateways (the quota the recorded answers give) in a subnet of ``zone``."""
    ec2 = aws_client("ec2", region)
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace("/16", "/24"), AvailabilityZone=zone)["Subnet"]
    for _ in range(5):
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        ec2.create_nat_gateway(SubnetId=subnet["SubnetId"], AllocationId=allocation)


def test_nat_quota_is_checked_in_every_zone_that_gets_a_gateway(aws: Aws, tmp_path: Path) -> None:
    """Review i30l finding 5: ``nat_gateways: per_zone`` puts one NAT gateway in each zone; a full second zone
    fails under its own key, and with ``one`` the second zone gets none and is not checked."""
    quotas(aws)
    folder = env_folder(tmp_path, "pcluster-accounting", P5_REGION)
    ok = preflight.check_nat_quota(context(aws, folder, "pcluster-accounting", P5_REGION))
    assert [(r.key, r.status, r.message.split("; ")[1]) for r in ok] == [
        ("network.availability_zone", "pass", "0 in us-east-2a, 1 needed"),
        ("network.extra_zones[0]", "pass", "0 in us-east-2b, 1 needed"),
    ]
    _full_zone(P5_REGION, "us-east-2b", "10.7.0.0/16")
    bad = preflight.check_nat_quota(context(aws, folder, "pcluster-accounting", P5_REGION))
    assert [(r.key, r.status) for r in bad] == [
        ("network.availability_zone", "pass"),
        ("network.extra_zones[0]", "fail"),
    ]
    assert bad[1].message.endswith("5 in us-east-2b, 1 needed: request an increase or choose another zone")
    # The edge: one NAT gateway, in the primary zone alone; the full second zone is none of its business.
    network = yaml.safe_load((folder / "pcluster-accounting.yaml").read_text())["network"]
    one = env_folder(tmp_path, "pcluster-accounting", P5_REGION, network={**network, "nat_gateways": "one"})
    single = preflight.check_nat_quota(context(aws, one, "pcluster-accounting", P5_REGION))
    assert [(r.key, r.status) for r in single] == [("network.availability_zone", "pass")]


def test_nat_quota_by_zone_id(aws: Aws, tmp_path: Path) -> None:
    """Zones named by ID (HyperPod's) are matched by the subnet's AvailabilityZoneId."""
    quotas(aws)
    network = {"availability_zone_id": "use2-az1", "extra_zones": [{"availability_zone_id": "use2-az2"}]}
    folder = env_folder(tmp_path, "hyperpod-accounting", P5_REGION, network={**network, "nat_gateways": "per_zone"})
    ec2 = aws_client("ec2", P5_REGION)
    names = {z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    _full_zone(P5_REGION, names["use2-az2"], "10.7.0.0/16")
    results = preflight.check_nat_quota(context(aws, folder, "hyperpod-accounting", P5_REGION))
    assert [(r.key, r.status) for r in results] == [
        ("network.availability_zone_id", "pass"),
        ("network.extra_zones[0]", "fail"),
    ]
    assert "5 in use2-az2, 1 needed" in results[1].message


def test_offerings_by_zone_name_and_id(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    assert {
        s for s, _ in rows(preflight.check_offerings(context(aws, folder, "p5", P5_REGION)), "instance-offered")
    } == {"pass"}
    (first, *_) = aws.params("DescribeInstanceTypeOfferings")
    assert first["LocationType"] == "availability-zone"
    hp = env_folder(tmp_path, "hyperpod", "us-west-2")
    results = preflight.check_offerings(context(aws, hp, "hyperpod", "us-west-2"))
    assert {r.status for r in results} == {"pass"}
    assert aws.params("DescribeInstanceTypeOfferings")[-1]["LocationType"] == "availability-zone-id"
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data["cluster"]["pcluster"]["queues"][0]["compute_resources"][0]["instance_type"] = "p4de.24xlarge"
    data["network"]["availability_zone"] = "us-east-2c"
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    failed = preflight.check_offerings(context(aws, folder, "p5", P5_REGION))
    assert [r.message for r in failed if r.status == "fail"] == [
        "p4de.24xlarge is not offered in us-east-2c: choose another instance_type or zone (network.availability_zone)"
    ]


@pytest.mark.parametrize(
    ("changes", "level", "words"),
    [
        ({}, None, "active p5.48xlarge x4 in us-east-2a until 2027-01-26"),
        ({"EndDate": NOW + timedelta(days=7, minutes=1)}, None, "until 2026-12-04"),
        ({"EndDate": NOW + timedelta(days=7)}, "WARNING", "within 7 days: extend it"),
        ({"EndDateType": "unlimited", "EndDate": None}, None, "with no end date"),
        ({"State": "expired", "EndDate": NOW - timedelta(days=1)}, "ERROR", "state is expired"),
        ({"AvailabilityZone": "us-east-2b"}, "ERROR", "it is in us-east-2b, the group in us-east-2a"),
        ({"InstanceType": "p4d.24xlarge"}, "ERROR", "it reserves p4d.24xlarge"),
        ({"TotalInstanceCount": 3}, "ERROR", "it holds 3 instances, max_count is 4"),
        (
            {"ReservationType": "capacity-block", "State": "scheduled", "StartDate": NOW + timedelta(days=1)},
            "WARNING",
            "capacity block starts 2026-11-28 12:00 UTC",
        ),
    ],
)
def test_reservation_findings(aws: Aws, tmp_path: Path, changes: dict[str, Any], level: str | None, words: str) -> None:
    found = reservation(**changes)
    if found["CapacityReservations"][0]["EndDate"] is None:
        del found["CapacityReservations"][0]["EndDate"]
    aws.answer("ec2", "DescribeCapacityReservations", always=found)
    results = preflight.check_reservations(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert aws.params("DescribeCapacityReservations") == [{"CapacityReservationIds": [RESERVATION]}]
    text = " | ".join(r.message for r in results)
    assert words in text
    if level is None:
        assert [r.status for r in results] == ["pass"]
    else:
        assert (("fail", level)) in rows(results, "capacity-reservation")


def test_reservation_not_found(aws: Aws, tmp_path: Path) -> None:
    aws.answer(
        "ec2",
        "DescribeCapacityReservations",
        always=error("InvalidCapacityReservationId.NotFound", "The capacity reservation ID does not exist"),
    )
    results = preflight.check_reservations(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert rows(results, "capacity-reservation") == [("fail", "ERROR")]
    assert "does not exist in us-east-2" in results[0].message


def test_pcluster_image(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer("ec2", "DescribeImages", image(), {"Images": []})
    assert rows(preflight.check_pcluster_image(context(aws, folder, "p5", P5_REGION)), "pcluster-image") == [
        ("pass", "ERROR")
    ]
    failed = preflight.check_pcluster_image(context(aws, folder, "p5", P5_REGION))
    assert rows(failed, "pcluster-image") == [("fail", "ERROR")]
    assert "no official image aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64*" in failed[0].message


def test_names_free_ours_or_taken(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION, storage={"data_bucket": {"name": "p5-training-data-0001"}})
    results = preflight.check_names(context(aws, folder, "p5", P5_REGION))
    assert {r.status for r in results} == {"pass"} and len(results) == 7  # p5 has DRAs and observability
    cfn = aws_client("cloudformation", P5_REGION)
    body = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})
    cfn.create_stack(StackName="p5-Network", TemplateBody=body, Tags=[{"Key": "mlcluster:environment", "Value": "p5"}])
    cfn.create_stack(StackName="p5-train", TemplateBody=body)
    s3 = aws_client("s3", P5_REGION)
    s3.create_bucket(Bucket="p5-training-data-0001", CreateBucketConfiguration={"LocationConstraint": P5_REGION})
    results = preflight.check_names(context(aws, folder, "p5", P5_REGION))
    failed = sorted(r.message for r in results if r.status == "fail")
    assert failed == [
        "bucket p5-training-data-0001 exists in this account without tag mlcluster:environment=p5: choose another name",
        "stack p5-train exists without tag mlcluster:environment=p5: rename the environment or cluster.name",
    ]
    assert aws.params("HeadBucket")[-1] == {"Bucket": "p5-training-data-0001", "ExpectedBucketOwner": "123456789012"}
    assert aws.params("GetBucketTagging")[-1] == aws.params("HeadBucket")[-1]


BUCKET = "p5-training-data-0001"
#: A bucket name's owner row: the ``names`` check's data bucket row.
BUCKET_KEY = "storage.data_bucket.name"


def bucket_row(aws: Aws, folder: Path) -> preflight.Result:
    (row,) = [r for r in preflight.check_names(context(aws, folder, "p5", P5_REGION)) if r.key == BUCKET_KEY]
    return row


def test_a_kept_data_bucket_fails_until_the_storage_stack_holds_it_again(aws: Aws, tmp_path: Path) -> None:
    """moto's CloudFormation makes p5-Storage with the named bucket (kept on delete, as the data bucket is);
    after the stack is deleted the bucket and its tag stay, and the next create would fail "already exists"."""
    folder = env_folder(tmp_path, "p5", P5_REGION, storage={"data_bucket": {"name": BUCKET}})
    bucket = {
        "Type": "AWS::S3::Bucket",
        "DeletionPolicy": "Retain",
        "Properties": {"BucketName": BUCKET, "Tags": [{"Key": "mlcluster:environment", "Value": "p5"}]},
    }
    cfn = aws_client("cloudformation", P5_REGION)
    tags = [{"Key": "mlcluster:environment", "Value": "p5"}]
    cfn.create_stack(StackName="p5-Storage", TemplateBody=json.dumps({"Resources": {"DataBucket": bucket}}), Tags=tags)
    assert bucket_row(aws, folder) == preflight.Result(
        "names", "pass", "ERROR", BUCKET_KEY, f"bucket {BUCKET} exists, held by stack p5-Storage"
    )
    cfn.delete_stack(StackName="p5-Storage")
    assert aws_client("s3", P5_REGION).get_bucket_tagging(Bucket=BUCKET)["TagSet"] == tags  # kept, still tagged
    assert bucket_row(aws, folder) == preflight.Result(
        "names",
        "fail",
        "ERROR",
        BUCKET_KEY,
        f"bucket {BUCKET} carries tag mlcluster:environment=p5 but stack p5-Storage does not exist: it was kept from "
        "an earlier deploy (deleted with its stack, or left it, and retained), and `cdk deploy` would fail creating "
        "it again (already exists): bring it into the stack with `npx cdk import 'p5/Storage'` (then deploy), or "
        "take what you need from it, empty and delete it, or choose another storage.data_bucket.name",
    )


def test_another_accounts_bucket_with_our_tag_is_refused_by_the_expected_owner(aws: Aws, tmp_path: Path) -> None:
    """Another account made the bucket, tagged it for p5 and lets anyone list it and read its tags: without
    ExpectedBucketOwner, S3 answers both reads and the bucket read as ours. S3 refuses a request whose
    ExpectedBucketOwner is not the owner with 403 (botocore's S3 model; moto 5 ignores the header, so S3's
    rule is played here by answers that read it)."""
    folder = env_folder(tmp_path, "p5", P5_REGION, storage={"data_bucket": {"name": BUCKET}})
    owner = "210987654321"

    def as_s3(found: dict[str, Any]) -> Any:
        def answer(params: dict[str, Any]) -> dict[str, Any]:
            if params.get("ExpectedBucketOwner", owner) != owner:
                return error("403", "Forbidden", 403)
            return found

        return answer

    aws.answer("s3", "HeadBucket", always=as_s3({}))
    aws.answer("s3", "GetBucketTagging", always=as_s3({"TagSet": [{"Key": "mlcluster:environment", "Value": "p5"}]}))
    assert bucket_row(aws, folder) == preflight.Result(
        "names",
        "fail",
        "ERROR",
        BUCKET_KEY,
        f"bucket {BUCKET} exists and HeadBucket as account 123456789012 was refused: either another account owns "
        "it (choose another name), or this account does and these credentials lack s3:ListBucket on it (grant it "
        "and run again)",
    )


def test_hyperpod_cluster_name(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    # The API's answer for an unknown cluster (moto 5 answers ValidationException instead).
    aws.answer("sagemaker", "DescribeCluster", always=error("ResourceNotFound", "Cluster not found"))
    assert {r.status for r in preflight.check_names(context(aws, folder, "hyperpod", "us-west-2"))} == {"pass"}
    aws.answer(
        "sagemaker",
        "DescribeCluster",
        always={
            "ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/abc123def456",
            "ClusterStatus": "InService",
            "InstanceGroups": [],
        },
    )
    aws.answer("sagemaker", "ListTags", always={"Tags": [{"Key": "team", "Value": "other"}]})
    results = preflight.check_names(context(aws, folder, "hyperpod", "us-west-2"))
    assert [r.message for r in results if r.status == "fail"] == [
        "HyperPod cluster ml-hyperpod exists without tag mlcluster:environment=hyperpod: choose another cluster.name"
    ]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (None, ("fail", "ERROR")),
        ("5", ("fail", "ERROR")),
        ("6", ("fail", "WARNING")),
        ("32", ("fail", "WARNING")),
        ("33", ("pass", "ERROR")),
    ],
)
def test_cdk_bootstrap(aws: Aws, tmp_path: Path, version: str | None, expected: tuple[str, str]) -> None:
    if version is not None:
        bootstrap(version)
    results = preflight.check_bootstrap(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert rows(results, "cdk-bootstrap") == [expected]
    if version is None:
        assert "npx cdk bootstrap aws://<account>/us-east-2" in results[0].message


@pytest.mark.parametrize(
    ("check", "env", "operation"),
    [
        ("vcpu-quota", "p5", ("ec2", "DescribeInstanceTypes")),
        ("sagemaker-quota", "hyperpod", ("service-quotas", "ListServiceQuotas")),
        ("fsx-quota", "p5", ("fsx", "DescribeFileSystems")),
        ("vpc-quota", "p5", ("ec2", "DescribeVpcs")),
        ("eip-quota", "p5", ("ec2", "DescribeAddresses")),
        ("nat-quota", "p5", ("ec2", "DescribeNatGateways")),
        ("instance-offered", "p5", ("ec2", "DescribeInstanceTypeOfferings")),
        ("capacity-reservation", "p5", ("ec2", "DescribeCapacityReservations")),
        ("training-plan", "hyperpod-plan", ("sagemaker", "DescribeTrainingPlan")),
        ("pcluster-image", "p5", ("ec2", "DescribeImages")),
        ("names", "p5", ("cloudformation", "DescribeStacks")),
        ("cdk-bootstrap", "p5", ("cloudformation", "DescribeStacks")),
    ],
)
@pytest.mark.parametrize("code", ["AccessDenied", "Throttling"])
def test_every_check_reports_an_aws_error_as_a_row(
    aws: Aws, tmp_path: Path, check: str, env: str, operation: tuple[str, str], code: str
) -> None:
    healthy_p5(aws)
    aws.sticky[operation] = error(code, "refused by the test")
    region = "us-west-2" if env.startswith("hyperpod") else P5_REGION
    if env == "hyperpod-plan":
        env, folder = "hyperpod", hyperpod_with_plan(tmp_path)
    else:
        folder = env_folder(tmp_path, env, region)
    ctx = context(aws, folder, env, region)
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != check])
    assert [(r.check, r.status) for r in results] == [(check, "error")]
    assert f"{code}: refused by the test" in results[0].message
    assert preflight.exit_code(results) == 3


def test_a_redeploy_needs_no_new_vpc(aws: Aws, tmp_path: Path) -> None:
    quotas(aws)
    aws_client("ec2", P5_REGION).create_vpc(
        CidrBlock="10.0.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": [{"Key": "mlcluster:environment", "Value": "p5"}]}],
    )
    results = network_quotas(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert [r.message.split("; ", 1)[1] for r in results] == [
        "2 exist, 0 more needed",
        "0 allocated, 0 needed for NAT gateways",
        "0 in us-east-2a, 0 needed",
    ]


def test_an_environment_without_a_cluster(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    healthy_p5(aws)
    monkeypatch.setattr(preflight, "datetime", _Frozen)
    folder = env_folder(tmp_path, "dev", P5_REGION, network={"availability_zone": "us-east-2a"})
    result = invoke("preflight", "dev", "--environments", str(folder), "--json")
    assert result.exit_code == 0, result.output
    checks = {r["check"] for r in json.loads(result.stdout)["results"]}
    assert checks == {"fsx-quota", "vpc-quota", "eip-quota", "nat-quota", "zone-exists", "names", "cdk-bootstrap"}


def test_queues_on_existing_subnets_cannot_name_the_zone(aws: Aws, tmp_path: Path) -> None:
    existing = {
        "availability_zone": "us-east-2a",
        "existing": {
            "vpc_id": "vpc-0abc1234",
            "vpc_cidr": "10.0.0.0/16",
            "private_subnet_ids": ["subnet-0abc1234"],
            "security_group_id": "sg-0abc1234",
        },
    }
    folder = env_folder(tmp_path, "p5", P5_REGION, network=existing)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data["cluster"]["pcluster"]["queues"][0]["zones"] = ["subnet-0abc1234"]
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    results = preflight.check_offerings(context(aws, folder, "p5", P5_REGION))
    assert [(r.key, r.status, r.level) for r in results] == [
        ("cluster.pcluster.head_node.instance_type", "pass", "ERROR"),
        ("cluster.pcluster.queues[0].compute_resources[0]", "fail", "WARNING"),
    ]
    assert preflight.check_vpc_quota(context(aws, folder, "p5", P5_REGION)) == []


PLAN_ARN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/p5-plan"


def training_plan(**changes: Any) -> dict[str, Any]:
    found = {
        "TrainingPlanArn": PLAN_ARN,
        "TrainingPlanName": "p5-plan",
        "Status": "Active",
        "StartTime": NOW - timedelta(days=1),
        "EndTime": NOW + timedelta(days=14),
        "TargetResources": ["hyperpod-cluster"],
        "ReservedCapacitySummaries": [
            {
                "ReservedCapacityArn": "arn:aws:sagemaker:us-west-2:123456789012:reserved-capacity/rc-1",
                "InstanceType": "ml.p5.48xlarge",
                "TotalInstanceCount": 2,
                "Status": "Active",
                "AvailabilityZone": "us-west-2d",
                "AvailabilityZoneId": "usw2-az4",
            }
        ],
    }
    found.update(changes)
    return found


def hyperpod_with_plan(tmp_path: Path) -> Path:
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    data = yaml.safe_load((folder / "hyperpod.yaml").read_text())
    data["cluster"]["hyperpod"]["workers"][0]["training_plan_arn"] = PLAN_ARN
    (folder / "hyperpod.yaml").write_text(yaml.safe_dump(data))
    return folder


@pytest.mark.parametrize(
    ("changes", "level", "words"),
    [
        ({}, None, "p5-plan: Active ml.p5.48xlarge x2 until 2026-12-11"),
        ({"Status": "Scheduled", "StartTime": NOW + timedelta(days=2)}, "WARNING", "scheduled to start 2026-11-29"),
        ({"Status": "Expired", "EndTime": NOW - timedelta(hours=1)}, "ERROR", "status is Expired, not Active"),
        ({"TargetResources": ["training-job"]}, "ERROR", "not for hyperpod-cluster"),
        ({"EndTime": NOW + timedelta(days=3)}, "WARNING", "within 7 days"),
    ],
)
def test_training_plan_findings(
    aws: Aws, tmp_path: Path, changes: dict[str, Any], level: str | None, words: str
) -> None:
    aws.answer("sagemaker", "DescribeTrainingPlan", always=training_plan(**changes))
    results = preflight.check_training_plans(context(aws, hyperpod_with_plan(tmp_path), "hyperpod", "us-west-2"))
    assert aws.params("DescribeTrainingPlan") == [{"TrainingPlanName": "p5-plan"}]
    assert words in " | ".join(r.message for r in results)
    if level is None:
        assert [r.status for r in results] == ["pass"]
    else:
        assert ("fail", level) in rows(results, "training-plan")


def test_training_plan_capacity_and_zone(aws: Aws, tmp_path: Path) -> None:
    small = training_plan()
    small["ReservedCapacitySummaries"][0].update(TotalInstanceCount=1, AvailabilityZoneId="usw2-az1")
    aws.answer("sagemaker", "DescribeTrainingPlan", always=small)
    results = preflight.check_training_plans(context(aws, hyperpod_with_plan(tmp_path), "hyperpod", "us-west-2"))
    assert [r.message for r in results] == [
        "p5-plan: it reserves 1 ml.p5.48xlarge, instance_count is 2",
        "p5-plan: its capacity is in usw2-az1, the group in usw2-az4",
    ]
    aws.sticky[("sagemaker", "DescribeTrainingPlan")] = error("ResourceNotFound", "no plan")
    missing = preflight.check_training_plans(context(aws, hyperpod_with_plan(tmp_path), "hyperpod", "us-west-2"))
    assert [(r.status, r.message) for r in missing] == [("fail", "p5-plan does not exist in us-west-2: fix the ARN")]


# --- review findings: capacity blocks, reservations, HyperPod quotas, quota errors, Spot, names, AMIs -----


def test_a_capacity_block_not_started_is_read_from_its_tags(aws: Aws, tmp_path: Path) -> None:
    block = reservation(
        State="scheduled",
        StartDate=NOW + timedelta(days=1),
        TotalInstanceCount=0,
        AvailableInstanceCount=0,
        Tags=[
            {"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "capacity-block"},
            {"Key": "aws:ec2capacityreservation:incrementalRequestedQuantity", "Value": "4"},
        ],
    )
    del block["CapacityReservations"][0]["ReservationType"]
    aws.answer("ec2", "DescribeCapacityReservations", always=block)
    results = preflight.check_reservations(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert [(r.status, r.level, r.message) for r in results] == [
        ("fail", "WARNING", f"{RESERVATION}: capacity block starts 2026-11-28 12:00 UTC; nodes cannot launch before")
    ]
    assert preflight.reservation_kind_and_size(block["CapacityReservations"][0]) == ("capacity-block", 4)
    # One instance short of the group, by the tag: an error.
    block["CapacityReservations"][0]["Tags"][1]["Value"] = "3"
    assert preflight.reservation_kind_and_size(block["CapacityReservations"][0]) == ("capacity-block", 3)


@pytest.mark.parametrize(
    ("changes", "level", "words"),
    [
        ({"InstancePlatform": "Linux/UNIX"}, None, "active p5.48xlarge x4"),
        ({"InstancePlatform": "Windows"}, "ERROR", "it is for Windows instances, the cluster's OS runs as Linux/UNIX"),
        ({"Tenancy": "dedicated"}, "ERROR", "its tenancy is dedicated"),
        ({"AvailableInstanceCount": 3}, "ERROR", "3 of its 4 instances are free and 0 are this cluster's"),
    ],
)
def test_reservation_platform_tenancy_and_free_instances(
    aws: Aws, tmp_path: Path, changes: dict[str, Any], level: str | None, words: str
) -> None:
    aws.answer("ec2", "DescribeCapacityReservations", always=reservation(**changes))
    results = preflight.check_reservations(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert words in " | ".join(r.message for r in results)
    assert rows(results, "capacity-reservation") == [("pass", "ERROR") if level is None else ("fail", level)]


def test_reservation_in_any_of_the_queue_zones(aws: Aws, tmp_path: Path) -> None:
    import dataclasses

    aws.answer("ec2", "DescribeCapacityReservations", always=reservation())
    ctx = context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)
    groups = tuple(
        dataclasses.replace(g, zones=("us-east-2b", "us-east-2a")) if g.reservation_id else g for g in ctx.plan.groups
    )
    ctx.plan = dataclasses.replace(ctx.plan, groups=groups)
    results = preflight.check_reservations(ctx)
    assert [(r.status, r.level, r.message) for r in results] == [
        ("fail", "WARNING", f"{RESERVATION}: nodes launched in us-east-2b cannot use it (it is in us-east-2a only)")
    ]
    ctx.plan = dataclasses.replace(
        ctx.plan, groups=tuple(dataclasses.replace(g, zones=("us-east-2b", "us-east-2c")) for g in groups)
    )
    assert [r.message for r in preflight.check_reservations(ctx)] == [
        f"{RESERVATION}: it is in us-east-2a, the group in us-east-2b, us-east-2c: set the group's zone to us-east-2a"
    ]


def _other_cluster(aws: Aws, count: int) -> None:
    arn = "arn:aws:sagemaker:us-west-2:123456789012:cluster/other0000001"
    aws.answer(
        "sagemaker",
        "ListClusters",
        always={
            "ClusterSummaries": [
                {"ClusterArn": arn, "ClusterName": "other", "CreationTime": NOW, "ClusterStatus": "InService"},
                {
                    "ClusterArn": arn.replace("other", "mine0"),
                    "ClusterName": "ml-hyperpod",
                    "CreationTime": NOW,
                    "ClusterStatus": "InService",
                },
            ]
        },
    )
    aws.answer(
        "sagemaker",
        "DescribeCluster",
        always={
            "ClusterArn": arn,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                {"InstanceGroupName": "w", "InstanceType": "ml.p5.48xlarge", "CurrentCount": count, "TargetCount": 1}
            ],
        },
    )


def test_sagemaker_quota_counts_the_other_clusters(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    listed = [
        {"QuotaCode": "L-AAAA0001", "QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 3.0},
        {"QuotaCode": "L-AAAA0002", "QuotaName": "ml.m5.12xlarge for cluster usage", "Value": 4.0},
        {"QuotaCode": "L-AAAA0003", "QuotaName": "ml.m5.4xlarge for cluster usage", "Value": 4.0},
        {"QuotaCode": "L-AAAA0004", "QuotaName": preflight.HYPERPOD_TOTAL_QUOTA, "Value": 6.0},
        {"QuotaCode": "L-AAAA0005", "QuotaName": preflight.HYPERPOD_PER_CLUSTER_QUOTA, "Value": 5.0},
    ]
    aws.answer("service-quotas", "ListServiceQuotas", always={"Quotas": listed})
    _other_cluster(aws, 1)
    ok = preflight.check_sagemaker_quota(context(aws, folder, "hyperpod", "us-west-2"))
    need = sum(g.max_count for g in plan_of(load_environment(folder / "hyperpod.yaml")).groups)
    assert {r.status for r in ok} == {"pass"}, [r.message for r in ok]
    assert "ml.p5.48xlarge for cluster usage (L-AAAA0001) 3 >= 1 in other HyperPod clusters + 2" in [
        r.message for r in ok
    ]
    # Only the other cluster is described, not the one this environment deploys.
    assert aws.params("DescribeCluster") == [{"ClusterName": "other"}]
    _other_cluster(aws, 2)
    listed[3] = {**listed[3], "Value": 5.0}
    listed[4] = {**listed[4], "Value": float(need - 1)}
    failed = preflight.check_sagemaker_quota(context(aws, folder, "hyperpod", "us-west-2"))
    assert [r.message for r in failed if r.status == "fail"] == [
        "ml.p5.48xlarge for cluster usage (L-AAAA0001) is 3; 2 run in other HyperPod clusters and the groups "
        "need 2: request 4 or lower instance_count",
        f"{preflight.HYPERPOD_TOTAL_QUOTA} (L-AAAA0004) is 5; 2 run in other HyperPod clusters and the groups "
        f"need {need}: request {need + 2} or lower instance_count",
        f"{preflight.HYPERPOD_PER_CLUSTER_QUOTA} (L-AAAA0005) is {need - 1}; the groups need {need}: "
        f"request {need} or lower instance_count",
    ]


def test_a_quota_without_a_value_is_an_error_row(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    healthy_p5(aws)
    unreadable = {
        "Quota": {
            "ServiceCode": "ec2",
            "QuotaCode": "L-417A185B",
            "QuotaName": "Running On-Demand P instances",
            "ErrorReason": {"ErrorCode": "SERVICE_QUOTA_NOT_AVAILABLE_ERROR", "ErrorMessage": "not available"},
        }
    }
    aws.sticky[("service-quotas", "GetServiceQuota")] = unreadable
    ctx = context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "vcpu-quota"])
    assert [(r.check, r.status) for r in results] == [("vcpu-quota", "error")]
    assert "SERVICE_QUOTA_NOT_AVAILABLE_ERROR: not available" in results[0].message
    del unreadable["Quota"]["ErrorReason"]
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "vcpu-quota"])
    assert [(r.check, r.status) for r in results] == [("vcpu-quota", "error")]
    assert "returned no value for Running On-Demand P instances" in results[0].message
    # Any other failure inside a check is an error row too, never a traceback.
    monkeypatch.setitem(preflight.CHECKS, "names", lambda ctx: [][0])
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "names"])
    assert [(r.check, r.status) for r in results] == [("names", "error")]
    assert "IndexError: list index out of range" in results[0].message and preflight.exit_code(results) == 3


def test_spot_queues_are_checked_against_the_spot_quota(aws: Aws, tmp_path: Path) -> None:
    quotas(aws, p_vcpus=384.0)
    spot_quota = {"value": 768.0}

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        if params["QuotaCode"] == "L-7212CCBC":
            return quota("ec2", "L-7212CCBC", "All P Spot Instance Requests", spot_quota["value"])
        table = {"L-417A185B": ("Running On-Demand P instances", 384.0), "L-1216C47A": ("Standard", 1152.0)}
        name, value = table[params["QuotaCode"]]
        return quota("ec2", params["QuotaCode"], name, value)

    aws.answer("service-quotas", "GetServiceQuota", always=answer)
    folder = spot_p5_folder(tmp_path)
    # The On-Demand P quota (384) is not what limits a Spot queue: 768 Spot vCPUs fit at the edge.
    results = preflight.check_vcpu_quota(context(aws, folder, "p5", P5_REGION))
    assert [(r.key, r.status, r.message) for r in results] == [
        (
            "cluster.pcluster.head_node.instance_type",
            "pass",
            "Standard (L-1216C47A) 1152 >= 0 running + 32 needed",
        ),
        (
            "cluster.pcluster.queues[0].compute_resources[0]",
            "pass",
            "All P Spot Instance Requests (L-7212CCBC) 768 >= 0 running + 768 needed",
        ),
    ]
    assert "L-417A185B" not in [p["QuotaCode"] for p in aws.params("GetServiceQuota")]
    # A running Spot p5 elsewhere counts against the Spot quota, not the On-Demand one.
    aws_client("ec2", P5_REGION).run_instances(
        ImageId="ami-12345678",
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
    )
    failed = preflight.check_vcpu_quota(context(aws, folder, "p5", P5_REGION))
    assert [r.message for r in failed if r.status == "fail"] == [
        "All P Spot Instance Requests (L-7212CCBC) is 768 vCPUs; 192 Spot run already and max_count needs 768: "
        "request 960 in Service Quotas or lower max_count"
    ]


def test_running_instances_count_their_default_vcpus(aws: Aws, tmp_path: Path) -> None:
    quotas(aws, p_vcpus=900.0)
    # A running p5 with threads turned off still takes its 192 default vCPUs of the quota.
    threads_off = {"InstanceId": "i-0abc1234def567890", "InstanceType": "p5.48xlarge"}
    threads_off["CpuOptions"] = {"CoreCount": 96, "ThreadsPerCore": 1}
    aws.answer("ec2", "DescribeInstances", always={"Reservations": [{"Instances": [threads_off]}]})
    results = preflight.check_vcpu_quota(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert "192 run already and max_count needs 768: request 960" in " ".join(r.message for r in results)


def _stacks(statuses: dict[str, str]) -> Any:
    def answer(params: dict[str, Any]) -> dict[str, Any]:
        name = params["StackName"]
        if name not in statuses:
            return error("ValidationError", f"Stack with id {name} does not exist", 400)
        return {
            "Stacks": [
                {
                    "StackName": name,
                    "CreationTime": NOW,
                    "StackStatus": statuses[name],
                    "Tags": [{"Key": "mlcluster:environment", "Value": "p5"}],
                }
            ]
        }

    return answer


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("UPDATE_COMPLETE", True),
        ("ROLLBACK_COMPLETE", True),
        ("UPDATE_ROLLBACK_FAILED", False),
        ("DELETE_FAILED", False),
        ("UPDATE_IN_PROGRESS", False),
        ("DELETE_IN_PROGRESS", False),
    ],
)
def test_names_own_stack_in_a_blocked_state_fails(aws: Aws, tmp_path: Path, status: str, ok: bool) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer("cloudformation", "DescribeStacks", always=_stacks({"p5-Observability": status}))
    aws.answer("cloudformation", "ListStackResources", always={"StackResourceSummaries": []})
    results = preflight.check_names(context(aws, folder, "p5", P5_REGION))
    asked = [p["StackName"] for p in aws.params("DescribeStacks")]
    assert asked == ["p5-Network", "p5-Storage", "p5-Cluster", "p5-DataRepository", "p5-Observability", "p5-train"]
    mine = [r for r in results if "p5-Observability" in r.message]
    assert [r.status for r in mine] == ["pass" if ok else "fail"]
    if not ok and status != "UPDATE_ROLLBACK_FAILED":
        assert f"stack p5-Observability (this environment's) is {status}: wait for it" in mine[0].message


def _resource(logical_id: str, kind: str, status: str) -> dict[str, Any]:
    return {
        "LogicalResourceId": logical_id,
        "ResourceType": kind,
        "ResourceStatus": status,
        "LastUpdatedTimestamp": NOW,
    }


def test_names_our_cluster_stack_stuck_in_update_rollback_failed_names_the_fix(aws: Aws, tmp_path: Path) -> None:
    """ENV-Cluster in UPDATE_ROLLBACK_FAILED: preflight names continue-update-rollback and the resource to skip."""
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer("cloudformation", "DescribeStacks", always=_stacks({"p5-Cluster": "UPDATE_ROLLBACK_FAILED"}))
    page = {
        "StackResourceSummaries": [
            _resource("ProviderRole1234", "AWS::IAM::Role", "UPDATE_COMPLETE"),
            _resource("ClusterE4D3A1B2", "Custom::PclusterCluster", "UPDATE_FAILED"),
        ]
    }
    aws.answer("cloudformation", "ListStackResources", always=page)
    results = preflight.check_names(context(aws, folder, "p5", P5_REGION))
    mine = [r for r in results if "p5-Cluster" in r.message]
    assert [(r.status, r.level) for r in mine] == [("fail", "ERROR")]
    assert mine[0].message == (
        "stack p5-Cluster (this environment's) is UPDATE_ROLLBACK_FAILED (ClusterE4D3A1B2 (Custom::PclusterCluster)): "
        "CloudFormation refuses every update until the rollback is continued: `aws cloudformation "
        "continue-update-rollback --stack-name p5-Cluster --resources-to-skip ClusterE4D3A1B2`, then "
        "`mlcluster status` and deploy"
    )
    assert aws.params("ListStackResources") == [{"StackName": "p5-Cluster"}]


def test_names_a_rollback_failed_stack_that_cannot_be_listed_is_an_error_row(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer("cloudformation", "DescribeStacks", always=_stacks({"p5-Cluster": "UPDATE_ROLLBACK_FAILED"}))
    aws.answer("cloudformation", "ListStackResources", always=error("AccessDenied", "not allowed", 403))
    ctx = context(aws, folder, "p5", P5_REGION)
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "names"])
    assert [(r.check, r.status) for r in results] == [("names", "error")]
    assert "AccessDenied" in results[0].message


def test_names_data_repository_stack_only_with_associations(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data.setdefault("storage", {}).setdefault("lustre", {})["data_repository_associations"] = []
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    preflight.check_names(context(aws, folder, "p5", P5_REGION))
    assert "p5-DataRepository" not in [p["StackName"] for p in aws.params("DescribeStacks")]


def test_names_only_resource_not_found_frees_a_hyperpod_name(aws: Aws, tmp_path: Path) -> None:
    folder = env_folder(tmp_path, "hyperpod", "us-west-2")
    aws.answer("sagemaker", "DescribeCluster", always=error("ValidationException", "something else"))
    ctx = context(aws, folder, "hyperpod", "us-west-2")
    results = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "names"])
    assert [(r.check, r.status) for r in results] == [("names", "error")]
    assert "ValidationException: something else" in results[0].message
    aws.sticky[("sagemaker", "DescribeCluster")] = error("ResourceNotFound", "no such cluster")
    free = preflight.run_checks(ctx, skip=[c for c in preflight.CHECKS if c != "names"])
    assert "HyperPod cluster name ml-hyperpod is free" in [r.message for r in free]


def test_custom_ami_must_be_available_and_may_be_deprecated(aws: Aws, tmp_path: Path) -> None:
    results = missing_custom_ami_rows(aws, tmp_path)
    assert rows(results, "pcluster-image") == [("fail", "ERROR")]
    assert aws.params("DescribeImages") == [
        {
            "Filters": [
                {"Name": "image-id", "Values": ["ami-0123456789abcdef0"]},
                {"Name": "state", "Values": ["available"]},
            ],
            "IncludeDeprecated": True,
        }
    ]


def test_zone_exists_asks_ec2(aws: Aws, tmp_path: Path) -> None:
    """validate only warns about a zone its table lacks; preflight asks DescribeAvailabilityZones (review of 26)."""
    folder = env_folder(tmp_path, "p5", P5_REGION)
    (passed,) = preflight.check_zones_exist(context(aws, folder, "p5", P5_REGION))
    assert (passed.status, passed.key, passed.message) == (
        "pass",
        "network.availability_zone",
        "us-east-2a is available",
    )
    assert aws.params("DescribeAvailabilityZones")[-1]["Filters"] == [{"Name": "zone-name", "Values": ["us-east-2a"]}]
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data["network"]["availability_zone"] = "us-east-2z"
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    (failed,) = preflight.check_zones_exist(context(aws, folder, "p5", P5_REGION))
    assert (failed.status, failed.level) == ("fail", "ERROR")
    assert failed.message.startswith(f"EC2 lists no zone us-east-2z in {P5_REGION} for this account")
    hp = env_folder(tmp_path, "hyperpod", "us-west-2")
    (by_id,) = preflight.check_zones_exist(context(aws, hp, "hyperpod", "us-west-2"))
    assert (by_id.status, by_id.key) == ("pass", "network.availability_zone_id")


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("UPDATE_ROLLBACK_COMPLETE", True),  # runs its previous configuration: a deploy may start
        ("CREATE_COMPLETE", True),
        ("ROLLBACK_COMPLETE", False),  # a rolled-back create still holds the name: the provider's create fails
        ("CREATE_FAILED", False),
        ("UPDATE_IN_PROGRESS", False),
    ],
)
def test_names_parallelcluster_stack_by_its_table(aws: Aws, tmp_path: Path, status: str, ok: bool) -> None:
    folder = env_folder(tmp_path, "p5", P5_REGION)
    aws.answer(
        "cloudformation", "DescribeStacks", always=_stacks({"p5-train": status, "p5-Cluster": "CREATE_COMPLETE"})
    )
    results = preflight.check_names(context(aws, folder, "p5", P5_REGION))
    mine = [r for r in results if r.key == "cluster.name"]
    assert [r.status for r in mine] == ["pass" if ok else "fail"]
    assert mine[0].message.startswith(f"cluster stack p5-train is {status}: ")
    if status == "UPDATE_ROLLBACK_COMPLETE":  # the head node's own rollback may still run (PR #7150)
        assert "confirm it did in /var/log/chef-client.log on the head node before deploying" in mine[0].message
