"""SageMaker HyperPod (Slurm) node lifecycle scripts: ``on_create.sh``, its steps, and ``precheck.sh``.

The whole folder is uploaded to the lifecycle S3 prefix together with the two generated
input files (``mlcluster_features.json`` and ``provisioning_parameters.json``); see README.md.
"""

from pathlib import Path

#: The folder to upload as the HyperPod ``LifeCycleConfig.SourceS3Uri`` prefix.
HYPERPOD_DIR = Path(__file__).parent
