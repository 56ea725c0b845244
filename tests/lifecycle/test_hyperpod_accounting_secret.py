"""slurmdbd after a rotation of the remote accounting database's secret (accounting_secret.sh).

Contract (accounting_secret.sh's header): the accounting step (mode remote) installs
``/usr/local/sbin/mlcluster-accounting-secret``, a slurmdbd drop-in whose ``ExecStartPre=+`` runs
``refresh`` as root before every start, and a timer that runs ``watch`` every 5 minutes. ``refresh``
rewrites slurmdbd.conf's StorageUser and StoragePass from the secret (root's rename, mode 600, owner
kept) only when they differ; ``watch`` restarts slurmdbd when they did. A secret slurmdbd.conf cannot
hold is refused and the file left alone; the password never reaches a log or a command line. A start
whose secret cannot be read goes on with the file's password; a watch that cannot read it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, Sandbox

ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurm-db-AbCdEf"
REMOTE = {"mode": "remote", "endpoint": "db.example.internal:3306", "secret_arn": ARN}
MINIMAL = {**FEATURES, "users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False, "accounting": REMOTE}
CONF = "/opt/slurm/etc/slurmdbd.conf"
TOOL = "usr/local/sbin/mlcluster-accounting-secret"


def secret(password: str, username: str = "slurm") -> str:
    return json.dumps({"username": username, "password": password, "host": "db.example.internal", "port": 3306})


@pytest.fixture
def controller(tmp_path: Path) -> Sandbox:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox


def tool(sandbox: Sandbox, verb: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed tool the way systemd does (as root, from the copy in /opt/mlcluster/lifecycle)."""
    return subprocess.run(
        ["bash", str(sandbox.root / TOOL), verb],
        env={**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def credentials(sandbox: Sandbox) -> tuple[str, str]:
    conf = sandbox.read(CONF)
    return conf.split("StorageUser=")[1].split("\n")[0], conf.split("StoragePass=")[1].split("\n")[0]


def restarts(sandbox: Sandbox) -> int:
    return sandbox.actions().count("systemctl restart slurmdbd")


def test_the_step_installs_the_tool_the_drop_in_and_the_timer(controller: Sandbox) -> None:
    info = (controller.root / TOOL).stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o755)
    drop_in = controller.read("/etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf")
    assert "[Service]\nExecStartPre=+/usr/bin/env MLC_MAX_ATTEMPTS=2 AWS_MAX_ATTEMPTS=1 " in drop_in
    assert "/usr/local/sbin/mlcluster-accounting-secret refresh\n" in drop_in
    service = controller.read("/etc/systemd/system/mlcluster-accounting-secret.service")
    assert "Type=oneshot\nExecStart=/usr/local/sbin/mlcluster-accounting-secret watch\n" in service
    timer = controller.read("/etc/systemd/system/mlcluster-accounting-secret.timer")
    assert "OnBootSec=5min\nOnUnitActiveSec=5min\n" in timer
    actions = controller.actions()
    assert "systemctl enable mlcluster-accounting-secret.timer" in actions
    assert "systemctl start mlcluster-accounting-secret.timer" in actions
    # The drop-in is in place (and systemd reloaded) before slurmdbd's first start.
    assert actions.index("systemctl daemon-reload") < actions.index("systemctl start slurmdbd")
    assert credentials(controller) == ("slurm", "first-Pass1")


def test_watch_after_a_rotation_rewrites_the_file_and_restarts_slurmdbd_once(controller: Sandbox) -> None:
    before = controller.read(CONF)
    result = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 0, result.stderr
    assert credentials(controller) == ("slurm", "rotated-Pass2")
    # Only the two credential lines changed; the file stays slurm's, mode 600, written by a rename.
    assert [a for a in before.splitlines() if not a.startswith("StoragePass=")] == [
        a for a in controller.read(CONF).splitlines() if not a.startswith("StoragePass=")
    ]
    info = (controller.root / CONF.lstrip("/")).stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (401, 401, 0o600)
    assert not list((controller.root / "opt/slurm/etc").glob("*.mlcluster.*"))
    assert restarts(controller) == 1
    assert "rotated-Pass2" not in result.stdout + result.stderr + "\n".join(controller.actions())
    # Nothing changed since: no second restart.
    again = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2"))
    assert again.returncode == 0, again.stderr
    assert restarts(controller) == 1


def test_watch_leaves_a_stopped_slurmdbd_stopped(controller: Sandbox) -> None:
    (controller.state / "systemd/active/slurmdbd").unlink()
    result = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 0, result.stderr
    assert credentials(controller) == ("slurm", "rotated-Pass2")
    assert restarts(controller) == 0


def test_refresh_before_a_start_applies_the_secret_without_restarting(controller: Sandbox) -> None:
    result = tool(controller, "refresh", STUB_SECRET=secret("rotated-Pass2", username="slurm2"))
    assert result.returncode == 0, result.stderr
    assert credentials(controller) == ("slurm2", "rotated-Pass2")
    assert restarts(controller) == 0


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("new\nStorageHost=attacker.example", "a newline would add a line"),
        ("half#comment", "'#' starts a comment"),
        ("with space", "a space ends the value"),
        ('quote"d', "a quote"),
    ],
)
def test_a_secret_the_file_cannot_hold_is_refused_and_the_file_kept(
    controller: Sandbox, password: str, why: str
) -> None:
    before = controller.read(CONF)
    result = tool(controller, "watch", STUB_SECRET=secret(password))
    assert result.returncode == 1, why
    assert "field 'password' has a character slurmdbd.conf cannot hold" in result.stderr
    assert "the accounting secret could not be applied; slurmdbd keeps running as it is" in result.stderr
    assert controller.read(CONF) == before
    assert restarts(controller) == 0
    assert password not in result.stderr


