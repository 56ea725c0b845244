"""``mlcluster patch``: the marker's exact S3 requests, every problem of a marker it did not write, the root script.

The marker decides which root action runs next and with what arguments; each check is driven at its edge and
the whole refusal (every problem named, in order) is compared with ``==``. The root shell script and each
refusal of an argument are pinned whole.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import click
import pytest
from botocore.stub import Stubber

from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, CliError
from mlcluster.cli.patch import PatchState, backup_digests, checked_state, confirm_stored_restore, tool_script

BUCKET = "p5-patch-backups"
KEY_ARN = "arn:aws:kms:us-east-2:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"
RUN = "20261128T090000Z"
URI = f"s3://{BUCKET}/mlcluster/patch/hp/{RUN}/"
STATE_URI = f"s3://{BUCKET}/mlcluster/patch/hp/state.json"
SHA_A = "a" * 64
SHA_B = "b" * 64
AT = "2026-11-28T09:00:00Z"


class FakeTarget:
    """What PatchState reads of a target: two outputs, one S3 client and the environment's name."""

    name = "hp"

    def __init__(self, s3: Any = None, key_arn: str = KEY_ARN) -> None:
        self._s3 = s3
        self._outputs = {"PatchBackupBucketName": BUCKET, "PatchBackupKeyArn": key_arn}

    def output(self, stack: str, key: str) -> str:
        assert stack == "Cluster"
        return self._outputs[key]

    def client(self, service: str) -> Any:
        assert service == "s3"
        return self._s3


@pytest.fixture
def s3() -> Any:
    client = boto3.client("s3", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def state(s3_client: Any = None, key_arn: str = KEY_ARN) -> PatchState:
    return PatchState(FakeTarget(s3_client, key_arn), "hp")  # type: ignore[arg-type]


def test_the_marker_lives_beside_the_backups_of_its_cluster() -> None:
    marker = state()
    assert (marker.bucket, marker.prefix, marker.key, marker.uri) == (
        BUCKET,
        "mlcluster/patch/hp",
        "mlcluster/patch/hp/state.json",
        STATE_URI,
    )
    assert marker.run_uri(RUN) == URI
    assert marker.digests_from_this_run is False


def test_the_marker_is_saved_encrypted_with_the_buckets_key(s3: tuple[Any, Stubber]) -> None:
    client, stubber = s3
    marker = state(client)
    marker.data = {"run": RUN, "steps": {}}
    stubber.add_response(
        "put_object",
        {},
        {
            "Bucket": BUCKET,
            "Key": "mlcluster/patch/hp/state.json",
            "Body": json.dumps(marker.data, indent=2).encode(),
            "ContentType": "application/json",
            "ServerSideEncryption": "aws:kms",
            "SSEKMSKeyId": KEY_ARN,
        },
    )
    marker.save()


def test_a_failed_save_names_the_marker(s3: tuple[Any, Stubber]) -> None:
    client, stubber = s3
    marker = state(client)
    stubber.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
    with pytest.raises(CliError) as raised:
        marker.save()
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(f"PutObject {STATE_URI} failed: AccessDenied: Access Denied\n")


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "arn:aws:kms:us-east-2:123456789012:alias/patch",
        KEY_ARN + "x",
        "x" + KEY_ARN,
        "arn:aws:kms:us-east-2:12345678901:key/0123abcd-0123-4567-89ab-0123456789ab",
    ],
)
def test_an_output_that_is_not_a_kms_key_arn_is_refused(arn: str) -> None:
    with pytest.raises(CliError) as raised:
        _ = state(key_arn=arn).key_arn
    assert (raised.value.message, raised.value.exit_code) == (
        f"output PatchBackupKeyArn: {arn!r} is not a KMS key ARN\n"
        "  what to do: deploy the cluster stack again (`npx cdk deploy`)",
        EXIT_FAILED,
    )


def test_a_key_arn_of_another_partition_is_a_key_arn() -> None:
    arn = "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"
    assert state(key_arn=arn).key_arn == arn


def test_the_marker_is_read_back_and_its_absence_is_no_run(s3: tuple[Any, Stubber]) -> None:
    client, stubber = s3
    params = {"Bucket": BUCKET, "Key": "mlcluster/patch/hp/state.json"}
    stubber.add_response("get_object", {"Body": io.BytesIO(b'{"run": "x"}')}, params)
    stubber.add_client_error("get_object", "NoSuchKey", "The specified key does not exist.", 404, None, params)
    stubber.add_client_error("get_object", "404", "Not Found", 404, None, params)
    marker = state(client)
    assert marker.load() == {"run": "x"}
    assert marker.load() is None
    assert marker.load() is None


