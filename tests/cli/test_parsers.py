"""The smoke parsers on transcripts in the tools' own formats."""

from __future__ import annotations

from mlcluster.cli.parsers import parse_all_reduce, parse_hostnames, parse_precheck, parse_sinfo
from tests.cli.conftest import transcript


def test_sinfo_rows_default_partition_and_usable_states() -> None:
    rows = parse_sinfo(transcript("sinfo_pcluster.txt"))
    assert [(r.partition, r.default, r.nodes, r.state, r.usable) for r in rows] == [
        ("compute-gpu", True, 1, "down*", False),
        ("compute-gpu", True, 3, "idle", True),
    ]
    assert rows[1].nodelist == "compute-gpu-st-p5-[1-3]"


def test_sinfo_drain_and_power_saving() -> None:
    rows = parse_sinfo(transcript("sinfo_drained.txt"))
    assert [(r.state, r.usable) for r in rows] == [("drain", False), ("idle", True)]
    # idle~ is powered down: Slurm resumes it for a job; idle* does not respond
    edge = parse_sinfo(
        "q* up infinite 2 idle~ q-dy-1-[1-2]\nq up infinite 1 idle* q-st-1-1\nq up infinite 1 mix q-st-1-2\n"
    )
    assert [(r.state, r.usable) for r in edge] == [("idle~", True), ("idle*", False), ("mix", True)]
    assert parse_sinfo("slurm_load_partitions: Unable to contact slurm controller (connect failure)\n") == []


def test_hostnames_are_distinct_and_ordered() -> None:
    assert parse_hostnames("ip-10-1-4-190\nip-10-1-5-138\nip-10-1-4-190\n") == ["ip-10-1-4-190", "ip-10-1-5-138"]
    assert parse_hostnames("srun: error: Unable to allocate resources: Invalid partition name specified\n") == []


def test_all_reduce_p5_and_p4d() -> None:
    p5 = parse_all_reduce(transcript("all_reduce_p5_slow.txt"))
    assert (p5.provider, p5.avg_busbw_gbps, p5.out_of_bounds_ok, p5.wrong_values) == ("efa", 349.88, True, False)
    assert [r.size_bytes for r in p5.rows] == [2**30, 2**31, 2**32, 2**33]
    assert p5.peak is not None and (p5.peak.size_bytes, p5.peak.busbw_gbps) == (2**33, 362.44)
    p4d = parse_all_reduce(transcript("all_reduce_p4d.txt"))
    assert (p4d.provider, p4d.peak and p4d.peak.busbw_gbps) == ("efa", 45.2)


def test_all_reduce_socket_fallback_wrong_values_and_labels() -> None:
    assert parse_all_reduce(transcript("all_reduce_socket.txt")).provider == "socket"
    wrong = transcript("all_reduce_p5_slow.txt").replace("362.44      0", "362.44      3")
    assert parse_all_reduce(wrong).wrong_values
    labelled = "\n".join(f"0: {line}" for line in transcript("all_reduce_p5.txt").splitlines())
    assert len(parse_all_reduce(labelled).rows) == 4
    empty = parse_all_reduce("srun: error: ip-10-1-5-138: task 8: Exited with exit code 1\n")
    assert (empty.rows, empty.peak, empty.provider) == ((), None, None)


def test_precheck_summaries() -> None:
    ok = parse_precheck(transcript("precheck_ok.txt"))
    assert (ok.passed_hosts, ok.failures, ok.hosts) == (["ip-10-1-4-190", "ip-10-1-5-138"], {}, 2)
    failed = parse_precheck(transcript("precheck_fail.txt"))
    assert failed.passed_hosts == ["ip-10-1-4-190"]
    assert [f.split(":")[0] for f in failed.failures["ip-10-1-5-138"]] == ["fsx_mounted", "slurmd_running"]
    raw = parse_precheck(transcript("precheck_raw.txt"))  # unfiltered output parses the same way
    assert (raw.passed_hosts, raw.failures) == (["ip-10-1-4-190"], {})