def test_the_widest_password_the_file_can_hold_is_applied(controller: Sandbox) -> None:
    edge = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '#\\"')
    result = tool(controller, "watch", STUB_SECRET=secret(edge))
    assert result.returncode == 0, result.stderr
    assert credentials(controller) == ("slurm", edge)


def test_a_secret_that_is_not_json_is_refused_without_echoing_it(controller: Sandbox) -> None:
    result = tool(controller, "watch", STUB_SECRET="plain-Password9")
    assert result.returncode == 1
    assert "the accounting secret is not a JSON object" in result.stderr
    assert "plain-Password9" not in result.stderr
    assert credentials(controller) == ("slurm", "first-Pass1")


def test_watch_fails_when_the_secret_cannot_be_read(controller: Sandbox) -> None:
    # AccessDenied, throttling or no route to Secrets Manager: the aws CLI exits non-zero (retried 3 times).
    result = tool(controller, "watch", STUB_FAIL="aws")
    assert result.returncode == 1
    assert "read the accounting secret" in result.stderr and "giving up" in result.stderr
    assert credentials(controller) == ("slurm", "first-Pass1")
    assert restarts(controller) == 0


def test_a_start_without_the_secret_goes_on_with_the_files_password(controller: Sandbox) -> None:
    result = tool(controller, "refresh", STUB_FAIL="aws")
    assert result.returncode == 0, result.stderr
    assert "slurmdbd starts with the password slurmdbd.conf already has" in result.stderr
    assert credentials(controller) == ("slurm", "first-Pass1")


