#!/usr/bin/env python3
"""Write a compliance report per environment under ``cdk.out/compliance/`` (``make compliance``).

For each environment and each pack mlcluster supports (AwsSolutions, NIST
800-53 r5, HIPAA Security, PCI DSS 3.2.1) the report lists every rule with
its status:

- ``compliant``: the rule judged resources of this environment and found nothing;
- ``fixed``: as compliant, for a rule mlcluster satisfies by design (how is said);
- ``acknowledged``: the rule found something, acknowledged on the resource with
  the reason shown (the synthesis fails on anything not acknowledged);
- ``not applicable``: no resource of this environment is of a kind the rule judges.

The environments are synthesized once with every pack added (which already
fails on an unacknowledged finding); the packs are then run again on the
synthesized templates by ``tools/compliance_rules.js`` to learn the rules
that passed or had nothing to judge, which cdk-nag 3.x does not report. The
acknowledgements and their reasons come from the assembly's metadata. When
checkov is on ``PATH`` its results (passed, failed, skipped with reason)
are written beside them. Output: ``<env>.md`` and ``<env>.csv`` (and
``<env>-checkov.csv``). Usage: ``compliance_report.py [ENV[,ENV...]] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The jsii packages whose JavaScript the rules script needs, by Python module holding the tarball.
JSII_MODULES = (
    "aws_cdk._jsii",
    "aws_cdk.cloud_assembly_schema._jsii",
    "aws_cdk.asset_awscli_v1._jsii",
    "aws_cdk.asset_node_proxy_agent_v6._jsii",
    "constructs._jsii",
    "cdk_nag._jsii",
)
#: Rules mlcluster satisfies by design rather than by a setting someone must remember, and how.
FIXED_BY_DESIGN = {
    "CloudWatchLogGroupEncrypted": "every log group uses the environment's customer-managed key (EncryptLogGroups)",
    "CloudWatchLogGroupRetentionPeriod": "every log group keeps logs for retention.log_retention_days",
    "S3BucketSSLRequestsOnly": "every bucket policy denies requests without TLS 1.2 or newer",
    "S3BucketVersioningEnabled": "every bucket is versioned",
    "S3BucketLevelPublicAccessProhibited": "every bucket blocks all public access",
    "VPCFlowLogsEnabled": "the VPC's flow logs go to an encrypted log group",
    "KMSBackingKeyRotationEnabled": "every key mlcluster creates rotates yearly",
}
#: Files of the jsii tarballs the rules script never loads: types, docs, source maps, jsii assemblies,
#: the Lambda layer zips of the asset packages and the template validator's WebAssembly.
NOT_LOADED_BY_NODE = (".d.ts", ".md", ".map", ".jsii", ".jsii.gz", ".jsii.tabl.json.gz", ".zip", ".wasm")
STATUSES = ("compliant", "fixed", "acknowledged", "not applicable")
PACK_NAMES = ("AwsSolutions", "NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")


@dataclass
class RuleStatus:
    """One rule of one pack for one environment."""

    pack: str
    rule: str
    status: str
    resources: int
    detail: str


def node_modules(cache: Path) -> Path:
    """The JavaScript of aws-cdk-lib, cdk-nag and their dependencies, unpacked once from the installed jsii tarballs.

    Only what the rules script loads is written (80 MB of 190 MB): writing many files is most of
    the cost on a slow disk. A file it needs but which was left out fails it loudly.
    """
    stamp = cache / "versions.json"
    tarballs = []
    for module in JSII_MODULES:
        folder = Path(importlib.import_module(module).__file__ or "").parent
        tarballs += sorted(folder.glob("*.jsii.tgz"))
    versions = sorted(t.name for t in tarballs)
    if stamp.exists() and json.loads(stamp.read_text()) == versions:
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    for tarball in tarballs:
        with tarfile.open(tarball) as archive:
            package = archive.extractfile("package/package.json")
            if package is None:
                raise RuntimeError(f"{tarball}: no package/package.json")
            name = json.load(package)["name"]
            target = cache / name
            target.mkdir(parents=True)
            members = []
            for member in archive.getmembers():
                member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
                if member.name and not member.name.endswith(NOT_LOADED_BY_NODE):
                    members.append(member)
            archive.extractall(target, members=members, filter="data")
    stamp.write_text(json.dumps(versions))
    return cache


def synthesize(environments: list[str] | None, outdir: Path) -> Path:
    """Synthesize ``environments`` (all if None) with every pack; raises on any unacknowledged finding."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from mlcluster.app import build_app
    from mlcluster.stacks.stage import EXTRA_PACKS

    shutil.rmtree(outdir, ignore_errors=True)
    app, _ = build_app(ROOT / "environments", selected=environments, outdir=str(outdir), extra_packs=list(EXTRA_PACKS))
    app.synth()
    return outdir


