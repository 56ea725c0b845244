"""What an NCCL run over EFA needs on a node, and the node-side shell that proves it before the run.

nccl-tests links ``libmpi`` and NCCL without an rpath, and NCCL loads the
aws-ofi-nccl plugin with ``dlopen``: without the right ``LD_LIBRARY_PATH``
``all_reduce_perf`` does not start, or NCCL silently falls back to TCP
sockets. AWS's own nccl-tests scripts (awsome-distributed-training,
micro-benchmarks/nccl-tests) put the EFA, Open MPI, aws-ofi-nccl and CUDA
library folders on the loader path; :data:`LIBRARY_DIRS` lists where each
backend's images keep them, first existing folder wins. NCCL's own folder is
found by its library (:data:`MARKER_FILES`): the HyperPod step nccl_tests
builds against the first of ``/opt/nccl/build``, ``/usr/local/cuda`` and
``/usr`` that has ``include/nccl.h`` and nccl-tests' Makefile links
``-L$NCCL_HOME/lib`` with no rpath, so the same order is searched here.

:data:`EFA_DEVICES` is the number of EFA devices aws-ofi-nccl should find on
one node ("found N nics", ``src/nccl_ofi_net.cpp`` of aws/aws-ofi-nccl): the
EC2 ``NetworkInfo.EfaInfo.MaximumEfaInterfaces`` of each type, as
moto 5's ``instance_types.json`` and the EC2 user guide ("Maximize network
bandwidth on Amazon EC2 instances with multiple network cards") give them,
and for Trainium the Neuron guide "How to prepare trn1.32xlarge for
multi-node execution" ("trn1.32xlarge has 8 EFA devices, trn1n.32xlarge has
16"). ``tests/cli/test_nccl.py`` compares every entry with moto's data.
"""

from __future__ import annotations

import shlex
from typing import Final, Literal

Backend = Literal["pcluster", "hyperpod"]

#: Per backend: (component, candidate folders); the first folder that exists on the node is used.
#: ParallelCluster: Ubuntu AMIs install the EFA software under lib, Amazon Linux and RHEL under lib64;
#: aws-ofi-nccl is bundled in /opt/amazon/ofi-nccl or built by the lifecycle into /opt/aws-ofi-nccl
#: (mlcluster/lifecycle/pcluster/nccl_efa.sh). HyperPod: the DLAMI (Ubuntu) keeps all of them under
#: /opt/amazon, the plugin in its multiarch folder.
#: Where NCCL's libnccl.so.2 is, in the order nccl_tests.sh picks NCCL_HOME (then the distribution's
#: folders, for a libnccl2 package).
_NCCL_DIRS: Final = (
    "/opt/nccl/build/lib",
    "/usr/local/cuda/lib",
    "/usr/local/cuda/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
)

LIBRARY_DIRS: Final[dict[Backend, tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "pcluster": (
        ("efa", ("/opt/amazon/efa/lib", "/opt/amazon/efa/lib64")),
        ("openmpi", ("/opt/amazon/openmpi/lib", "/opt/amazon/openmpi/lib64")),
        (
            "ofi-nccl",
            (
                "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
                "/opt/amazon/ofi-nccl/lib",
                "/opt/aws-ofi-nccl/lib",
            ),
        ),
        ("nccl", _NCCL_DIRS),
        ("cuda", ("/usr/local/cuda/lib64",)),
    ),
    "hyperpod": (
        ("efa", ("/opt/amazon/efa/lib",)),
        ("openmpi", ("/opt/amazon/openmpi/lib",)),
        ("ofi-nccl", ("/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib")),
        ("nccl", _NCCL_DIRS),
        ("cuda", ("/usr/local/cuda/lib64",)),
    ),
}

#: Components whose folder must hold this file, not just exist (the others: the folder is enough).
MARKER_FILES: Final[dict[str, str]] = {"nccl": "libnccl.so.2"}

#: EFA devices per node, by instance type (see the module docstring for the sources).
EFA_DEVICES: Final[dict[str, int]] = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "trn1.32xlarge": 8,
    "trn1n.32xlarge": 16,
    "trn2.48xlarge": 16,
}

#: Settings the aws-ofi-nccl plugin (1.x) makes for NCCL itself: its tuner chooses protocol and
#: algorithm per message size, and a hand setting overrides it (facts.md, "aws-ofi-nccl ... can
#: conflict with its tuner"). A user's value is flagged, not removed.
TUNER_SETTINGS: Final = ("NCCL_PROTO", "NCCL_ALGO")

