"""``mlcluster smoke``: prove a new cluster works, step by step, from its head node or controller.

Every step is one script run through Systems Manager (:mod:`mlcluster.cli.runcommand`)
as the cluster's default user, with its own time bound, and ends in one PASS,
FAIL or SKIP line that says where to look when it fails.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import CliError
from mlcluster.cli.expectations import SOURCE, Expectation, expectation
from mlcluster.cli.nccl import Backend, efa_devices, node_check, node_run
from mlcluster.cli.nccl_marks import parse_versions, pass_mark
from mlcluster.cli.nodes import Node, cluster_name, controller
from mlcluster.cli.parsers import (
    NODES_MARK,
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
from mlcluster.pcluster.instance_types import INSTANCE_TYPES, InstanceType
from mlcluster.pcluster.render import efa_enabled

if TYPE_CHECKING:
    from rich.console import Console

NCCL_BINARY = "/opt/mlcluster/nccl-tests/bin/all_reduce_perf"
PRECHECK = "mlcluster-precheck"

#: Keeps all_reduce_perf's output under Run Command's 2500 characters: the result table and summary,
#: no per-rank lines; of aws-ofi-nccl's lines (one per rank) the first ``Initializing`` and libfabric
#: line, and one ``Selected provider ... (found N nics)`` line per distinct provider and device count,
#: so a node that lost an EFA device still shows.
NCCL_FILTER = (
    "awk '/^#  *Rank /{next} "
    "/NET\\/OFI Initializing /{if (!i++) print; next} /NET\\/OFI Using Libfabric version/{if (!l++) print; next} "
    '/Selected [Pp]rovider/{k = $0; sub(/.*Selected /, "", k); if (!(k in seen)) {seen[k] = 1; print}; next} '
    "/Using network/{if (!n++) print; next} "
    "/^#|^ *[0-9]+ +[0-9]+ /{print; next} /[Ee]rror|NET\\/Socket/{if (e++ < 5) print}'"
)
#: nccl-tests in a container: AWS's public image with CUDA, NCCL, the EFA libraries, aws-ofi-nccl and
#: nccl-tests, pinned by digest (a tag can be moved; a digest cannot). Enroot 4's reference syntax
#: ``REGISTRY#IMAGE@DIGEST``. The digest is the one the tag
#: ``cuda13.0.2-efa1.48.0-ofiv1.19.0-ncclv2.30.4-1-testsv2.18.3`` resolved to as third-party pin files
#: on GitHub record it; neither the image's publisher nor a registry (unreachable where this was
#: written) confirmed it, so it is NOT verified: ``docker buildx imagetools inspect
#: public.ecr.aws/hpc-cloud/nccl-tests:<tag>`` prints a tag's digest. CUDA 13 needs an NVIDIA driver of
#: the 580 series or later. Override with --nccl-image.
DEFAULT_NCCL_IMAGE = (
    "public.ecr.aws#hpc-cloud/nccl-tests@sha256:a5390d3f0eb50f3e5854085e2ae0fef90b9eb4f3b7486ed4cab0d47864809d4c"
)
#: Where that image keeps nccl-tests' binaries.
CONTAINER_NCCL_BINARY = "/opt/nccl-tests/build/all_reduce_perf"
#: The name of the container the container step's two job steps share.
CONTAINER_NAME = "mlcluster-nccl-tests"
#: Pyxis options of every container step: the user's home stays out of the container (the default
#: user may have sudo: an image must not be able to plant a ``.bashrc`` or SSH key there).
CONTAINER_OPTIONS = "--no-container-mount-home"
#: What a container must see, printed once per node: GPUs (``nvidia-smi -L``: one ``GPU <n>: <name>
#: (UUID: ...)`` line each, nvidia-smi(1)), the EFA verbs devices under /dev/infiniband, and the plugin.
CONTAINER_CHECK = (
    'h=$(hostname -s); g=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU "); u=0; p=none\n'
    'for f in /dev/infiniband/uverbs*; do if [ -e "$f" ]; then u=$((u + 1)); fi; done\n'
    "for f in /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net*.so /opt/amazon/ofi-nccl/lib/libnccl-net*.so "
    '/opt/aws-ofi-nccl/lib/libnccl-net*.so; do if [ -e "$f" ]; then p=$f; break; fi; done\n'
    'echo "MLC-CTR $h gpus=$g uverbs=$u plugin=$p"\n'
)
#: neuron-ls's device table (Neuron "Neuron LS User Guide"): one row per device whose first cell is
#: the device number (``| 0      | 2      | 32 GB  | 12, 3, 4, 1 | 0000:10:1c.0 | ...``); continuation
#: rows of the process columns leave it empty. Counted on the node, one line per node, with the EFA
#: devices: the RDMA devices in /sys/class/infiniband whose PCI driver is ``efa`` (as health.sh counts).
NEURON_COUNT = (
    "h=$(hostname -s); n=$(neuron-ls 2>&1 | awk -F'|' 'NF > 2 && $2 ~ /^ *[0-9]+ *$/ {n++} END {print n + 0}'); "
    'e=0; for d in "${MLC_ROOT:-}"/sys/class/infiniband/*; do '
    'case $(readlink -f "$d/device/driver" 2>/dev/null) in */efa) e=$((e + 1)) ;; esac; done; '
    'echo "MLC-NEURON $h devices=$n efa=$e"'
)
#: The port of nccom-test's root communicator across nodes. Its multi-node ("MPI execution") mode, as
#: the Neuron SDK 2.28.0 release of the "NCCOM-TEST User Guide" documents it (aws-neuron/aws-neuron-sdk
#: tools/neuron-sys-tools/nccom-test.rst at 86a9286833dc2a1cd23b674f7081061924aa587a, the release
#: pins.sh installs): every host given with ``-s, --hosts``, NEURON_RT_ROOT_COMM_ID set to the IP
#: address of the first host listed and any free port, run on one of the hosts (here the first; its
#: example puts ``--hosts`` after the operation). MPI may need passwordless SSH between the hosts.
NCCOM_ROOT_PORT = 44444
#: The rest of the run: ``-b/-e/-f`` sizes and step factor, ``-d fp32``, ``--check`` (the guide's
#: correctness check; it leaves time and bandwidth unchanged; given before another option because
#: 2.28 takes an optional mode after it), ``--non-interactive`` (no progress animation in captured output).
NCCOM_OPTIONS = "-b 64M -e 1G -f 2 --check -d fp32 --non-interactive"
#: NeuronCores per Neuron device, for nccom-test's rank count (Neuron "Trn1/Trn1n Architecture":
#: a Trainium v1 device has two NeuronCore-v2).
NEURON_CORES_PER_DEVICE = {"trn1.32xlarge": 2, "trn1n.32xlarge": 2}


def nccom_run(ranks: int, nodes: int) -> str:
    """The shell that starts nccom-test on the first node of the job: the hosts by IP address, the first
    (this node) also as the root communicator (NCCOM_ROOT_PORT), ``ranks`` workers over ``nodes`` nodes."""
    return (
        'ips=""; for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do '
        "ip=$(getent ahostsv4 \"$h\" | awk 'NR == 1 {print $1}'); "
        '[ -n "$ip" ] || { echo "cannot resolve $h" >&2; exit 1; }; ips="$ips $ip"; done; '
        f'set -- $ips; export NEURON_RT_ROOT_COMM_ID="$1:{NCCOM_ROOT_PORT}"; '
        f'exec nccom-test -r {ranks} -N {nodes} {NCCOM_OPTIONS} allr --hosts "$@"'
    )


def nccom_script(placement: str, first: str, ranks: int, nodes: int, timeout: int) -> str:
    """The smoke step's shell: allocate every node of ``placement``, then start :func:`nccom_run` once, on ``first``.

    ``salloc`` holds the whole allocation (``SLURM_JOB_NODELIST`` names every node) and runs its
    command on the submitting host; the ``srun`` inside it is one task on ``first``. A lone
    ``srun -N 2 --ntasks=1`` would not do: srun lowers the node count to the task count ("can't run
    1 processes on 2 nodes, setting nnodes to 1"), so the job, and nccom-test's host list, would
    hold one node.
    """
    return (
        "export FI_PROVIDER=efa\n"
        f"timeout {timeout} salloc {placement} srun -N 1 -n 1 -w {shlex.quote(first)} "
        f"bash -c {shlex.quote(nccom_run(ranks, nodes))} 2>&1"
    )


#: An image reference pinned by digest (what --image and --nccl-image accept).
DIGEST_PINNED = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
#: The NCCL filter, keeping the container check's lines too.
NCCL_FILTER_CONTAINER = NCCL_FILTER.replace("awk '", "awk '/^MLC-CTR /{print; next} ", 1)
#: Seconds srun waits for the idle nodes it names (``--immediate``): they were idle a moment ago, so a
#: longer wait means another job took them.
IMMEDIATE_SECONDS = 60
PRECHECK_FILTER = "grep -E ' FAIL |: all checks passed$|check\\(s\\) failed$'"


@dataclass
class Step:
    """One smoke step's outcome."""

    name: str
    outcome: str  # PASS, FAIL or SKIP
    summary: str
    look_at: str = ""
    command_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "outcome": self.outcome,
            "summary": self.summary,
            "look_at": self.look_at,
            "command_id": self.command_id,
            **({"data": self.data} if self.data else {}),
        }


