"""The synth-time guard, the stacks' shape for day two, and the lock file.

The example ``p5.yaml`` is synthesized and locked once; then the Lustre
deployment-type edit must fail synth naming the resource, the key and the
safe way, unless ``retention.allow_replacement`` names it. The same synth
shows the DRAs in their own stack, weak references only, and termination
protection where data is retained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.app import build_app, main, project_context, synth_guarded
from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.lockfile import Lock, lock_path, read_lock, write_lock
from mlcluster.replacement import create_only_paths, snapshot_from_assembly
from tests.support import ENVIRONMENTS, ROOT, write_env

DEPLOYMENT_TYPE_EDIT = {"deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 200, "lustre_version": "2.12"}


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with p5.yaml (a copy of the example), synthesized and locked, plus a scratch environment."""
    root = tmp_path_factory.mktemp("guard")
    envs = root / "environments"
    envs.mkdir()
    shutil.copy(ENVIRONMENTS / "p5.yaml", envs / "p5.yaml")
    write_env(
        envs,
        "scratch",
        {
            "network": {"availability_zone": "us-east-1a"},
            "retention": {"on_delete": "destroy"},
            "storage": {"lustre": {"data_repository_associations": []}},
        },
    )
    for name in ("p5", "scratch"):
        # Never deployed: the explicit first lock ('mlcluster lock NAME --new').
        write_lock(load_environment(envs / f"{name}.yaml"), Lock({}, "new"))
    app, stages = build_app(envs, outdir=str(root / "cdk.out"))
    assembly = synth_guarded(app, stages)
    for stage in stages:
        write_lock(
            stage.environment, Lock(snapshot_from_assembly(Path(assembly.directory), stage.stage_name), "templates")
        )
    return root


def edited(root: Path, name: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``root``'s p5 (and its lock) with ``change`` applied to the YAML, in ``root/name``."""
    envs = root / name / "environments"
    envs.mkdir(parents=True)
    shutil.copy(root / "environments" / "p5.lock.json", envs / "p5.lock.json")
    data = yaml.safe_load((root / "environments" / "p5.yaml").read_text(encoding="utf-8"))
    change(data)
    write_env(envs, "p5", data)
    return envs


def deployment_type(data: dict[str, Any], allow: list[str] | None = None) -> None:
    data.setdefault("storage", {}).setdefault("lustre", {}).update(DEPLOYMENT_TYPE_EDIT)
    if allow is not None:
        data.setdefault("retention", {})["allow_replacement"] = allow


def guarded_synth(envs: Path) -> None:
    """``synth_guarded`` on an edit; cdk-nag and CloudFormation validation, which the guard does not read, stay off."""
    app, stages = build_app(envs, outdir=str(envs.parent / "cdk.out"), template_checks=False)
    synth_guarded(app, stages)


@dataclasses.dataclass(frozen=True)
class Refused:
    """What ``app.py`` did with the Lustre deployment-type edit: its exit code and standard error."""

    envs: Path
    code: object
    err: str


@pytest.fixture(scope="module")
def refused(locked: Path) -> Refused:
    """The deployment-type edit synthesized once, by ``main`` as ``app.py`` runs it (from the project folder)."""
    envs = edited(locked, "refused", deployment_type)
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.chdir(envs.parent)
        with pytest.raises(SystemExit) as raised:
            main()
    return Refused(envs, raised.value.code, err.getvalue())


def test_lustre_deployment_type_edit_fails_synth_clearly(refused: Refused) -> None:
    """``synth_guarded`` refuses the edit (``main`` prints its ``ConfigError`` after the first line)."""
    # p5 warns about /home on the head node first (mlcluster.config.advice); then the refusal.
    err = refused.err[refused.err.index("mlcluster: change refused") :]
    assert err.startswith("mlcluster: change refused (no template of this synth is left in the output to deploy)\n")
    text = err.split("\n", 1)[1]
    # The file as the app was given it: ``environments/`` of the project folder it runs in.
    assert text.startswith("environments/p5.yaml: storage.lustre: ")
    assert "storage.lustre: this edit replaces p5-Storage/Storage/Lustre/Resource (AWS::FSx::FileSystem" in text
    assert 'LustreConfiguration.DeploymentType "PERSISTENT_2" -> "PERSISTENT_1"' in text
    assert "new, empty file system" in text and "export" in text
    assert "add 'Storage/Lustre' to retention.allow_replacement" in text
    # The DRAs follow the file system (their FileSystemId is create-only) and are named too.
    assert "DataRepository/Lustre/AssociationData" in text


def test_a_refused_synth_leaves_nothing_to_deploy(locked: Path) -> None:
    """``cdk deploy --app cdk.out`` after a refusal fails: the stage's nested assembly is gone."""
    envs = edited(locked, "gone", deployment_type)
    with pytest.raises(ConfigError):
        guarded_synth(envs)
    out = envs.parent / "cdk.out"
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert any(a["type"] == "cdk:cloud-assembly" for a in manifest["artifacts"].values())
    assert not (out / "assembly-p5").exists()
    # The pinned CDK CLI reads the assembly as 'deploy' would, and fails (no AWS call is made by 'ls').
    done = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "ls", "--app", str(out), "--no-notices"],
        capture_output=True,
        text=True,
        check=False,
        cwd=envs.parent,
        timeout=300,
    )
    assert done.returncode != 0 and "p5" not in done.stdout, done.stdout + done.stderr


