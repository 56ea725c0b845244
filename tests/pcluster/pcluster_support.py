"""Shared data for the ParallelCluster tests: the three archetypes, deploy inputs, helpers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from mlcluster.config.pcluster import PclusterConfig
from mlcluster.config.schema import load_section
from mlcluster.pcluster.render import DeployInputs, ZoneSubnet
from tests.support import ROOT

PCLUSTER_PYTHON = ROOT / ".venv-pcluster" / "bin" / "python"
SCHEMA_TOOL = ROOT / "tools" / "pcluster_schema_check.py"

#: The three archetypes, as the ``cluster:`` section of an environment file.
ARCHETYPES_YAML: dict[str, str] = {
    "p5-odcr": """
cluster:
  backend: pcluster
  name: p5-train
  pcluster:
    head_node:
      instance_type: m5.8xlarge
    queues:
      - name: compute-gpu
        job_exclusive_allocation: true
        compute_resources:
          - name: p5
            instance_type: p5.48xlarge
            min_count: 4
            max_count: 4
            capacity_reservation_id: cr-0123456789abcdef0
            placement_group: false   # AWS-delivered ODCRs carry their own placement
    shared_storage:
      apps:
        size_gib: 200
""",
    "p4de-g5": """
cluster:
  backend: pcluster
  name: p4de-train
  pcluster:
    capacity_reservation_groups:
      - name: p4de-pool
        reservation_ids: [cr-0123456789abcdef1, cr-0123456789abcdef2]
    queues:
      - name: compute-gpu
        job_exclusive_allocation: true
        compute_resources:
          - name: p4de
            instance_type: p4de.24xlarge
            min_count: 4
            max_count: 4
            capacity_reservation_group: p4de-pool
      - name: inference-gpu
        compute_resources:
          - name: g5
            instance_type: g5.12xlarge
            min_count: 0
            max_count: 10
            efa: false
    login_nodes:
      instance_type: m5.2xlarge
      count: 1
    slurm:
      scaledown_idle_minutes: 15
""",
    "trn1-neuron": """
cluster:
  backend: pcluster
  name: trn1-train
  pcluster:
    os: ubuntu2204
    head_node:
      key_name: trn-key
    queues:
      - name: compute-trn
        job_exclusive_allocation: true
        compute_resources:
          - name: trn1
            instance_type: trn1.32xlarge
            min_count: 0
            max_count: 8
    node_scripts:
      neuron: true
    shared_storage:
      home_on_openzfs: true
""",
}

#: The rest of an environment the archetypes are deployed into.
NETWORK: dict[str, Any] = {"availability_zone": "us-east-1a", "extra_zones": [{"availability_zone": "us-east-1b"}]}
STORAGE: dict[str, Any] = {"openzfs": {}}


def archetype_env(name: str) -> dict[str, Any]:
    """A whole environment file (as a mapping) for archetype ``name``."""
    data: dict[str, Any] = yaml.safe_load(ARCHETYPES_YAML[name])
    return {"network": NETWORK, "storage": STORAGE, "tags": {"Project": "mlcluster"}, **data}


def pcluster(data: dict[str, Any] | str) -> PclusterConfig:
    """Load a ``cluster.pcluster`` section (a mapping or YAML text)."""
    raw = yaml.safe_load(data) if isinstance(data, str) else data
    return load_section(PclusterConfig, raw, "test.yaml")


def archetype(name: str) -> PclusterConfig:
    """The ``PclusterConfig`` of archetype ``name``."""
    return pcluster(yaml.safe_load(ARCHETYPES_YAML[name])["cluster"]["pcluster"])


PRIVATE_A = "subnet-0aaaaaaaaaaaaaaa1"
PRIVATE_B = "subnet-0aaaaaaaaaaaaaaa2"
PUBLIC = "subnet-0bbbbbbbbbbbbbbb1"
SG = "sg-0ccccccccccccccc1"
FSX = "fs-0ddddddddddddddd1"
ZFS_VOLUME = "fsvol-0eeeeeeeeeeeeeee1"
BUCKET = "mlcluster-dev-node-scripts"
SCRIPT_POLICY = "arn:aws:iam::123456789012:policy/parallelcluster/mlcluster-node-scripts"
SESSION_POLICY = "arn:aws:iam::123456789012:policy/parallelcluster/mlcluster-session-manager"
BOUNDARY = "arn:aws:iam::123456789012:policy/parallelcluster/mlcluster-node-boundary"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/p4de-train-p4de-pool"


def inputs(**overrides: Any) -> DeployInputs:
    """Deploy inputs with plain IDs; ``overrides`` replace single fields."""
    values: dict[str, Any] = {
        "region": "us-east-1",
        "private_subnets": (
            ZoneSubnet(zone="us-east-1a", subnet_id=PRIVATE_A),
            ZoneSubnet(zone="us-east-1b", subnet_id=PRIVATE_B),
        ),
        "public_subnet_id": PUBLIC,
        "security_group_ids": (SG,),
        "vpc_cidr": "10.0.0.0/16",
        "lustre_file_system_id": FSX,
        "node_script_bucket": BUCKET,
        "openzfs_volume_id": ZFS_VOLUME,
        "node_script_policy_arn": SCRIPT_POLICY,
        "session_manager_policy_arn": SESSION_POLICY,
        "permissions_boundary_arn": BOUNDARY,
        "reservation_group_arns": {"p4de-pool": GROUP_ARN},
    }
    values.update(overrides)
    return DeployInputs(**values)


def get(config: Any, path: str) -> Any:
    """Follow ``A.B[0].C`` through nested dicts and lists; KeyError/IndexError when absent."""
    value = config
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        value = value[int(index)] if index else value[name]
    return value


def run_schema_check(files: list[Path], *, cluster_name: str = "mlcluster-test") -> dict[str, list[str]]:
    """Run tools/pcluster_schema_check.py in .venv-pcluster; per file, its output lines ("OK" when clean)."""
    proc = subprocess.run(
        [str(PCLUSTER_PYTHON), str(SCHEMA_TOOL), "--cluster-name", cluster_name, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    result: dict[str, list[str]] = {str(f): [] for f in files}
    for line in proc.stdout.splitlines():
        if line.startswith("OK "):
            result[line[3:]].append("OK")
            continue
        for f in result:
            if line.startswith(f"{f}: "):
                result[f].append(line[len(f) + 2 :])
                break
    result["__returncode__"] = [str(proc.returncode)]
    result["__stderr__"] = [proc.stderr]
    return result


#: The example environments whose cluster backend is ParallelCluster.
PCLUSTER_EXAMPLES = ("p4de", "p5", "pcluster-accounting", "trn1")


def cluster_resource(templates: dict[str, dict[str, Any]], example: str) -> tuple[str, dict[str, Any]]:
    """The ``Custom::PclusterCluster`` of an example, and the display name of its stack."""
    stack = f"{example}/Cluster"
    (resource,) = [r for r in templates[stack]["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    return stack, resource