@dataclass(frozen=True)
class NodeKind:
    """One kind of node of a partition, and what it must show: a ParallelCluster compute resource (its
    instance type and its own ``efa`` setting) or a HyperPod instance group (EFA on where the type has it)."""

    resource: str
    instance_type: str
    efa: bool

    def efa_devices(self) -> int:
        """EFA devices one node must show: the type's, or 0 where the compute resource has EFA off."""
        return (efa_devices(self.instance_type) or 0) if self.efa else 0

    def expectations(self) -> tuple[int, int, int]:
        """(NVIDIA GPUs, EFA devices, Neuron devices) one node of this kind must show."""
        info = INSTANCE_TYPES.get(self.instance_type.removeprefix("ml."))
        gpus = info.accelerators if info is not None and info.accelerator == "nvidia" else 0
        neuron = info.accelerators if info is not None and info.accelerator == "neuron" else 0
        return gpus, self.efa_devices(), neuron


@dataclass(frozen=True)
class Partition:
    """The partition under test and the kinds of node in it (one per compute resource / instance group)."""

    name: str
    kinds: tuple[NodeKind, ...]
    #: ParallelCluster names its Slurm nodes ``<queue>-<st|dy>-<compute resource>-<index>``; HyperPod by host.
    backend: str = "hyperpod"

    @property
    def uniform(self) -> bool:
        """True when every node of the partition must show the same (one instance type and EFA setting)."""
        return len({k.expectations() for k in self.kinds}) == 1

    def kind_of(self, node: str) -> NodeKind | None:
        """The kind of Slurm node ``node``: from its name on ParallelCluster, the only kind of a uniform
        partition on HyperPod; None when the name does not tell (HyperPod groups of different types sharing
        a partition: Slurm's node names are host names)."""
        if self.backend == "pcluster":
            for kind in self.kinds:
                if re.fullmatch(rf"{re.escape(self.name)}-(?:st|dy)-{re.escape(kind.resource)}-[0-9]+", node):
                    return kind
            return None
        return self.kinds[0] if self.uniform else None


