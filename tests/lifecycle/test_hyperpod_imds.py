"""Issue 17, item 6: on HyperPod controller and login nodes only root reaches IMDS, over IPv4 and IPv6.

The imds step runs on a fake controller whose ``iptables`` and ``ip6tables`` stubs keep the rules
they were given. The rules are then read the way the kernel's OUTPUT chain would apply them to a
connection (destination and owner uid), so the tests show who is rejected, not only what was typed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, Sandbox

IMDS_V4 = "169.254.169.254"
IMDS_V6 = "fd00:ec2::254"
UNIT = "/etc/systemd/system/mlcluster-imds-root-only.service"


def verdict(rules: str, destination: str, uid: int) -> str:
    """What the OUTPUT chain does with a TCP connection from ``uid`` to ``destination``.

    Understands the options the step uses (``--destination``, ``--protocol``, ``--match owner``,
    ``[!] --uid-owner``, ``--jump``); any other option fails the test, so a rule this reader does
    not understand cannot pass for a restriction. The first matching rule decides; none: ACCEPT.
    """
    for line in rules.splitlines():
        words = line.split()
        assert words[0] == "OUTPUT", line
        matches, target, negate, i = True, "", False, 1
        while i < len(words):
            word = words[i]
            if word == "!":
                negate = True
                i += 1
                continue
            value = words[i + 1]
            if word == "--destination":
                matches &= value == destination
            elif word == "--protocol":
                matches &= value == "tcp"
            elif word == "--match":
                assert value == "owner", line
            elif word == "--uid-owner":
                matches &= (uid != int(value)) if negate else (uid == int(value))
            elif word == "--jump":
                target = value
            else:
                raise AssertionError(f"option {word} not understood in {line}")
            negate = False
            i += 2
        if matches:
            return target
    return "ACCEPT"


def rules(sandbox: Sandbox, tool: str) -> str:
    path = sandbox.state / f"{tool}.rules"
    return path.read_text() if path.exists() else ""


def run_imds(sandbox: Sandbox) -> str:
    result = sandbox.run("on_create.sh", "imds")
    log = sandbox.read("/var/log/provision/imds.log")
    assert result.returncode == 0, log
    return log


def test_only_root_reaches_imds_over_ipv4_and_ipv6_and_a_second_run_adds_nothing(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    log = run_imds(sandbox)
    once = {tool: rules(sandbox, tool) for tool in ("iptables", "ip6tables")}
    assert f"IMDS limited to root (ip6tables OUTPUT --destination {IMDS_V6} --protocol tcp" in log
    for tool, endpoint in (("iptables", IMDS_V4), ("ip6tables", IMDS_V6)):
        assert len(once[tool].splitlines()) == 1
        assert verdict(once[tool], endpoint, 2001) == "REJECT"  # a cluster user
        assert verdict(once[tool], endpoint, 1000) == "REJECT"  # ubuntu, the image's sudo user, too
        assert verdict(once[tool], endpoint, 0) == "ACCEPT"  # root: HyperPod's agents and the steps
    assert verdict(once["ip6tables"], "2600:1f18::1", 2001) == "ACCEPT"  # other IPv6 traffic is untouched
    done = len(sandbox.actions())
    log = run_imds(sandbox)
    assert {tool: rules(sandbox, tool) for tool in once} == once
    assert sandbox.actions()[done:] == []
    assert "IMDS is already limited to root (ip6tables)" in log


def test_the_boot_unit_restores_both_rules(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    run_imds(sandbox)
    unit = sandbox.read(UNIT)
    v4 = f"OUTPUT --destination {IMDS_V4} --protocol tcp --match owner ! --uid-owner 0 --jump REJECT"
    v6 = f"OUTPUT --destination {IMDS_V6} --protocol tcp --match owner ! --uid-owner 0 --jump REJECT"
    assert f"ExecStart=/bin/sh -c 'iptables --wait --check {v4} 2>/dev/null || iptables --wait --insert {v4}'\n" in unit
    assert (
        f"ExecStart=/bin/sh -c '[ ! -e /proc/net/if_inet6 ] || ip6tables --wait --check {v6} 2>/dev/null "
        f"|| ip6tables --wait --insert {v6}'\n"
    ) in unit
    assert "systemctl enable mlcluster-imds-root-only" in sandbox.actions()


def test_the_boot_unit_runs_before_any_user_process_can(tmp_path: Path) -> None:
    """After a reboot the rules are back before the network, logins, sshd, cron, at and slurmd start.

    ``After=network-pre.target`` alone (the old unit) ordered nothing before user sessions; systemd
    itself (systemd-analyze verify) checks the unit parses and its dependencies resolve.
    """
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    run_imds(sandbox)
    unit = sandbox.read(UNIT)
    lines = unit.splitlines()
    before = {name for line in lines if line.startswith("Before=") for name in line.removeprefix("Before=").split()}
    assert {
        "network-pre.target",
        "systemd-user-sessions.service",
        "ssh.service",
        "cron.service",
        "atd.service",
        "slurmd.service",
    } <= before
    assert "Wants=network-pre.target" in lines and "DefaultDependencies=no" in lines
    assert "RequiredBy=systemd-user-sessions.service" in lines
    assert not any(line.startswith("After=") and "network" in line for line in lines)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed to check the unit (Debian package systemd)")
    folder = tmp_path / "units"
    folder.mkdir()
    (folder / "mlcluster-imds-root-only.service").write_text(unit.replace("/bin/sh", "/bin/true"))
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(folder / "mlcluster-imds-root-only.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # It names the file on every line about it: an unknown key, a bad value, a missing section.
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if str(folder) in line] == []


def test_a_node_without_ipv6_gets_the_ipv4_rule_only(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.root / "proc/net/if_inet6").unlink()
    log = run_imds(sandbox)
    assert "IPv6 is off on this node (/proc/net/if_inet6 is absent)" in log
    assert rules(sandbox, "ip6tables") == ""
    assert not any(a.startswith("ip6tables") for a in sandbox.actions())
    assert verdict(rules(sandbox, "iptables"), IMDS_V4, 2001) == "REJECT"


def test_ipv6_on_without_ip6tables_stops_the_step(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.bin / "ip6tables").unlink()
    result = sandbox.run("on_create.sh", "imds")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/imds.log")
    assert "IPv6 is on but ip6tables is missing (package iptables)" in log
    assert any(a.endswith(" install iptables") for a in sandbox.actions())  # it tried to install it first
