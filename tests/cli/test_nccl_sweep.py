"""The node-side NCCL shell, whole (issue 27 sweep): what the check and the run send to every node, per backend.

``test_nccl`` runs this shell under bash against fake node roots; here the complete text is compared with a reviewed
snapshot, so a folder, marker, message or option that changes is seen even where no fake root exercises it.
"""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion

from mlcluster.cli.nccl import Backend, efa_devices, library_prelude, node_check, node_run


@pytest.mark.parametrize("backend", ["pcluster", "hyperpod"])
def test_the_node_check_and_run_shell_whole(backend: Backend, snapshot: SnapshotAssertion) -> None:
    binary = "/opt/nccl tests/all_reduce_perf"  # a space: quoted where the shell runs it
    assert {
        "check": node_check(backend, binary).splitlines(),
        "run": node_run(backend, f"{binary} -b 1G").splitlines(),
    } == snapshot
    assert node_run(backend, "x") == library_prelude(backend) + "exec x\n"
    assert node_check(backend, binary).startswith(library_prelude(backend))


@pytest.mark.parametrize(
    ("instance_type", "devices"),
    [("ml.p5.48xlarge", 32), ("p5en.48xlarge", 16), ("ml.trn1n.32xlarge", 16), ("ml.g5.48xlarge", None), ("", None)],
)
def test_efa_devices_by_type_with_or_without_the_prefix(instance_type: str, devices: int | None) -> None:
    assert efa_devices(instance_type) == devices
