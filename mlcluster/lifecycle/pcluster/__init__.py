"""ParallelCluster node scripts: ``run.sh`` (the OnNodeConfigured entry), ``lib.sh`` and one script per step.

Upload ``NODE_SCRIPT_FILES`` under one S3 prefix; the rendered cluster
configuration runs ``run.sh`` from there with the node's role and steps, and
``run.sh`` fetches ``lib.sh`` and the step scripts from the same prefix.
"""

from pathlib import Path

#: The folder holding the scripts.
PCLUSTER_DIR = Path(__file__).parent

#: The script ParallelCluster runs; it runs the steps.
ENTRY_SCRIPT = "run.sh"

#: Every step, in the order ``run.sh`` runs them.
STEPS = ("docker", "enroot_pyxis", "nccl_efa", "neuron")

#: The files to upload to the node-script prefix.
NODE_SCRIPT_FILES = (ENTRY_SCRIPT, "lib.sh", *(f"{step}.sh" for step in STEPS))