def test_a_start_that_cannot_read_the_secret_falls_back_inside_slurmdbds_start_timeout(
    controller: Sandbox, tmp_path: Path
) -> None:
    """Issue 30c, item 4: the drop-in's ExecStartPre, run as systemd would, gives up on the secret in time.

    systemd kills a start that outlasts TimeoutStartSec (90 s by default) and then the fallback to the file's
    password never runs. Each aws call is one attempt (AWS_MAX_ATTEMPTS=1) of at most the tool's connect and
    read timeouts; the tool's retries, their pauses and two minutes for slurmdbd itself fit in the limit.
    """
    drop_in = controller.read("/etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf")
    settings = dict(line.split("=", 1) for line in drop_in.splitlines() if "=" in line and not line.startswith("#"))
    limit = int(settings["TimeoutStartSec"])
    command = settings["ExecStartPre"].removeprefix("+").split()
    assert command[0] == "/usr/bin/env"
    # A failing aws that notes the attempts it was allowed; nothing of the test process's environment leaks in.
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "aws").write_text('#!/bin/bash\necho "${AWS_MAX_ATTEMPTS:-unset} $*" >>"$FAKE_AWS_LOG"\nexit 255\n')
    (fake / "aws").chmod(0o755)
    log = tmp_path / "aws.log"
    env = {k: v for k, v in controller.env().items() if k not in ("MLC_MAX_ATTEMPTS", "MLC_RETRY_DELAY")}
    env |= {"PATH": f"{fake}:{env['PATH']}", "FAKE_AWS_LOG": str(log), "MLC_RETRY_DELAY": "0"}
    env |= {"MLC_LIFECYCLE_DIR": str(controller.root / "opt/mlcluster/lifecycle")}
    tool_path = str(controller.root / command[-2].lstrip("/"))
    result = subprocess.run(
        ["/usr/bin/env", *command[1:-2], "bash", tool_path, command[-1]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "slurmdbd starts with the password slurmdbd.conf already has" in result.stderr
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["1"] * len(calls)
    script = (controller.root / TOOL).read_text()
    connect = int(script.split("--cli-connect-timeout ")[1].split()[0])
    read = int(script.split("--cli-read-timeout ")[1].split()[0])
    assert all(f"--cli-connect-timeout {connect} --cli-read-timeout {read}" in c for c in calls)
    pauses = sum(min(2 * 2**n, 60) for n in range(len(calls) - 1))  # lib.sh retry: 2 s, doubling
    worst = len(calls) * (connect + read) + pauses
    assert (len(calls), worst) == (2, 62)
    assert worst + 120 <= limit


def test_a_start_without_the_secret_and_without_a_password_fails(controller: Sandbox) -> None:
    conf = controller.root / CONF.lstrip("/")
    conf.write_text(conf.read_text().replace("StoragePass=first-Pass1\n", "StoragePass=\n"))
    result = tool(controller, "refresh", STUB_FAIL="aws")
    assert result.returncode == 1
    assert "slurmdbd.conf has no password and the accounting secret could not be applied" in result.stderr


def test_the_tool_refuses_local_accounting_and_bad_usage(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features={**MINIMAL, "accounting": {"mode": "local"}})
    assert sandbox.run().returncode == 0
    assert not (sandbox.root / TOOL).exists()
    sandbox_tool = sandbox.lifecycle / "accounting_secret.sh"
    env = {**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.lifecycle)}
    local = subprocess.run(["bash", str(sandbox_tool), "watch"], env=env, capture_output=True, text=True, check=False)
    assert local.returncode == 1
    assert "accounting mode is 'local' in node.env; the secret is only read for mode remote" in local.stderr
    usage = subprocess.run(["bash", str(sandbox_tool), "rotate"], env=env, capture_output=True, text=True, check=False)
    assert usage.returncode == 2
    assert "usage: mlcluster-accounting-secret refresh|watch" in usage.stderr


@pytest.mark.parametrize("verb", ["refresh", "watch"])
def test_a_linked_slurmdbd_conf_is_refused_and_its_target_never_copied(controller: Sandbox, verb: str) -> None:
    """Issue 30 item 4: root must not read a link's target into slurmdbd.conf (or write through it)."""
    conf = controller.root / CONF.lstrip("/")
    target = controller.root / "etc/shadow-like"
    target.write_text("root:$6$secret-hash:19000::::::\nStoragePass=from-the-target\n")
    target.chmod(0o600)
    conf.unlink()
    conf.symlink_to(target)
    result = tool(controller, verb, STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 1
    assert f"{conf} is a symbolic link; refusing to follow it" in result.stderr
    assert conf.is_symlink() and conf.readlink() == target
    assert target.read_text() == "root:$6$secret-hash:19000::::::\nStoragePass=from-the-target\n"
    assert "secret-hash" not in result.stderr + result.stdout
    assert restarts(controller) == 0


def test_a_folder_others_can_write_or_a_linked_folder_is_refused(controller: Sandbox) -> None:
    conf = controller.root / CONF.lstrip("/")
    folder = conf.parent
    before = conf.read_text()
    folder.chmod(0o775)
    result = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 1
    assert f"{folder} is owned by uid 0 with mode 775" in result.stderr and "refusing to touch" in result.stderr
    assert conf.read_text() == before
    # At the edge: root's and 0755 again is accepted.
    folder.chmod(0o755)
    assert tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2")).returncode == 0
    assert credentials(controller) == ("slurm", "rotated-Pass2")
    # A folder that is a link to a real one of root's is refused as well.
    real = folder.with_name("etc-real")
    folder.rename(real)
    folder.symlink_to(real)
    result = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass3"))
    assert result.returncode == 1
    assert f"{folder} is not a folder (or is a link)" in result.stderr
    assert "StoragePass=rotated-Pass2\n" in (real / "slurmdbd.conf").read_text()


def test_a_folder_of_another_owner_is_refused(controller: Sandbox) -> None:
    conf = controller.root / CONF.lstrip("/")
    os.chown(conf.parent, 2001, 0)
    result = tool(controller, "refresh", STUB_SECRET=secret("rotated-Pass2"))
    # refresh falls back to the file's password for a secret it cannot read, never for an unsafe folder.
    assert result.returncode == 1
    assert "is owned by uid 2001 with mode 755" in result.stderr
    assert "slurmdbd.conf was not read or written" in result.stderr
    assert credentials(controller) == ("slurm", "first-Pass1")


def test_a_planted_scratch_folder_never_receives_the_password(controller: Sandbox) -> None:
    """Root writes the new slurmdbd.conf (with the password) into /var/lib/mlcluster/tmp first: a link planted
    there is moved aside, and the copy is made in a fresh root folder of mode 700, never in the link's target."""
    scratch = controller.root / "var/lib/mlcluster/tmp"
    victim = controller.root / "srv/shared"
    victim.mkdir(parents=True)
    victim.chmod(0o777)
    shutil.rmtree(scratch)
    scratch.symlink_to(victim)
    result = tool(controller, "watch", STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 0, result.stderr
    assert list(victim.iterdir()) == []
    assert scratch.is_dir() and not scratch.is_symlink()
    assert (scratch.stat().st_uid, stat.S_IMODE(scratch.stat().st_mode)) == (0, 0o700)
    assert "is a link; moved it aside" in result.stderr
    assert credentials(controller) == ("slurm", "rotated-Pass2")


def test_slurmdbds_first_start_finds_the_tools_library_before_install_tools_ran(tmp_path: Path) -> None:
    """On a new controller the accounting step starts slurmdbd (its ExecStartPre runs the tool) before
    install_tools: the step keeps the lifecycle copy the tool sources (lib.sh, plan.py) itself."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "install_tools" not in sandbox.step_order()
    kept = sandbox.root / "opt/mlcluster/lifecycle"
    assert (kept / "lib.sh").is_file() and (kept / "plan.py").is_file()
    # The drop-in's command, as systemd runs it: the tool with nothing but the kept copy.
    started = tool(sandbox, "refresh", STUB_SECRET=secret("rotated-Pass2"))
    assert started.returncode == 0, started.stderr
    assert credentials(sandbox) == ("slurm", "rotated-Pass2")


@pytest.mark.parametrize(
    ("uid", "mode"),
    [(401, 0o755), (401, 0o700), (1000, 0o755), (0, 0o775), (0, 0o757), (0, 0o777), (1000, 0o2777)],
    ids=["slurm-755", "slurm-700", "a-user-755", "root-group-writable", "root-other-writable", "root-777", "setgid"],
)
def test_the_step_makes_the_platforms_slurm_etc_roots_so_slurmdbd_can_start(
    tmp_path: Path, uid: int, mode: int
) -> None:
    """Issue 30: HyperPod's image makes /opt/slurm/etc with an owner and mode AWS publishes nowhere, and the
    tool (slurmdbd's ExecStartPre) refuses a folder that is not root's or that group or others can write,
    so slurmdbd would never start. The accounting step makes the folder root's, mode 755, before it installs
    the tool; the start that follows, as systemd runs it, passes."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, uid, uid)
    folder.chmod(mode)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    info = folder.stat()
    # Group root and no setgid (re-review): with the old group kept, what root writes there would be that group's.
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 0, 0o755)
    log = sandbox.read("/var/log/provision/accounting.log")
    assert (
        f"WARNING: {folder} was owned by uid {uid} with mode {mode:o}; made it root's (group root) with mode 755" in log
    )
    # slurm.conf stays readable by Slurm's users, slurmdbd.conf stays slurm's and 600.
    assert sandbox.as_user(1000, "cat", str(folder / "slurm.conf")).returncode == 0
    conf = (folder / "slurmdbd.conf").stat()
    assert (conf.st_uid, stat.S_IMODE(conf.st_mode)) == (401, 0o600)
    started = tool(sandbox, "refresh", STUB_SECRET=secret("rotated-Pass2"))
    assert started.returncode == 0, started.stderr
    assert credentials(sandbox) == ("slurm", "rotated-Pass2")


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o700])
def test_a_root_folder_no_one_else_can_write_is_left_as_the_platform_made_it(tmp_path: Path, mode: int) -> None:
    """The edge: a folder of root's without group or other write is what the tool accepts; the step changes nothing."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 0, 401)
    folder.chmod(mode)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    info = folder.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 401, mode)
    assert "made it root's" not in sandbox.read("/var/log/provision/accounting.log")
    assert tool(sandbox, "refresh", STUB_SECRET=secret("rotated-Pass2")).returncode == 0


def test_the_step_refuses_a_linked_slurm_etc_before_writing_anything(tmp_path: Path) -> None:
    """A link at /opt/slurm/etc is not followed (root would write the password where it points): the step
    fails naming it, and installs neither slurmdbd.conf nor the drop-in."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    folder = sandbox.root / "opt/slurm/etc"
    elsewhere = sandbox.root / "srv/etc-elsewhere"
    elsewhere.parent.mkdir(parents=True)
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder} is not a folder (or is a link); slurmdbd.conf must sit in a real folder of root's" in log
    assert not (elsewhere / "slurmdbd.conf").exists()
    assert not (sandbox.root / "etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf").exists()