def test_an_unreadable_marker_is_refused(s3: tuple[Any, Stubber]) -> None:
    client, stubber = s3
    stubber.add_client_error("get_object", "AccessDenied", "Access Denied", 403)
    stubber.add_response("get_object", {"Body": io.BytesIO(b"{not json")})
    marker = state(client)
    with pytest.raises(CliError) as raised:
        marker.load()
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(f"GetObject {STATE_URI} failed: AccessDenied: Access Denied\n")
    with pytest.raises(CliError) as raised:
        marker.load()
    assert (raised.value.message, raised.value.exit_code) == (
        f"{STATE_URI} is not valid JSON\n  what to do: inspect it; delete it to start a new patch run",
        EXIT_FAILED,
    )


def good_marker(**changes: Any) -> dict[str, Any]:
    marker: dict[str, Any] = {
        "run": RUN,
        "cluster": "hp",
        "backup_uri": URI,
        "steps": {
            "backup": {"at": AT, "uri": URI, "digests": {"slurmctld-state.tar.gz": SHA_A, "accounting.sql.gz": SHA_B}},
            "update": {"at": AT, "note": "found the cluster SystemUpdating"},
            "wait": {"at": AT, "status": "InService"},
            "restore": {"at": AT},
        },
        "complete": AT,
    }
    marker.update(changes)
    return marker


def refusal(*problems: str) -> str:
    return (
        f"{STATE_URI} is not a state this command wrote; nothing was run:\n  "
        + "\n  ".join(problems)
        + "\n  what to do: find out who changed it (the bucket is versioned; look at its versions and CloudTrail); "
        "delete it to start a new patch run"
    )


@pytest.mark.parametrize(
    "marker",
    [
        good_marker(),
        good_marker(complete=None, steps={}),
        good_marker(
            complete=None, steps={"backup": {"at": AT, "uri": URI, "digests": {"slurmctld-state.tar.gz": SHA_A}}}
        ),
        good_marker(steps={**good_marker()["steps"], "update": {"at": AT}}),
    ],
)
def test_every_marker_this_command_writes_is_accepted_as_it_is(marker: dict[str, Any]) -> None:
    assert checked_state(json.loads(json.dumps(marker)), state(), "hp") == marker


def test_a_marker_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(CliError) as raised:
        checked_state(["run"], state(), "hp")
    assert (raised.value.message, raised.value.exit_code) == (
        f"{STATE_URI} is not a patch state object (a JSON object)\n"
        "  what to do: inspect it; delete it to start a new patch run",
        EXIT_FAILED,
    )


def problems_of(marker: Any) -> str:
    with pytest.raises(CliError) as raised:
        checked_state(marker, state(), "hp")
    assert raised.value.exit_code == EXIT_FAILED
    return raised.value.message


def test_every_top_level_problem_is_named_in_one_refusal() -> None:
    marker = {
        "zeta": 1,
        "alpha": "x" * 200,
        "run": "2026-11-28",
        "cluster": "other",
        "backup_uri": URI,
        "steps": [],
        "complete": "yesterday",
    }
    assert problems_of(marker) == refusal(
        'alpha: "'
        + "x" * 119
        + " is not allowed; allowed: no such key; keys: backup_uri, cluster, complete, run, steps",
        "zeta: 1 is not allowed; allowed: no such key; keys: backup_uri, cluster, complete, run, steps",
        'run: "2026-11-28" is not allowed; allowed: a run id such as 20260101T120000Z',
        "cluster: \"other\" is not allowed; allowed: 'hp'",
        f'backup_uri: "{URI}" is not allowed; allowed: s3://{BUCKET}/mlcluster/patch/hp/<run>/',
        'complete: "yesterday" is not allowed; allowed: null or a UTC time such as 2026-01-01T12:00:00Z',
        "steps: [] is not allowed; allowed: an object of step records",
    )


def test_a_missing_run_and_a_backup_elsewhere_are_named() -> None:
    marker = good_marker(backup_uri=f"s3://other/mlcluster/patch/hp/{RUN}/", complete=5)
    del marker["run"]
    assert problems_of(marker) == refusal(
        "run: null is not allowed; allowed: a run id such as 20260101T120000Z",
        f'backup_uri: "s3://other/mlcluster/patch/hp/{RUN}/" is not allowed; allowed: '
        f"s3://{BUCKET}/mlcluster/patch/hp/<run>/",
        "complete: 5 is not allowed; allowed: null or a UTC time such as 2026-01-01T12:00:00Z",
        f'steps.backup.uri: "{URI}" is not allowed; allowed: the run\'s backup location',
    )


def test_a_backup_location_of_another_run_is_refused() -> None:
    other = f"s3://{BUCKET}/mlcluster/patch/hp/20250101T000000Z/"
    assert problems_of(good_marker(backup_uri=other)) == refusal(
        f'backup_uri: "{other}" is not allowed; allowed: {URI}'
    )


