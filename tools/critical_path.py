"""Print the critical path of a first deploy of one environment, from a synthesized cloud assembly.

    .venv/bin/python tools/critical_path.py cdk.out p5

Model: CloudFormation creates a stack's resources as soon as what they
depend on (``DependsOn``, ``Ref``, ``Fn::GetAtt``, ``Fn::Sub``) is complete;
a stack starts when every stack it depends on is complete (the cloud
assembly's stack dependencies; independent stacks run side by side with
``cdk deploy --concurrency 2`` or more). Each resource takes a typical time
by type (``DURATIONS``, each with its source); the script prints when the
cluster is ready, when the whole deploy is done, and the chain of resources
that decides each.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MINUTE = 60

#: Typical creation time by resource type, in seconds, and where the figure comes from.
DURATIONS: dict[str, tuple[int, str]] = {
    "AWS::FSx::FileSystem": (
        15 * MINUTE,
        "FSx for Lustre FAQ: a file system is running 'within minutes'; 15 min assumed for PERSISTENT_2",
    ),
    "AWS::FSx::DataRepositoryAssociation": (
        120 * MINUTE,
        "batch metadata import of a large bucket takes hours (issue 11; aws/aws-parallelcluster#2393, #4499); "
        "2 h assumed, grows with the object count",
    ),
    "Custom::PclusterCluster": (
        35 * MINUTE,
        "ParallelCluster waits up to NODE_BOOTSTRAP_TIMEOUT = 2100 s for the head node (pcluster/constants.py "
        "3.16); the custom resource polls every 2 min; the bound is used",
    ),
    "AWS::SageMaker::Cluster": (
        60 * MINUTE,
        "HyperPod InService with lifecycle scripts and deep health checks: 1 h assumed (the resource's "
        "create handler allows 720 min, its schema's timeoutInMinutes)",
    ),
    "AWS::EC2::NatGateway": (3 * MINUTE, "a NAT gateway becomes available in a few minutes; 3 min assumed"),
    "AWS::CloudFormation::Stack": (3 * MINUTE, "ParallelCluster's provider stack (Lambda, roles): 3 min assumed"),
    "Custom::CDKBucketDeployment": (MINUTE, "CDK's S3 deployment Lambda copying the scripts: 1 min assumed"),
    "AWS::Lambda::Function": (30, "assumed"),
    "AWS::IAM::Role": (30, "assumed (IAM propagation)"),
}
DEFAULT = (10, "any other resource: 10 s assumed")

_SUB_NAME = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


def duration(resource_type: str) -> int:
    """Typical creation seconds of ``resource_type``."""
    return DURATIONS.get(resource_type, DEFAULT)[0]


def references(value: Any) -> Iterator[str]:
    """Logical ids ``value`` refers to within its template."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                yield inner
            elif key == "Fn::GetAtt":
                yield inner[0] if isinstance(inner, list) else str(inner).split(".", 1)[0]
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                yield from _SUB_NAME.findall(str(text))
                if isinstance(inner, list) and len(inner) > 1:
                    yield from references(inner[1])
            else:
                yield from references(inner)
    elif isinstance(value, list):
        for item in value:
            yield from references(item)


@dataclass(frozen=True)
class Step:
    """One resource on a path: stack, logical id, type, and when it finishes (seconds from the start)."""

    stack: str
    logical_id: str
    type: str
    finish: int


def stack_paths(template: dict[str, Any], stack: str, start: int) -> dict[str, list[Step]]:
    """For every resource, the longest chain that ends with it, given the stack starts at ``start``."""
    resources: dict[str, Any] = template.get("Resources", {})
    best: dict[str, list[Step]] = {}

    def chain(lid: str) -> list[Step]:
        if lid in best:
            return best[lid]
        resource = resources[lid]
        depends = resource.get("DependsOn", [])
        before = {*([depends] if isinstance(depends, str) else depends)}
        before |= set(references({k: v for k, v in resource.items() if k != "DependsOn"}))
        prior = max((chain(d) for d in before if d in resources and d != lid), key=lambda c: c[-1].finish, default=[])
        begins = prior[-1].finish if prior else start
        best[lid] = [*prior, Step(stack, lid, str(resource["Type"]), begins + duration(str(resource["Type"])))]
        return best[lid]

    for lid in resources:
        chain(lid)
    return best


