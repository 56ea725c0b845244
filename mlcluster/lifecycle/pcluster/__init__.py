"""ParallelCluster node scripts: ``run.sh`` (the OnNodeConfigured entry), ``lib.sh`` and one script per step.

Upload ``NODE_SCRIPT_FILES`` under one S3 prefix; the rendered cluster
configuration runs ``run.sh`` from there with the node's role and steps, and
``run.sh`` fetches ``SUPPORT_FILES`` and the step scripts from the same prefix (and, for the
exporters step, the shared ``mlcluster.lifecycle.exporters`` files uploaded there too, and for the
health_check step ``HEALTH_TOOL``).
``pins.sh`` holds every pinned version, checksum, commit and key fingerprint.
"""

from pathlib import Path

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