def test_a_lifecycle_copy_folder_a_user_made_first_is_not_what_root_sources(tmp_path: Path) -> None:
    """Root's tools (slurmdbd's ExecStartPre among them) source lib.sh from /opt/mlcluster/lifecycle: a folder a
    user made there before the first run, holding a lib.sh of theirs, is moved aside, and the copy is root's."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    kept = sandbox.root / "opt/mlcluster/lifecycle"
    kept.mkdir(parents=True)
    (kept / "lib.sh").write_text("touch /tmp/owned-by-a-user\n")
    for path in (kept.parent, kept, kept / "lib.sh"):
        os.chown(path, 1000, 1000)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for path in (kept.parent, kept, kept / "lib.sh"):
        assert not path.is_symlink() and path.stat().st_uid == 0, path
    assert "owned-by-a-user" not in (kept / "lib.sh").read_text()
    assert list(kept.parent.parent.glob("mlcluster.mlcluster-moved-aside.*"))


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["root-777", "root-775"])
def test_a_root_lifecycle_copy_folder_others_could_write_is_moved_aside_with_what_they_put_there(
    tmp_path: Path, mode: int
) -> None:
    """Final attacker review: a root-owned /opt/mlcluster/lifecycle that group or others could write was only
    chmodded, so a `steps` link a user put there stayed and root wrote its tools into the user's folder."""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    kept = sandbox.root / "opt/mlcluster/lifecycle"
    kept.mkdir(parents=True)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 1000, 1000)
    (kept / "steps").symlink_to(theirs)
    os.lchown(kept / "steps", 1000, 1000)
    kept.chmod(mode)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (kept / "steps").is_symlink() and (kept / "steps").stat().st_uid == 0
    assert list(theirs.iterdir()) == []  # nothing of root's was written into the user's folder
    assert oct(kept.stat().st_mode & 0o7777) == "0o755"
    assert "is root's but writable by group or others" in result.stdout + result.stderr