def critical_paths(assembly: Path, stage: str) -> tuple[list[Step], list[Step]]:
    """(chain to the cluster being ready, chain to the whole deploy being done)."""
    nested = assembly / f"assembly-{stage}"
    manifest = json.loads((nested / "manifest.json").read_text(encoding="utf-8"))
    stacks = {k: a for k, a in manifest["artifacts"].items() if a.get("type") == "aws:cloudformation:stack"}
    finished: dict[str, list[Step]] = {}

    def finish(artifact_id: str) -> list[Step]:
        if artifact_id in finished:
            return finished[artifact_id]
        artifact = stacks[artifact_id]
        deps = [d for d in artifact.get("dependencies", []) if d in stacks]
        prior = max((finish(d) for d in deps), key=lambda c: c[-1].finish if c else 0, default=[])
        start = prior[-1].finish if prior else 0
        template = json.loads((nested / artifact["properties"]["templateFile"]).read_text(encoding="utf-8"))
        name = str(artifact["properties"].get("stackName", artifact_id))
        chains = stack_paths(template, name, start)
        longest = max(chains.values(), key=lambda c: c[-1].finish, default=[])
        finished[artifact_id] = [*prior, *longest]
        return finished[artifact_id]

    everything = max((finish(a) for a in stacks), key=lambda c: c[-1].finish if c else 0)
    cluster = [finish(a) for a, s in stacks.items() if str(s["properties"].get("stackName", "")).endswith("-Cluster")]
    return (cluster[0] if cluster else []), everything


def stack_graph(assembly: Path, stage: str) -> list[str]:
    """``stack <- stacks it waits for``, one line per stack, in the manifest's order."""
    manifest = json.loads((assembly / f"assembly-{stage}" / "manifest.json").read_text(encoding="utf-8"))
    stacks = {k: a for k, a in manifest["artifacts"].items() if a.get("type") == "aws:cloudformation:stack"}
    names = {k: str(a["properties"].get("stackName", k)) for k, a in stacks.items()}
    return [
        f"{names[k]} <- {', '.join(names[d] for d in a.get('dependencies', []) if d in stacks) or '(nothing)'}"
        for k, a in stacks.items()
    ]


def render(steps: list[Step]) -> str:
    """One line per step with its finish time."""
    lines = []
    for step in steps:
        if duration(step.type) >= MINUTE:
            lines.append(f"  {step.finish / 60:7.1f} min  {step.stack}/{step.logical_id} ({step.type})")
    return "\n".join(lines)


def main() -> None:
    """Print both chains for one environment of an assembly."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assembly", type=Path, help="cloud assembly directory (cdk.out)")
    parser.add_argument("environment", help="environment (stage) name")
    args = parser.parse_args()
    cluster, everything = critical_paths(args.assembly, args.environment)
    print("stack dependencies (a stack starts when those it waits for are complete):")
    for line in stack_graph(args.assembly, args.environment):
        print(f"  {line}")
    if cluster:
        print(f"cluster ready after {cluster[-1].finish / 60:.0f} min; steps of a minute or more:")
        print(render(cluster))
    print(f"deploy complete after {everything[-1].finish / 60:.0f} min; steps of a minute or more:")
    print(render(everything))
    print("durations assumed (seconds, source):")
    for kind, (seconds, source) in {**DURATIONS, "(other)": DEFAULT}.items():
        print(f"  {kind}: {seconds} ({source})")


if __name__ == "__main__":
    main()
