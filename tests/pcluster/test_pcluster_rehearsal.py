"""The rehearsal gate: every ParallelCluster configuration we deploy passes ParallelCluster's FULL validator suite.

``pcluster create-cluster --dryrun`` loads the configuration in
ParallelCluster's schema and runs every validator of the model, which call
EC2, S3, IAM and FSx. Here that runs offline in ``.venv-pcluster``
(tools/pcluster_validate.py), in one process, against moto serving the
resources our stacks create: for each example, the world is read from the
synthesized Network, Storage and Cluster templates, and every reference in
the cluster configuration points into it. Table-driven variants cover the
combinations the examples do not (head node and login pool placement,
Session Manager on a queue, your own placement group with its reservation,
a Rocky Linux custom image).

Zero errors for every configuration; the warnings that remain are listed in
``ACCEPTED_WARNINGS`` with the reason (and named in the docs). The
``trap`` variants prove the gate fails: they render what mlcluster used to
(or what its pre-deploy checks refuse) and must fail here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.config import load_environment
from mlcluster.lifecycle.pcluster import HEALTH_CHECK_PROGRAM
from mlcluster.pcluster.render import ZoneSubnet, render_cluster_config
from tests.pcluster.pcluster_support import (
    ARCHETYPES_YAML,
    PCLUSTER_EXAMPLES,
    PCLUSTER_PYTHON,
    inputs,
    pcluster,
)
from tests.pcluster.rehearsal import example_document, node_script_keys, region_of, run_rehearsal
from tests.support import ENVIRONMENTS

pytestmark = pytest.mark.skipif(
    not PCLUSTER_PYTHON.exists() and not os.environ.get("CI"), reason=".venv-pcluster is not set up (make pytest does)"
)

#: Warnings ParallelCluster gives on purpose-made choices: (validator, fragment of the message) -> reason.
ACCEPTED_WARNINGS: dict[tuple[str, str], str] = {
    ("KeyPairValidator", "do not specify a key pair"): (
        "nodes are reached with Session Manager; an EC2 key pair is optional (head_node.key_name)"
    ),
    ("EfaPlacementGroupValidator", "capacity reservation with its own placement group"): (
        "queues on a targeted reservation or capacity block get no ParallelCluster-made placement group: "
        "the reservation brings its own placement, and a new group makes launches fail"
    ),
    ("EfaValidator", "supports enhanced networking capabilities using Elastic Fabric Adapter"): (
        "the file turned EFA off for this queue (efa: false), e.g. the p4de example's g5 inference queue, "
        "which runs single-node jobs"
    ),
    ("DeletionPolicyValidator", "The storage 'home' will be retained"): (
        "an INFO, and the point: /home is an EBS volume of its own kept when the cluster goes "
        "(shared_storage.home_volume, issue 33)"
    ),
}


def accepted(failure: dict[str, str]) -> bool:
    return failure["level"] in {"WARNING", "INFO"} and any(
        validator == failure["validator"] and fragment in failure["message"]
        for validator, fragment in ACCEPTED_WARNINGS
    )


# ---------------------------------------------------------------- the table world

S = {
    "vpc": "table/Vpc",
    "public": "table/PublicSubnet",
    "private_a": "table/PrivateSubnetA",
    "private_b": "table/PrivateSubnetB",
    "igw": "table/Igw",
    "nat": "table/Nat",
    "sg": "table/NodeSecurityGroup",
    "bucket": "table/NodeScripts",
    "script_policy": "table/NodeScriptRead",
    "session_policy": "table/SessionManager",
    "boundary": "table/Boundary",
    "lustre": "table/Lustre",
    "zfs": "table/OpenZfs",
    "zfs_volume": "table/OpenZfs.RootVolumeId",
    "group": "table/P4dePool",
    "pg": "table/OwnPlacementGroup",
    "ami": "table/RockyImage",
}
DOC = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}

TABLE_WORLD: dict[str, Any] = {
    "vpcs": [{"id": S["vpc"], "cidr": "10.0.0.0/16"}],
    "subnets": [
        {"id": S["public"], "vpc": S["vpc"], "cidr": "10.0.0.0/20", "az": "us-east-1a"},
        {"id": S["private_a"], "vpc": S["vpc"], "cidr": "10.0.64.0/18", "az": "us-east-1a"},
        {"id": S["private_b"], "vpc": S["vpc"], "cidr": "10.0.128.0/18", "az": "us-east-1b"},
    ],
    "internet_gateways": [{"id": S["igw"], "vpc": S["vpc"]}],
    "nat_gateways": [{"id": S["nat"], "subnet": S["public"]}],
    "route_tables": [
        {
            "id": "table/PublicRt",
            "vpc": S["vpc"],
            "subnets": [S["public"]],
            "routes": [{"cidr": "0.0.0.0/0", "gateway": S["igw"]}],
        },
        {
            "id": "table/PrivateRt",
            "vpc": S["vpc"],
            "subnets": [S["private_a"], S["private_b"]],
            "routes": [{"cidr": "0.0.0.0/0", "nat": S["nat"]}],
        },
    ],
    "security_groups": [
        {
            "id": S["sg"],
            "vpc": S["vpc"],
            "ingress": [{"protocol": "-1", "group": S["sg"]}],
            "egress": [{"protocol": "-1", "group": S["sg"]}, {"protocol": "-1", "cidr": "0.0.0.0/0"}],
        }
    ],
    "buckets": [{"id": S["bucket"], "name": "mlc-table-node-scripts", "keys": node_script_keys()}],
    "policies": [
        {"id": S["script_policy"], "name": "mlc-node-scripts", "path": "/parallelcluster/", "document": DOC},
        {"id": S["session_policy"], "name": "mlc-session-manager", "path": "/parallelcluster/", "document": DOC},
        {"id": S["boundary"], "name": "mlc-boundary", "path": "/parallelcluster/", "document": DOC},
    ],
    "file_systems": [
        {"id": S["lustre"], "type": "LUSTRE", "subnet": S["private_a"], "security_groups": [S["sg"]]},
        {
            "id": S["zfs"],
            "type": "OPENZFS",
            "subnet": S["private_a"],
            "security_groups": [S["sg"]],
            "volume": S["zfs_volume"],
        },
    ],
    "placement_groups": [{"id": S["pg"], "name": "p5-odcr-pg"}],
    "capacity_reservations": [
        {"id": "cr-0123456789abcdef0", "instance_type": "p5.48xlarge", "az": "us-east-1a"},
        {"id": "cr-0123456789abcdef3", "instance_type": "p5.48xlarge", "az": "us-east-1a", "placement_group": S["pg"]},
    ],
    "resource_groups": [
        {
            "id": S["group"],
            "name": "p4de-train-p4de-pool",
            "reservations": [
                {"id": "cr-0123456789abcdef1", "instance_type": "p4de.24xlarge", "az": "us-east-1a"},
                {"id": "cr-0123456789abcdef2", "instance_type": "p4de.24xlarge", "az": "us-east-1a"},
            ],
        }
    ],
    "images": [{"id": S["ami"], "os": "rocky9"}],
    "key_pairs": [{"name": "trn-key", "type": "ed25519"}, {"name": "rsa-key", "type": "rsa"}],
}


def sym(key: str) -> str:
    return "@{" + S[key] + "}"


def table_inputs() -> Any:
    return inputs(
        private_subnets=(
            ZoneSubnet(zone="us-east-1a", subnet_id=sym("private_a")),
            ZoneSubnet(zone="us-east-1b", subnet_id=sym("private_b")),
        ),
        public_subnet_id=sym("public"),
        security_group_ids=(sym("sg"),),
        lustre_file_system_id=sym("lustre"),
        openzfs_volume_id=sym("zfs_volume"),
        node_script_bucket=sym("bucket"),
        node_script_policy_arn=sym("script_policy"),
        session_manager_policy_arn=sym("session_policy"),
        permissions_boundary_arn=sym("boundary"),
        reservation_group_arns={"p4de-pool": sym("group")},
    )


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def variants() -> dict[str, dict[str, Any]]:
    """Table-driven variants: each archetype in every head-node x login-pool placement, and the edge settings."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(ARCHETYPES_YAML):
        base = yaml.safe_load(ARCHETYPES_YAML[name])["cluster"]["pcluster"]
        head = base.get("head_node", {})
        for head_subnet in ("private", "public"):
            for login in ("none", "internal", "internet"):
                cfg = with_(base, head_node={**head, "subnet": head_subnet, "ssh_allowed_cidr": "192.0.2.0/24"})
                cfg.pop("login_nodes", None)
                if login != "none":
                    cfg["login_nodes"] = {"count": 1, "internet_facing": login == "internet"}
                out[f"{name}/head-{head_subnet}/login-{login}"] = cfg
    p5 = yaml.safe_load(ARCHETYPES_YAML["p5-odcr"])["cluster"]["pcluster"]
    queue = p5["queues"][0]
    resource = queue["compute_resources"][0]
    out["p5/queue-ssm"] = with_(p5, queues=[with_(queue, ssm=True)])
    out["p5/own-placement-group"] = with_(
        p5,
        queues=[
            with_(
                queue,
                compute_resources=[
                    with_(
                        {k: v for k, v in resource.items() if k != "placement_group"},
                        capacity_reservation_id="cr-0123456789abcdef3",
                        placement_group_name="p5-odcr-pg",
                    )
                ],
            )
        ],
    )
    out["p5/rocky9"] = with_(p5, os="rocky9", custom_ami="ami-0123456789abcdef0")
    out["p5/user-policies"] = with_(
        p5,
        head_node={"additional_iam_policies": ["arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"]},
        queues=[with_(queue, additional_iam_policies=["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"])],
    )
    return out


