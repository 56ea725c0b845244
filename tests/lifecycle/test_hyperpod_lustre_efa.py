"""The lustre_efa and mount_fsx steps on fake nodes of an EFA-enabled FSx for Lustre file system.

The Lustre tools are stubs (``tests/lifecycle/hyperpod_sandbox.py``): ``lnetctl`` keeps LNet's nets in
the stub state, ``modprobe`` records its calls, ``modinfo`` and ``uname`` answer what a test asks.
A reboot is played by dropping LNet's state and running what ``mlcluster-lustre-efa.service`` runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FSX_SOURCE, PROVISIONING, WORKER_IP, Sandbox

#: 32 EFA devices, as on a p5.48xlarge.
P5_DEVICES = tuple(f"rdmap{n}s0" for n in range(79, 111))
#: The eight the FSx guide's table gives p5.48xlarge: every fourth of the sorted devices.
P5_CHOSEN = sorted(P5_DEVICES)[::4]
EFA_PROVISIONING = {**PROVISIONING, "fsx_efa_enabled": True, "fsx_efa_groups": ["worker-group-1"]}
STEPS = ("lustre_efa", "mount_fsx")
EFA_FSTAB = (
    f"{FSX_SOURCE} /fsx lustre noatime,flock,nosuid,nodev,_netdev,x-systemd.automount,x-systemd.requires=network-online.target,"
    "x-systemd.requires=mlcluster-lustre-efa.service,x-systemd.after=mlcluster-lustre-efa.service 0 0"
)


def efa_worker(
    tmp_path: Path, *, efa_devices: tuple[str, ...] = P5_DEVICES, extra_env: dict[str, str] | None = None
) -> Sandbox:
    """A p5.48xlarge worker of an EFA-enabled file system (its group is an EFA group)."""
    return Sandbox(
        tmp_path, ips=WORKER_IP, provisioning=EFA_PROVISIONING, efa_devices=efa_devices, extra_env=extra_env or {}
    )


def lnet_calls(actions: list[str]) -> list[str]:
    return [a for a in actions if a.split()[0] in ("lnetctl", "modprobe")]


def expected_lnet_calls() -> list[str]:
    return [
        "modprobe lnet",
        "modprobe kefalnd ipif_name=ens5",
        "modprobe ksocklnd",
        "lnetctl lnet configure",
        "lnetctl net del --net tcp",
        "lnetctl net add --net tcp --if ens5",
        *(f"lnetctl net add --net efa --if {device} --peer-credits 32" for device in P5_CHOSEN),
        "lnetctl set discovery 1",
        "lnetctl udsp add --src efa --priority 0",
        "modprobe lustre",
    ]


def reboot(sandbox: Sandbox) -> subprocess.CompletedProcess[str]:
    """Lose LNet's dynamic configuration, then run the boot unit's ExecStart as systemd would."""
    shutil.rmtree(sandbox.state / "lnet")
    unit = sandbox.read("/etc/systemd/system/mlcluster-lustre-efa.service")
    assert "ExecStart=/usr/local/sbin/mlcluster-lustre-efa\n" in unit
    script = sandbox.root / "usr/local/sbin/mlcluster-lustre-efa"
    assert os.access(script, os.X_OK)
    return subprocess.run(
        ["bash", str(script)], env=sandbox.env(), capture_output=True, text=True, timeout=60, check=False
    )


def test_an_efa_worker_sets_lnet_up_over_efa_before_it_mounts(tmp_path: Path) -> None:
    sandbox = efa_worker(tmp_path)
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    actions = sandbox.actions()
    assert lnet_calls(actions) == expected_lnet_calls()
    # LNet is over EFA before the mount, which still names the file system's tcp NID (the MGS).
    mount = f"mount -t lustre -o noatime,flock,nosuid,nodev {FSX_SOURCE} {sandbox.root}/fsx"
    assert actions.index("modprobe lustre") < actions.index(mount)
    assert f"LNet uses EFA on {' '.join(P5_CHOSEN)} and TCP on ens5" in result.stdout + result.stderr
    # What survives a reboot: the interfaces, the module options, the script, the enabled unit, fstab.
    config = sandbox.read("/etc/mlcluster/lustre-efa.env")
    assert f'MLC_LNET_EFA_INTERFACES="{" ".join(P5_CHOSEN)}"' in config
    assert "MLC_LNET_TCP_INTERFACE=ens5" in config
    assert sandbox.read("/etc/modprobe.d/mlcluster-lustre-efa.conf").endswith("options ksocklnd credits=2560\n")
    unit = sandbox.read("/etc/systemd/system/mlcluster-lustre-efa.service")
    assert "After=network-online.target\nBefore=remote-fs-pre.target\n" in unit
    assert "systemctl enable mlcluster-lustre-efa" in actions
    assert sandbox.read("/etc/fstab").splitlines()[-1] == EFA_FSTAB


def test_the_efa_configuration_comes_back_after_a_reboot(tmp_path: Path) -> None:
    sandbox = efa_worker(tmp_path)
    assert sandbox.run("on_create.sh", *STEPS).returncode == 0
    before = len(sandbox.actions())
    result = reboot(sandbox)
    assert result.returncode == 0, result.stderr
    assert lnet_calls(sandbox.actions()[before:]) == expected_lnet_calls()
    shown = subprocess.run(
        ["lnetctl", "net", "show", "--net", "efa"], env=sandbox.env(), capture_output=True, text=True, check=True
    ).stdout
    assert shown.count("@efa") == len(P5_CHOSEN)


def test_a_second_run_changes_nothing_and_never_touches_the_mounted_tcp_net(tmp_path: Path) -> None:
    sandbox = efa_worker(tmp_path)
    assert sandbox.run("on_create.sh", *STEPS).returncode == 0
    files, before = sandbox.snapshot(), len(sandbox.actions())
    second = sandbox.run("on_create.sh", *STEPS)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sandbox.actions()[before:] == []
    assert sandbox.snapshot() == files
    assert "LNet already uses 8 EFA interface(s); nothing to do" in second.stdout + second.stderr


def test_a_run_that_stopped_half_way_is_completed(tmp_path: Path) -> None:
    """One EFA interface and the UDSP rule from an interrupted run: the rest is added, the rule is kept."""
    sandbox = efa_worker(tmp_path)
    lnet = sandbox.state / "lnet"
    lnet.mkdir(parents=True)
    (lnet / "configured").touch()
    (lnet / "udsp").touch()
    (lnet / "nets").write_text(f"tcp ens5 10.1.0.20@tcp\nefa {P5_CHOSEN[0]} 1.2.3.1@efa\n")
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    added = [a for a in sandbox.actions() if a.startswith("lnetctl net add")]
    assert added == [f"lnetctl net add --net efa --if {device} --peer-credits 32" for device in P5_CHOSEN[1:]]
    assert "the EFA preference rule (UDSP) is already there" in result.stdout + result.stderr


def test_a_node_whose_type_has_no_efa_for_lustre_mounts_over_tcp_and_says_so(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, provisioning=EFA_PROVISIONING)
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert lnet_calls(sandbox.actions()) == []
    assert (
        "the file system is EFA-enabled, but instance type ml.p5.48xlarge of group controller-machine has no EFA "
        "for FSx for Lustre (Nitro v4 or newer with EFA, not trn2): this node mounts it over TCP (ENA)"
    ) in result.stdout + result.stderr
    assert f"mount -t lustre -o noatime,flock,nosuid,nodev {FSX_SOURCE} {sandbox.root}/fsx" in sandbox.actions()
    assert sandbox.read("/etc/fstab").splitlines()[-1].endswith("x-systemd.requires=network-online.target 0 0")
    assert not (sandbox.root / "etc/systemd/system/mlcluster-lustre-efa.service").exists()


def test_without_an_efa_file_system_nothing_changes(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP, efa_devices=P5_DEVICES)
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert lnet_calls(sandbox.actions()) == []
    assert "the FSx for Lustre file system is not EFA-enabled: Lustre runs over TCP" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"extra_env": {"STUB_KERNEL": "5.15.0-1063-aws"}}, "EFA for FSx for Lustre needs Linux 6.8 or newer"),
        ({"efa_devices": ()}, "no EFA device (/sys/class/infiniband/*, driver efa) on this ml.p5.48xlarge"),
        (
            {"extra_env": {"STUB_MISSING_MODULES": "kefalnd"}},
            "the Lustre client has no EFA network driver (kernel module kefalnd)",
        ),
    ],
)
def test_an_efa_node_that_cannot_use_efa_stops_instead_of_mounting_over_tcp(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    sandbox = efa_worker(tmp_path, **change)
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode != 0
    assert reason in result.stdout + result.stderr
    assert "refusing to mount over TCP only" in result.stdout + result.stderr
    assert "step lustre_efa: FAILED" in result.stdout + result.stderr
    assert not [a for a in sandbox.actions() if a.startswith("mount ")]


def test_mount_fsx_alone_refuses_an_efa_node_whose_lnet_has_no_efa(tmp_path: Path) -> None:
    sandbox = efa_worker(tmp_path)
    result = sandbox.run("on_create.sh", "mount_fsx")
    assert result.returncode != 0
    assert (
        "this node should reach FSx for Lustre over EFA, but LNet has no EFA interface" in result.stdout + result.stderr
    )
    assert not [a for a in sandbox.actions() if a.startswith("mount ")]


def test_lnet_that_does_not_come_up_over_efa_fails_the_step(tmp_path: Path) -> None:
    sandbox = efa_worker(tmp_path, extra_env={"STUB_FAIL": "lnetctl"})
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode != 0
    assert "LNet over EFA could not be set up" in result.stdout + result.stderr
    assert not [a for a in sandbox.actions() if a.startswith("mount ")]


def test_an_fsx_mounted_without_nosuid_by_an_earlier_run_is_remounted_with_it_once(tmp_path: Path) -> None:
    """A node provisioned before /fsx was mounted nosuid,nodev: the step remounts the mount point with them (bind:
    its flags only), and a later run leaves it (reviews: the options reached only fresh mounts)."""
    sandbox = efa_worker(tmp_path)
    assert sandbox.run("on_create.sh", *STEPS).returncode == 0
    mounts = sandbox.root / "proc/mounts"
    # What an earlier release left: the same file system, mounted without the two options.
    mounts.write_text(mounts.read_text().replace("noatime,flock,nosuid,nodev", "noatime,flock"))
    before = len(sandbox.actions())
    again = sandbox.run("on_create.sh", *STEPS)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sandbox.actions()[before:] == [f"mount -o remount,bind,noatime,nosuid,nodev {sandbox.root}/fsx"]
    assert f"remounted {sandbox.root}/fsx nosuid,nodev (an earlier run mounted it without them)" in (
        again.stdout + again.stderr
    )
    after = len(sandbox.actions())
    third = sandbox.run("on_create.sh", *STEPS)
    assert third.returncode == 0, third.stderr[-3000:]
    assert sandbox.actions()[after:] == []