def fresh(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})


@pytest.mark.parametrize(
    ("parent", "uid", "mode"), [("opt/slurm", 0, 0o777), ("opt/slurm", 401, 0o755), ("opt", 0, 0o775)]
)
def test_the_step_refuses_to_adopt_slurm_etc_below_a_parent_others_can_change(
    tmp_path: Path, parent: str, uid: int, mode: int
) -> None:
    """Issue 30 (review): whoever can rename entries in /opt/slurm or /opt can swap etc for a link between the
    step's checks and its chmod (which follows links). The step fails naming the parent and adopts nothing:
    the folder keeps its owner, and neither slurmdbd.conf nor the drop-in is written."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 401, 401)
    os.chown(sandbox.root / parent, uid, uid)
    (sandbox.root / parent).chmod(mode)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert (
        f"ERROR: {sandbox.root / parent} is not a real folder of root's that only root can change; refusing to "
        f"adopt {folder} below it"
    ) in log
    assert folder.stat().st_uid == 401
    assert not (folder / "slurmdbd.conf").exists()
    assert not (sandbox.root / "etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf").exists()


def test_the_tool_refuses_slurm_etc_below_a_parent_others_can_change(controller: Sandbox) -> None:
    conf = controller.root / CONF.lstrip("/")
    before = conf.read_text()
    parent = controller.root / "opt/slurm"
    parent.chmod(0o777)
    result = tool(controller, "refresh", STUB_SECRET=secret("rotated-Pass2"))
    assert result.returncode == 1
    assert f"{parent} is not a real folder of root's that only root can change" in result.stderr
    assert "slurmdbd.conf was not read or written" in result.stderr
    assert conf.read_text() == before
    # At the edge: root's and sticky (others may add entries but not rename root's) is accepted.
    parent.chmod(0o1777)
    assert tool(controller, "refresh", STUB_SECRET=secret("rotated-Pass2")).returncode == 0
    assert credentials(controller) == ("slurm", "rotated-Pass2")


def test_a_folder_swapped_for_a_link_after_the_checks_is_not_chmodded(tmp_path: Path) -> None:
    """Issue 30 (review): the swap is simulated inside owner_mode (the stat of the folder, after the link test),
    as a user who could rename entries in /opt/slurm would race it; the step checks again after its chown and
    before chmod, and fails, and the link's target keeps its mode."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 401, 401)
    victim = sandbox.root / "etc/shadow-like"
    victim.write_text("root:$6$secret-hash:19000::::::\n")
    victim.chmod(0o600)
    sandbox.repin(
        "lib.sh",
        r"^owner_mode\(\) \{\n",
        "owner_mode() {\n"
        '  if [[ $1 == "$MLC_ROOT/opt/slurm/etc" && ! -e $MLC_ROOT/swapped ]]; then\n'
        '    touch "$MLC_ROOT/swapped"; mv -- "$1" "$1-real"; ln -s "$MLC_ROOT/etc/shadow-like" "$1"\n'
        "  fi\n",
    )
    result = sandbox.run("on_create.sh", "accounting")
    assert (sandbox.root / "swapped").exists() and folder.is_symlink()
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder} is not a real folder of root's after its chown (it changed into a link or vanished)" in log
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (sandbox.root / "etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf").exists()


