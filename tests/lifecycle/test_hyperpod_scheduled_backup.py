"""Issue 33, item 6: the controller's Slurm state has a scheduled second copy.

Contract (backup.sh, steps/scheduled_backup.sh): with ``scheduled_backup`` in the features file the
controller installs ``mlcluster-backup-scheduled.service`` (oneshot, root, journal, retried) and a daily
``.timer`` (RandomizedDelaySec, Persistent); the service runs ``mlcluster-backup scheduled URI KEY``,
which leaves slurmctld running, dumps the accounting database in one transaction and puts the files
with SSE-KMS under ``URI/<weekday>/`` (seven rotating copies, nothing deleted by a rule).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from mlcluster.lifecycle.hyperpod.plan import (
    SCHEDULED_COPY_METRIC,
    SCHEDULED_COPY_NAMESPACE,
    LifecycleInputError,
    parse_features,
    plan_steps,
)
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, WORKER_IP, Sandbox

BUCKET = "hyperpod-cluster-patchbackups-1a2b3c"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
PREFIX = "mlcluster/patch/ml/scheduled/"
URI = f"s3://{BUCKET}/{PREFIX.rstrip('/')}"
CLUSTER = "ml-hyperpod"
SCHEDULED = {"bucket": BUCKET, "key_arn": KEY, "prefix": PREFIX, "cluster_name": CLUSTER}
UNIT = "/etc/systemd/system/mlcluster-backup-scheduled"
STATE = "/opt/sagemaker/mlcluster/slurmctld"


def with_backup(**extra: object) -> dict[str, object]:
    return {**FEATURES, "docker": False, "enroot_pyxis": False, "scheduled_backup": SCHEDULED, **extra}


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    sandbox = Sandbox(tmp_path_factory.mktemp("controller"), ips=CONTROLLER_IP, features=with_backup())
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox


def scheduled_run(sandbox: Sandbox) -> subprocess.CompletedProcess[str]:
    """Run the ExecStart line of the installed service, as systemd would (root, no shell)."""
    service = sandbox.read(UNIT + ".service")
    (command,) = re.findall(r"^ExecStart=(.*)$", service, re.M)
    tool, *args = command.split()
    assert tool == "/usr/local/sbin/mlcluster-backup"
    env = {**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle")}
    return subprocess.run(
        ["bash", str(sandbox.root / tool.lstrip("/")), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_step_runs_on_the_controller_only_and_only_when_asked() -> None:
    on = parse_features(with_backup())
    off = parse_features({**FEATURES})
    assert "scheduled_backup" in plan_steps("controller", on)
    assert "scheduled_backup" not in plan_steps("worker", on)
    assert "scheduled_backup" not in plan_steps("login", on)
    assert "scheduled_backup" not in plan_steps("controller", off)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bucket", "Bad_Bucket"),
        ("bucket", "b; rm -rf /"),
        ("key_arn", "alias/aws/s3"),
        ("key_arn", KEY + " --endpoint-url http://evil"),
        ("prefix", "mlcluster/patch/ml/scheduled"),  # no trailing '/'
        ("prefix", "mlcluster/../state.json/"),
        ("prefix", "/absolute/"),
        ("cluster_name", "-leading-dash"),
        ("cluster_name", "a" * 64),
        ("cluster_name", "ml;reboot"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(LifecycleInputError, match=rf"scheduled_backup\.{key} = .* is not valid; allowed: "):
        parse_features(with_backup(scheduled_backup={**SCHEDULED, key: value}))


def test_the_edges_are_accepted_and_a_missing_key_is_named() -> None:
    edge = {
        "bucket": "a" * 63,
        "key_arn": KEY.replace("aws:", "aws-us-gov:", 1),
        "prefix": "x/",
        "cluster_name": "a" * 63,
    }
    assert parse_features(with_backup(scheduled_backup=edge)).scheduled_backup is not None
    with pytest.raises(LifecycleInputError, match=r"scheduled_backup\.key_arn is missing"):
        parse_features(with_backup(scheduled_backup={"bucket": BUCKET, "prefix": PREFIX, "cluster_name": CLUSTER}))
    with pytest.raises(LifecycleInputError, match=r"scheduled_backup\.cluster_name is missing"):
        parse_features(with_backup(scheduled_backup={"bucket": BUCKET, "key_arn": KEY, "prefix": PREFIX}))
    with pytest.raises(LifecycleInputError, match=r"scheduled_backup\.region = "):
        parse_features(with_backup(scheduled_backup={**SCHEDULED, "region": "us-east-1"}))


def test_the_metric_region_is_the_keys_region(controller: Sandbox) -> None:
    """Issue 33c item 2: the AWS CLI on a node has no default region; node.env carries the key ARN's region."""
    gov = KEY.replace("aws:kms:us-east-1", "aws-us-gov:kms:us-gov-west-1", 1)
    found = parse_features(with_backup(scheduled_backup={**SCHEDULED, "key_arn": gov})).scheduled_backup
    assert found is not None and found.region == "us-gov-west-1"
    assert "MLC_SCHEDULED_BACKUP_REGION=us-east-1" in controller.read("/etc/mlcluster/node.env").splitlines()


