"""The real tools a user meets: the pinned CDK CLI, and the wheel in someone else's CDK app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

CDK = ROOT / "node_modules" / ".bin" / "cdk"
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}


@pytest.mark.slow
def test_pinned_cli_synthesizes_dev_with_nag(tmp_path: Path, examples_outdir: Path) -> None:
    """A CLI/library schema mismatch, or a nag error in dev, fails here.

    Its templates, written with dev's own packs, are the ones the session's example synthesis
    (every pack, tests/conftest.py) holds for dev: the packs judge, they change no template.

    The CLI that runs is the pinned one: ``node_modules/.bin/cdk`` resolves into the installed
    aws-cdk package of the version package.json pins (read from its package.json, as ``cdk
    --version`` reports it, without starting node once more).
    """
    package = json.loads((CDK.resolve().parents[1] / "package.json").read_text())
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert (package["name"], package["version"]) == ("aws-cdk", pinned)
    result = subprocess.run(
        [str(CDK), "synth", "**", "--quiet", "--no-notices", "-c", "env=dev", "--output", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "out" / "assembly-dev" / "manifest.json").exists()
    assert not (tmp_path / "out" / "assembly-prod").exists()
    written = sorted(p.name for p in (tmp_path / "out" / "assembly-dev").glob("*.template.json"))
    assert written == sorted(p.name for p in (examples_outdir / "assembly-dev").glob("*.template.json"))
    for name in written:
        by_cli = without_cli_additions(json.loads((tmp_path / "out" / "assembly-dev" / name).read_text()))
        assert by_cli == json.loads((examples_outdir / "assembly-dev" / name).read_text()), name


#: Resource metadata only the CLI asks for (its path-metadata and asset-metadata context).
CLI_METADATA = ("aws:cdk:path", "aws:asset:")


def without_cli_additions(template: dict[str, Any]) -> dict[str, Any]:
    """``template`` without what the CLI alone adds: its version-reporting resource and condition, and
    the path and asset metadata of each resource."""
    template["Resources"].pop("CDKMetadata")
    conditions = template.get("Conditions", {})
    conditions.pop("CDKMetadataAvailable")
    if not conditions:
        template.pop("Conditions", None)
    for resource in template["Resources"].values():
        metadata = {k: v for k, v in resource.get("Metadata", {}).items() if not k.startswith(CLI_METADATA)}
        if metadata:
            resource["Metadata"] = metadata
        else:
            resource.pop("Metadata", None)
    return template


#: Run in the consumer's venv: every requirement the wheel declares is met there.
REQUIREMENTS_MET = """
import sys
from importlib.metadata import requires, version
from packaging.requirements import Requirement
unmet = []
for text in requires("mlcluster") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        found = version(req.name)
    except Exception:
        unmet.append(f"{req}: not installed")
        continue
    if not req.specifier.contains(found, prereleases=True):
        unmet.append(f"{req}: {found} installed")
print("\\n".join(unmet))
sys.exit(1 if unmet else 0)
"""

EXTERNAL_APP = """
import aws_cdk as cdk
from mlcluster.config.pcluster import PclusterConfig
from mlcluster.config.schema import load_section
from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.lustre import LustreStorage
from mlcluster.constructs.network import ClusterNetwork
from mlcluster.constructs.pcluster_cluster import PclusterCluster, session_manager_policy
from mlcluster.pcluster.render import DeployInputs, ZoneSubnet, render_cluster_config

app = cdk.App()
stack = cdk.Stack(app, "Consumer")
net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4", cidr="10.50.0.0/16")
data = DataBucket(stack, "Data")
fsx = LustreStorage(
    stack, "Fsx", vpc=net.vpc, subnet=net.private_subnets[0], cluster_security_group=net.security_group,
    data_bucket=data.bucket,
)
settings = load_section(
    PclusterConfig,
    {"queues": [{"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "efa": False}]}]},
    "inline",
)
inputs = DeployInputs(
    region=stack.region,
    private_subnets=(ZoneSubnet(zone="use1-az4", subnet_id=net.private_subnets[0].subnet_id),),
    public_subnet_id=net.public_subnet.subnet_id,
    security_group_ids=(net.security_group.security_group_id,),
    vpc_cidr="10.50.0.0/16",
    lustre_file_system_id=fsx.file_system_id,
    node_script_bucket=data.bucket.bucket_name,
    session_manager_policy_arn=session_manager_policy(stack, "SessionManager").managed_policy_arn,
)
cluster = PclusterCluster(stack, "Cluster", cluster_name="external", cluster_configuration=render_cluster_config(settings, inputs))
cdk.CfnOutput(stack, "Sg", value=net.security_group.security_group_id)
app.synth()
"""


@pytest.mark.slow
def test_wheel_installs_and_works_in_an_external_app(tmp_path: Path) -> None:
    """Our constructs are a library: build the wheel, install it elsewhere, compose network, storage and a cluster.

    The consumer's virtualenv gets only our wheel; its dependencies come from
    this checkout's environment through a ``.pth`` file (installing
    aws-cdk-lib again would prove nothing about our package and take a
    minute). The wheel's declared requirements are then checked against
    those installed versions, and the app must import mlcluster from the
    wheel, never from this checkout.
    """
    dist = tmp_path / "dist"
    build = ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(ROOT)]
    subprocess.run(
        [sys.executable, "-m", "pip", *build],
        check=True,
        capture_output=True,
        env=ENV,
    )
    (wheel,) = dist.glob("mlcluster-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for shipped in (
        "mlcluster/py.typed",
        "mlcluster/lifecycle/hyperpod/on_create.sh",
        "mlcluster/handlers/hyperpod_cluster/app.py",
        "mlcluster/handlers/grafana_provisioner/app.py",
    ):
        assert shipped in names, f"the wheel lacks {shipped}"
    assert not any(name.startswith(("tests/", "tools/", "environments/")) for name in names)
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    py = target / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    (site_packages,) = (target / "lib").glob("python3*/site-packages")
    (site_packages / "checkout-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    unmet = subprocess.run([str(py), "-c", REQUIREMENTS_MET], capture_output=True, text=True, check=False)
    assert unmet.returncode == 0, unmet.stdout + unmet.stderr
    app_dir = tmp_path / "consumer"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(EXTERNAL_APP)
    result = subprocess.run(
        [str(py), "app.py"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        env={**ENV, "CDK_OUTDIR": str(app_dir / "out")},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((app_dir / "out" / "Consumer.template.json").read_text())
    subnets = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet"]
    assert {s["Properties"]["AvailabilityZoneId"] for s in subnets} == {"use1-az4"}
    kinds = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "Custom::PclusterCluster"} <= kinds
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    (fsx,) = cluster["Properties"]["ClusterConfiguration"]["SharedStorage"][:1]
    assert fsx["MountDir"] == "/fsx"
    # The module came from the wheel, not from this checkout.
    where = subprocess.run(
        [str(py), "-c", "import mlcluster; print(mlcluster.__file__)"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(target) in where.stdout