def test_steps_out_of_order_or_unknown_are_refused() -> None:
    steps = good_marker()["steps"]
    marker = good_marker(steps={"update": steps["update"], "backup": steps["backup"], "extra": {"x": 1}})
    assert problems_of(marker) == refusal(
        'steps: ["update", "backup", "extra"] is not allowed; allowed: the steps in order, each after the one '
        "before: backup, update, wait, restore",
    )


def test_every_problem_of_each_step_record_is_named() -> None:
    marker = good_marker(
        steps={
            "backup": {
                "at": "2026-11-28 09:00:00",
                "uri": f"{URI}x/",
                "digests": {"slurmctld-state.tar.gz": SHA_A.upper()},
                "size": 1,
            },
            "update": {"at": AT, "note": 7, "by": "me"},
            "wait": {"at": AT, "status": "Failed"},
            "restore": "done",
        }
    )
    digests_allowed = "slurmctld-state.tar.gz (and optionally accounting.sql.gz) mapped to a SHA-256 in lower-case hex"
    assert problems_of(marker) == refusal(
        'steps.backup.at: "2026-11-28 09:00:00" is not allowed; allowed: a UTC time such as 2026-01-01T12:00:00Z',
        "steps.backup.size: 1 is not allowed; allowed: no such key; keys: at, uri, digests",
        f'steps.backup.uri: "{URI}x/" is not allowed; allowed: {URI}',
        f'steps.backup.digests: {{"slurmctld-state.tar.gz": "{SHA_A.upper()}"}} is not allowed; allowed: '
        + digests_allowed,
        'steps.update.by: "me" is not allowed; allowed: no such key; keys: at, note',
        "steps.update.note: 7 is not allowed; allowed: text",
        'steps.wait.status: "Failed" is not allowed; allowed: InService',
        "steps.restore: \"done\" is not allowed; allowed: an object with 'at'",
    )


@pytest.mark.parametrize(
    "digests",
    [
        None,
        {},
        {"accounting.sql.gz": SHA_B},
        {"slurmctld-state.tar.gz": SHA_A, "other.gz": SHA_B},
        {"slurmctld-state.tar.gz": SHA_A[:-1]},
        {"slurmctld-state.tar.gz": 1},
        ["slurmctld-state.tar.gz"],
    ],
)
def test_backup_digests_must_name_the_state_file_and_only_known_files_with_sha256(digests: Any) -> None:
    backup = {"at": AT, "uri": URI, "digests": digests}
    message = problems_of(good_marker(complete=None, steps={"backup": backup}))
    assert message == refusal(
        f"steps.backup.digests: {json.dumps(digests)[:120]} is not allowed; allowed: slurmctld-state.tar.gz (and "
        "optionally accounting.sql.gz) mapped to a SHA-256 in lower-case hex"
    )


def test_a_missing_wait_status_and_at_are_named() -> None:
    marker = good_marker(complete=None, steps={**good_marker()["steps"], "wait": {}})
    del marker["steps"]["restore"]
    assert problems_of(marker) == refusal(
        "steps.wait.at: null is not allowed; allowed: a UTC time such as 2026-01-01T12:00:00Z",
        "steps.wait.status: null is not allowed; allowed: InService",
    )


def test_the_backup_script_runs_the_tool_as_root_with_a_timeout_and_the_key() -> None:
    assert tool_script("backup", URI, 1800, key_arn=KEY_ARN) == (
        f"set -o pipefail\ntimeout 1800 /usr/local/sbin/mlcluster-backup backup {URI} {KEY_ARN} 2>&1 | tail -c 2000\n"
    )


