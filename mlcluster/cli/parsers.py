"""Parsers for what ``smoke`` reads back from the head node: sinfo, srun, the pre-check, all_reduce_perf."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: sinfo base states in which a node takes jobs (``~`` suffix: powered down, Slurm resumes it).
USABLE_STATES = {"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing"}


@dataclass(frozen=True)
class SinfoRow:
    """One line of ``sinfo``'s default output."""

    partition: str
    default: bool
    available: str
    nodes: int
    state: str
    nodelist: str

    @property
    def base_state(self) -> str:
        return self.state.rstrip("*~#!%$@^-+")

    @property
    def usable(self) -> bool:
        return self.available == "up" and self.base_state in USABLE_STATES and not self.state.endswith("*")


_SINFO = re.compile(r"^(?P<p>\S+)\s+(?P<a>\S+)\s+(?P<t>\S+)\s+(?P<n>\d+)\s+(?P<s>\S+)\s+(?P<l>\S+)\s*$")


def parse_sinfo(text: str) -> list[SinfoRow]:
    """Rows of ``sinfo`` (PARTITION AVAIL TIMELIMIT NODES STATE NODELIST); the header and noise are skipped."""
    rows = []
    for line in text.splitlines():
        match = _SINFO.match(line.strip())
        if match is None or match["p"] == "PARTITION":
            continue
        partition = match["p"]
        rows.append(
            SinfoRow(
                partition=partition.rstrip("*"),
                default=partition.endswith("*"),
                available=match["a"],
                nodes=int(match["n"]),
                state=match["s"],
                nodelist=match["l"],
            )
        )
    return rows


def parse_hostnames(text: str) -> list[str]:
    """Distinct host names printed by ``srun -N N hostname`` (one per line), in order."""
    seen: list[str] = []
    for line in text.splitlines():
        name = line.strip()
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name) and name not in seen:
            seen.append(name)
    return seen


@dataclass
class PrecheckSummary:
    """The pre-check across nodes: hosts that passed, and each failing host's FAIL lines."""

    passed_hosts: list[str] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)

    @property
    def hosts(self) -> int:
        return len(self.passed_hosts) + len(self.failures)


_PRECHECK_FAIL = re.compile(r"^(?P<host>\S+) FAIL (?P<check>[a-z_]+): (?P<rest>.*)$")
_PRECHECK_DONE = re.compile(r"^(?P<host>\S+): (all checks passed|(?P<n>\d+) check\(s\) failed)$")


def parse_precheck(text: str) -> PrecheckSummary:
    """Summarize ``mlcluster-precheck`` output from many nodes (``<host> PASS|FAIL|SKIP <check>: ...``)."""
    summary = PrecheckSummary()
    for line in text.splitlines():
        line = line.strip()
        if match := _PRECHECK_FAIL.match(line):
            summary.failures.setdefault(match["host"], []).append(f"{match['check']}: {match['rest']}")
        elif (match := _PRECHECK_DONE.match(line)) and match["n"] is None:
            summary.passed_hosts.append(match["host"])
        elif match:
            summary.failures.setdefault(match["host"], [])
    return summary


@dataclass(frozen=True)
class NcclRow:
    """One size of an all_reduce_perf run: out-of-place bus bandwidth and wrong-value count."""

    size_bytes: int
    busbw_gbps: float
    wrong: str


@dataclass(frozen=True)
class NcclResult:
    """What an all_reduce_perf run proved: sizes, average bus bandwidth, the network NCCL used."""

    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds_ok: bool
    provider: str | None

    @property
    def peak(self) -> NcclRow | None:
        """The row with the highest out-of-place bus bandwidth (large messages reach the link rate)."""
        return max(self.rows, key=lambda r: r.busbw_gbps) if self.rows else None

    @property
    def wrong_values(self) -> bool:
        return any(r.wrong not in {"0", "N/A"} for r in self.rows)


_NCCL_ROW = re.compile(
    r"^(?:\d+:\s+)?\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)\s"
)
_NCCL_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.]+)")
_NCCL_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<p>[\w-]+)")


def parse_all_reduce(text: str) -> NcclResult:
    """Parse nccl-tests ``all_reduce_perf`` output (optionally with srun ``--label`` prefixes)."""
    rows = []
    avg = None
    provider = None
    for line in text.splitlines():
        if match := _NCCL_ROW.match(line):
            rows.append(NcclRow(int(match["size"]), float(match["busbw"]), match["wrong"]))
        elif match := _NCCL_AVG.search(line):
            avg = float(match["bw"])
        elif match := _NCCL_PROVIDER.search(line):
            provider = provider or match["p"]
        elif "Using network Socket" in line or "NET/Socket" in line:
            provider = provider or "socket"
    ok = bool(re.search(r"#\s*Out of bounds values\s*:\s*0 OK", text))
    return NcclResult(rows=tuple(rows), avg_busbw_gbps=avg, out_of_bounds_ok=ok, provider=provider)