def table_config(cfg: dict[str, Any]) -> dict[str, Any]:
    config = render_cluster_config(pcluster(cfg), table_inputs())
    if cfg.get("custom_ami"):
        config["Image"]["CustomAmi"] = sym("ami")
    return config


def trap_placement_group_on_reservation() -> dict[str, Any]:
    """What the pre-deploy checks refuse: a ParallelCluster-made placement group on a targeted reservation."""
    config = table_config(yaml.safe_load(ARCHETYPES_YAML["p5-odcr"])["cluster"]["pcluster"])
    config["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]["Networking"]["PlacementGroup"] = {"Enabled": True}
    return config


VARIANTS = variants()


def trap_rocky_without_image() -> dict[str, Any]:
    """What the config now refuses: rocky9 without custom_ami."""
    config = table_config(yaml.safe_load(ARCHETYPES_YAML["p5-odcr"])["cluster"]["pcluster"])
    config["Image"] = {"Os": "rocky9"}
    return config


def trap_rsa_key_on_ubuntu() -> dict[str, Any]:
    """An RSA key pair on Ubuntu 22.04: ParallelCluster refuses it (the pre-deploy checks warn)."""
    config = table_config(yaml.safe_load(ARCHETYPES_YAML["trn1-neuron"])["cluster"]["pcluster"])
    config["HeadNode"]["Ssh"]["KeyName"] = "rsa-key"
    return config


def trap_health_check_as_prolog() -> dict[str, Any]:
    """The node health tool wired as Slurm's Prolog: ParallelCluster manages Prolog and refuses it."""
    config = table_config(yaml.safe_load(ARCHETYPES_YAML["p5-odcr"])["cluster"]["pcluster"])
    config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"] = [
        {"Prolog": "/usr/local/sbin/mlcluster-health-check"}
    ]
    return config


