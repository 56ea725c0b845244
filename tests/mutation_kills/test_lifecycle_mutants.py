"""Node-script behaviour the hand-written mutants (mutation/shell_mutants.yaml) showed no test asserted.

Each test names the mutant it kills; all of them run the real scripts on the fake HyperPod node
(tests/lifecycle/hyperpod_sandbox.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, Sandbox
from tests.lifecycle.test_hyperpod_lustre_efa import STEPS, efa_worker

MINIMAL = {**FEATURES, "users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False}


def link_to_same_content(folder: Path) -> None:
    """lib.sh replaced by a link to a byte-identical copy outside the checked folder."""
    outside = folder.parent / "outside-lib.sh"
    outside.write_bytes((folder / "lib.sh").read_bytes())
    (folder / "lib.sh").unlink()
    (folder / "lib.sh").symlink_to(outside)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        # manifest-accepts-link: the checksum matches (the link's target is the same bytes), the link is refused.
        (link_to_same_content, "checksum manifest: lib.sh is missing"),
        # manifest-checks-only-shell: root imports the Python files beside the scripts; a new one is refused.
        (lambda d: (d / "steps/extra.py").write_text("import os\n"), "steps/extra.py is not in the checksum manifest"),
        # manifest-name-unquoted: a planted name that is a glob must not match a listed name (lib.sh).
        (lambda d: (d / "lib*").write_text("id\n"), "lib* is not in the checksum manifest"),
    ],
    ids=["listed-file-is-a-link", "added-python-file", "added-glob-name"],
)
def test_the_manifest_refuses_what_a_looser_check_would_pass(
    tmp_path: Path, tamper: Callable[[Path], object], message: str
) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL)
    tamper(sandbox.lifecycle)
    result = sandbox.run()
    assert result.returncode != 0
    assert message in result.stderr
    assert "refusing to run" in result.stderr
    assert "step identify_node: start" not in result.stderr
    assert sandbox.actions() == []


@pytest.mark.parametrize("kernel", ["6.8.0-1001-aws", "6.10.0-1001-aws", "6.14.0-1012-aws", "10.1.0-1-aws"])
def test_kernels_from_6_8_on_get_lustre_over_efa(tmp_path: Path, kernel: str) -> None:
    """kernel-compare-lexical: versions compare as numbers (6.10 and 10.1 are newer than 6.8), 6.8.0 itself is enough."""
    sandbox = efa_worker(tmp_path, extra_env={"STUB_KERNEL": kernel})
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "modprobe kefalnd ipif_name=ens5" in sandbox.actions()


@pytest.mark.parametrize("kernel", ["6.7.12-1-aws", "5.15.0-1063-aws"])
def test_kernels_before_6_8_are_refused_efa(tmp_path: Path, kernel: str) -> None:
    """The edge below: 6.7.12 (a larger last field, a smaller minor) is still too old."""
    sandbox = efa_worker(tmp_path, extra_env={"STUB_KERNEL": kernel})
    result = sandbox.run("on_create.sh", *STEPS)
    assert result.returncode != 0
    assert "EFA for FSx for Lustre needs Linux 6.8 or newer" in result.stdout + result.stderr
