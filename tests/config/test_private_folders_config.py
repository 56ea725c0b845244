"""A HyperPod cluster's DRAs stay off the folders its nodes keep private on Lustre (keys, state, homes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, load_environment
from tests.support import write_env

KEY = "storage.lustre.data_repository_associations[{}].file_system_path"
STORE = "the nodes' SSH key store and the controller's state (/fsx/.mlcluster)"
HOMES = "the users' homes (/fsx/home, or where they were before they moved)"


def environment(
    *paths: str, backend: str = "hyperpod", home_on_fsx: bool = True, openzfs: bool = False
) -> dict[str, Any]:
    storage: dict[str, Any] = {
        "lustre": {
            "data_repository_associations": [
                {"file_system_path": path, "data_bucket_prefix": f"p{index}/"} for index, path in enumerate(paths)
            ]
        }
    }
    if openzfs:
        storage["openzfs"] = {}
    if backend == "hyperpod":
        cluster: dict[str, Any] = {
            "backend": "hyperpod",
            "hyperpod": {
                "workers": [{"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge"}],
                "lifecycle": {"home_on_fsx": home_on_fsx},
            },
        }
    else:
        cluster = {
            "backend": "pcluster",
            "pcluster": {
                "queues": [{"name": "q", "compute_resources": [{"name": "a", "instance_type": "p5.48xlarge"}]}]
            },
        }
    return {"network": {"availability_zone_id": "use1-az4"}, "storage": storage, "cluster": cluster}


def refusals(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    path = write_env(tmp_path, "dra", data)
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    prefix = f"{path}: storage.lustre.data_repository_associations["
    return [line.removeprefix(f"{path}: ") for line in str(caught.value).splitlines() if line.startswith(prefix)]


def message(index: int, value: str, what: str, folder: str) -> str:
    return (
        f"{KEY.format(index)}: {value!r} is not valid; links {what} to S3: their keys would be exported and whoever "
        f"can write the bucket could plant files there; allowed: a folder outside {folder} such as /data; a "
        "deployed link goes first, its files kept: 'aws fsx delete-data-repository-association --association-id ID "
        "--no-delete-data-in-file-system' (ids: 'aws fsx describe-data-repository-associations'; upgrade note in "
        "mlcluster's docs/upgrading.md)"
    )


def test_the_whole_file_system_links_the_key_store_and_the_homes(tmp_path: Path) -> None:
    assert refusals(tmp_path, environment("/")) == [
        message(0, "/", STORE, "/.mlcluster"),
        message(0, "/", HOMES, "/home"),
    ]


@pytest.mark.parametrize("value", ["/home", "/home/", "/home/alice"])
def test_a_link_over_or_inside_the_homes_is_refused(tmp_path: Path, value: str) -> None:
    assert refusals(tmp_path, environment("/data", value)) == [message(1, value, HOMES, "/home")]


@pytest.mark.parametrize("value", ["/.mlcluster", "/.mlcluster/ssh"])
def test_a_link_over_or_inside_the_key_store_is_refused(tmp_path: Path, value: str) -> None:
    assert refusals(tmp_path, environment(value)) == [message(0, value, STORE, "/.mlcluster")]


@pytest.mark.parametrize("value", ["/homes", "/home2", "/.mlcluster2", "/data/home", "/data"])
def test_a_neighbour_of_a_private_folder_is_accepted(tmp_path: Path, value: str) -> None:
    load_environment(write_env(tmp_path, "dra", environment(value)))


@pytest.mark.parametrize(
    "options", [{"home_on_fsx": False}, {"openzfs": True}], ids=["homes-on-the-node", "homes-on-openzfs"]
)
def test_fsx_home_stays_private_after_the_homes_move(tmp_path: Path, options: dict[str, bool]) -> None:
    """Nodes not yet re-provisioned still use /fsx/home, and the old homes keep each user's key (attacker review:
    adding OpenZFS and a DRA at /home in one deploy linked the live homes)."""
    assert refusals(tmp_path, environment("/home", **options)) == [message(0, "/home", HOMES, "/home")]


def test_a_doubled_slash_cannot_reach_the_homes(tmp_path: Path) -> None:
    """ "//home" is refused as a path (an empty part), not read as a neighbour of /home (data-loss review)."""
    path = write_env(tmp_path, "dra", environment("//home"))
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    assert f"{KEY.format(0)}: '//home' is not valid; allowed: an absolute path" in str(caught.value)


def test_parallelcluster_keeps_nothing_of_ours_on_lustre(tmp_path: Path) -> None:
    load_environment(write_env(tmp_path, "dra", environment("/", backend="pcluster")))
