"""What smoke reads back from the nodes, parsed whole (issue 27 sweep): every transcript's complete parse in a
reviewed snapshot, and hand-built lines at each pattern's edge compared with ``==``."""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion

from mlcluster.cli.parsers import (
    ContainerView,
    NcclResult,
    NcclRow,
    NccomResult,
    NodeCheck,
    PrecheckSummary,
    SinfoRow,
    nccl_version,
    parse_all_reduce,
    parse_container_check,
    parse_hostnames,
    parse_nccom,
    parse_neuron_counts,
    parse_neuron_efa,
    parse_node_check,
    parse_node_states,
    parse_precheck,
    parse_sinfo,
)
from tests.cli.conftest import transcript

ALL_REDUCE = ["all_reduce_p4d.txt", "all_reduce_p5.txt", "all_reduce_p5_degraded.txt", "all_reduce_p5_slow.txt",
              "all_reduce_socket.txt", "container_p5.txt", "nccl_check_missing.txt"]  # fmt: skip


@pytest.mark.parametrize("name", ALL_REDUCE)
def test_every_nccl_transcript_parses_whole(name: str, snapshot: SnapshotAssertion) -> None:
    text = transcript(name)
    result = parse_all_reduce(text)
    assert {
        "all_reduce": result,
        "peak": result.peak,
        "wrong_values": result.wrong_values,
        "node_check": parse_node_check(text),
        "container": parse_container_check(text),
    } == snapshot


@pytest.mark.parametrize("name", ["sinfo_hyperpod.txt", "sinfo_pcluster.txt", "sinfo_drained.txt"])
def test_every_sinfo_transcript_parses_whole(name: str, snapshot: SnapshotAssertion) -> None:
    text = transcript(name)
    rows = parse_sinfo(text)
    assert {
        "rows": rows,
        "usable": [(r.base_state, r.usable) for r in rows],
        "nodes": parse_node_states(text),
    } == snapshot


@pytest.mark.parametrize("name", ["precheck_ok.txt", "precheck_fail.txt", "precheck_raw.txt"])
def test_every_precheck_transcript_parses_whole(name: str, snapshot: SnapshotAssertion) -> None:
    summary = parse_precheck(transcript(name))
    assert (summary, summary.hosts) == snapshot


@pytest.mark.parametrize("name", ["nccom_trn1.txt", "nccom_failed.txt"])
def test_every_nccom_transcript_parses_whole(name: str, snapshot: SnapshotAssertion) -> None:
    result = parse_nccom(transcript(name))
    assert (result, result.peak) == snapshot


def test_sinfo_states_usable_or_not_at_each_suffix() -> None:
    text = (
        "PARTITION AVAIL TIMELIMIT NODES STATE NODELIST\n"
        "gpu* up infinite 1 idle~ a\n"
        "gpu up 1:00:00 2 mixed- b\n"
        "gpu up infinite 3 comp c\n"
        "gpu down infinite 1 idle d\n"
        "gpu inact infinite 1 alloc e\n"
        "gpu up infinite 1 idle* f\n"
        "gpu up infinite 1 drng g\n"
        "gpu up infinite 1 allocated h trailing\n"
        "  cpu up infinite 10 completing+ i  \n"
        "MLC-NODES\n"
        "x up infinite 1 idle x\n"
    )
    rows = parse_sinfo(text)
    assert rows == [
        SinfoRow("gpu", True, "up", 1, "idle~", "a"),
        SinfoRow("gpu", False, "up", 2, "mixed-", "b"),
        SinfoRow("gpu", False, "up", 3, "comp", "c"),
        SinfoRow("gpu", False, "down", 1, "idle", "d"),
        SinfoRow("gpu", False, "inact", 1, "alloc", "e"),
        SinfoRow("gpu", False, "up", 1, "idle*", "f"),
        SinfoRow("gpu", False, "up", 1, "drng", "g"),
        SinfoRow("cpu", False, "up", 10, "completing+", "i"),
    ]
    assert [(r.base_state, r.usable) for r in rows] == [
        ("idle", True), ("mixed", True), ("comp", True), ("idle", False), ("alloc", False), ("idle", False),
        ("drng", False), ("completing", True),
    ]  # fmt: skip
    assert parse_node_states(text) == []  # "x up ..." after the mark is no node line