def partitions(target: Target) -> list[Partition]:
    """The cluster's Slurm partitions and their kinds of node, from the environment file.

    ParallelCluster: one kind per compute resource of the queue, with its own instance type and ``efa``
    setting (as rendered). HyperPod: one per worker group whose partition it is (EFA is on for every type
    that has it).
    """
    cluster = target.environment.config.cluster
    if cluster.pcluster is not None:
        return [
            Partition(
                q.name,
                tuple(NodeKind(cr.name, cr.instance_type, efa_enabled(cr)) for cr in q.compute_resources),
                "pcluster",
            )
            for q in cluster.pcluster.queues
        ]
    assert cluster.hyperpod is not None  # require_backend ran first
    grouped: dict[str, list[NodeKind]] = {}
    for w in cluster.hyperpod.workers:
        info = INSTANCE_TYPES.get(w.instance_type.removeprefix("ml."))
        kind = NodeKind(w.instance_group_name, w.instance_type, info is not None and info.efa)
        grouped.setdefault(w.partition_name or w.instance_group_name, []).append(kind)
    return [Partition(name, tuple(kinds), "hyperpod") for name, kinds in grouped.items()]


def choose_partition(target: Target, partition: str | None) -> Partition:
    """The partition ``--partition`` names (the first one when not given), or a CliError listing the allowed."""
    known = partitions(target)
    chosen = next((p for p in known if p.name == partition), None) if partition else known[0]
    if chosen is None:
        raise CliError(
            f"--partition {partition}: not a partition of {target.name} (allowed: {', '.join(p.name for p in known)})",
        )
    return chosen


