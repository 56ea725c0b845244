"""The metrics collector's node files, shared by both backends: its install script and its target refresher.

``collector_install.sh`` installs the pinned Prometheus in agent mode with its
units; ``collector_targets.py`` (standard library only, run by a timer as the
collector's user) rewrites the collector's ``file_sd`` files from Slurm's node
list. Both are uploaded next to each backend's node scripts, with the two
files :func:`mlcluster.collector.render` makes at synth time.
"""

from pathlib import Path

#: The folder holding the files.
COLLECTOR_DIR = Path(__file__).parent
#: The files uploaded next to the node scripts.
COLLECTOR_FILES = ("collector_install.sh", "collector_targets.py")
#: Their paths here.
COLLECTOR_SCRIPTS = tuple(COLLECTOR_DIR / name for name in COLLECTOR_FILES)
#: What an upload of the folder leaves out (everything but ``COLLECTOR_FILES``).
COLLECTOR_EXCLUDE = ["__init__.py", "__pycache__", "*.pyc"]