def test_node_states_after_the_mark_only_first_of_each_name() -> None:
    text = "a idle\nMLC-NODES\n b idle~ \nc drain*\nb alloc\n-d idle\ne IDLE\nf idle**\ng.h_i-j mix\n"
    assert parse_node_states(text) == [("b", "idle~"), ("c", "drain*"), ("g.h_i-j", "mix")]
    assert parse_node_states("a idle\nb idle\n") == []
    assert parse_node_states("MLC-NODESx\na idle\n") == []


def test_hostnames_keep_plain_names_once_in_order() -> None:
    text = " b.example \na\nb.example\n-x\na_b\nsrun: error\n\nc-1\n"
    assert parse_hostnames(text) == ["b.example", "a", "c-1"]


def test_precheck_passes_fails_and_counts_hosts() -> None:
    text = (
        "h1: all checks passed\n"
        "  h2 FAIL fsx_mounted: /fsx is not a Lustre mount. Mitigation: x  \n"
        "h2 FAIL slurmd_running: down\n"
        "h2: 2 check(s) failed\n"
        "h3: 1 check(s) failed\n"
        "h4 PASS gpu: ok\n"
        "h5 FAIL Bad: x\n"
        "h6: all checks passed and more\n"
    )
    summary = parse_precheck(text)
    assert summary == PrecheckSummary(
        ["h1"], {"h2": ["fsx_mounted: /fsx is not a Lustre mount. Mitigation: x", "slurmd_running: down"], "h3": []}
    )
    assert summary.hosts == 3


def test_all_reduce_rows_versions_and_network_from_hand_built_lines() -> None:
    text = (
        "0: h1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws\n"
        "h1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.3\n"
        "h1:1:1 [0] NCCL INFO NET/OFI Using Libfabric version 1.22\n"
        "h1:1:1 [0] NCCL INFO NET/OFI Using Libfabric version 2.1\n"
        "1: h2:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n"
        "h1:1:1 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is x (found 2 nics)\n"
        "h3:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)\n"
        "# nccl-tests version 2.13.8 nccl-headers=2708 nccl-library=21805\n"
        "# nccl-tests version 2.99.0 nccl-headers=1 nccl-library=22703\n"
        "3:   1024   256   float   sum   -1   10.5   0.10   0.19   0 10.1 0.1 0.2 0\n"
        "  2048   512   half   sum   0   10.5   0.20   0.38   N/A 10.1 0.1 0.2 0\n"
        "  4096   1024   float   sum   -1   10.5   0.40   0.37   2 10.1 0.1 0.2 0\n"
        "  8192   2048   float   sum   -1   10.5   0.40   0.75   0\n"
        "# Avg bus bandwidth    : 0.25\n"
        "#  Out of bounds values : 0 OK\n"
    )
    result = parse_all_reduce(text)
    assert result == NcclResult(
        rows=(NcclRow(1024, 0.19, "0"), NcclRow(2048, 0.38, "N/A"), NcclRow(4096, 0.37, "2")),
        avg_busbw_gbps=0.25,
        out_of_bounds_ok=True,
        provider="efa",
        nics={4: "h2", 2: "h1"},
        plugin_version="1.9.1-aws",
        libfabric_version="1.22",
        nccl_version="2.18.5",
        nccl_tests_version="2.13.8",
    )
    assert (result.peak, result.wrong_values) == (NcclRow(2048, 0.38, "N/A"), True)
    sockets = parse_all_reduce("h1 NCCL INFO NET/Socket : Using [0]eth0\n# Out of bounds values : 3 FAILED\n")
    assert sockets == NcclResult((), None, False, "socket")
    assert (sockets.peak, sockets.wrong_values) == (None, False)
    assert parse_all_reduce("NCCL INFO Using network Socket\n").provider == "socket"
    assert (
        parse_all_reduce("x NET/OFI Selected provider is efa (found 4 nics)\nNCCL INFO Using network Socket\n").provider
        == "efa"
    )


