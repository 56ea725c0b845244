"""on_create.sh on a fake controller and a fake GPU worker: step order, results, and a no-op second run."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlcluster.lifecycle.hyperpod import plan
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, FSX_SOURCE, WORKER_IP, Sandbox
from tests.lifecycle.pcluster_sandbox import NODE_EXPORTER_TARBALL


@dataclass
class TwoRuns:
    """A sandbox after on_create.sh ran twice, with what each run did."""

    sandbox: Sandbox
    first_actions: list[str]
    second_actions: list[str]
    first_files: dict[str, str]
    second_files: dict[str, str]


def run_twice(sandbox: Sandbox) -> TwoRuns:
    first = sandbox.run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    first_actions, first_files = sandbox.actions(), sandbox.snapshot()
    second = sandbox.run()
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    return TwoRuns(sandbox, first_actions, sandbox.actions()[len(first_actions) :], first_files, sandbox.snapshot())


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    return run_twice(Sandbox(tmp_path_factory.mktemp("controller"), ips=f"{CONTROLLER_IP} 172.17.0.1"))


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoRuns]:
    """A GPU worker with observability on; a real listening socket plays slurmctld."""
    with socket.socket() as slurmctld:
        slurmctld.bind(("127.0.0.1", 0))
        slurmctld.listen(16)
        sandbox = Sandbox(
            tmp_path_factory.mktemp("worker"),
            ips=WORKER_IP,
            controller_ip="127.0.0.1",
            gpu=True,
            features={**FEATURES, "observability": True},
            extra_env={"MLC_SLURMCTLD_PORT": str(slurmctld.getsockname()[1])},
        )
        sandbox.trust_node_exporter(NODE_EXPORTER_TARBALL)
        yield run_twice(sandbox)


def index(actions: list[str], prefix: str) -> int:
    """Position of the first action starting with ``prefix`` (fails the test when absent)."""
    found = [i for i, action in enumerate(actions) if action.startswith(prefix)]
    assert found, f"no action starts with {prefix!r} in {actions}"
    return found[0]


# --- order ------------------------------------------------------------------------------------


def test_controller_runs_its_steps_in_plan_order(controller: TwoRuns) -> None:
    expected = [plan.IDENTIFY_STEP, *plan.plan_steps("controller", plan.parse_features(FEATURES))]
    assert controller.sandbox.step_order() == expected * 2
    assert expected == [
        "identify_node",
        "lustre_efa",
        "mount_fsx",
        "mount_openzfs",
        "imds",
        "add_users",
        "docker",
        "enroot_pyxis",
        "homes",
        "ssh_keys",
        "accounting",
        "start_slurm",
        "log_rotation",
        "install_tools",
    ]


def test_worker_runs_its_steps_in_plan_order(worker: TwoRuns) -> None:
    expected = [
        plan.IDENTIFY_STEP,
        *plan.plan_steps("worker", plan.parse_features({**FEATURES, "observability": True})),
    ]
    assert worker.sandbox.step_order() == expected * 2
    assert expected.index("wait_controller") < expected.index("homes") < expected.index("start_slurm")
    assert "accounting" not in expected
    assert "imds" not in expected  # jobs on workers keep the instance role (as on ParallelCluster compute)


def test_every_step_writes_its_own_log(controller: TwoRuns) -> None:
    logs = controller.sandbox.root / "var/log/provision"
    for step in set(controller.sandbox.step_order()):
        assert f"step {step}\n" in (logs / f"{step}.log").read_text()
    assert "mlcluster lifecycle: all 13 steps done" in (logs / "on_create.log").read_text()


def test_homes_move_only_after_fsx_is_mounted_and_before_slurmctld_starts(controller: TwoRuns) -> None:
    actions = controller.first_actions
    assert (
        index(actions, "mount -t lustre")
        < index(actions, "usermod --home")
        < index(actions, "systemctl start slurmctld")
    )
    assert index(actions, "systemctl start slurmdbd") < index(actions, "systemctl start slurmctld")


# --- second run -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "worker"])
def test_a_second_run_changes_nothing(role: str, request: pytest.FixtureRequest) -> None:
    runs: TwoRuns = request.getfixturevalue(role)
    assert len(runs.first_actions) > 20
    assert runs.second_actions == []
    assert runs.second_files == runs.first_files


# --- controller results -----------------------------------------------------------------------


def test_controller_mounts_fsx_and_records_it_in_fstab(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    assert f"mount -t lustre -o noatime,flock,nosuid,nodev {FSX_SOURCE} {sandbox.root}/fsx" in controller.first_actions
    fstab = sandbox.read("/etc/fstab").splitlines()
    # A reboot mounts it once the network is up, on first access, without blocking the boot.
    assert fstab[-1] == (
        f"{FSX_SOURCE} /fsx lustre noatime,flock,nosuid,nodev,_netdev,x-systemd.automount,"
        "x-systemd.requires=network-online.target 0 0"
    )
    assert fstab[0].startswith("LABEL=cloudimg-rootfs /")


def test_controller_creates_users_with_fixed_ids_and_homes_on_fsx(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    assert "groupadd --gid 2001 alice" in controller.first_actions
    assert (
        "useradd --uid 2001 --gid 2001 --no-create-home --home-dir /fsx/home/alice --shell /bin/bash alice"
        in controller.first_actions
    )
    passwd = sandbox.read("/etc/passwd")
    assert "alice:x:2001:2001::/fsx/home/alice:/bin/bash" in passwd
    assert "ubuntu:x:1000:1000:Ubuntu:/fsx/home/ubuntu:/bin/bash" in passwd
    assert sandbox.read("/fsx/home/ubuntu/.bashrc") == "# ubuntu's bashrc\n"
    assert sandbox.read("/fsx/home/alice/.bashrc") == "# skel bashrc\n"
    home_root = (sandbox.root / "fsx/home").stat()
    assert (home_root.st_uid, home_root.st_mode & 0o7777) == (0, 0o755)
    for user, uid in (("ubuntu", 1000), ("alice", 2001), ("bob", 2002)):
        home = (sandbox.root / f"fsx/home/{user}").stat()
        assert (home.st_uid, home.st_gid, home.st_mode & 0o777) == (uid, uid, 0o750)
        assert (sandbox.root / f"fsx/home/{user}/.bashrc").stat().st_uid == uid
    # Nobody is in the root-equivalent docker group unless docker_group asks for it.
    assert "docker:x:998:\n" in sandbox.read("/etc/group")


def test_controller_shares_one_key_pair_per_user(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    for user in ("ubuntu", "alice", "bob"):
        public = sandbox.read(f"/fsx/.mlcluster/ssh/{user}/id_ed25519.pub")
        assert sandbox.read(f"/fsx/home/{user}/.ssh/id_ed25519.pub") == public
        assert sandbox.read(f"/fsx/home/{user}/.ssh/authorized_keys") == public
        ssh = sandbox.root / f"fsx/home/{user}/.ssh"
        uid = sandbox.root.joinpath(f"fsx/home/{user}").stat().st_uid
        assert (ssh.stat().st_uid, ssh.stat().st_mode & 0o777) == (uid, 0o700)
        for name, mode in (("id_ed25519", 0o600), ("id_ed25519.pub", 0o644), ("authorized_keys", 0o600)):
            info = (ssh / name).stat()
            assert (info.st_uid, info.st_mode & 0o777) == (uid, mode), name
        # The key store entry is root's alone.
        entry = (sandbox.root / f"fsx/.mlcluster/ssh/{user}").stat()
        assert (entry.st_uid, entry.st_mode & 0o777) == (0, 0o700)
    store = (sandbox.root / "fsx/.mlcluster/ssh").stat()
    assert (store.st_uid, store.st_mode & 0o777) == (0, 0o700)


def test_every_node_shares_one_host_key_and_knows_it(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    host_public = sandbox.read("/fsx/.mlcluster/ssh/.host/id_ed25519.pub")
    assert sandbox.read("/etc/ssh/ssh_host_ed25519_key.pub") == host_public
    assert (sandbox.root / "etc/ssh/ssh_host_ed25519_key").stat().st_mode & 0o777 == 0o600
    key = " ".join(host_public.split()[:2])
    assert sandbox.read("/etc/ssh/ssh_known_hosts") == f"ip-10-1-*,10.1.* {key}\n"


def test_imds_is_for_root_only_on_the_controller(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    rule = "OUTPUT --destination 169.254.169.254 --protocol tcp --match owner ! --uid-owner 0 --jump REJECT"
    assert f"iptables --wait --insert {rule}" in controller.first_actions
    unit = sandbox.read("/etc/systemd/system/mlcluster-imds-root-only.service")
    assert f"iptables --wait --check {rule}" in unit
    assert "systemctl enable mlcluster-imds-root-only" in controller.first_actions


def test_controller_sets_up_local_accounting(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    conf = sandbox.read("/opt/slurm/etc/slurmdbd.conf")
    assert "StorageHost=localhost\nStoragePort=3306\nStorageUser=slurm\n" in conf
    password = conf.split("StoragePass=")[1].split()[0]
    sql = (sandbox.state / "mysql.sql").read_text()
    assert sql.count(f"IDENTIFIED BY '{password}'") == 2
    assert "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" in sql
    assert (sandbox.root / "opt/slurm/etc/slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    assert password not in "\n".join(controller.first_actions)
    assert f"AccountingStorageHost={CONTROLLER_IP}\n" in sandbox.read("/opt/slurm/etc/accounting.conf")


def test_controller_runs_slurmctld_in_configless_mode_and_not_slurmd(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    conf = sandbox.read("/opt/slurm/etc/slurm.conf")
    assert "SlurmctldParameters=cloud_dns,enable_configless\n" in conf
    assert "include /opt/slurm/etc/accounting.conf\n" in conf
    assert "systemctl start slurmctld" in controller.first_actions
    assert not any(
        a.startswith("systemctl start slurmd ") or a == "systemctl start slurmd" for a in controller.first_actions
    )
    assert not (sandbox.root / "etc/systemd/system/slurmd.service").exists()
    assert (sandbox.root / "etc/systemd/system/slurmd.service.mlcluster-disabled").exists()


def test_container_data_goes_to_local_nvme(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    assert json.loads(sandbox.read("/etc/docker/daemon.json")) == {"data-root": "/opt/dlami/nvme/docker/data-root"}
    assert 'DOCKER_TMPDIR=/opt/dlami/nvme/docker/tmp"' in sandbox.read(
        "/etc/systemd/system/docker.service.d/mlcluster.conf"
    )
    enroot = sandbox.read("/etc/enroot/enroot.conf")
    assert "ENROOT_RUNTIME_PATH        /opt/dlami/nvme/enroot/runtime/user-$(id -u)\n" in enroot
    assert "ENROOT_DATA_PATH           /opt/dlami/nvme/enroot/data/user-$(id -u)\n" in enroot
    assert "ENROOT_TEMP_PATH           /opt/dlami/nvme/enroot/tmp/user-$(id -u)\n" in enroot
    tmpfiles = sandbox.read("/etc/tmpfiles.d/mlcluster-enroot.conf")
    for folder in ("runtime", "cache", "data", "tmp"):
        parent = (sandbox.root / f"opt/dlami/nvme/enroot/{folder}").stat()
        assert (parent.st_uid, parent.st_mode & 0o7777) == (0, 0o755)  # no world-writable root
        assert f"d /opt/dlami/nvme/enroot/{folder} 0755 root root -" in tmpfiles
        for uid in (1000, 2001, 2002):
            mine = (sandbox.root / f"opt/dlami/nvme/enroot/{folder}/user-{uid}").stat()
            assert (mine.st_uid, mine.st_mode & 0o7777) == (uid, 0o700)
            assert f"d /opt/dlami/nvme/enroot/{folder}/user-{uid} 0700 {uid} {uid} -" in tmpfiles


def test_users_build_images_with_rootless_podman(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    assert any(a.endswith("install podman uidmap slirp4netns fuse-overlayfs") for a in controller.first_actions)
    assert sandbox.read("/etc/subuid") == "ubuntu:100000:65536\nalice:165536:65536\nbob:231072:65536\n"
    assert sandbox.read("/etc/subgid") == sandbox.read("/etc/subuid")
    assert 'rootless_storage_path = "/opt/dlami/nvme/containers/user-$UID"' in sandbox.read(
        "/etc/containers/storage.conf"
    )
    for uid in (1000, 2001, 2002):
        mine = (sandbox.root / f"opt/dlami/nvme/containers/user-{uid}").stat()
        assert (mine.st_uid, mine.st_mode & 0o777) == (uid, 0o700)


def test_pyxis_is_built_against_hyperpods_slurm_and_registered(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    make = next(a for a in controller.first_actions if a.startswith("make ") and "/pyxis " in a)
    assert make.startswith(f"make CPPFLAGS=-I{sandbox.root}/opt/slurm/include ")
    assert make.endswith(f"install DESTDIR={sandbox.root}")
    assert any(
        a.startswith("git clone --quiet --no-checkout https://github.com/NVIDIA/pyxis.git ")
        for a in controller.first_actions
    )
    assert any(
        a.endswith("checkout --quiet --detach 424563865a491f2d8f3c396a095d18db81f1fb07")
        for a in controller.first_actions
    )
    log = sandbox.read("/var/log/provision/enroot_pyxis.log")
    assert "pyxis v0.20.0 verified at 424563865a491f2d8f3c396a095d18db81f1fb07 (tree sha256 22ce2d38" in log
    assert sandbox.read("/opt/slurm/etc/plugstack.conf") == "include /opt/slurm/etc/plugstack.conf.d/pyxis.conf\n"
    assert (
        sandbox.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf") == "required /usr/local/lib/slurm/spank_pyxis.so\n"
    )
    assert "ConstrainDevices=yes" in sandbox.read("/opt/slurm/etc/cgroup.conf")


def test_slurm_logs_are_rotated_and_tools_installed(controller: TwoRuns) -> None:
    sandbox = controller.sandbox
    assert "/var/log/slurm/*.log {" in sandbox.read("/etc/logrotate.d/mlcluster-slurm")
    precheck = sandbox.root / "usr/local/bin/mlcluster-precheck"
    assert precheck.read_text() == (sandbox.lifecycle / "precheck.sh").read_text()
    assert precheck.stat().st_mode & 0o777 == 0o755
    assert (sandbox.root / "opt/mlcluster/lifecycle/steps/mount_fsx.sh").exists()
    assert sandbox.read("/opt/mlcluster/lifecycle/mlcluster_features.json") == json.dumps(FEATURES) + "\n"


# --- worker results ---------------------------------------------------------------------------


def test_worker_runs_slurmd_against_the_controller(worker: TwoRuns) -> None:
    sandbox = worker.sandbox
    port = sandbox.extra_env["MLC_SLURMCTLD_PORT"]
    assert f"ExecStart=/opt/slurm/sbin/slurmd -D -s --conf-server 127.0.0.1:{port}\n" in sandbox.read(
        "/etc/systemd/system/slurmd.service"
    )
    assert index(worker.first_actions, "systemctl daemon-reload") < index(
        worker.first_actions, "systemctl start slurmd"
    )
    assert (sandbox.root / "etc/systemd/system/slurmctld.service.mlcluster-disabled").exists()
    assert not any("mariadb" in a or "slurmctld" in a for a in worker.first_actions)


def test_gpu_worker_gets_the_nvidia_toolkit_and_exporters(worker: TwoRuns) -> None:
    actions = worker.first_actions
    assert index(actions, "apt-get") < index(actions, "nvidia-ctk runtime configure --runtime=docker")
    # The toolkit is pinned, and its repository key checked by fingerprint.
    assert any(
        "install --allow-downgrades nvidia-container-toolkit=1.17.8-1 nvidia-container-toolkit-base=1.17.8-1" in a
        for a in actions
    )
    log = worker.sandbox.read("/var/log/provision/docker.log")
    assert "nvidia-container-toolkit apt key verified: C95B321B61E88C1809C4F759DDCAE044F796ECB0" in log
    assert "docker apt key verified: 9DC858229FC7DD38854AE2D88D81803C0EBFCD88" in log
    assert "systemctl start mlcluster-node-exporter" in actions
    assert "systemctl start mlcluster-dcgm-exporter" in actions
    assert (
        "docker pull --quiet nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04"
        "@sha256:a7ad6547d4546eaf4dd5d6b4c0b4db4101e63ef7dc3cdff7f42b767d2c60b706"
    ) in actions
    assert not any(a.startswith("docker run") for a in actions)  # systemd runs it, as the exporter user


def test_gpu_worker_has_the_pinned_nccl_tests_where_the_smoke_test_looks(worker: TwoRuns) -> None:
    sandbox = worker.sandbox
    binary = sandbox.root / "opt/mlcluster/nccl-tests/bin/all_reduce_perf"
    assert binary.stat().st_mode & 0o111
    make = next(a for a in worker.first_actions if a.startswith("make ") and "BUILDDIR=" in a)
    assert "MPI=1 MPI_HOME=/opt/amazon/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/opt/nccl/build" in make
    assert "nccl-tests v2.17.10 verified at c379e19a711e011f2086b0001deb3d590e4b46f4" in sandbox.read(
        "/var/log/provision/nccl_tests.log"
    )


def test_precheck_passes_on_a_provisioned_worker(worker: TwoRuns) -> None:
    result = worker.sandbox.run("precheck.sh", "--user", "alice")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    checks = [line.split()[2].rstrip(":") for line in lines[:-1]]
    assert checks == [
        "docker_installed",
        "enroot_runtime_path",
        "docker_data_root",
        "fsx_mounted",
        "pyxis_plugin",
        "slurmd_running",
        "home_shared",
        "nvidia_container_cli",
    ]
    assert all(line.split()[1] == "PASS" for line in lines[:-1])
    assert lines[-1] == "ip-10-1-0-20: all checks passed"


def test_every_node_gets_the_health_tool_and_the_controller_runs_it_as_health_check(
    controller: TwoRuns, worker: TwoRuns
) -> None:
    for runs in (controller, worker):
        root = runs.sandbox.root
        assert (root / "usr/local/bin/mlcluster-health").read_text() == (
            runs.sandbox.lifecycle / "health.sh"
        ).read_text()
        assert (root / "usr/local/sbin/mlcluster-health-check").stat().st_mode & 0o777 == 0o755
        assert "exec /usr/local/bin/mlcluster-health --tier quick --drain" in runs.sandbox.read(
            "/usr/local/sbin/mlcluster-health-check"
        )
    # the sandbox's groups are all ml.p5.48xlarge: 8 GPUs, 32 EFA devices
    assert worker.sandbox.read("/etc/mlcluster/health.env").endswith(
        "MLC_EXPECT_GPUS=8\nMLC_EXPECT_EFA=32\nMLC_EXPECT_NEURON=0\n"
    )
    conf = controller.sandbox.read("/opt/slurm/etc/slurm.conf")
    assert "HealthCheckProgram=/usr/local/sbin/mlcluster-health-check\n" in conf
    assert "HealthCheckInterval=300\n" in conf
    assert "HealthCheckNodeState=ANY,CYCLE\n" in conf


def test_precheck_passes_as_the_unprivileged_default_user(worker: TwoRuns) -> None:
    """srun runs the pre-check as ubuntu (uid 1000), outside the docker group: no check may need the socket."""
    sandbox = worker.sandbox
    denied = subprocess.run(
        ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", str(sandbox.state / "bin/docker"), "info"],
        env=sandbox.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert denied.returncode == 1
    assert "permission denied while trying to connect to the Docker daemon socket" in denied.stderr
    result = sandbox.run_as(1000, "precheck.sh", "--user", "alice")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ip-10-1-0-20 PASS docker_data_root: /opt/dlami/nvme/docker/data-root" in result.stdout
    assert result.stdout.splitlines()[-1] == "ip-10-1-0-20: all checks passed"


def test_precheck_names_a_stopped_docker_and_a_bad_daemon_json(worker: TwoRuns, tmp_path: Path) -> None:
    sandbox = worker.sandbox
    active = sandbox.state / "systemd/active/docker"
    daemon = sandbox.root / "etc/docker/daemon.json"
    saved = daemon.read_text()
    try:
        active.unlink()
        stopped = sandbox.run_as(1000, "precheck.sh", "--user", "alice")
        assert "FAIL docker_data_root: the docker service is not active." in stopped.stdout
        active.touch()
        daemon.write_text("{not json")
        broken = sandbox.run_as(1000, "precheck.sh", "--user", "alice")
        assert "FAIL docker_data_root: cannot read docker's data root from /etc/docker/daemon.json (Expecting" in (
            broken.stdout
        )
        daemon.write_text("{}")
        default = sandbox.run_as(1000, "precheck.sh", "--user", "alice")
        assert "FAIL docker_data_root: docker's data root is /var/lib/docker, not on local NVMe" in default.stdout
    finally:
        active.touch()
        daemon.write_text(saved)


@pytest.mark.parametrize("role", ["controller", "worker"])
def test_no_temporary_files_are_left_behind(role: str, request: pytest.FixtureRequest) -> None:
    runs: TwoRuns = request.getfixturevalue(role)
    leftovers = [
        path
        for path in runs.sandbox.root.rglob("*")
        if ".mlcluster." in path.name
        or path.name.startswith((".staging.", ".mlcluster-write-test"))
        or "moved-aside" in path.name
        or path.parent == runs.sandbox.root / "var/lib/mlcluster/tmp"
    ]
    assert leftovers == []