def test_allowing_the_file_system_alone_still_refuses_its_dras(locked: Path) -> None:
    envs = edited(locked, "half", lambda d: deployment_type(d, ["Storage/Lustre"]))
    with pytest.raises(ConfigError) as raised:
        guarded_synth(envs)
    assert "replaces p5-Storage/Storage/Lustre/Resource" not in str(raised.value)
    assert "add 'DataRepository/Lustre/AssociationData' to retention.allow_replacement" in str(raised.value)


def test_explicit_allowance_lets_the_edit_synthesize(locked: Path) -> None:
    guarded_synth(
        edited(
            locked,
            "allowed",
            lambda d: deployment_type(d, ["Storage/Lustre", "DataRepository/Lustre/AssociationData"]),
        )
    )


def test_app_main_prints_the_refusal_without_traceback(refused: Refused) -> None:
    assert refused.code == 1
    before, _ = refused.err.split("mlcluster: change refused", 1)
    assert all(line.startswith("mlcluster: warning: ") for line in before.splitlines())
    assert "Traceback" not in refused.err


def test_in_place_edit_passes_the_guard(locked: Path) -> None:
    guarded_synth(
        edited(
            locked,
            "capacity",
            lambda d: d.setdefault("storage", {}).setdefault("lustre", {}).update({"storage_capacity_gib": 2400}),
        )
    )