TRAPS = {
    "trap/health-check-as-prolog": trap_health_check_as_prolog,
    "trap/rsa-key-on-ubuntu": trap_rsa_key_on_ubuntu,
    "trap/placement-group-on-reservation": trap_placement_group_on_reservation,
    "trap/rocky9-without-image": trap_rocky_without_image,
}


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory, pcluster_templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every example and variant rehearsed in one run of the tool (one process)."""
    templates = pcluster_templates
    documents = []
    for example in PCLUSTER_EXAMPLES:
        zone = load_environment(ENVIRONMENTS / f"{example}.yaml").config.network.availability_zone
        assert zone is not None
        documents.append(example_document(templates, example, region_of(zone)))
    configs = {name: {"cluster_name": "table-train", "config": table_config(cfg)} for name, cfg in VARIANTS.items()}
    configs.update({name: {"cluster_name": "table-train", "config": make()} for name, make in TRAPS.items()})
    documents.append({"region": "us-east-1", "world": TABLE_WORLD, "configs": configs})
    return run_rehearsal(documents, Path(tmp_path_factory.mktemp("rehearsal")))


def problems(result: dict[str, Any]) -> list[str]:
    out = [f"schema: {path}: {message}" for path, message in result["schema"]]
    out += [f"{f['level']} {f['validator']}: {f['message']}" for f in result["failures"] if not accepted(f)]
    return out


@pytest.mark.parametrize("example", PCLUSTER_EXAMPLES)
def test_example_passes_the_full_validator_suite(findings: dict[str, Any], example: str) -> None:
    assert problems(findings[example]) == []


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_passes_the_full_validator_suite(findings: dict[str, Any], name: str) -> None:
    assert problems(findings[name]) == []


def test_the_gate_fails_on_the_placement_group_trap(findings: dict[str, Any]) -> None:
    """ParallelCluster warns (not errs) on a new group over a targeted reservation; the gate fails on it."""
    found = problems(findings["trap/placement-group-on-reservation"])
    assert any("PlacementGroupCapacityReservationValidator" in p and "unrelated placement group" in p for p in found)


def test_the_gate_fails_on_rocky_without_an_image(findings: dict[str, Any]) -> None:
    """What the rocky8/rocky9 rule now refuses before deploying: ParallelCluster has no official image."""
    found = problems(findings["trap/rocky9-without-image"])
    assert any(p.startswith("ERROR") for p in found), found


def test_the_health_check_program_passes_and_a_prolog_does_not(findings: dict[str, Any]) -> None:
    """Every variant carries HealthCheckProgram and passes (above); the same hook as Prolog is refused."""
    assert all(
        {"HealthCheckProgram": HEALTH_CHECK_PROGRAM}
        in table_config(cfg)["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"]
        for cfg in VARIANTS.values()
    )
    found = problems(findings["trap/health-check-as-prolog"])
    assert any("CustomSlurmSettingsValidator" in p and "Prolog" in p for p in found), found


def test_the_gate_fails_on_an_rsa_key_on_ubuntu(findings: dict[str, Any]) -> None:
    found = problems(findings["trap/rsa-key-on-ubuntu"])
    assert any("KeyPairValidator" in p and "ed25519" in p for p in found), found


def test_every_accepted_warning_is_seen(findings: dict[str, Any]) -> None:
    """No stale entry: each accepted warning still occurs somewhere (else remove it, and its docs line)."""
    seen = {
        key
        for result in findings.values()
        for f in result["failures"]
        for key in ACCEPTED_WARNINGS
        if f["validator"] == key[0] and key[1] in f["message"]
    }
    assert seen == set(ACCEPTED_WARNINGS)
