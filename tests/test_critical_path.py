"""tools/critical_path.py on small hand-made assemblies: the cluster waits for the DRA only when they share a stack."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import critical_path

FS = {"Fs": {"Type": "AWS::FSx::FileSystem", "Properties": {}}}
DRA = {"Dra": {"Type": "AWS::FSx::DataRepositoryAssociation", "Properties": {"FileSystemId": {"Ref": "Fs"}}}}
CLUSTER = {"Cluster": {"Type": "Custom::PclusterCluster", "Properties": {}}}


def assembly(tmp: Path, stacks: dict[str, tuple[dict[str, Any], list[str]]]) -> Path:
    nested = tmp / "assembly-e"
    nested.mkdir(parents=True)
    artifacts = {}
    for name, (resources, deps) in stacks.items():
        (nested / f"{name}.json").write_text(json.dumps({"Resources": resources}), encoding="utf-8")
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{name}.json", "stackName": f"e-{name}"},
            "dependencies": [*deps, f"{name}.assets"],
        }
    (nested / "manifest.json").write_text(json.dumps({"artifacts": artifacts}), encoding="utf-8")
    return tmp


def minutes(steps: list[critical_path.Step]) -> float:
    return steps[-1].finish / 60


def test_before_the_cluster_waits_for_the_import(tmp_path: Path) -> None:
    root = assembly(tmp_path, {"Storage": ({**FS, **DRA}, []), "Cluster": (CLUSTER, ["Storage"])})
    cluster, everything = critical_path.critical_paths(root, "e")
    assert minutes(cluster) == 15 + 120 + 35
    assert [s.logical_id for s in cluster] == ["Fs", "Dra", "Cluster"]
    assert everything == cluster


def test_after_the_cluster_starts_once_the_file_system_exists(tmp_path: Path) -> None:
    dra = {"Dra": {**DRA["Dra"], "Properties": {"FileSystemId": "fs-from-storage"}}}
    root = assembly(
        tmp_path,
        {"Storage": (FS, []), "DataRepository": (dra, ["Storage"]), "Cluster": (CLUSTER, ["Storage"])},
    )
    cluster, everything = critical_path.critical_paths(root, "e")
    assert minutes(cluster) == 15 + 35
    assert [s.logical_id for s in everything] == ["Fs", "Dra"]
    assert minutes(everything) == 15 + 120
    assert critical_path.stack_graph(root, "e") == [
        "e-Storage <- (nothing)",
        "e-DataRepository <- e-Storage",
        "e-Cluster <- e-Storage",
    ]


def test_references_inside_a_stack_order_resources() -> None:
    template = {
        "Resources": {
            "Role": {"Type": "AWS::IAM::Role"},
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}},
            "Use": {"Type": "AWS::SNS::Topic", "Properties": {"Name": {"Fn::Sub": "${Fn.Arn}-x"}}, "DependsOn": "Role"},
        }
    }
    chains = critical_path.stack_paths(template, "s", 0)
    assert [s.logical_id for s in chains["Use"]] == ["Role", "Fn", "Use"]
    assert chains["Use"][-1].finish == 30 + 30 + 10
