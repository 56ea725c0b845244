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
    for line in text.partition(NODES_MARK + "\n")[0].splitlines():
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


#: What the sinfo step prints between ``sinfo``'s default table and the per-node list.
NODES_MARK = "MLC-NODES"

_NODE_STATE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s+(?P<state>[a-z]+[*~#!%$@^+-]?)$")


def parse_node_states(text: str) -> list[tuple[str, str]]:
    """``(node, compact state)`` from ``sinfo -h -N -p P -o '%N %t'`` printed after :data:`NODES_MARK`.

    ``%t`` is sinfo's compact state (``idle``, ``mix``, ``alloc``, ``drain``, ``idle~`` powered down,
    ``idle*`` not responding; sinfo(1), "NODE STATE CODES"). A node of several partitions would be
    listed once per partition; the step asks for one partition.
    """
    _, marked, tail = text.partition(NODES_MARK + "\n")
    rows: list[tuple[str, str]] = []
    for line in tail.splitlines() if marked else []:
        if (match := _NODE_STATE.match(line.strip())) and match["name"] not in {n for n, _ in rows}:
            rows.append((match["name"], match["state"]))
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
    """What an all_reduce_perf run proved: sizes, average bus bandwidth, the network and versions NCCL used.

    ``nics`` maps each distinct EFA device count aws-ofi-nccl reported ("found N nics") to the first
    host that reported it: one entry on a healthy cluster, two when a node lost a device.
    """

    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds_ok: bool
    provider: str | None
    nics: dict[int, str] = field(default_factory=dict)
    plugin_version: str | None = None
    libfabric_version: str | None = None
    nccl_version: str | None = None
    nccl_tests_version: str | None = None

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
#: aws-ofi-nccl's provider line: ``NET/OFI Selected provider is %s, fabric is %s (found %d nics)``
#: (src/nccl_ofi_net.cpp, v1.14 and later) and ``NET/OFI Selected Provider is %s (found %d nics)``
#: (src/nccl_ofi_net.c, v1.7 to v1.13).
_NCCL_PROVIDER = re.compile(
    r"^(?:\d+:\s+)?(?P<host>[^:\s]+)\S*.*NET/OFI Selected [Pp]rovider is (?P<p>[\w-]+)"
    r"(?:, fabric is \S+)? \(found (?P<nics>\d+) nics\)"
)
#: ``NET/OFI Initializing `` PACKAGE_STRING (``aws-ofi-nccl <version>``, configure.ac AC_INIT).
_OFI_VERSION = re.compile(r"NET/OFI Initializing aws-ofi-nccl (?P<v>\S+)")
#: ``NET/OFI Using Libfabric version %u.%u`` (src/nccl_ofi_net.cpp).
_FABRIC_VERSION = re.compile(r"NET/OFI Using Libfabric version (?P<v>\d+\.\d+)")
#: nccl-tests ``# nccl-tests version %s nccl-headers=%d nccl-library=%d`` (src/util.cu, v2.17).
_TESTS_VERSION = re.compile(r"# nccl-tests version (?P<t>\S+) nccl-headers=\d+ nccl-library=(?P<code>\d+)")


def nccl_version(code: int) -> str:
    """NCCL's version from ``NCCL_VERSION_CODE`` (nccl.h: ``X*10000+Y*100+Z`` since 2.9, ``X*1000+Y*100+Z`` before)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def parse_all_reduce(text: str) -> NcclResult:
    """Parse nccl-tests ``all_reduce_perf`` output (optionally with srun ``--label`` prefixes)."""
    rows = []
    avg = None
    provider = None
    nics: dict[int, str] = {}
    versions: dict[str, str] = {}
    for line in text.splitlines():
        if match := _NCCL_ROW.match(line):
            rows.append(NcclRow(int(match["size"]), float(match["busbw"]), match["wrong"]))
        elif match := _NCCL_AVG.search(line):
            avg = float(match["bw"])
        elif match := _NCCL_PROVIDER.search(line):
            provider = provider or match["p"]
            nics.setdefault(int(match["nics"]), match["host"])
        elif match := _OFI_VERSION.search(line):
            versions.setdefault("plugin", match["v"])
        elif match := _FABRIC_VERSION.search(line):
            versions.setdefault("libfabric", match["v"])
        elif match := _TESTS_VERSION.search(line):
            versions.setdefault("tests", match["t"])
            versions.setdefault("nccl", nccl_version(int(match["code"])))
        elif "Using network Socket" in line or "NET/Socket" in line:
            provider = provider or "socket"
    ok = bool(re.search(r"#\s*Out of bounds values\s*:\s*0 OK", text))
    return NcclResult(
        rows=tuple(rows),
        avg_busbw_gbps=avg,
        out_of_bounds_ok=ok,
        provider=provider,
        nics=nics,
        plugin_version=versions.get("plugin"),
        libfabric_version=versions.get("libfabric"),
        nccl_version=versions.get("nccl"),
        nccl_tests_version=versions.get("tests"),
    )


@dataclass
class NodeCheck:
    """The node-side NCCL check (``mlcluster.cli.nccl.node_check``) across nodes."""

    ok: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)


_NODE_CHECK = re.compile(
    r"^(?:\d+:\s+)?MLC-NCCL (?P<host>\S+) (?P<what>ok|missing|not-installed|no-plugin|not-found|setting) ?(?P<rest>.*)$"
)


def parse_node_check(text: str) -> NodeCheck:
    """Per host: the library path that passed, or what is missing; and the NCCL tuner settings found."""
    check = NodeCheck()
    for line in text.splitlines():
        match = _NODE_CHECK.match(line.strip())
        if match is None:
            continue
        host, what, rest = match["host"], match["what"], match["rest"].strip()
        if what == "ok":
            check.ok[host] = rest
        elif what == "setting":
            entry = f"{host}: {rest}"
            if entry not in check.settings:
                check.settings.append(entry)
        else:
            label = {
                "missing": "no library folder for",
                "not-installed": "no executable",
                "no-plugin": "no aws-ofi-nccl libnccl-net*.so in",
                "not-found": "ldd: not found:",
            }[what]
            check.problems[host] = f"{label} {rest or '(none)'}"
    return check


@dataclass(frozen=True)
class ContainerView:
    """What a container saw on one node: GPUs, EFA verbs devices, the aws-ofi-nccl plugin (or None)."""

    gpus: int
    uverbs: int
    plugin: str | None


_CONTAINER = re.compile(r"^(?:\d+:\s+)?MLC-CTR (?P<host>\S+) gpus=(?P<g>\d+) uverbs=(?P<u>\d+) plugin=(?P<p>\S+)$")


def parse_container_check(text: str) -> dict[str, ContainerView]:
    """Per host, the ``MLC-CTR`` line of the container step's check (:data:`mlcluster.cli.smoke.CONTAINER_CHECK`)."""
    seen: dict[str, ContainerView] = {}
    for line in text.splitlines():
        if match := _CONTAINER.match(line.strip()):
            plugin = None if match["p"] == "none" else match["p"]
            seen.setdefault(match["host"], ContainerView(int(match["g"]), int(match["u"]), plugin))
    return seen


_NEURON = re.compile(r"^(?:\d+:\s+)?MLC-NEURON (?P<host>\S+) devices=(?P<n>\d+)(?: efa=(?P<efa>\d+))?$")


def parse_neuron_counts(text: str) -> dict[str, int]:
    """Per host, the Neuron devices neuron-ls listed (``MLC-NEURON <host> devices=<n>``, smoke's NEURON_COUNT)."""
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if match := _NEURON.match(line.strip()):
            seen.setdefault(match["host"], int(match["n"]))
    return seen


def parse_neuron_efa(text: str) -> dict[str, int]:
    """Per host, the EFA devices the same ``MLC-NEURON`` line counted (``efa=<n>``; absent: not counted)."""
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if (match := _NEURON.match(line.strip())) and match["efa"] is not None:
            seen.setdefault(match["host"], int(match["efa"]))
    return seen


@dataclass(frozen=True)
class NccomResult:
    """An nccom-test run: one row per size (bytes, bus bandwidth) and the average bus bandwidth."""

    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None
    #: nccom-test's own verdict when a size failed (``1 errors found - test failed``), else None.
    failure: str | None = None

    @property
    def peak(self) -> NcclRow | None:
        return max(self.rows, key=lambda r: r.busbw_gbps) if self.rows else None


#: nccom-test's table (Neuron "NCCOM-TEST User Guide", aws-neuron/aws-neuron-sdk
#: tools/neuron-sys-tools/nccom-test.rst at 86a9286833dc2a1cd23b674f7081061924aa587a): ``size(B)
#: count(elems) type time(us) algbw(GB/s) busbw(GB/s)``, then ``Avg bus bandwidth:      40.6901GB/s``.
#: A size that failed prints ``<size>    Failure running neuron-bench - log file <path>`` in its row
#: and the run ends with ``<N> errors found - test failed``.
_NCCOM_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[a-z]+\d*)\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)"
    r"\s+(?P<busbw>[\d.]+)\s*$"
)
_NCCOM_AVG = re.compile(r"Avg bus bandwidth:\s*(?P<bw>[\d.]+)\s*GB/s")
_NCCOM_FAILED = re.compile(r"^\s*\d+ errors? found - test failed\s*$")


def parse_nccom(text: str) -> NccomResult:
    """Parse ``nccom-test`` output."""
    rows = []
    avg = None
    failure = None
    for line in text.splitlines():
        if match := _NCCOM_ROW.match(line):
            rows.append(NcclRow(int(match["size"]), float(match["busbw"]), "0"))
        elif match := _NCCOM_AVG.search(line):
            avg = float(match["bw"])
        elif _NCCOM_FAILED.match(line):
            failure = line.strip()
    return NccomResult(tuple(rows), avg, failure)