def test_what_the_old_owner_left_in_slurm_etc_no_longer_reaches_roots_reads(tmp_path: Path) -> None:
    """Issue 30 (review): adopting the folder leaves what its old owner (uid 1000 here) planted. After the step
    the files Slurm and the step read are root's without group or other write (slurmdbd.conf slurm's, 600), a
    link at accounting.conf is moved aside (its target untouched), and a link the step does not read is left."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    victim = sandbox.root / "etc/shadow-like"
    victim.write_text("root:$6$secret-hash:19000::::::\n")
    victim.chmod(0o600)
    os.chown(folder, 1000, 1000)
    for name, mode in (("slurm.conf", 0o664), ("cgroup.conf", 0o666), ("gres.conf", 0o644)):
        (folder / name).touch()
        os.chown(folder / name, 1000, 1000)
        (folder / name).chmod(mode)
    (folder / "plugstack.conf.d").mkdir(mode=0o777)
    os.chown(folder / "plugstack.conf.d", 1000, 1000)
    (folder / "plugstack.conf.d").chmod(0o777)
    (folder / "accounting.conf").symlink_to(victim)
    (folder / "topology.conf").symlink_to(victim)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name, mode in (
        ("slurm.conf", 0o644),
        ("cgroup.conf", 0o644),
        ("gres.conf", 0o644),
        ("plugstack.conf.d", 0o755),
    ):
        info = (folder / name).lstat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, mode), name
    assert not (folder / "accounting.conf").is_symlink() and (folder / "accounting.conf").stat().st_uid == 0
    assert [p.name.split(".mlcluster-moved-aside.")[0] for p in folder.glob("*.mlcluster-moved-aside.*")] == [
        "accounting.conf"
    ]
    assert (folder / "topology.conf").is_symlink()
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "root:$6$secret-hash:19000::::::\n"
    conf = (folder / "slurmdbd.conf").stat()
    assert (conf.st_uid, stat.S_IMODE(conf.st_mode)) == (401, 0o600)
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"WARNING: {folder / 'slurm.conf'} was owned by uid 1000 with mode 664; made it root's" in log
    assert f"WARNING: {folder / 'topology.conf'} is a link; left as it is" in log
    assert tool(sandbox, "refresh", STUB_SECRET=secret("rotated-Pass2")).returncode == 0


def test_a_linked_slurm_conf_is_refused(tmp_path: Path) -> None:
    """slurm.conf is read and rewritten by root (plan slurm-conf): a link there fails the step before any read."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    real = sandbox.root / "srv/slurm.conf"
    real.parent.mkdir(parents=True)
    (folder / "slurm.conf").rename(real)
    (folder / "slurm.conf").symlink_to(real)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder / 'slurm.conf'} is a link or not a regular file; refusing to read it as root" in log
    assert not (folder / "slurmdbd.conf").exists()


def test_a_folder_its_old_owner_swaps_for_a_link_in_a_sticky_parent_is_not_chmodded(tmp_path: Path) -> None:
    """Issue 30 (attacker review): a sticky /opt/slurm (root's, 1777) passes the parent check, yet in it the
    folder's old owner may still rename the folder until root owns it. The swap is simulated just before the
    step's chown of the folder (a wrapper of chown), the last moment the old owner can make it: chown -h makes
    the link root's, and the step must then refuse it rather than chmod 755 through it."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 401, 401)
    (sandbox.root / "opt/slurm").chmod(0o1777)
    victim = sandbox.root / "etc/shadow-like"
    victim.write_text("root:$6$secret-hash:19000::::::\n")
    victim.chmod(0o600)
    sandbox.repin(
        "lib.sh",
        r"^owner_mode\(\) \{\n",
        "chown() {\n"
        '  if [[ $* == "-h 0:0 -- $MLC_ROOT/opt/slurm/etc" && ! -e $MLC_ROOT/swapped ]]; then\n'
        '    touch "$MLC_ROOT/swapped"; mv -- "$4" "$4-real"; ln -s "$MLC_ROOT/etc/shadow-like" "$4"\n'
        "  fi\n"
        '  command chown "$@"\n'
        "}\n"
        "owner_mode() {\n",
    )
    result = sandbox.run("on_create.sh", "accounting")
    assert (sandbox.root / "swapped").exists() and folder.is_symlink()
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder} is not a real folder of root's after its chown" in log
    assert not (sandbox.root / "etc/systemd/system/slurmdbd.service.d/mlcluster-secret.conf").exists()


def test_the_folder_adopted_below_a_sticky_parent_becomes_roots(tmp_path: Path) -> None:
    """The edge of the check after chown: with no swap, a folder of slurm's below a sticky /opt/slurm is adopted."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 401, 401)
    (sandbox.root / "opt/slurm").chmod(0o1777)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    info = folder.lstat()
    assert (stat.S_ISDIR(info.st_mode), info.st_uid, stat.S_IMODE(info.st_mode)) == (True, 0, 0o755)
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"WARNING: {folder} was owned by uid 401 with mode 755; made it root's (group root) with mode 755" in log


