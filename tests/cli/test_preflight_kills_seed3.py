"""``mlcluster preflight``: what the operator reads and what a child process runs with (issue 27, cli seed 3).

Each test asserts a row or line an operator acts on, or the environment a child that calls AWS gets:
a failing Elastic IP row that says what to do, a reservation in the zone the group names by ID passing,
the summary line counting warnings, and the child never reading the operator's shared credentials file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from botocore.credentials import Credentials

from mlcluster.cli import preflight
from tests.cli.conftest import Aws, aws_client
from tests.cli.test_preflight import P5_REGION, RESERVATION, context, env_folder, quotas, reservation


def test_a_full_elastic_ip_quota_says_what_to_do_and_a_free_one_does_not(aws: Aws, tmp_path: Path) -> None:
    """The failing row ends with the two ways out; the passing row at the edge (quota exactly met) has none."""
    quotas(aws)  # EC2-VPC Elastic IPs: 5
    folder = env_folder(tmp_path, "p5", P5_REGION)  # a new VPC, one NAT gateway
    ec2 = aws_client("ec2", P5_REGION)
    for _ in range(4):
        ec2.allocate_address(Domain="vpc")
    (edge,) = preflight.check_eip_quota(context(aws, folder, "p5", P5_REGION))
    assert (edge.status, edge.level, edge.key) == ("pass", "ERROR", "network.nat_gateways")
    assert edge.message == "EC2-VPC Elastic IPs (L-0263D0A3) is 5; 4 allocated, 1 needed for NAT gateways"
    ec2.allocate_address(Domain="vpc")
    (full,) = preflight.check_eip_quota(context(aws, folder, "p5", P5_REGION))
    assert (full.status, full.level, full.key) == ("fail", "ERROR", "network.nat_gateways")
    assert full.message == (
        "EC2-VPC Elastic IPs (L-0263D0A3) is 5; 5 allocated, 1 needed for NAT gateways: "
        "release unused addresses or request an increase"
    )


def test_a_reservation_in_the_zone_the_group_names_by_id_passes(aws: Aws, tmp_path: Path) -> None:
    """network.availability_zone_id: the reservation's AvailabilityZoneId is compared (its name is not the ID)."""
    folder = env_folder(tmp_path, "p5", P5_REGION, network={"availability_zone_id": "use2-az1"})
    ctx = context(aws, folder, "p5", P5_REGION)
    aws.answer("ec2", "DescribeCapacityReservations", always=reservation())  # us-east-2a, use2-az1
    assert [(r.status, r.message) for r in preflight.check_reservations(ctx)] == [
        ("pass", f"{RESERVATION}: active p5.48xlarge x4 in use2-az1 until 2027-01-26")
    ]
    aws.answer(
        "ec2",
        "DescribeCapacityReservations",
        always=reservation(AvailabilityZone="us-east-2b", AvailabilityZoneId="use2-az2"),
    )
    assert [(r.status, r.level, r.message) for r in preflight.check_reservations(ctx)] == [
        (
            "fail",
            "ERROR",
            f"{RESERVATION}: it is in use2-az2, the group in use2-az1: set the group's zone to use2-az2",
        )
    ]


def test_the_summary_line_counts_each_kind_of_row(capsys: pytest.CaptureFixture[str]) -> None:
    """Warnings are failed WARNING rows only: an ERROR fail, a pass, an AWS error and a skip are counted apart."""
    results = [
        preflight.Result("vcpu-quota", "fail", "ERROR", "a", "short"),
        preflight.Result("capacity-reservation", "fail", "WARNING", "b", "ends soon"),
        preflight.Result("spot", "fail", "WARNING", "c", "no quota known"),
        preflight.Result("vpc-quota", "pass", "WARNING", "d", "fine"),
        preflight.Result("eip-quota", "error", "ERROR", "e", "AccessDenied"),
        preflight.Result("pcluster-validators", "skipped", "WARNING", "f", "later"),
    ]
    preflight.render(results, "p5", P5_REGION)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "1 errors, 2 warnings, 1 checks could not run, 1 skipped"


CHILD = """\
import json, boto3
session = boto3.session.Session()
credentials = session.get_credentials().get_frozen_credentials()
print(json.dumps({
    "key": credentials.access_key,
    "endpoint": session.client("sts").meta.endpoint_url,
    "profiles": session.available_profiles,
}))
"""


def test_the_child_reads_no_shared_credentials_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real child Python under operator_environ: the default profile of ~/.aws/credentials (another key, an
    endpoint elsewhere) never reaches it; it acts with the resolved credentials against the region's endpoint."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDFROMTHEFILE\naws_secret_access_key = other\n"
        "endpoint_url = https://elsewhere.example.invalid\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("AWS_SHARED_CREDENTIALS_FILE", raising=False)
    session = SimpleNamespace(get_credentials=lambda: Credentials("AKIDRESOLVED", "secret", "token"))
    environ = preflight.operator_environ(SimpleNamespace(region=P5_REGION, session=session))  # type: ignore[arg-type]
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=environ, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen == {"key": "AKIDRESOLVED", "endpoint": f"https://sts.{P5_REGION}.amazonaws.com", "profiles": []}