def test_the_controller_gets_a_daily_persistent_retried_timer(controller: Sandbox) -> None:
    service = controller.read(UNIT + ".service").splitlines()
    timer = controller.read(UNIT + ".timer").splitlines()
    assert f"ExecStart=/usr/local/sbin/mlcluster-backup scheduled {URI} {KEY}" in service
    assert {"Type=oneshot", "Restart=on-failure", "RestartSec=15min", "StandardOutput=journal"} <= set(service)
    assert not [line for line in service if line.startswith(("User=", "DynamicUser="))]  # root
    assert {"OnCalendar=daily", "RandomizedDelaySec=1h", "Persistent=true", "WantedBy=timers.target"} <= set(timer)
    assert (controller.state / "systemd/enabled/mlcluster-backup-scheduled.timer").exists()
    assert (controller.state / "systemd/active/mlcluster-backup-scheduled.timer").exists()


SEED = (
    f"aws cloudwatch put-metric-data --region us-east-1 --namespace {SCHEDULED_COPY_NAMESPACE} "
    f"--metric-name {SCHEDULED_COPY_METRIC} --dimensions ClusterName={CLUSTER} --value 1 --unit Count"
)


def test_the_step_seeds_the_metric_after_starting_the_timer(controller: Sandbox) -> None:
    """Issue 33c item 1: one data point at node creation starts the alarm's two-day clock (the first copy runs
    only after the next midnight plus up to an hour); same namespace, dimension and the key's region."""
    actions = controller.actions()
    assert SEED in actions
    assert actions.index(SEED) > actions.index("systemctl start mlcluster-backup-scheduled.timer")


@pytest.mark.parametrize(("code", "message"), [("AccessDenied", "lacks cloudwatch:PutMetricData"), ("Throttling", "")])
def test_a_seed_that_cannot_be_put_fails_the_step(controller: Sandbox, code: str, message: str) -> None:
    """At creation the grant must be there: a refused or failing seed fails the step, naming the metric."""
    before = len(controller.actions())
    result = controller.run("on_create.sh", "scheduled_backup", STUB_METRIC_ERROR=code, MLC_MAX_ATTEMPTS="2")
    assert result.returncode != 0
    assert f"({code})" in result.stderr + result.stdout
    assert message in result.stderr + result.stdout
    seeds = [a for a in controller.actions()[before:] if a == SEED]
    assert len(seeds) == (1 if code == "AccessDenied" else 2)


def test_a_second_run_of_the_step_changes_nothing(controller: Sandbox) -> None:
    before = len(controller.actions())
    result = controller.run("on_create.sh", "scheduled_backup")
    assert result.returncode == 0, result.stderr[-2000:]
    assert [a for a in controller.actions()[before:] if a.startswith("systemctl")] == []


def test_systemd_accepts_both_units(controller: Sandbox, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed to check the units (Debian package systemd)")
    for suffix in ("service", "timer"):
        text = controller.read(UNIT + "." + suffix)
        # The tool is on the node, not here: verify checks that ExecStart's program exists.
        (tmp_path / f"mlcluster-backup-scheduled.{suffix}").write_text(
            text.replace("/usr/local/sbin/mlcluster-backup", "/bin/true")
        )
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(tmp_path / "mlcluster-backup-scheduled.timer")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if str(tmp_path) in line] == []