def test_the_restore_script_hands_over_each_digest_sorted_by_file() -> None:
    digests = {"slurmctld-state.tar.gz": SHA_A, "accounting.sql.gz": SHA_B}
    assert tool_script("restore", URI, 60, digests) == (
        "set -o pipefail\n"
        f"timeout 60 /usr/local/sbin/mlcluster-backup restore {URI} accounting.sql.gz={SHA_B} "
        f"slurmctld-state.tar.gz={SHA_A} 2>&1 | tail -c 2000\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("delete", URI), "verb: 'delete' is not allowed; allowed: backup, restore"),
        (
            ("backup", "s3://b/p/"),
            "uri: 's3://b/p/' is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /",
        ),
        (
            ("backup", f"s3://{BUCKET}/a/../b/"),
            f"uri: 's3://{BUCKET}/a/../b/' is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /",
        ),
        (
            ("backup", f"s3://{BUCKET}/a b/"),
            f"uri: 's3://{BUCKET}/a b/' is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /",
        ),
        (
            ("backup", f"s3://{BUCKET}/a"),
            f"uri: 's3://{BUCKET}/a' is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /",
        ),
        (
            ("backup", f"s3://{BUCKET}/a/;reboot/"),
            f"uri: 's3://{BUCKET}/a/;reboot/' is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /",
        ),
    ],
)
def test_a_bad_verb_or_location_never_reaches_the_root_shell(args: tuple[str, str], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        tool_script(*args, 60, key_arn=KEY_ARN)
    assert str(raised.value) == message


def test_restore_takes_digests_and_no_key_backup_a_key_and_no_digests() -> None:
    good = {"slurmctld-state.tar.gz": SHA_A}
    cases: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
        (("restore", URI, 60), {}, "digests: None is not allowed; restore takes the backup's digests, backup none"),
        (
            ("backup", URI, 60, good),
            {"key_arn": KEY_ARN},
            "digests: {'slurmctld-state.tar.gz': '" + SHA_A + "'} is not allowed; restore takes the backup's digests, "
            "backup none",
        ),
        (
            ("restore", URI, 60, {"accounting.sql.gz": SHA_B}),
            {},
            "digests: {'accounting.sql.gz': '" + SHA_B + "'} is not allowed; restore takes the backup's digests, "
            "backup none",
        ),
        (
            ("restore", URI, 60, good),
            {"key_arn": KEY_ARN},
            f"key_arn: {KEY_ARN!r} is not allowed; backup takes the bucket's KMS key ARN, restore none",
        ),
        (("backup", URI, 60), {}, "key_arn: None is not allowed; backup takes the bucket's KMS key ARN, restore none"),
        (
            ("backup", URI, 60),
            {"key_arn": "alias/x"},
            "key_arn: 'alias/x' is not allowed; backup takes the bucket's KMS key ARN, restore none",
        ),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(ValueError) as raised:
            tool_script(*args, **kwargs)
        assert str(raised.value) == message


def test_the_backups_digest_lines_are_read_and_anything_else_is_refused() -> None:
    output = (
        "uploading\n"
        f"MLCLUSTER_SHA256 {SHA_A} slurmctld-state.tar.gz\n"
        f"MLCLUSTER_SHA256 {SHA_B} accounting.sql.gz\n"
        "done\n"
    )
    assert backup_digests(output) == {"slurmctld-state.tar.gz": SHA_A, "accounting.sql.gz": SHA_B}
    bad = "  no digest here: " + "x" * 400 + "\n"
    with pytest.raises(CliError) as raised:
        backup_digests(bad)
    assert (raised.value.message, raised.value.exit_code) == (
        "the backup printed no valid digests (expected 'MLCLUSTER_SHA256 <sha256> <file>' for slurmctld-state.tar.gz "
        f"and optionally accounting.sql.gz), got: {bad.strip()[-300:]}\n"
        "  what to do: update the lifecycle scripts (`npx cdk deploy`) so the controller has the current "
        "mlcluster-backup; nothing was updated",
        EXIT_FAILED,
    )


def stored_state() -> PatchState:
    marker = state()
    marker.data = good_marker(complete=None)
    del marker.data["steps"]["restore"]
    return marker


def test_a_stored_restore_shows_the_digests_and_times_and_goes_on_with_the_run_id_typed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[str, Any]] = []

    def prompt(text: str, **kwargs: Any) -> str:
        asked.append((text, kwargs))
        return f"  {RUN} "

    monkeypatch.setattr(click, "prompt", prompt)
    confirm_stored_restore(stored_state(), URI)
    assert asked == [("type the run id to restore it (anything else stops)", {"default": "", "err": True})]
    assert capsys.readouterr().err == (
        f"patch run {RUN} resumes at the restore with a state this process did not write ({STATE_URI}):\n"
        f"  backup   {AT}\n"
        f"  update   {AT}\n"
        f"  wait     {AT}\n"
        f"  accounting.sql.gz  sha256 {SHA_B}\n"
        f"  slurmctld-state.tar.gz  sha256 {SHA_A}\n"
        f"root on the controller will load these files from {URI}; compare the digests with the ones the backup "
        "printed.\n"
    )


@pytest.mark.parametrize("answer", ["", "20261128T090001Z", "yes"])
def test_a_stored_restore_not_confirmed_by_its_run_id_stops(monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    monkeypatch.setattr(click, "prompt", lambda text, **kwargs: answer)
    with pytest.raises(CliError) as raised:
        confirm_stored_restore(stored_state(), URI)
    assert (raised.value.message, raised.value.exit_code) == (
        f"the restore of run {RUN} was not confirmed; nothing was run\n"
        f"  what to do: check {STATE_URI} (versions, CloudTrail) and run `mlcluster patch hp` again in a terminal",
        EXIT_FAILED,
    )
