"""Synthesize through the pinned CDK CLI and print one line per stack.

Usage: ``python tools/synth_summary.py [env,env...]``. Runs ``cdk synth`` (no
AWS credentials needed), then reads the cloud assembly: resources, outputs
and acknowledgements per stack, which ParallelCluster nodes are reachable from
where, and the cdk-nag packs that checked it (the
synth fails on any unacknowledged finding, so a printed line means they
passed), then one line per node group with its way out to the internet and
to S3 (mlcluster/analysis/reachability.py), then each environment's On-Demand
cost total from the local price cache of ``mlcluster cost`` (no AWS call, no
credentials; one line saying how to make the cache where there is none). Exits
non-zero when the synth fails: a config error prints its one message, a nag
finding prints cdk's report. The cost lines never change the exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from mlcluster.analysis.assembly import load_assembly
from mlcluster.analysis.reachability import check_assembly
from mlcluster.config import load_environment
from mlcluster.config.environment import environment_files
from mlcluster.pcluster.checks import access_summary

ROOT = Path(__file__).resolve().parent.parent
CDK = ROOT / "node_modules" / ".bin" / "cdk"


def synth(selection: str | None, outdir: Path) -> int:
    """Run the pinned CLI on every stack of every stage (``**``); return its exit code.

    Selecting ``**`` matters: the CLI only reports validation (cdk-nag)
    failures for the stacks it selects, and the default selection of an app
    made of stages is empty.
    """
    cmd = [str(CDK), "synth", "**", "--quiet", "--no-notices", "--output", str(outdir)]
    if selection:
        cmd += ["-c", f"env={selection}"]
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


def acknowledged_by_stack(stage_dir: Path) -> Counter[str]:
    """How many findings each stack acknowledges, from its metadata file."""
    counts: Counter[str] = Counter()
    for metadata in stage_dir.glob("*.metadata.json"):
        for entries in json.loads(metadata.read_text()).values():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    counts[metadata.name.removesuffix(".metadata.json")] += len(entry["data"])
    return counts


def summarize(outdir: Path) -> list[str]:
    """Lines describing every stack in the cloud assembly at ``outdir``."""
    lines = [f"{'stack':<22} {'resources':>9} {'outputs':>7}  {'acknowledgements':>16}  cdk-nag packs (all passed)"]
    manifest = json.loads((outdir / "manifest.json").read_text())
    files = {p.stem: p for p in environment_files(ROOT / "environments")}
    for name, artifact in sorted(manifest["artifacts"].items()):
        if artifact["type"] != "cdk:cloud-assembly":
            continue
        stage = name.removeprefix("assembly-")
        config = load_environment(files[stage]).config
        packs = ", ".join(["AwsSolutions", *config.compliance.packs])
        stage_dir = outdir / artifact["properties"]["directoryName"]
        acks = acknowledged_by_stack(stage_dir)
        stage_manifest = json.loads((stage_dir / "manifest.json").read_text())
        for artifact_id, stack in sorted(stage_manifest["artifacts"].items()):
            if stack["type"] != "aws:cloudformation:stack":
                continue
            template = json.loads((stage_dir / stack["properties"]["templateFile"]).read_text())
            path = stack.get("displayName", artifact_id)
            resources = len(template.get("Resources", {}))
            outputs = len(template.get("Outputs", {}))
            lines.append(f"{path:<22} {resources:>9} {outputs:>7}  {acks[artifact_id]:>16}  {packs}")
        if config.cluster.backend == "pcluster" and config.cluster.pcluster is not None:
            lines += [f"  {stage} reachable: {line}" for line in access_summary(config.cluster.pcluster)]
    return lines


def reachability(outdir: Path) -> list[str]:
    """One line per node group: how it reaches the internet and S3, and how many gaps the proof found."""
    lines = [f"{'node group':<44} {'internet':<17} {'S3':<17} gaps"]
    for report in check_assembly(load_assembly(outdir)):
        for group in report.groups:
            name = f"{report.environment}: {group.name}"
            path = report.paths.get(group.name, {})
            gaps = sum(1 for p in report.problems if p.startswith(f"{name}:"))
            lines.append(f"{name:<44} {path.get('internet', 'none'):<17} {path.get('s3', 'none'):<17} {gaps}")
    return lines


def cost_lines(selection: str | None, folder: Path) -> list[str]:
    """Each environment's cost total from the price cache (mlcluster/cli/cost.py), offline; never raises.

    Environments whose region has no cache are named on one line that says how
    to create it; an environment whose estimate cannot be made says why on its own line;
    one whose lines the cache lacks (filled by another environment) names them
    and says to run ``mlcluster cost ENV`` once, and shows no figure when none is priced.
    """
    from mlcluster.cli.context import zone_region
    from mlcluster.cli.cost import offline_total, total_lines

    wanted = set(selection.split(",")) if selection else None
    lines = ["cost per environment (mlcluster cost ENV for the table):"]
    uncached: dict[str, str] = {}
    for path in environment_files(folder):
        if wanted is not None and path.stem not in wanted:
            continue
        try:
            environment = load_environment(path)
            region = environment.config.region or zone_region(environment.config)
            if region is None:
                lines.append(f"  {path.stem}: no region in the file; run `mlcluster cost {path.stem} --region REGION`")
                continue
            found = offline_total(environment, region)
            if found is None:
                uncached[path.stem] = region
            else:
                lines += [f"  {line}" for line in total_lines(*found)]
        except Exception as error:  # the summary must never fail synth; say why instead
            message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
            lines.append(f"  {path.stem}: no estimate ({' '.join(str(message).split())})")
    if uncached:
        names = ", ".join(f"{name} ({region})" for name, region in uncached.items())
        lines.append(
            f"  no price cache for {names}: run `mlcluster cost ENV` once with AWS credentials "
            "(pricing:GetProducts) to create it"
        )
    return lines


def main() -> int:
    selection = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ENV") or None
    outdir = ROOT / "cdk.out"
    code = synth(selection, outdir)
    if code != 0:
        print(f"make synth: cdk synth failed (exit {code})", file=sys.stderr)
        return code
    print("\n".join(summarize(outdir)))
    print()
    print("\n".join(reachability(outdir)))
    print()
    print("\n".join(cost_lines(selection, ROOT / "environments")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