def test_the_scheduled_copy_keeps_slurmctld_running_and_rotates_by_weekday(controller: Sandbox) -> None:
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("jobs v1\n")
    before = len(controller.actions())
    days = {time.strftime("%a", time.gmtime())}
    result = scheduled_run(controller)
    days.add(time.strftime("%a", time.gmtime()))
    assert result.returncode == 0, result.stderr
    actions = controller.actions()[before:]
    assert not [a for a in actions if a.startswith("systemctl")]  # slurmctld never stopped
    assert "mysqldump --single-transaction slurm_acct_db" in actions
    puts = [a for a in actions if a.startswith("aws s3api put-object")]
    assert len(puts) == 3 and all(f"--server-side-encryption aws:kms --ssekms-key-id {KEY}" in a for a in puts)
    (day,) = [d for d in days if (controller.state / "s3" / BUCKET / PREFIX / d).is_dir()]
    folder = controller.state / "s3" / BUCKET / PREFIX / day
    assert sorted(p.name for p in folder.iterdir()) == ["SHA256SUMS", "accounting.sql.gz", "slurmctld-state.tar.gz"]
    with tarfile.open(fileobj=io.BytesIO((folder / "slurmctld-state.tar.gz").read_bytes())) as archive:
        member = archive.extractfile("./job_state")
        assert member is not None and member.read() == b"jobs v1\n"
    assert b"slurm_acct_db" in gzip.decompress((folder / "accounting.sql.gz").read_bytes())
    sums = (folder / "SHA256SUMS").read_text()
    for name in ("accounting.sql.gz", "slurmctld-state.tar.gz"):
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}\n" in sums
        assert f"{name}={digest}" in result.stderr  # the restore command, in the journal
    assert f"scheduled copy complete: {URI}/{day}" in result.stderr
    # Last, the data point the Observability stack's alarm reads: HyperPod's namespace, this cluster.
    assert actions[-1] == (
        f"aws cloudwatch put-metric-data --region us-east-1 --namespace {SCHEDULED_COPY_NAMESPACE} "
        f"--metric-name {SCHEDULED_COPY_METRIC} --dimensions ClusterName={CLUSTER} --value 1 --unit Count"
    )