def test_hard_linked_entries_are_moved_aside_and_their_inodes_left_alone(tmp_path: Path) -> None:
    """Issue 30 (attacker review): a hard link is a plain file to -L and -f, and chown/chmod change the inode
    it shares. The folder's old owner hard-links slurmdbd.conf and cgroup.conf to files of others' (where
    fs.protected_hardlinks is off, or to files the old owner owns); the step must not hand them to slurm
    (600) or to root: each entry with more than one link is moved aside (logged), both files keep their owner
    and mode, and the step still writes its own slurmdbd.conf."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    os.chown(folder, 1000, 1000)
    victims = {"slurmdbd.conf": sandbox.root / "etc/shadow-like", "cgroup.conf": sandbox.root / "srv/user-file"}
    for name, victim in victims.items():
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text(f"{name} victim\n")
        os.chown(victim, 1000, 1000)
        victim.chmod(0o664)
        (folder / name).unlink(missing_ok=True)
        os.link(victim, folder / name)
    result = sandbox.run("on_create.sh", "accounting")
    for name, victim in victims.items():
        info = victim.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (1000, 0o664), name
        assert victim.read_text() == f"{name} victim\n", name
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    moved = sorted(p.name.split(".mlcluster-moved-aside.")[0] for p in folder.glob("*.mlcluster-moved-aside.*"))
    assert moved == ["cgroup.conf", "slurmdbd.conf"]
    log = sandbox.read("/var/log/provision/accounting.log")
    for name in victims:
        assert (
            f"WARNING: {folder / name} has 2 hard links (root would change the file they share); moved it aside" in log
        )
    conf = (folder / "slurmdbd.conf").stat()
    assert (conf.st_nlink, conf.st_uid, stat.S_IMODE(conf.st_mode)) == (1, 401, 0o600)
    assert credentials(sandbox) == ("slurm", "first-Pass1")
    # Run again: the entries moved aside keep their links and are left where they are (not moved again).
    assert sandbox.run("on_create.sh", "accounting").returncode == 0
    assert sorted(p.name.split(".mlcluster-moved-aside.")[0] for p in folder.glob("*.mlcluster-moved-aside.*")) == moved
    assert all(stat.S_IMODE(v.stat().st_mode) == 0o664 and v.stat().st_uid == 1000 for v in victims.values())


def test_a_hard_linked_slurm_conf_is_refused(tmp_path: Path) -> None:
    """slurm.conf is read and rewritten by root and cannot be moved aside (the image writes it): a hard link
    there fails the step before its shared file is re-owned."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    other = sandbox.root / "srv/slurm.conf-link"
    other.parent.mkdir(parents=True)
    os.link(folder / "slurm.conf", other)
    os.chown(other, 1000, 1000)
    other.chmod(0o664)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder / 'slurm.conf'} has 2 hard links; refusing to read it as root" in log
    info = other.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (1000, 0o664)
    assert not (folder / "slurmdbd.conf").exists()


def test_a_hard_link_to_slurm_conf_made_after_its_check_is_still_refused(tmp_path: Path) -> None:
    """Re-review (attacker): a link made between the slurm.conf check and the entries' listing must fail the step,
    not move slurm.conf aside (the controller would be left without it). A wrapper of find makes the link at the
    listing, the last moment."""
    sandbox = fresh(tmp_path)
    folder = sandbox.root / "opt/slurm/etc"
    sandbox.repin(
        "lib.sh",
        r"^owner_mode\(\) \{\n",
        "find() {\n"
        '  if [[ ${1-} == "$MLC_ROOT/opt/slurm/etc" && ! -e $MLC_ROOT/linked ]]; then\n'
        '    ln -- "$1/slurm.conf" "$MLC_ROOT/linked"\n'
        "  fi\n"
        '  command find "$@"\n'
        "}\n"
        "owner_mode() {\n",
    )
    result = sandbox.run("on_create.sh", "accounting")
    assert (sandbox.root / "linked").exists(), "the wrapper did not run: the test proves nothing"
    assert result.returncode != 0
    assert (folder / "slurm.conf").is_file()
    assert not list(folder.glob("slurm.conf.mlcluster-moved-aside.*"))
    log = sandbox.read("/var/log/provision/accounting.log")
    assert f"ERROR: {folder / 'slurm.conf'} has 2 hard links; refusing to read it as root" in log


