"""The metrics exporters' node files, shared by both backends: units, textfile collectors, DCGM fields.

``efa_metrics.sh`` (EFA port counters) and ``slurm_metrics.sh`` (Slurm node and
job counts) are run by timers as the exporter's user and write the node
exporter's textfile folder; ``dcgm_counters.csv`` is the DCGM exporter's field
list; ``exporter_units.sh`` (sourced) holds the exporters' layout and prints their systemd units.
ParallelCluster's ``exporters.sh`` and HyperPod's ``steps/observability.sh`` source it and install
the others; both backends upload them to the top of their node-script prefix.
"""

from pathlib import Path

#: The folder holding the files.
EXPORTERS_DIR = Path(__file__).parent
#: The files uploaded next to the node scripts.
EXPORTER_FILES = ("exporter_units.sh", "efa_metrics.sh", "slurm_metrics.sh", "dcgm_counters.csv")
#: Their paths here.
EXPORTER_SCRIPTS = tuple(EXPORTERS_DIR / name for name in EXPORTER_FILES)
#: What an upload of the folder leaves out (everything but ``EXPORTER_FILES``).
EXPORTERS_EXCLUDE = ["__init__.py", "__pycache__", "*.pyc"]