def metric_refused_run(sandbox: Sandbox, code: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """One scheduled copy whose PutMetricData calls all fail with ``code``; the run and its actions."""
    state = sandbox.root / STATE.lstrip("/")
    (state / "job_state").write_text(f"jobs {code}\n")
    before = len(sandbox.actions())
    env = {
        **sandbox.env(),
        "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle"),
        "STUB_METRIC_ERROR": code,
        "MLC_MAX_ATTEMPTS": "2",
    }
    done = subprocess.run(
        ["bash", str(sandbox.root / "usr/local/sbin/mlcluster-backup"), "scheduled", URI, KEY],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, sandbox.actions()[before:]


@pytest.mark.parametrize("code", ["Throttling", "InternalServiceFault", "InvalidParameterValue"])
def test_a_metric_that_cannot_be_put_fails_the_run_after_the_copy(controller: Sandbox, code: str) -> None:
    """The copy is in S3, but without its data point the alarm goes off: the run fails so systemd retries."""
    done, actions = metric_refused_run(controller, code)
    assert done.returncode != 0
    assert "the copy is in S3 but MlclusterScheduledCopy was not published" in done.stderr
    assert f"({code})" in done.stderr  # the AWS error reaches the journal
    assert len([a for a in actions if a.startswith("aws s3api put-object")]) == 3
    assert len([a for a in actions if a.startswith("aws cloudwatch put-metric-data --region us-east-1 ")]) == 2


@pytest.mark.parametrize("code", ["AccessDenied", "AccessDeniedException"])
def test_a_metric_refused_access_after_the_copy_is_a_warning(controller: Sandbox, code: str) -> None:
    """Issue 33c item 3: scheduled_backup turned off removed the grant, not the timer: the copy succeeded,
    so the run succeeds (no retry every 15 minutes) and the journal says to stop the timer."""
    done, actions = metric_refused_run(controller, code)
    assert done.returncode == 0, done.stderr
    assert f"({code})" in done.stderr
    assert "WARNING: the copy is in S3 but this node may no longer publish MlclusterScheduledCopy" in done.stderr
    assert "systemctl disable --now mlcluster-backup-scheduled.timer" in done.stderr
    assert len([a for a in actions if a.startswith("aws s3api put-object")]) == 3
    assert len([a for a in actions if a.startswith("aws cloudwatch put-metric-data")]) == 1  # not retried


def test_the_copy_restores_with_the_tool_patch_uses(controller: Sandbox) -> None:
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("the night's state\n")
    result = scheduled_run(controller)
    assert result.returncode == 0, result.stderr
    (command,) = re.findall(r"restore with: mlcluster-backup (restore .*)$", result.stderr, re.M)
    (state / "job_state").write_text("a new, empty controller\n")
    env = {**controller.env(), "MLC_LIFECYCLE_DIR": str(controller.root / "opt/mlcluster/lifecycle")}
    done = subprocess.run(
        ["bash", str(controller.root / "usr/local/sbin/mlcluster-backup"), *command.split()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (state / "job_state").read_text() == "the night's state\n"


def test_an_upload_without_the_key_fails_the_run_so_systemd_retries(controller: Sandbox) -> None:
    env_file = controller.root / "usr/local/sbin/mlcluster-backup"
    env = {**controller.env(), "MLC_LIFECYCLE_DIR": str(controller.root / "opt/mlcluster/lifecycle")}
    env["MLC_MAX_ATTEMPTS"] = "1"
    done = subprocess.run(
        ["bash", str(env_file), "scheduled", URI, "alias/aws/s3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2  # usage: only a key ARN is allowed
    stub = controller.bin / "aws"
    original = stub.read_text()
    stub.write_text(
        original.replace(
            'act "$@"\n  declare -A opt=()',
            "echo 'An error occurred (AccessDenied)' >&2; exit 254\n  declare -A opt=()",
            1,
        )
    )
    try:
        failed = subprocess.run(
            ["bash", str(env_file), "scheduled", URI, KEY],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        stub.write_text(original)
    assert failed.returncode == 1, failed.stderr
    assert "still failing after 1 attempt(s)" in failed.stderr
    assert "scheduled copy complete" not in failed.stderr


def test_a_worker_has_no_timer(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP, features=with_backup())
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (sandbox.root / (UNIT.lstrip("/") + ".timer")).exists()
    assert "scheduled_backup" not in sandbox.step_order()


def run_tool(sandbox: Sandbox, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed mlcluster-backup with ARGS (and EXTRA_ENV), as root would."""
    env = {**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle"), **extra_env}
    return subprocess.run(
        ["bash", str(sandbox.root / "usr/local/sbin/mlcluster-backup"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_one_lock_keeps_the_daily_copy_off_a_running_backup_or_restore(controller: Sandbox) -> None:
    """Finding 1: the daily copy skips (exit 0, logged) and backup/restore wait, then fail clearly."""
    (controller.root / STATE.lstrip("/") / "job_state").write_text("jobs\n")
    lock = controller.root / "run/mlcluster-backup.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as holder:  # another run holding the lock
        fcntl.flock(holder, fcntl.LOCK_EX)
        before = len(controller.actions())
        skipped = run_tool(controller, "scheduled", URI, KEY)
        assert skipped.returncode == 0, skipped.stderr
        assert "another mlcluster-backup is running; this daily copy is skipped" in skipped.stderr
        assert not [a for a in controller.actions()[before:] if a.startswith(("aws", "mysqldump"))]
        started = time.monotonic()
        waited = run_tool(controller, "backup", URI, KEY, MLC_BACKUP_LOCK_WAIT_SECONDS="1")
        assert waited.returncode == 1
        assert time.monotonic() - started >= 1
        assert "another mlcluster-backup held" in waited.stderr and "nothing was changed" in waited.stderr
        assert not [a for a in controller.actions()[before:] if a.startswith(("aws", "mysqldump", "systemctl"))]
        refused = run_tool(
            controller, "restore", URI, "slurmctld-state.tar.gz=" + "0" * 64, MLC_BACKUP_LOCK_WAIT_SECONDS="1"
        )
        assert refused.returncode == 1 and "another mlcluster-backup held" in refused.stderr
    # The lock free again: the same runs go through.
    assert run_tool(controller, "scheduled", URI, KEY).returncode == 0
    assert run_tool(controller, "backup", URI, KEY, MLC_BACKUP_LOCK_WAIT_SECONDS="1").returncode == 0


def test_a_freshly_initialised_state_folder_never_overwrites_a_weekday_copy(controller: Sandbox) -> None:
    """Finding 1: no job_state at all (a new controller before its restore) -> skipped, nothing uploaded."""
    job_state = controller.root / STATE.lstrip("/") / "job_state"
    job_state.unlink(missing_ok=True)
    before = len(controller.actions())
    try:
        done = run_tool(controller, "scheduled", URI, KEY)
    finally:
        job_state.write_text("jobs\n")
    assert done.returncode == 0, done.stderr
    assert "has no job_state (freshly initialised?); this daily copy is skipped" in done.stderr
    assert not [a for a in controller.actions()[before:] if a.startswith(("aws", "mysqldump"))]


@pytest.mark.parametrize("misses", [1, 99])
def test_an_archive_missing_a_state_file_is_retried_and_never_uploaded(controller: Sandbox, misses: int) -> None:
    """Finding 2: slurmctld unlinks FILE then links FILE.new to it; a tar in between misses FILE."""
    (controller.root / STATE.lstrip("/") / "job_state").write_text("jobs v2\n")
    real_tar = shutil.which("tar")
    assert real_tar is not None
    stub = controller.bin / "tar"  # ahead of the real tar on PATH
    counter = controller.root.parent / f"tar.count.{misses}"
    counter.write_text("0")
    # Stand-in tar: the first MISSES archives are made in the window where job_state is unlinked.
    stub.write_text(
        "#!/bin/bash\n"
        f"n=$(cat {counter}); if [[ $1 == --create ]] && ((n < {misses})); then echo $((n + 1)) >{counter}; "
        f'exec {real_tar} --exclude=./job_state "$@"; fi\nexec {real_tar} "$@"\n'
    )
    stub.chmod(0o755)
    before = len(controller.actions())
    try:
        done = run_tool(controller, "scheduled", URI, KEY, MLC_RETRY_DELAY="0")
    finally:
        stub.unlink()
    puts = [a for a in controller.actions()[before:] if a.startswith("aws s3api put-object")]
    assert "the archive lacks job_state" in done.stderr
    if misses == 1:
        assert done.returncode == 0, done.stderr
        assert len(puts) == 3
        day = re.findall(rf"scheduled copy complete: {re.escape(URI)}/(\w+);", done.stderr)[0]
        folder = controller.state / "s3" / BUCKET / PREFIX / day
        with tarfile.open(fileobj=io.BytesIO((folder / "slurmctld-state.tar.gz").read_bytes())) as archive:
            member = archive.extractfile("./job_state")
            assert member is not None and member.read() == b"jobs v2\n"
    else:
        assert done.returncode == 1
        assert "could not archive" in done.stderr
        assert puts == []


def test_a_failed_day_does_not_spend_the_next_days_start_limit(controller: Sandbox) -> None:
    """Finding 3: 4 starts per 6 h (a failed day's retries are forgotten before the next day's run)."""
    service = controller.read(UNIT + ".service").splitlines()
    assert {"StartLimitIntervalSec=6h", "StartLimitBurst=4", "Restart=on-failure", "RestartSec=15min"} <= set(service)


def test_job_state_caught_unlinked_is_not_a_fresh_folder_and_is_never_uploaded_without_it(controller: Sandbox) -> None:
    """Finding 2: only job_state.old there (the unlink/link window) -> archived again, not skipped or uploaded."""
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").unlink(missing_ok=True)
    (state / "job_state.old").write_text("jobs, previous save\n")
    before = len(controller.actions())
    try:
        done = run_tool(controller, "scheduled", URI, KEY, MLC_RETRY_DELAY="0", MLC_MAX_ATTEMPTS="2")
    finally:
        (state / "job_state.old").unlink()
        (state / "job_state").write_text("jobs\n")
    assert done.returncode == 1, done.stderr
    assert "the archive lacks job_state" in done.stderr and "could not archive" in done.stderr
    assert not [a for a in controller.actions()[before:] if a.startswith("aws s3api put-object")]
