"""Scripts that run on cluster nodes, shipped as package data and uploaded to S3 by the cluster constructs."""

from pathlib import Path

#: The folder that holds the node lifecycle scripts, one sub-folder per cluster backend.
LIFECYCLE_DIR = Path(__file__).parent