#: Marker of the lines the node-side check prints (parsed by :func:`mlcluster.cli.parsers.parse_node_check`).
MARK: Final = "MLC-NCCL"


def efa_devices(instance_type: str) -> int | None:
    """The EFA devices aws-ofi-nccl should find on one node of ``instance_type`` (``ml.`` allowed)."""
    return EFA_DEVICES.get(instance_type.removeprefix("ml."))


def library_prelude(backend: Backend) -> str:
    """Shell that exports ``LD_LIBRARY_PATH`` from the node's folders and records what is missing.

    Sets ``mlc_missing`` (components with no folder) and ``mlc_ofi`` (the plugin's folder). Folders
    are looked up under ``$MLC_ROOT`` (unset on a node; a test's fake root otherwise).
    """
    lines = [
        'mlc_path=""; mlc_missing=""; mlc_ofi=""; r=${MLC_ROOT:-}',
        "mlc_dir() {",
        "  local name=$1 file=$2 d",
        "  shift 2",
        '  for d in "$@"; do',
        '    if [ -d "$r$d" ] && [ -e "$r$d/$file" ]; then',
        '      mlc_path="$mlc_path${mlc_path:+:}$r$d"',
        '      if [ "$name" = ofi-nccl ]; then mlc_ofi="$r$d"; fi',
        "      return 0",
        "    fi",
        "  done",
        '  mlc_missing="$mlc_missing $name"',
        "}",
    ]
    lines += [
        f"mlc_dir {name} {shlex.quote(MARKER_FILES.get(name, '.'))} {' '.join(shlex.quote(d) for d in dirs)}"
        for name, dirs in LIBRARY_DIRS[backend]
    ]
    lines.append('export LD_LIBRARY_PATH="$mlc_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"')
    return "\n".join(lines) + "\n"


def node_check(backend: Backend, binary: str) -> str:
    """Shell run once per node before the NCCL job: folders, ``ldd`` of the binary and of the plugin.

    Prints one ``MLC-NCCL <host> ok|missing|not-installed|not-found|no-plugin ...`` line and, for every
    :data:`TUNER_SETTINGS` key the user's environment or ``/etc/nccl.conf`` / ``~/.nccl.conf``
    sets, one ``MLC-NCCL <host> setting KEY=VALUE (where)`` line. Exits 1 on a problem.
    """
    keys = "|".join(TUNER_SETTINGS)
    return (
        library_prelude(backend)
        + f"""h=$(hostname -s)
for k in {" ".join(TUNER_SETTINGS)}; do
  v=$(printenv "$k") && echo "{MARK} $h setting $k=$v (environment)"
done
for f in "$r/etc/nccl.conf" "$HOME/.nccl.conf"; do
  [ -r "$f" ] && awk -v h="$h" -v f="${{f#"$r"}}" 'match($0, /^[ \t]*({keys})[ \t]*=/) {{
    k = $0; sub(/[ \t]*=.*/, "", k); sub(/^[ \t]*/, "", k); v = substr($0, RLENGTH + 1); sub(/^[ \t]+/, "", v)
    print "{MARK} " h " setting " k "=" v " (" f ")" }}' "$f"
done
if [ -n "$mlc_missing" ]; then echo "{MARK} $h missing$mlc_missing"; exit 1; fi
if [ ! -x "$r"{shlex.quote(binary)} ]; then echo "{MARK} $h not-installed {binary}"; exit 1; fi
plugin=""
for f in "$mlc_ofi"/libnccl-net*.so; do if [ -e "$f" ]; then plugin=$f; break; fi; done
if [ -z "$plugin" ]; then echo "{MARK} $h no-plugin $mlc_ofi"; exit 1; fi
nf=$(ldd "$r"{shlex.quote(binary)} "$plugin" 2>&1 | awk '/not found/ {{print $1}}' | sort -u | paste -s -d, -)
if [ -n "$nf" ]; then echo "{MARK} $h not-found $nf"; exit 1; fi
echo "{MARK} $h ok $LD_LIBRARY_PATH"
"""
    )


def node_run(backend: Backend, command: str) -> str:
    """Shell that exports the node's library path and ``exec``s ``command`` (one rank)."""
    return library_prelude(backend) + f"exec {command}\n"