@pytest.mark.parametrize(
    ("code", "version"),
    [(22703, "2.27.3"), (10000, "1.0.0"), (9999, "9.9.99"), (2708, "2.7.8"), (21805, "2.18.5"), (30001, "3.0.1")],
)
def test_nccl_version_codes_on_both_sides_of_the_2_9_change(code: int, version: str) -> None:
    assert nccl_version(code) == version


def test_node_check_lines_per_host() -> None:
    text = (
        "0: MLC-NCCL h1 ok /a:/b \n"
        "MLC-NCCL h2 missing openmpi nccl\n"
        "MLC-NCCL h3 not-installed /opt/x\n"
        "MLC-NCCL h4 no-plugin /opt/amazon/ofi-nccl/lib\n"
        "MLC-NCCL h5 not-found libmpi.so.40,libnccl.so.2\n"
        "MLC-NCCL h6 no-plugin\n"
        "MLC-NCCL h1 setting NCCL_PROTO=simple (/etc/nccl.conf)\n"
        "MLC-NCCL h1 setting NCCL_PROTO=simple (/etc/nccl.conf)\n"
        "MLC-NCCL h2 setting NCCL_ALGO=Ring (environment)\n"
        "MLC-NCCL h7 broken x\n"
        "MLC-NCCLh8 ok /x\n"
    )
    assert parse_node_check(text) == NodeCheck(
        ok={"h1": "/a:/b"},
        problems={
            "h2": "no library folder for openmpi nccl",
            "h3": "no executable /opt/x",
            "h4": "no aws-ofi-nccl libnccl-net*.so in /opt/amazon/ofi-nccl/lib",
            "h5": "ldd: not found: libmpi.so.40,libnccl.so.2",
            "h6": "no aws-ofi-nccl libnccl-net*.so in (none)",
        },
        settings=["h1: NCCL_PROTO=simple (/etc/nccl.conf)", "h2: NCCL_ALGO=Ring (environment)"],
    )


def test_container_and_neuron_lines_first_per_host() -> None:
    text = (
        "1: MLC-CTR h1 gpus=8 uverbs=32 plugin=/opt/p.so\n"
        " MLC-CTR h2 gpus=0 uverbs=0 plugin=none \n"
        "MLC-CTR h1 gpus=1 uverbs=1 plugin=none\n"
        "MLC-CTR h3 gpus=x uverbs=0 plugin=none\n"
        "0: MLC-NEURON n1 devices=16 efa=8\n"
        "MLC-NEURON n2 devices=0\n"
        "MLC-NEURON n1 devices=1 efa=1\n"
        "MLC-NEURON n3 devices=2 efa=\n"
        "MLC-NEURON n4 devices=2 efa=3 x\n"
    )
    assert parse_container_check(text) == {
        "h1": ContainerView(8, 32, "/opt/p.so"),
        "h2": ContainerView(0, 0, None),
    }
    assert parse_neuron_counts(text) == {"n1": 16, "n2": 0}
    assert parse_neuron_efa(text) == {"n1": 8}


def test_nccom_rows_average_and_failure() -> None:
    text = (
        "size(B)    count(elems)    type    time(us)    algbw(GB/s)    busbw(GB/s)\n"
        "    67108864    16777216    fp32    2240.2    29.96    56.17\n"
        "  134217728  33554432  bf16  4480.4  29.95  56.16  \n"
        "    33554432    Failure running neuron-bench - log file /tmp/x.log\n"
        "Avg bus bandwidth:      40.6901GB/s\n"
        "  2 errors found - test failed  \n"
    )
    result = parse_nccom(text)
    assert result == NccomResult(
        (NcclRow(67108864, 56.17, "0"), NcclRow(134217728, 56.16, "0")), 40.6901, "2 errors found - test failed"
    )
    assert result.peak == NcclRow(67108864, 56.17, "0")
    assert parse_nccom("1 error found - test failed\n").failure == "1 error found - test failed"
    assert parse_nccom("") == NccomResult((), None, None)
    assert parse_nccom("").peak is None
