"""ParallelCluster node scripts: ``run.sh`` (the OnNodeConfigured entry), ``lib.sh`` and one script per step.

Upload ``NODE_SCRIPT_FILES`` under one S3 prefix; the rendered cluster
configuration runs ``run.sh`` from there with the node's role and steps, and
``run.sh`` fetches ``SUPPORT_FILES`` and the step scripts from the same prefix (and, for the
exporters step, the shared ``mlcluster.lifecycle.exporters`` files uploaded there too, and for the
health_check step ``HEALTH_TOOL``).
``pins.sh`` holds every pinned version, checksum, commit and key fingerprint.

On compute nodes ``run.sh`` runs nothing it has not checked: the queue's action in the cluster
configuration (which only the deploy writes) carries the SHA-256 of every file a node fetches
(``--sha256 NAME=HEX``, from :func:`node_script_sha256`), so a file changed in the bucket is refused
before any step runs. The head node and login pools run with ``--role``, ``--source`` and their steps
only: no ``--sha256`` means bucket-trusted (``run.sh`` fetches every file, the collector's rendered
files too, and trusts the bucket only the deploy role may write; ``--bucket-trusted`` says the same
explicitly but is not rendered). ParallelCluster refuses any change to their ``CustomActions`` on
update, so their arguments must not follow each script release.
"""

import hashlib
from collections.abc import Iterable
from pathlib import Path

from mlcluster.lifecycle.collector import COLLECTOR_DIR, COLLECTOR_FILES
from mlcluster.lifecycle.exporters import EXPORTER_FILES, EXPORTERS_DIR

#: The folder holding the scripts.
PCLUSTER_DIR = Path(__file__).parent

#: The script ParallelCluster runs; it runs the steps.
ENTRY_SCRIPT = "run.sh"

#: Every step, in the order ``run.sh`` runs them.
STEPS = ("docker", "docker_group", "enroot_pyxis", "nccl_efa", "neuron", "exporters", "collector", "health_check")

#: Files every step needs: helpers, pins and the per-user folder helper the steps install.
SUPPORT_FILES = ("lib.sh", "pins.sh", "user_dirs.sh")

#: The node health tool the health_check step installs: HyperPod's ``health.sh``, uploaded next to the
#: node scripts under this name (``run.sh``'s HEALTH_FILES).
HEALTH_TOOL = Path(__file__).parent.parent / "hyperpod" / "health.sh"

#: Slurm's HealthCheckProgram on ParallelCluster compute nodes (written by the health_check step).
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/mlcluster-health-check"

#: Where nccl_efa installs ``all_reduce_perf`` (the operator command's smoke test runs it there).
NCCL_TESTS_ALL_REDUCE = "/opt/mlcluster/nccl-tests/bin/all_reduce_perf"

#: The files to upload to the node-script prefix.
NODE_SCRIPT_FILES = (ENTRY_SCRIPT, *SUPPORT_FILES, *(f"{step}.sh" for step in STEPS))

#: The collector step's files rendered at deploy time (``mlcluster.collector.render``): uploaded by the
#: stack next to the scripts and fetched by the head node (bucket-trusted: no ``--sha256``).
GENERATED_FILES = ("collector.yml", "collector_targets.json")


def node_files(steps: Iterable[str]) -> tuple[str, ...]:
    """The files ``run.sh`` fetches for ``steps``: its ``SUPPORT_FILES``, step scripts, exporter, health and collector
    files."""
    chosen = set(steps)
    files = [*SUPPORT_FILES, *(f"{step}.sh" for step in STEPS if step in chosen)]
    if "exporters" in chosen:
        files += EXPORTER_FILES
    if "health_check" in chosen:
        files.append(HEALTH_TOOL.name)
    if "collector" in chosen:
        files += COLLECTOR_FILES
    return tuple(files)


def node_script_sha256() -> dict[str, str]:
    """Name -> hex SHA-256 of every file the stack uploads for ``run.sh`` to fetch, read from this package."""
    folders = {name: PCLUSTER_DIR for name in (*SUPPORT_FILES, *(f"{step}.sh" for step in STEPS))}
    folders.update({name: EXPORTERS_DIR for name in EXPORTER_FILES})
    folders.update({name: COLLECTOR_DIR for name in COLLECTOR_FILES})
    folders[HEALTH_TOOL.name] = HEALTH_TOOL.parent
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name, folder in folders.items()}
