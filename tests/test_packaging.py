"""The real tools a user meets: the pinned CDK CLI, and the wheel in someone else's CDK app."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once for every test of this module (``make pytest`` runs a module on one worker)."""
    dist = tmp_path_factory.mktemp("dist")
    build = ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(ROOT)]
    subprocess.run([sys.executable, "-m", "pip", *build], check=True, capture_output=True, env=ENV)
    (built,) = dist.glob("mlcluster-*.whl")
    return built


@pytest.fixture(scope="module")
def consumer(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel installed; returns its folder.

    It gets only our wheel; its dependencies come from this checkout's
    environment through a ``.pth`` file (installing aws-cdk-lib again would
    prove nothing about our package and take a minute). The wheel's declared
    requirements are then checked against those installed versions.
    """
    target = tmp_path_factory.mktemp("consumer-venv")
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
    return target


@pytest.mark.slow
def test_wheel_installs_and_works_in_an_external_app(wheel: Path, consumer: Path, tmp_path: Path) -> None:
    """Our constructs are a library: install the wheel elsewhere, compose network, storage and a cluster.

    The app must import mlcluster from the wheel, never from this checkout.
    """
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for shipped in (
        "mlcluster/py.typed",
        "mlcluster/cdk_context.json",
        "mlcluster/pcluster/update_policies.json",
        "mlcluster/lifecycle/hyperpod/on_create.sh",
        "mlcluster/handlers/hyperpod_cluster/app.py",
        "mlcluster/handlers/grafana_provisioner/app.py",
    ):
        assert shipped in names, f"the wheel lacks {shipped}"
    assert not any(name.startswith(("tests/", "tools/", "environments/")) for name in names)
    assert "cdk.json" not in names
    # The package is exactly what git tracks under mlcluster/: no bytecode a test run left beside the node
    # scripts and handlers (package-data globs would take it), nothing tracked left out.
    tracked = subprocess.run(["git", "ls-files", "mlcluster"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert {name for name in names if name.startswith("mlcluster/")} == set(tracked.stdout.split())
    target = consumer
    py = target / "bin" / "python"
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


# --- The `mlcluster` command as a user runs it from the wheel (issue 26) ------------------------------------

#: What a user's shell has: no AWS or CDK variables of this test run (the suite sets CDK_CONTEXT_JSON, which
#: would hand the app the flags and hide a missing cdk.json), and no instance metadata to ask for credentials.
USER_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_", "MLCLUSTER_"))},
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "AWS_EC2_METADATA_DISABLED": "true",
    "COLUMNS": "120",
}
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
#: Every exit code the docs document (docs/use-cases/day-one.md).
DOCUMENTED = {0, 1, 2, 3, 4, 5, 6}


@dataclass(frozen=True)
class User:
    """A user's machine: the installed command, a home with an empty AWS config, and two project folders."""

    command: Path
    home: Path
    with_cdk_json: Path
    without_cdk_json: Path

    def run(self, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``mlcluster *args`` in ``cwd``; no output may hold a traceback, and the code must be documented."""
        aws = {"AWS_CONFIG_FILE": str(self.home / "aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(self.home / "none")}
        done = subprocess.run(
            [str(self.command), *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**USER_ENV, "HOME": str(self.home), **aws, **env},
            timeout=600,
            check=False,
        )
        assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert done.returncode in DOCUMENTED, (done.returncode, done.stderr)
        return done


def _project(folder: Path, *, cdk_json: bool) -> Path:
    (folder / "environments").mkdir(parents=True)
    for name in ("dev", "hyperpod"):
        shutil.copy(ROOT / "environments" / f"{name}.yaml", folder / "environments")
        shutil.copy(ROOT / "environments" / f"{name}.lock.json", folder / "environments")  # committed with the files
    if cdk_json:
        shutil.copy(ROOT / "cdk.json", folder)
    return folder


@pytest.fixture(scope="module")
def user(consumer: Path, tmp_path_factory: pytest.TempPathFactory) -> User:
    home = tmp_path_factory.mktemp("home")
    (home / "aws-config").write_text("[profile ops]\nregion = eu-north-1\n")
    return User(
        command=consumer / "bin" / "mlcluster",
        home=home,
        with_cdk_json=_project(tmp_path_factory.mktemp("project"), cdk_json=True),
        without_cdk_json=_project(tmp_path_factory.mktemp("folder"), cdk_json=False),
    )


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto in server mode on 127.0.0.1 (a free port), with ``dev-Network`` deployed in us-east-1 (dev's zone) only."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    cfn = boto3.client(
        "cloudformation",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    template = {"Resources": {"Scratch": {"Type": "AWS::S3::Bucket"}}}
    cfn.create_stack(StackName="dev-Network", TemplateBody=json.dumps(template))
    yield endpoint
    server.stop()


@pytest.mark.slow
def test_wheel_lock_equals_the_checkouts_with_and_without_cdk_json(user: User) -> None:
    """From the wheel, `lock --from-templates` writes the checkout's lock file byte for byte, in a project or not.

    Before issue 26 it read cdk.json next to the installed package (site-packages): no feature flags, so
    10 Fn::ImportValue where `cdk deploy` writes Fn::GetStackOutput, and a different lock file.
    """
    expected = (ROOT / "environments" / "dev.lock.json").read_bytes()
    inside = user.run(user.with_cdk_json / "environments", "lock", "dev", "--from-templates")  # cdk.json found above
    assert inside.returncode == 0, inside.stderr
    assert "no cdk.json" not in inside.stderr
    assert (user.with_cdk_json / "environments" / "dev.lock.json").read_bytes() == expected
    bare = user.run(user.without_cdk_json, "lock", "dev", "--from-templates", "--json")
    assert bare.returncode == 0, bare.stderr
    assert f"mlcluster: note: no cdk.json in {user.without_cdk_json.resolve()} or above" in bare.stderr
    assert json.loads(bare.stdout)["stacks"] == 4
    assert (user.without_cdk_json / "environments" / "dev.lock.json").read_bytes() == expected
    assert "Fn::ImportValue" not in expected.decode()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("diff", "dev"),
        ("lock", "dev"),
        ("protect", "dev"),
        ("status", "dev"),
        ("ssh", "hyperpod", "--print"),
        ("ssh-config", "hyperpod"),
        ("smoke", "hyperpod"),
        ("patch", "hyperpod", "--yes"),
    ],
    ids=lambda a: a[0],
)
def test_wheel_without_credentials(user: User, args: tuple[str, ...]) -> None:
    """Every verb that calls AWS: one line, exit 4, before any synthesis (diff and protect gave a traceback)."""
    done = user.run(user.without_cdk_json, *args)
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("mlcluster: no AWS credentials found\n")


@pytest.mark.slow
def test_wheel_status_with_each_region_source(user: User, moto_endpoint: str, tmp_path: Path) -> None:
    """The environment file pins the region (`region:`, else its zone); another one from anywhere is exit 4.

    Before the review of issue 26, AWS_REGION eu-west-1 beat dev's zone us-east-1a: status, diff, protect
    and lock looked in a region where dev cannot live, and said nothing was deployed.
    """
    aws = {**CREDENTIALS, "AWS_ENDPOINT_URL": moto_endpoint}
    folder = user.with_cdk_json

    def region(*extra: str, cwd: Path = folder, **env: str) -> tuple[str, dict[str, str]]:
        done = user.run(cwd, "status", "dev", "--json", *extra, **{**aws, **env})
        assert done.returncode == 1, done.stderr  # not every stack is deployed: needs attention
        data = json.loads(done.stdout)
        return data["region"], {s["stack"]: s["status"] for s in data["stacks"]}

    def refused(*extra: str, cwd: Path = folder, **env: str) -> str:
        done = user.run(cwd, "status", "dev", *extra, **{**aws, **env})
        assert (done.returncode, done.stdout) == (4, ""), done.stderr
        return done.stderr

    by_zone = region()  # credentials, no region anywhere: dev's zone us-east-1a
    assert by_zone == ("us-east-1", {**by_zone[1], "dev-Network": "CREATE_COMPLETE"})
    assert region(AWS_REGION="us-east-1")[0] == region("--region", "us-east-1")[0] == "us-east-1"
    assert "AWS_REGION says eu-west-1" in refused(AWS_REGION="eu-west-1")
    assert "--region says eu-west-1" in refused("--region", "eu-west-1", AWS_REGION="us-east-1")
    assert "AWS_DEFAULT_REGION says ca-central-1" in refused(AWS_DEFAULT_REGION="ca-central-1")
    profile = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    (user.home / "ops-config").write_text(
        "[profile ops]\nregion = eu-north-1\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    by_profile = refused("--profile", "ops", AWS_CONFIG_FILE=str(user.home / "ops-config"), **profile)
    assert (
        "the availability zone in " in by_profile and "profile ops in the AWS config file says eu-north-1" in by_profile
    )
    pinned = tmp_path / "pinned"
    (pinned / "environments").mkdir(parents=True)
    text = (ROOT / "environments" / "dev.yaml").read_text()
    (pinned / "environments" / "dev.yaml").write_text(text + "region: us-east-1\n")
    assert region(cwd=pinned)[0] == "us-east-1"
    assert "`region:` in " in refused(cwd=pinned, AWS_REGION="eu-west-1")


@pytest.mark.slow
def test_wheel_every_command_against_moto(user: User, moto_endpoint: str) -> None:
    """Each verb from a user's folder, with credentials and AWS_REGION, against moto: documented codes only."""
    aws = {**CREDENTIALS, "AWS_ENDPOINT_URL": moto_endpoint}  # each environment's zone names its region
    here = user.without_cdk_json
    version = user.run(here, "--version")
    assert version.returncode == 0 and version.stdout.startswith("mlcluster, version ")
    assert "Exit codes:" in user.run(here, "--help").stdout
    completion = user.run(here, _MLCLUSTER_COMPLETE="bash_source")
    assert "_mlcluster_completion()" in completion.stdout
    valid = user.run(here, "validate", "--json")
    assert json.loads(valid.stdout)["environments"] == ["dev", "hyperpod"]
    # dev's committed lock was written from the templates: protect still sets the stack policy on what is
    # deployed, then refuses (exit 1) until the lock is read from the deployed stacks.
    protected = user.run(here, "protect", "dev", "--json", **aws)
    assert protected.returncode == 1, protected.stderr
    assert set(json.loads(protected.stdout)["protected"]) == {"dev-Network"}
    assert "was written from the templates (--from-templates), but dev-Network are deployed" in protected.stderr
    assert "Run 'mlcluster lock dev' with credentials" in protected.stderr
    for args, code, text in [
        (("ssh", "hyperpod", "--print"), 3, "stack hyperpod-Cluster does not exist in us-west-2"),
        (("ssh-config", "hyperpod"), 3, "stack hyperpod-Cluster does not exist in us-west-2"),
        (("protect", "hyperpod"), 1, "protect: nothing protected: no stack of hyperpod is deployed in us-west-2"),
        (("smoke", "dev"), 1, "this command needs 'pcluster' or 'hyperpod'"),
        (("patch", "hyperpod", "--yes"), 3, "hyperpod-Cluster"),
        (("status", "nope"), 1, "no environment 'nope'"),
        (("status",), 2, "Missing argument 'ENV'"),
    ]:
        done = user.run(here, *args, **aws)
        assert (done.returncode, text in done.stderr) == (code, True), (args, done.stderr)
    diffed = user.run(user.with_cdk_json, "diff", "hyperpod", "--json", **{**aws, "AWS_REGION": "us-west-2"})
    assert diffed.returncode == 0, diffed.stderr
    data = json.loads(diffed.stdout)
    assert data["safe"] and set(data["stacks"].values()) == {"not deployed"}
    assert "\x1b" not in diffed.stderr  # no spinner frames off a terminal