class Smoke:
    """Runs the steps against one cluster and collects their outcomes."""

    def __init__(self, target: Target, node: Node, console: Console, nodes: int, partition: Partition) -> None:
        self.target = target
        self.node = node
        self.console = console
        self.nodes = nodes
        self.partition = partition
        self.steps: list[Step] = []
        self.partition_nodes = 0
        #: Nodes of the partition sinfo reported idle: the only ones the later steps name (all of one kind).
        self.idle_nodes: list[str] = []
        #: The kind of node under test (sinfo picks the one with the most idle nodes in a mixed partition).
        self.kind = partition.kinds[0]

    @property
    def instance_type(self) -> str:
        """The instance type of the nodes under test."""
        return self.kind.instance_type

    def placement(self, count: int) -> str:
        """srun options that run on ``count`` of the idle nodes, alone, or fail at once if they are taken.

        ``--nodelist`` names exactly the nodes (never a drained, down or busy one), ``--exclusive``
        keeps other jobs off them, and ``--immediate`` fails instead of queueing behind a job.
        """
        nodes = ",".join(self.idle_nodes[:count])
        partition = shlex.quote(self.partition.name)
        return f"-N {count} -p {partition} --nodelist={nodes} --exclusive --immediate={IMMEDIATE_SECONDS}"

    def run(self, name: str, script: str, timeout: int) -> runcommand.Result:
        return runcommand.run(
            self.target,
            self.node,
            "set -o pipefail\n" + script,
            comment=f"mlcluster smoke {self.target.name}: {name}",
            timeout_seconds=timeout,
            user=self.target.default_user,
            console=self.console,
        )

    def look(self, result: runcommand.Result, then: str) -> str:
        return f"{runcommand.where_to_look(self.target, self.node, result)}; {then}"

    def failed_run(self, name: str, result: runcommand.Result, then: str) -> Step | None:
        if result.status == "TimedOut":
            return Step(
                name,
                "FAIL",
                f"timed out ({result.stderr or 'the step ran past its bound'})",
                self.look(result, then),
                result.command_id,
            )
        if result.status != "Success" and result.exit_code in (-1, 0):
            return Step(
                name,
                "FAIL",
                f"Run Command {result.status}: {result.stderr}".strip(),
                self.look(result, then),
                result.command_id,
            )
        return None

    def sinfo(self, timeout: int) -> Step:
        script = f"sinfo\necho {NODES_MARK}\nsinfo -h -N -p {shlex.quote(self.partition.name)} -o '%N %t'"
        result = self.run("sinfo", script, timeout)
        then = f"`mlcluster ssh {self.target.name}`, then `sinfo -R` and `sudo systemctl status slurmctld`"
        if failed := self.failed_run("sinfo", result, then):
            return failed
        rows = parse_sinfo(result.stdout)
        mine = [r for r in rows if r.partition == self.partition.name]
        usable = sum(r.nodes for r in mine if r.usable)
        self.partition_nodes = sum(r.nodes for r in mine)
        self.idle_nodes = [name for name, state in parse_node_states(result.stdout) if state == "idle"]
        all_idle = len(self.idle_nodes)
        unknown = self.choose_kind()
        data = {
            "rows": [r.__dict__ for r in rows],
            "idle_nodes": self.idle_nodes,
            "kind": {"resource": self.kind.resource, "instance_type": self.instance_type, "efa": self.kind.efa},
        }
        if not result.ok or not rows:
            return Step(
                "sinfo",
                "FAIL",
                f"sinfo exited {result.exit_code}: {result.stdout.strip()[:300]}",
                self.look(result, then),
                result.command_id,
                data,
            )
        if not mine:
            known = ", ".join(sorted({r.partition for r in rows}))
            return Step(
                "sinfo",
                "FAIL",
                f"no partition {self.partition.name} (partitions: {known})",
                "pass --partition with one of them",
                result.command_id,
                data,
            )
        if unknown:
            kinds = ", ".join(f"{k.resource}: {k.instance_type}" for k in self.partition.kinds)
            return Step(
                "sinfo",
                "FAIL",
                f"partition {self.partition.name} mixes node kinds ({kinds}) and Slurm's node names do not say "
                f"which is which ({', '.join(unknown[:5])})",
                "give each instance group its own partition_name, or pass --partition with a partition of one kind",
                result.command_id,
                data,
            )
        bad = ", ".join(f"{r.nodes} {r.state} ({r.nodelist})" for r in mine if not r.usable)
        idle = len(self.idle_nodes)
        summary = f"partition {self.partition.name}: {usable} of {self.partition_nodes} nodes usable, {all_idle} idle"
        if len(self.partition.kinds) > 1:
            summary += (
                f", {idle} of them {self.kind.resource} ({self.instance_type}{'' if self.kind.efa else ', EFA off'})"
            )
        if idle < self.nodes:
            busy = usable - all_idle
            return Step(
                "sinfo",
                "FAIL",
                f"{summary}, {self.nodes} idle{' of one kind' if len(self.partition.kinds) > 1 else ''} needed; "
                f"not usable: {bad or 'none'}"
                + (f"; {busy} busy with jobs (the smoke test runs on idle nodes only)" if busy > 0 else ""),
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step(
            "sinfo", "PASS", summary + (f" (not usable: {bad})" if bad else ""), command_id=result.command_id, data=data
        )

    def choose_kind(self) -> list[str]:
        """Keep the idle nodes of one kind, the one with the most (the first in the file on a tie); the idle
        nodes whose kind their name does not tell, when the partition is not uniform (then nothing is kept)."""
        if self.partition.uniform:
            return []
        kinds = {name: self.partition.kind_of(name) for name in self.idle_nodes}
        unknown = [name for name, kind in kinds.items() if kind is None]
        if unknown:
            self.idle_nodes = []
            return unknown
        counts = [sum(k == kind for k in kinds.values()) for kind in self.partition.kinds]
        self.kind = self.partition.kinds[counts.index(max(counts))]
        self.idle_nodes = [name for name, kind in kinds.items() if kind == self.kind]
        return []

    def hostname(self, timeout: int) -> Step:
        if lacking := self.lacking("srun", self.nodes):
            return lacking
        script = f"timeout {timeout} srun {self.placement(self.nodes)} --ntasks-per-node=1 hostname 2>&1"
        result = self.run("srun hostname", script, timeout)
        then = "`squeue` and `sinfo -R` on the head node, and slurmd's log on the nodes"
        if failed := self.failed_run("srun", result, then):
            return failed
        hosts = parse_hostnames(result.stdout) if result.ok else []
        if len(hosts) != self.nodes:
            return Step(
                "srun",
                "FAIL",
                f"`srun -N {self.nodes} hostname` exited {result.exit_code}, "
                f"{len(hosts)} host(s): {result.stdout.strip()[:300]}",
                self.look(result, then),
                result.command_id,
                {"hosts": hosts},
            )
        return Step(
            "srun",
            "PASS",
            f"{self.nodes} nodes answered: {', '.join(hosts)}",
            command_id=result.command_id,
            data={"hosts": hosts},
        )

    def precheck(self, timeout: int) -> Step:
        if self.target.backend != "hyperpod":
            return Step("precheck", "SKIP", "the runtime pre-check is a HyperPod lifecycle tool")
        if lacking := self.lacking("precheck", 1):
            return lacking
        count = len(self.idle_nodes)
        script = (
            f"timeout {timeout} srun {self.placement(count)} --ntasks-per-node=1 {PRECHECK} 2>&1 | {PRECHECK_FILTER}"
        )
        result = self.run("pre-check", script, timeout)
        then = f"run `srun {self.placement(count)} {PRECHECK}` on the controller and follow each FAIL line's mitigation"
        if failed := self.failed_run("precheck", result, then):
            return failed
        summary = parse_precheck(result.stdout)
        data = {"passed_hosts": summary.passed_hosts, "failures": summary.failures, "nodes": count}
        if summary.failures or len(summary.passed_hosts) != count:
            lines = "; ".join(f"{h}: {', '.join(f) or 'failed'}" for h, f in summary.failures.items())
            return Step(
                "precheck",
                "FAIL",
                f"{len(summary.passed_hosts)} of {count} nodes passed"
                + (f"; {lines}" if lines else "")
                + (" (output truncated)" if result.truncated else ""),
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step(
            "precheck", "PASS", f"all {count} nodes passed every check", command_id=result.command_id, data=data
        )

    def lacking(self, name: str, count: int) -> Step | None:
        """A SKIP when sinfo found fewer than ``count`` idle nodes (its FAIL already says why)."""
        if len(self.idle_nodes) >= max(count, 1):
            return None
        return Step(name, "SKIP", f"not run: sinfo found {len(self.idle_nodes)} idle node(s), {max(count, 1)} needed")

    def nccl_kind(self, name: str) -> InstanceType | Step:
        """The partition's instance type when an NCCL step applies to it, else the SKIP that says why."""
        kind = INSTANCE_TYPES.get(self.instance_type.removeprefix("ml."))
        if self.nodes < 2:
            return Step(name, "SKIP", "all_reduce across nodes needs --nodes 2 or more")
        if kind is None or kind.accelerator != "nvidia":
            return Step(name, "SKIP", f"{self.instance_type} has no NVIDIA GPUs")
        if not kind.efa:
            return Step(name, "SKIP", f"{self.instance_type} has no EFA")
        if not self.kind.efa:
            return Step(name, "SKIP", f"{self.kind.resource}: EFA is off (efa: false)")
        return self.lacking(name, self.nodes) or kind

    def nccl(self, timeout: int, min_busbw: float | None) -> Step:
        kind = self.nccl_kind("nccl")
        if isinstance(kind, Step):
            return kind
        backend: Backend = "hyperpod" if self.target.backend == "hyperpod" else "pcluster"
        where = self.placement(self.nodes)
        check = shlex.quote(node_check(backend, NCCL_BINARY))
        run = shlex.quote(node_run(backend, f"{NCCL_BINARY} -b 1G -e 8G -f 2 -g 1"))
        script = (
            "export FI_PROVIDER=efa NCCL_DEBUG=INFO\n"
            "grep -h 'EFA installer version' /opt/amazon/efa_installed_packages 2>/dev/null | head -1\n"
            f"timeout {min(timeout, 300)} srun {where} --ntasks-per-node=1 bash -c {check} 2>&1 || exit\n"
            f"timeout {timeout} srun {where} --ntasks-per-node={kind.accelerators} --cpu-bind=none "
            f"--mpi=pmix bash -c {run} 2>&1 | {NCCL_FILTER}"
        )
        result = self.run("NCCL all_reduce_perf", script, timeout + min(timeout, 300))
        then = (
            f"rerun `NCCL_DEBUG=INFO srun {where} --cpu-bind=none --mpi=pmix {NCCL_BINARY} -b 1G -e 8G -f 2 -g 1` "
            "with LD_LIBRARY_PATH as the step printed it and look for `NET/OFI Selected provider is efa`; "
            "`fi_info -p efa` on a node lists its EFA devices"
        )
        if failed := self.failed_run("nccl", result, then):
            return failed
        node = parse_node_check(result.stdout)
        extra: dict[str, Any] = {"library_path": node.ok, "tuner_settings": node.settings}
        warning = (
            f"; warning: {', '.join(node.settings)} overrides aws-ofi-nccl's tuner (unset it unless measured)"
            if node.settings
            else ""
        )
        if node.problems or len(node.ok) != self.nodes:
            missing = "; ".join(f"{h}: {p}" for h, p in node.problems.items()) or result.stdout.strip()[-300:]
            return Step(
                "nccl",
                "FAIL",
                f"the NCCL libraries are not ready on {self.nodes - len(node.ok)} of {self.nodes} nodes "
                f"(checked with ldd before the run): {missing}{warning}",
                self.look(result, "install the EFA software and aws-ofi-nccl (the lifecycle's NCCL step), then rerun"),
                result.command_id,
                extra,
            )
        return self.judge_nccl("nccl", result, then, min_busbw, [], warning, extra)

    def container(self, image: str | None, nccl_image: str, timeout: int, min_busbw: float | None) -> Step:
        """nccl-tests in a container through Pyxis on NVIDIA EFA partitions; elsewhere a plain Pyxis job."""
        info = INSTANCE_TYPES.get(self.instance_type.removeprefix("ml."))
        if info is None or info.accelerator != "nvidia" or not info.efa or not self.kind.efa or self.nodes < 2:
            return self.pyxis(image, timeout)
        kind = self.nccl_kind("container")
        if isinstance(kind, Step):
            return kind
        devices = efa_devices(self.instance_type)
        where = self.placement(self.nodes)
        pyxis = f"--container-image={shlex.quote(nccl_image)} {CONTAINER_OPTIONS}"
        # One allocation, two job steps sharing a named container: the image is imported once per
        # node (Pyxis keeps a named container for the job), not once per srun.
        named = f"--container-name={CONTAINER_NAME} {pyxis}"
        steps = (
            f"srun --ntasks-per-node=1 {named} bash -c {shlex.quote(CONTAINER_CHECK)} || exit\n"
            f"srun --ntasks-per-node={kind.accelerators} --cpu-bind=none --mpi=pmix {named} "
            f"{CONTAINER_NCCL_BINARY} -b 1G -e 8G -f 2 -g 1\n"
        )
        script = (
            "export FI_PROVIDER=efa NCCL_DEBUG=INFO\n"
            f"timeout {timeout} salloc {where} bash -c {shlex.quote(steps)} 2>&1 | {NCCL_FILTER_CONTAINER}"
        )
        result = self.run("NCCL in a container (Pyxis)", script, timeout)
        then = (
            f"`srun {where} {pyxis} nvidia-smi -L` by hand; check /opt/slurm/etc/plugstack.conf, enroot's paths "
            "and that the NVIDIA container toolkit and EFA devices reach the container (/dev/infiniband)"
        )
        if failed := self.failed_run("container", result, then):
            return failed
        seen = parse_container_check(result.stdout)
        problems = []
        for host, view in sorted(seen.items()):
            if view.gpus != kind.accelerators:
                problems.append(f"{host}: the container sees {view.gpus} of {kind.accelerators} GPUs")
            if devices is not None and view.uverbs != devices:
                problems.append(f"{host}: the container sees {view.uverbs} of {devices} EFA devices in /dev/infiniband")
            if view.plugin is None:
                problems.append(f"{host}: no aws-ofi-nccl plugin (libnccl-net*.so) in the image")
        if len(seen) != self.nodes:
            problems.append(f"{len(seen)} of {self.nodes} nodes ran the container")
        extra: dict[str, Any] = {"image": nccl_image, "container": {h: v.__dict__ for h, v in seen.items()}}
        return self.judge_nccl("container", result, then, min_busbw, problems, "", extra)

    def pyxis(self, image: str | None, timeout: int) -> Step:
        """A plain Pyxis job on one node (partitions without NVIDIA GPUs and EFA)."""
        if image is None:
            return Step(
                "container",
                "SKIP",
                f"{self.instance_type}: pass --image NAME@sha256:DIGEST to run a Pyxis job on this partition",
            )
        if lacking := self.lacking("container", 1):
            return lacking
        script = (
            f"timeout {timeout} srun {self.placement(1)} --container-image={shlex.quote(image)} {CONTAINER_OPTIONS} "
            "grep -h '^PRETTY_NAME=' /etc/os-release 2>&1"
        )
        result = self.run("container (Pyxis)", script, timeout)
        then = "`srun --container-image=... true` by hand; check /opt/slurm/etc/plugstack.conf and enroot's paths"
        if failed := self.failed_run("container", result, then):
            return failed
        line = next((x for x in result.stdout.splitlines() if x.startswith("PRETTY_NAME=")), "")
        if not result.ok or not line:
            return Step(
                "container",
                "FAIL",
                f"Pyxis job exited {result.exit_code}: {result.stdout.strip()[-300:]}",
                self.look(result, then),
                result.command_id,
            )
        return Step(
            "container",
            "PASS",
            f"{image} ran through Pyxis: {line.split('=', 1)[1].strip(chr(34))}",
            command_id=result.command_id,
        )

    def neuron(self, timeout: int) -> Step:
        """neuron-ls on every node: each must list the instance type's Neuron devices."""
        kind = INSTANCE_TYPES.get(self.instance_type.removeprefix("ml."))
        if kind is None or kind.accelerator != "neuron":
            return Step("neuron", "SKIP", f"{self.instance_type} has no Neuron devices")
        if lacking := self.lacking("neuron", self.nodes):
            return lacking
        where = self.placement(self.nodes)
        script = f"timeout {timeout} srun {where} --ntasks-per-node=1 bash -c {shlex.quote(NEURON_COUNT)} 2>&1"
        result = self.run("neuron-ls", script, timeout)
        then = "`neuron-ls` on the node; `sudo dmesg | grep -i neuron` and `modinfo neuron` for the driver"
        if failed := self.failed_run("neuron", result, then):
            return failed
        seen = parse_neuron_counts(result.stdout)
        short = {host: count for host, count in seen.items() if count != kind.accelerators}
        efa_expected = self.kind.efa_devices() or None
        efa_seen = parse_neuron_efa(result.stdout)
        efa_short = (
            {host: efa_seen.get(host) for host in seen if efa_seen.get(host) != efa_expected} if efa_expected else {}
        )
        data = {"devices": seen, "expected": kind.accelerators, "efa_devices": efa_seen, "efa_expected": efa_expected}
        if short or efa_short or len(seen) != self.nodes or not result.ok:
            problems = [
                f"{host}: {count} of {kind.accelerators} Neuron devices" for host, count in sorted(short.items())
            ]
            problems += [
                f"{host}: EFA devices not listed ({efa_expected} expected)"
                if count is None
                else f"{host}: {count} of {efa_expected} EFA devices"
                for host, count in sorted(efa_short.items())
            ]
            if len(seen) != self.nodes:
                problems.append(f"{len(seen)} of {self.nodes} nodes answered")
            summary = "; ".join(problems) or f"exited {result.exit_code}"
            return Step("neuron", "FAIL", summary, self.look(result, then), result.command_id, data)
        return Step(
            "neuron",
            "PASS",
            f"{self.nodes} nodes list {kind.accelerators} Neuron devices each"
            + (f" and {efa_expected} EFA devices" if efa_expected else ""),
            command_id=result.command_id,
            data=data,
        )

    def nccom(self, timeout: int, min_busbw: float | None) -> Step:
        """A two-or-more-node ``nccom-test`` all-reduce over EFA, from the first node of an exclusive allocation."""
        name = self.instance_type.removeprefix("ml.")
        kind = INSTANCE_TYPES.get(name)
        if kind is None or kind.accelerator != "neuron":
            return Step("nccom", "SKIP", f"{self.instance_type} has no Neuron devices")
        if self.nodes < 2:
            return Step("nccom", "SKIP", "all-reduce across nodes needs --nodes 2 or more")
        cores = NEURON_CORES_PER_DEVICE.get(name)
        if not kind.efa or not self.kind.efa or cores is None:
            return Step("nccom", "SKIP", f"{self.instance_type}: no multi-node nccom-test for this type")
        if lacking := self.lacking("nccom", self.nodes):
            return lacking
        ranks = kind.accelerators * cores * self.nodes
        where = self.placement(self.nodes)
        first = self.idle_nodes[0]
        script = nccom_script(where, first, ranks, self.nodes, timeout)
        result = self.run("nccom-test all-reduce", script, timeout)
        then = (
            f"rerun `salloc {where} srun -N 1 -n 1 -w {first} nccom-test ... allr --hosts ...` "
            "and `fi_info -p efa` on a node"
        )
        if failed := self.failed_run("nccom", result, then):
            return failed
        parsed = parse_nccom(result.stdout)
        peak = parsed.peak
        expect = expectation(self.instance_type, min_busbw)
        data: dict[str, Any] = {
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "ranks": ranks,
            "avg_busbw_gbytes": parsed.avg_busbw_gbps,
            "peak_busbw_gbytes": peak.busbw_gbps if peak else None,
            "peak_size_bytes": peak.size_bytes if peak else None,
            "expected_line_rate_gbytes": expect.line_rate_gbytes if expect else None,
            "pass_busbw_gbytes": expect.pass_gbytes if expect else min_busbw,
            "source": SOURCE,
        }
        problems = []
        if not result.ok:
            problems.append(f"exited {result.exit_code}")
        if peak is None:
            problems.append("no result rows")
        if parsed.failure is not None:
            problems.append(parsed.failure)
        measured = (
            f"peak busbw {peak.busbw_gbps:.1f} GB/s at {peak.size_bytes / 2**20:g} MiB" if peak else "no bandwidth"
        )
        bound, mark = line_rate_mark(expect, min_busbw)
        if mark is not None and peak is not None and peak.busbw_gbps < mark:
            problems.append(f"below {mark:g} GB/s")
        summary = f"{measured} across {self.nodes} x {self.instance_type}, {ranks} ranks ({bound})"
        if problems:
            tail = result.stdout.strip()[-300:] if peak is None else ""
            return Step(
                "nccom",
                "FAIL",
                f"{summary}: {'; '.join(problems)}" + (f": {tail}" if tail else ""),
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step("nccom", "PASS", summary, command_id=result.command_id, data=data)

    def judge_nccl(
        self,
        name: str,
        result: runcommand.Result,
        then: str,
        min_busbw: float | None,
        problems: list[str],
        warning: str,
        extra: dict[str, Any],
    ) -> Step:
        """PASS or FAIL of an all_reduce_perf run: results, EFA as the network with every device, the pass mark.

        The pass mark comes from :func:`mlcluster.cli.nccl_marks.pass_mark`: 80% of a published
        measurement at the same message size where one exists, else half the line rate.
        """
        devices = efa_devices(self.instance_type)
        parsed = parse_all_reduce(result.stdout)
        peak = parsed.peak
        data: dict[str, Any] = {
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "provider": parsed.provider,
            "efa_devices_found": {str(count): host for count, host in sorted(parsed.nics.items())},
            "efa_devices_expected": devices,
            "aws_ofi_nccl_version": parsed.plugin_version,
            "libfabric_version": parsed.libfabric_version,
            "nccl_version": parsed.nccl_version,
            "nccl_tests_version": parsed.nccl_tests_version,
            **extra,
            "avg_busbw_gbytes": parsed.avg_busbw_gbps,
            "peak_busbw_gbytes": peak.busbw_gbps if peak else None,
            "peak_size_bytes": peak.size_bytes if peak else None,
        }
        problems = list(problems)
        if not result.ok:
            problems.append(f"exited {result.exit_code}")
        if peak is None:
            problems.append("no result rows")
        if parsed.wrong_values or (peak is not None and not parsed.out_of_bounds_ok):
            problems.append("wrong values reported")
        if parsed.plugin_version is None:
            problems.append("aws-ofi-nccl did not load (no `NET/OFI Initializing aws-ofi-nccl` line)")
        if parsed.provider != "efa":
            problems.append(f"NCCL used {parsed.provider or 'an unknown network'}, not EFA")
        if devices is not None:
            short = {count: host for count, host in parsed.nics.items() if count != devices}
            problems += [f"aws-ofi-nccl found {count} EFA devices on {host}" for count, host in sorted(short.items())]
            if short:
                problems[-1] += f" ({devices} expected on {self.instance_type.removeprefix('ml.')})"
        measured = (
            f"peak busbw {peak.busbw_gbps:.1f} GB/s at {peak.size_bytes / 2**30:g} GiB" if peak else "no bandwidth"
        )
        mark = pass_mark(self.instance_type, self.nodes, [r.size_bytes for r in parsed.rows], min_busbw)
        judged = next((r for r in parsed.rows if mark is not None and r.size_bytes == mark.size_bytes), peak)
        if mark is None:
            bound = "no expectation for this type (pass --min-busbw)"
        else:
            bound = f"pass >= {mark.pass_gbytes:g} GB/s: {mark.basis}"
            if judged is not None and judged.busbw_gbps < mark.pass_gbytes:
                problems.append(
                    f"{judged.busbw_gbps:.1f} GB/s at {judged.size_bytes / 2**30:g} GiB "
                    f"is below {mark.pass_gbytes:g} GB/s"
                )
        fabric = (parsed.provider or "an unknown network") + (
            f" x {min(parsed.nics)} devices" if parsed.nics and parsed.provider == "efa" else ""
        )
        efa_installer = parse_versions(result.stdout)["efa_installer"]
        data |= {
            "efa_installer_version": efa_installer,
            "judged_size_bytes": judged.size_bytes if judged else None,
            "judged_busbw_gbytes": judged.busbw_gbps if judged else None,
            "pass_busbw_gbytes": mark.pass_gbytes if mark else None,
            "pass_basis": mark.basis if mark else None,
            "published_busbw_gbytes": mark.published_gbytes if mark else None,
            "source": mark.source if mark and mark.source else SOURCE,
        }
        versions = ", ".join(
            f"{label} {value}"
            for label, value in (
                ("NCCL", parsed.nccl_version),
                ("aws-ofi-nccl", parsed.plugin_version),
                ("libfabric", parsed.libfabric_version),
                ("EFA installer", efa_installer),
            )
            if value
        )
        summary = f"{measured} across {self.nodes} x {self.instance_type} over {fabric} ({bound})" + (
            f"; {versions}" if versions else ""
        )
        if problems:
            tail = result.stdout.strip()[-300:] if peak is None else ""
            return Step(
                name,
                "FAIL",
                f"{summary}: {'; '.join(problems)}" + (f": {tail}" if tail else "") + warning,
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step(name, "PASS", summary + warning, command_id=result.command_id, data=data)


def line_rate_mark(expect: Expectation | None, min_busbw: float | None) -> tuple[str, float | None]:
    """How a bandwidth is judged, in words, and the pass mark (None: nothing to compare with).

    --min-busbw applies also to types the expectation table does not know.
    """
    if expect is not None:
        return f"line rate {expect.line_rate_gbytes:g} GB/s, pass >= {expect.pass_gbytes:g} GB/s", expect.pass_gbytes
    if min_busbw is not None:
        return f"pass >= {min_busbw:g} GB/s (--min-busbw)", min_busbw
    return "no expectation for this type (pass --min-busbw)", None


STYLES = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow"}


@click.command()
@environment_options
@click.option(
    "--nodes", "nodes", type=click.IntRange(1, 2048), default=2, show_default=True, help="Nodes for srun and NCCL."
)
@click.option("--partition", metavar="P", help="Slurm partition (default: the first queue / worker group).")
@click.option(
    "--image",
    metavar="NAME@sha256:DIGEST",
    help="Image of the Pyxis step on partitions without NVIDIA GPUs and EFA (pinned by digest; default: step skipped).",
)
@click.option(
    "--nccl-image",
    metavar="NAME@sha256:DIGEST",
    default=DEFAULT_NCCL_IMAGE,
    show_default=True,
    help=(
        "nccl-tests image of the container step on NVIDIA EFA partitions (pinned by digest). The default's "
        "digest is not verified against the registry: get the one you trust with `docker buildx imagetools "
        "inspect public.ecr.aws/hpc-cloud/nccl-tests:<tag>` and pass it here."
    ),
)
@click.option(
    "--step-timeout", type=click.IntRange(30, 7200), default=900, show_default=True, help="Seconds each step may take."
)
@click.option(
    "--min-busbw",
    type=click.FloatRange(min=0),
    metavar="GB/s",
    help="Pass mark for NCCL bus bandwidth at the peak (default: 80% of a published measurement for the "
    "instance type at the same message size, else half its line rate).",
)
@json_option
def smoke(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    nodes: int,
    partition: str | None,
    image: str | None,
    nccl_image: str,
    step_timeout: int,
    min_busbw: float | None,
    as_json: bool,
) -> None:
    """Prove a cluster works: sinfo, srun, a container, the pre-check, NCCL over EFA; on Trainium neuron-ls, nccom-test.

    Each step runs on the head node / controller as the cluster's default user
    (ParallelCluster: SSM Run Command AWS-RunShellScript; HyperPod, whose nodes
    Run Command cannot target: a non-interactive Session Manager session, which
    needs the AWS CLI and its Session Manager plugin), bounded by
    --step-timeout, and prints one PASS/FAIL/SKIP line saying where to look.
    Every job names idle nodes only (--nodelist, --exclusive, --immediate).
    On HyperPod the runtime pre-check runs on every idle node of the partition.
    NCCL all_reduce_perf runs across --nodes nodes, bare metal (with the
    node's library path, checked by ldd first) and in a digest-pinned
    container (which must see every GPU, EFA device and the plugin); each run
    must use EFA with every device of the instance type, and its peak bus
    bandwidth is compared with the pass mark.
    Exit code 0 when no step failed, 1 otherwise.
    """
    from rich.console import Console
    from rich.markup import escape

    for option, value in (("--image", image), ("--nccl-image", nccl_image)):
        if value is not None and not DIGEST_PINNED.match(value):
            raise CliError(
                f"{option} {value}: not pinned by digest; allowed: NAME@sha256:<64 hex digits> "
                "(a tag can be moved to another image)",
            )
    target = Target.load(env, environments, region, profile)
    target.require_backend("pcluster", "hyperpod")
    chosen = choose_partition(target, partition)
    node = controller(target)
    console = Console(stderr=True, soft_wrap=True)
    smoke_run = Smoke(target, node, console, nodes, chosen)
    short = min(step_timeout, 120)
    plan: list[Callable[[], Step]] = [
        lambda: smoke_run.sinfo(short),
        lambda: smoke_run.hostname(step_timeout),
        lambda: smoke_run.container(image, nccl_image, step_timeout, min_busbw),
        lambda: smoke_run.precheck(step_timeout),
        lambda: smoke_run.nccl(step_timeout, min_busbw),
        lambda: smoke_run.neuron(short),
        lambda: smoke_run.nccom(step_timeout, min_busbw),
    ]
    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    for step in plan:
        result = step()
        smoke_run.steps.append(result)
        if not as_json:
            out.print(f"[{STYLES[result.outcome]}]{result.outcome}[/] {result.name}: {escape(result.summary)}")
            if result.outcome == "FAIL" and result.look_at:
                out.print(f"     look at: {result.look_at}", markup=False)
    passed = all(s.outcome != "FAIL" for s in smoke_run.steps)
    if as_json:
        echo_json(
            {
                "environment": env,
                "cluster": cluster_name(target),
                "node": node.as_dict(),
                "partition": chosen.name,
                "nodes": nodes,
                "passed": passed,
                "steps": [s.as_dict() for s in smoke_run.steps],
            }
        )
    if not passed:
        failed = ", ".join(s.name for s in smoke_run.steps if s.outcome == "FAIL")
        raise CliError(f"smoke test failed: {failed}")