def test_lock_file_round_trips_and_a_broken_one_is_a_config_error(locked: Path, tmp_path: Path) -> None:
    env = load_environment(locked / "environments" / "p5.yaml")
    snapshot = read_lock(env)
    assert snapshot is not None and set(snapshot) == {
        "p5-Network",
        "p5-Storage",
        "p5-DataRepository",
        "p5-Observability",
        "p5-Cluster",
    }
    broken = tmp_path / "p5.yaml"
    shutil.copy(locked / "environments" / "p5.yaml", broken)
    lock_path(load_environment(broken)).write_text('{"format": 99}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\(lock file\): cannot be read \(format 99"):
        read_lock(load_environment(broken))


def test_allow_replacement_rejects_what_is_not_a_construct_path(make_env: Callable[..., Environment]) -> None:
    with pytest.raises(ConfigError, match=r"retention.allow_replacement.*'Lustre'"):
        make_env({"network": {"availability_zone": "us-east-1a"}, "retention": {"allow_replacement": ["Lustre"]}})
    env = make_env(
        {"network": {"availability_zone": "us-east-1a"}, "retention": {"allow_replacement": ["Cluster/Cluster"]}}
    )
    assert env.config.retention.allow_replacement == ("Cluster/Cluster",)


# -- stack shape ----------------------------------------------------------------


def manifest(root: Path, stage: str) -> dict[str, dict[str, Any]]:
    data = json.loads((root / "cdk.out" / f"assembly-{stage}" / "manifest.json").read_text(encoding="utf-8"))
    return {
        a["properties"]["stackName"]: a for a in data["artifacts"].values() if a["type"] == "aws:cloudformation:stack"
    }


def test_dras_have_their_own_stack_and_the_cluster_does_not_wait_for_them(locked: Path) -> None:
    stacks = manifest(locked, "p5")
    ids = {a["displayName"].split("/")[1]: artifact_id for artifact_id, a in _by_id(locked, "p5").items()}
    deps = {name: {d for d in a.get("dependencies", []) if not d.endswith(".assets")} for name, a in stacks.items()}
    assert deps["p5-DataRepository"] == {ids["Storage"]}
    # p5 has a Prometheus workspace: the head node's collector writes to it (its URL and ARN come from Observability).
    assert deps["p5-Cluster"] == {ids["Network"], ids["Storage"], ids["Observability"]}
    template = _template(locked, "p5", "p5-DataRepository")
    # The associations, and the digest of what Storage outputs (no stale reads, issue 25).
    assert sorted(r["Type"] for r in template["Resources"].values()) == [
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::SSM::Parameter",
    ]


def test_no_dra_no_data_repository_stack(locked: Path) -> None:
    assert set(manifest(locked, "scratch")) == {"scratch-Network", "scratch-Storage"}


def test_termination_protection_where_data_is_retained(locked: Path) -> None:
    protected = {
        name: a["properties"].get("terminationProtection", False) for name, a in manifest(locked, "p5").items()
    }
    assert protected == {
        "p5-Network": True,
        "p5-Storage": True,
        "p5-DataRepository": True,
        "p5-Observability": True,  # the Prometheus and Grafana workspaces (issue 25, finding 2)
        "p5-Cluster": False,
    }
    assert not any(a["properties"].get("terminationProtection") for a in manifest(locked, "scratch").values())


def test_weak_references_only(locked: Path) -> None:
    """No stack imports another's export, so no export can be "in use" when storage changes."""
    assert project_context()["@aws-cdk/core:defaultCrossStackReferences"] == "weak"
    texts = [json.dumps(_template(locked, "p5", name)) for name in manifest(locked, "p5")]
    assert not any("Fn::ImportValue" in text for text in texts)
    assert '"Fn::GetStackOutput"' in json.dumps(_template(locked, "p5", "p5-Cluster"))


def test_create_only_properties_come_from_the_bundled_schemas() -> None:
    assert "/properties/BucketName" in create_only_paths("AWS::S3::Bucket")
    assert "/properties/FileSystemPath" in create_only_paths("AWS::FSx::DataRepositoryAssociation")
    # The legacy FSx schema lacks the nested ones; the supplement adds what the template reference documents.
    assert "/properties/LustreConfiguration/DeploymentType" in create_only_paths("AWS::FSx::FileSystem")
    assert "/properties/SubnetIds" in create_only_paths("AWS::FSx::FileSystem")
    assert create_only_paths("Custom::PclusterCluster") == ("/properties/ClusterName",)


def _by_id(root: Path, stage: str) -> dict[str, dict[str, Any]]:
    data = json.loads((root / "cdk.out" / f"assembly-{stage}" / "manifest.json").read_text(encoding="utf-8"))
    return {k: a for k, a in data["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}


def _template(root: Path, stage: str, stack_name: str) -> dict[str, Any]:
    (artifact,) = [a for a in _by_id(root, stage).values() if a["properties"]["stackName"] == stack_name]
    path = root / "cdk.out" / f"assembly-{stage}" / artifact["properties"]["templateFile"]
    return dict(json.loads(path.read_text(encoding="utf-8")))
