"""The smoke parsers on transcripts in the tools' own formats."""

from __future__ import annotations

import re

import pytest

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
    wrong = transcript("all_reduce_p5_slow.txt").replace("362.44       0", "362.44       3")
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


# -- the transcripts are in nccl-tests' exact printed format ---------------------------------------------
#: Each nccl-tests transcript and the release whose src/util.cu (NVIDIA/nccl-tests) formats it: the
#: versions mlcluster installs (HyperPod v2.17.10 at c379e19a711e011f2086b0001deb3d590e4b46f4,
#: ParallelCluster v2.17.6 at da0b547b1b9c6e3b1d4c15578087874522ae3761) and the container image's v2.18.3
#: (f727aa2a540fef911de9d7bfd8852bc5d2c69815).
NCCL_TESTS_RELEASES = {
    "all_reduce_p5.txt": "2.17.10",
    "all_reduce_p5_slow.txt": "2.17.10",
    "all_reduce_p5_degraded.txt": "2.17.10",
    "container_p5.txt": "2.18.3",
    "all_reduce_socket.txt": "2.17.6",
    "all_reduce_p4d.txt": "2.17.6",
}


def float_str(value: float, width: int) -> str:
    """util.cu's getFloatStr: two decimals, then one, then none as the value grows, in ``width`` columns."""
    power, bound = 0, 1
    while value >= bound:
        power, bound = power + 1, bound * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def result_row(fields: list[str]) -> str:
    """writeBenchmarkLinePreamble + writeBenchmarkLineBody (out-of-place, in-place), as util.cu prints them."""
    size, count, kind, op, root = fields[:5]
    line = f"{int(size):12d}  {int(count):12d}  {kind:>8}  {op:>6}  {int(root):6d}"
    for time, algbw, busbw, wrong in (fields[5:9], fields[9:13]):
        line += f"  {float_str(float(time), 7):>7}  {float_str(float(algbw), 6):>6}  {float_str(float(busbw), 6):>6}"
        line += f"  {float(wrong):6g}"
    return line


def result_header(release: str) -> list[str]:
    """writeResultHeader without timestamps: v2.17.6 pads with ``%20s``, later releases with ``%*s`` of 0."""
    tail = " " + " " * (20 if release == "2.17.6" else 0)
    columns = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}"
    return [
        "# "
        + " " * 10
        + "  "
        + " " * 12
        + "  "
        + " " * 8
        + "  "
        + " " * 6
        + "  "
        + " " * 6
        + "           out-of-place                       in-place          ",
        columns.format(
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong",
        )
        + tail,
        columns.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
        + tail,
    ]


@pytest.mark.parametrize(("name", "release"), sorted(NCCL_TESTS_RELEASES.items()))
def test_nccl_tests_transcripts_are_in_the_printed_format(name: str, release: str) -> None:
    lines = transcript(name).splitlines()
    version = next(line for line in lines if line.startswith("# nccl-tests version "))
    assert version.split()[3] == release
    start = lines.index("# Using devices")
    assert lines[start - 4 : start] == [
        version,
        "# Collective test starting: all_reduce_perf",
        next(line for line in lines if line.startswith("# nThread 1 nGpus 1 minBytes ")),
        "#",
    ]
    header = lines.index(result_header(release)[0])
    assert lines[header - 1 : header + 3] == ["#", *result_header(release)]
    rows = [line for line in lines if re.match(r"^ +\d+ +\d+ ", line)]
    assert rows and all(result_row(row.split()) == row for row in rows)
    assert lines[-4:-2] == ["# Out of bounds values : 0 OK", lines[-3]]
    assert re.fullmatch(r"# Avg bus bandwidth    : [0-9.e+]+ ", lines[-3])
    assert lines[-2:] == ["#", "# Collective test concluded: all_reduce_perf"]
