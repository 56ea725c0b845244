"""The lifecycle settings of ``cluster.hyperpod.lifecycle`` this branch adds: bad input and the edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, load_environment
from tests.support import write_env


def hyperpod(lifecycle: dict[str, Any]) -> dict[str, Any]:
    return {
        "network": {"availability_zone_id": "use1-az4"},
        "cluster": {
            "backend": "hyperpod",
            "hyperpod": {
                "workers": [{"instance_group_name": "workers", "instance_type": "ml.g5.8xlarge"}],
                "lifecycle": lifecycle,
            },
        },
    }


@pytest.mark.parametrize(
    ("lifecycle", "path", "allowed"),
    [
        ({"docker": False, "enroot_pyxis": False, "docker_group": True}, "docker_group", "needs docker: true"),
        ({"controller_wait_minutes": 721}, "controller_wait_minutes", "720"),
        ({"controller_wait_minutes": 0}, "controller_wait_minutes", "1"),
        ({"rootless_podman": "yes"}, "rootless_podman", "true or false"),
    ],
    ids=["docker-group-without-docker", "wait-past-720", "wait-zero", "podman-not-a-flag"],
)
def test_bad_lifecycle_settings_are_named(tmp_path: Path, lifecycle: dict[str, Any], path: str, allowed: str) -> None:
    file = write_env(tmp_path, "bad", hyperpod(lifecycle))
    with pytest.raises(ConfigError) as caught:
        load_environment(file)
    lines = [line for line in str(caught.value).splitlines() if f"{path}: " in line]
    assert lines, str(caught.value)
    assert str(file) in lines[0]
    assert allowed in lines[0]


def test_the_edges_load(tmp_path: Path) -> None:
    env = load_environment(
        write_env(tmp_path, "edge", hyperpod({"controller_wait_minutes": 720, "docker_group": True}))
    )
    lifecycle = env.config.cluster.hyperpod.lifecycle  # type: ignore[union-attr]
    assert lifecycle.controller_wait_minutes == 720
    assert lifecycle.docker_group is True


def test_defaults_keep_users_out_of_the_docker_group(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "plain", hyperpod({})))
    lifecycle = env.config.cluster.hyperpod.lifecycle  # type: ignore[union-attr]
    assert (lifecycle.docker_group, lifecycle.rootless_podman, lifecycle.controller_wait_minutes) == (False, True, None)