def acknowledgements(assembly: Path) -> dict[tuple[str, str], dict[str, str]]:
    """(template file, logical id) -> {finding id: reason}, including those made on ancestor constructs."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for metadata_file in assembly.glob("*.metadata.json"):
        template = metadata_file.name.replace(".metadata.json", ".template.json")
        entries: dict[str, list[dict[str, Any]]] = json.loads(metadata_file.read_text())
        acks: dict[str, dict[str, str]] = defaultdict(dict)
        for path, items in entries.items():
            for item in items:
                if item["type"] == "aws:cdk:acknowledged-rules":
                    for finding, reason in item["data"].items():
                        acks[path][finding.removeprefix("Annotation::")] = reason
        for path, items in entries.items():
            for item in items:
                if item["type"] == "aws:cdk:logicalId":
                    inherited: dict[str, str] = {}
                    parts = path.split("/")
                    for end in range(2, len(parts) + 1):
                        inherited.update(acks.get("/".join(parts[:end]), {}))
                    out[(template, item["data"])] = inherited
    return out


def rule_results(modules: Path, templates: dict[str, list[Path]]) -> dict[str, list[list[Any]]]:
    """Per environment, [pack, rule id, template file, logical id, result] for every rule and resource.

    One ``compliance_rules.js`` process evaluates the templates of every environment (starting node and
    loading aws-cdk-lib costs more than evaluating one environment).
    """
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH; the CDK needs it too")
    owner = {str(path): (environment, path.name) for environment, paths in templates.items() for path in paths}
    result = subprocess.run(
        [node, str(ROOT / "tools" / "compliance_rules.js"), *owner],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NODE_PATH": str(modules)},
    )
    if result.returncode != 0:
        raise RuntimeError(f"compliance_rules.js failed:\n{result.stderr[-4000:]}")
    rows: dict[str, list[list[Any]]] = {environment: [] for environment in templates}
    for pack, rule, path, logical_id, outcome in json.loads(result.stdout):
        environment, name = owner[path]
        rows[environment].append([pack, rule, name, logical_id, outcome])
    return rows


def statuses(rows: list[list[Any]], acks: dict[tuple[str, str], dict[str, str]]) -> list[RuleStatus]:
    """Fold per-resource results into one status per pack and rule (see the module docstring)."""
    by_rule: dict[tuple[str, str], list[tuple[str, str, Any]]] = defaultdict(list)
    for pack, rule, template, logical_id, result in rows:
        by_rule[(pack, rule)].append((template, logical_id, result))
    out: list[RuleStatus] = []
    for (pack, rule), results in sorted(by_rule.items()):
        judged = [r for r in results if r[2] != "N/A"]
        reasons: list[str] = []
        unmatched: list[str] = []
        for template, logical_id, result in judged:
            if result == "Compliant":
                continue
            on_resource = acks.get((template, logical_id), {})
            findings = [f"{rule}[{f}]" for f in result] if isinstance(result, list) else [rule]
            for finding in findings:
                # Wildcard findings name cross-stack values the way the synthesis printed them; fall back to
                # the resource's acknowledgements of the same rule when the text differs.
                matches = [on_resource[finding]] if finding in on_resource else []
                matches = matches or [v for k, v in on_resource.items() if k.startswith(f"{rule}[")]
                if not matches:
                    unmatched.append(f"{logical_id}: {finding}")
                reasons += [f"{logical_id}: {m}" for m in matches]
        suffix = rule.split("-", 1)[1]
        if unmatched:
            out.append(RuleStatus(pack, rule, "unmatched", len(judged), "; ".join(sorted(set(unmatched)))))
        elif reasons:
            out.append(RuleStatus(pack, rule, "acknowledged", len(judged), " | ".join(dict.fromkeys(reasons))))
        elif judged and suffix in FIXED_BY_DESIGN:
            out.append(RuleStatus(pack, rule, "fixed", len(judged), FIXED_BY_DESIGN[suffix]))
        elif judged:
            out.append(RuleStatus(pack, rule, "compliant", len(judged), ""))
        else:
            out.append(RuleStatus(pack, rule, "not applicable", 0, "no resource of the kind this rule judges"))
    return out


def checkov_results(templates: dict[str, list[Path]], work: Path) -> dict[str, list[dict[str, str]]] | None:
    """Per environment, checkov's result per check and resource, or None when checkov is not installed.

    One checkov process scans every environment's templates (its start-up costs about as much as
    scanning all of them), copied side by side into one folder: in a folder per environment, checkov
    3.3 confuses the environment variables of same-named functions across folders. The stacks' template
    names start with their environment's name, so they do not collide. ``--skip-download``: the report
    needs nothing from Prisma Cloud, so checkov makes no network call.
    """
    local = ROOT / ".venv-checkov" / "bin" / "checkov"  # where `make compliance` installs it
    checkov = str(local) if local.exists() else shutil.which("checkov")
    if checkov is None:
        return None
    owner = {path.name: environment for environment, paths in templates.items() for path in paths}
    if len(owner) < sum(map(len, templates.values())):
        raise RuntimeError(f"two environments have a template of the same name: {templates}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for paths in templates.values():
        for template in paths:
            shutil.copy(template, work / template.name)
    command = [checkov, "-d", str(work), "--framework", "cloudformation", "-o", "json", "--compact", "--skip-download"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    report = json.loads(result.stdout)
    out: dict[str, list[dict[str, str]]] = {environment: [] for environment in templates}
    for key, status in (("passed_checks", "passed"), ("failed_checks", "failed"), ("skipped_checks", "skipped")):
        for check in report.get("results", {}).get(key, []):
            path = Path(check["file_path"])
            out[owner[path.name]].append(
                {
                    "check": check["check_id"],
                    "name": check.get("check_name", ""),
                    "resource": f"{path.name}:{check['resource']}",
                    "status": status,
                    "reason": (check.get("check_result") or {}).get("suppress_comment") or "",
                }
            )
    return out


def write_report(environment: str, rules: list[RuleStatus], checkov: list[dict[str, str]] | None, out: Path) -> None:
    """``<environment>.csv`` and ``.md`` (and ``-checkov.csv``) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{environment}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["environment", "pack", "rule", "status", "resources judged", "reason or how"])
        for r in rules:
            writer.writerow([environment, r.pack, r.rule, r.status, r.resources, r.detail])
    lines = [f"# Compliance report: {environment}", ""]
    for pack in PACK_NAMES:
        mine = [r for r in rules if r.pack == pack]
        counts = ", ".join(f"{sum(r.status == s for r in mine)} {s}" for s in (*STATUSES, "unmatched"))
        lines += [f"## {pack}", "", f"{len(mine)} rules: {counts}.", ""]
        lines += ["| rule | status | resources judged | reason or how |", "|---|---|---|---|"]
        lines += [f"| {r.rule} | {r.status} | {r.resources} | {r.detail.replace('|', '/')} |" for r in mine]
        lines.append("")
    if checkov is None:
        lines += ["## checkov", "", "checkov is not installed, so its results are not part of this report.", ""]
    else:
        with (out / f"{environment}-checkov.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["check", "name", "resource", "status", "reason"])
            writer.writeheader()
            writer.writerows(checkov)
        counts = ", ".join(f"{sum(c['status'] == s for c in checkov)} {s}" for s in ("passed", "failed", "skipped"))
        lines += ["## checkov", "", f"{counts}.", "", "| check | resource | status | reason |", "|---|---|---|---|"]
        lines += [
            f"| {c['check']} | {c['resource']} | {c['status']} | {c['reason'].replace('|', '/')} |"
            for c in checkov
            if c["status"] != "passed"
        ]
        lines.append("")
    (out / f"{environment}.md").write_text("\n".join(lines), encoding="utf-8")


def chosen_assemblies(assembly_root: Path, environments: list[str] | None) -> dict[str, Path]:
    """The cloud assembly of each environment asked for (all if None) under ``assembly_root``, by environment."""
    found = {a.name.removeprefix("assembly-"): a for a in sorted(assembly_root.glob("assembly-*"))}
    return {e: a for e, a in found.items() if environments is None or e in environments}


def generate(environments: list[str] | None, out: Path, assembly_root: Path | None = None) -> list[str]:
    """Synthesize, evaluate and write the report of each environment; returns the environments written.

    ``assembly_root``: a cloud assembly already synthesized with every pack (as :func:`synthesize`
    makes it, for these environments or more), used instead of synthesizing again.
    """
    if assembly_root is None:
        assembly_root = synthesize(environments, out / "assembly")
    assemblies = chosen_assemblies(assembly_root, environments)
    templates = {e: sorted(a.glob("*.template.json")) for e, a in assemblies.items()}
    rows = rule_results(node_modules(out / ".node_modules"), templates)
    checkov = checkov_results(templates, out / ".checkov")
    for environment, assembly in assemblies.items():
        rules = statuses(rows[environment], acknowledgements(assembly))
        write_report(environment, rules, None if checkov is None else checkov[environment], out)
    return list(assemblies)


def main() -> None:
    """Command line: the environments (comma-separated, default all) and the output folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("environments", nargs="?", default="", help="comma-separated; default: every environment")
    parser.add_argument("--out", type=Path, default=ROOT / "cdk.out" / "compliance")
    args = parser.parse_args()
    chosen = [e.strip() for e in args.environments.split(",") if e.strip()] or None
    for environment in generate(chosen, args.out):
        print(f"{args.out / environment}.md")


if __name__ == "__main__":
    main()