def test_a_slurm_version_link_of_roots_is_followed(tmp_path: Path) -> None:
    """Whole-diff user review: HyperPod's images ship /opt/slurm-<version> and a root's /opt/slurm link to the active
    one (AWS's lifecycle scripts switch it with `ln -sfn`). The step and the tool accept it and check its target.
    (A relative link here: an absolute one would leave the sandbox; unsafe_parent's reading of it is tested next.)"""
    sandbox = fresh(tmp_path)
    opt = sandbox.root / "opt"
    (opt / "slurm").rename(opt / "slurm-25.11")
    (opt / "slurm").symlink_to("slurm-25.11")
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (opt / "slurm-25.11" / "etc" / "slurmdbd.conf").is_file()
    started = tool(sandbox, "refresh", STUB_SECRET=secret("rotated-Pass2"))
    assert started.returncode == 0, started.stderr
    assert credentials(sandbox) == ("slurm", "rotated-Pass2")


@pytest.mark.parametrize("case", ["link-of-a-user", "target-others-can-write"])
def test_a_slurm_version_link_others_can_change_is_refused(tmp_path: Path, case: str) -> None:
    """The edges: a /opt/slurm link a user owns, or one to a folder others can write, is refused like an unsafe
    parent: nothing is written."""
    sandbox = fresh(tmp_path)
    opt = sandbox.root / "opt"
    (opt / "slurm").rename(opt / "slurm-25.11")
    (opt / "slurm").symlink_to("slurm-25.11")
    if case == "link-of-a-user":
        os.lchown(opt / "slurm", 1000, 1000)
    else:
        (opt / "slurm-25.11").chmod(0o777)
    result = sandbox.run("on_create.sh", "accounting")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/accounting.log")
    assert "is not a real folder of root's that only root can change" in log
    assert not (opt / "slurm-25.11" / "etc" / "slurmdbd.conf").exists()


@pytest.mark.parametrize(("mode", "found"), [(0o755, ""), (0o777, "opt/slurm-25.11")])
def test_an_absolute_version_link_is_read_under_the_nodes_root(tmp_path: Path, mode: int, found: str) -> None:
    """unsafe_parent reads /opt/slurm -> /opt/slurm-25.11 (as AWS's scripts make it) under MLC_ROOT and checks the
    target: a root-only target passes, one others can write is named."""
    root = tmp_path / "root"
    (root / "opt/slurm-25.11/etc").mkdir(parents=True)
    (root / "opt/slurm").symlink_to("/opt/slurm-25.11")
    (root / "opt/slurm-25.11").chmod(mode)
    lib = Path(__file__).resolve().parents[2] / "mlcluster/lifecycle/hyperpod/lib.sh"
    said = subprocess.run(
        ["bash", "-c", f'. "{lib}" >/dev/null 2>&1; unsafe_parent /opt/slurm/etc'],
        env={**os.environ, "MLC_ROOT": str(root)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert said.stdout.strip() == (str(root / found) if found else "")


@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o1777, False), (0o755, False)])
def test_root_folders_are_made_only_under_a_parent_no_one_else_can_rename_in(
    tmp_path: Path, mode: int, refused: bool
) -> None:
    """The parent of what the step makes as root: /opt writable by others without the sticky bit would let them
    swap /opt/mlcluster or /opt/slurm for a link between the check and root's use, so the step stops before
    making anything; a sticky or root-only /opt is used (the edge). (/opt/mlcluster itself, when others could
    write it, is moved aside: the test above.)"""
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL, extra_env={"STUB_SECRET": secret("first-Pass1")})
    parent = sandbox.root / "opt"
    parent.mkdir(parents=True, exist_ok=True)
    parent.chmod(mode)
    result = sandbox.run("on_create.sh", "accounting")
    output = result.stdout + result.stderr
    if refused:
        assert result.returncode != 0
        # The step's first root path under /opt (Slurm's configuration folder) is refused before anything is made.
        refusal = f"ERROR: {parent} is not a real folder of root's that only root can change; refusing to adopt"
        assert refusal in output, output[-1500:]
        assert not (parent / "mlcluster").exists()
    else:
        assert result.returncode == 0, output[-3000:]
        assert (parent / "mlcluster/lifecycle").is_dir() and (parent / "mlcluster").stat().st_uid == 0
