"""The collector configuration, the alert rules and the alert manager definition checked by the real tools.

promtool (Prometheus 2.42, Debian 12) checks every collector configuration the example environments
render (in agent mode, as the node runs it) and the rule group; ``promtool test rules`` proves each
alert fires on the series that should fire it, stays silent on healthy ones and resolves; amtool
(Alertmanager 0.25) checks the inner configuration of the alert manager definition.

Versions: the node runs Prometheus 2.54.1 (collector_install.sh) and Amazon Managed Service for
Prometheus evaluates the rules and runs the alert manager. Every field used here exists in 2.42 and
0.25 (``sigv4`` in remote_write since 2.26, ``absent_over_time`` since 2.16, ``sns_configs`` since
Alertmanager 0.23), so an older checker accepting them means the newer one does too; the reverse
(a field only 2.54 knows) would fail here first, which is the safe direction. AMP wraps the alert
manager configuration in a definition (``alertmanager_config`` plus ``template_files``) that amtool
does not know: the inner document is what amtool checks, and the wrapper is tested in test_alerts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.alert_rules import AlertInputs, alertmanager_yaml, rules_yaml
from mlcluster.collector import CONFIG_FILE, hyperpod_inputs, pcluster_inputs, render
from mlcluster.config import load_environment
from mlcluster.config.observability import prometheus_enabled
from tests.support import ENVIRONMENTS, EXAMPLES
from tests.system.system_tools import program, run

CLUSTER = "ml"
INPUTS = AlertInputs(
    cluster_name=CLUSTER,
    unhealthy_nodes=2,
    collector_silent_minutes=10,
    topic_arn="arn:aws:sns:us-west-2:123456789012:alarms",
    region="us-west-2",
)


def rendered_collectors() -> dict[str, str]:
    """Environment name -> the collector.yml its cluster stack uploads (the same inputs, concrete values)."""
    out = {}
    for name in EXAMPLES:
        env = load_environment(ENVIRONMENTS / f"{name}.yaml")
        if not prometheus_enabled(env.config):
            continue
        common: dict[str, Any] = {
            "cluster_name": env.cluster_name,
            "environment": env.name,
            "region": "us-west-2",
            "remote_write_url": "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0/api/v1/remote_write",
            "scrape_interval_seconds": env.config.observability.prometheus.scrape_interval_seconds,
        }
        cluster = env.config.cluster
        inputs = (
            pcluster_inputs(cluster.pcluster, **common)
            if cluster.pcluster is not None
            else hyperpod_inputs(cluster.hyperpod, **common)  # type: ignore[arg-type]
        )
        out[name] = render(inputs)[CONFIG_FILE]
    return out


COLLECTORS = rendered_collectors()


def test_some_examples_render_a_collector() -> None:
    assert len(COLLECTORS) >= 2, COLLECTORS.keys()


@pytest.mark.parametrize("name", sorted(COLLECTORS))
def test_promtool_accepts_the_collector_configuration_in_agent_mode(name: str, tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(COLLECTORS[name])
    done = run(program("promtool"), "check", "config", "--agent", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_refuses_what_the_collector_could_not_run(tmp_path: Path) -> None:
    """The check is not a formality: rules in agent mode, an unknown key, a timeout over the interval fail."""
    config = yaml.safe_load(next(iter(COLLECTORS.values())))
    broken = {
        "rules in agent mode": {**config, "rule_files": ["r.yml"]},
        "unknown sigv4 key": {**config, "remote_write": [{**config["remote_write"][0], "sigv4": {"regio": "x"}}]},
        "timeout over interval": {**config, "global": {**config["global"], "scrape_timeout": "1h"}},
        "a job twice": {**config, "scrape_configs": config["scrape_configs"] * 2},
    }
    for name, document in broken.items():
        (tmp_path / "broken.yml").write_text(yaml.safe_dump(document))
        done = run(program("promtool"), "check", "config", "--agent", str(tmp_path / "broken.yml"))
        assert done.returncode != 0, (name, done.stdout)


def test_promtool_accepts_the_rule_group(tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(rules_yaml(INPUTS))
    done = run(program("promtool"), "check", "rules", str(tmp_path / "rules.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_amtool_accepts_the_alert_manager_configuration(tmp_path: Path) -> None:
    inner = yaml.safe_load(alertmanager_yaml(INPUTS))["alertmanager_config"]
    (tmp_path / "am.yml").write_text(inner)
    done = run(program("amtool"), "check-config", str(tmp_path / "am.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 inhibit rules" in done.stdout and "1 receivers" in done.stdout
    # and refuses a route to a receiver that does not exist
    broken = yaml.safe_load(inner)
    broken["route"]["receiver"] = "nobody"
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    assert run(program("amtool"), "check-config", str(tmp_path / "broken.yml")).returncode != 0


# -- promtool test rules --------------------------------------------------------------------------------
# Series are sampled every minute; ``_`` is a missing sample, ``stale`` ends a series.
HEAD_UP = (
    f'up{{cluster="{CLUSTER}",environment="test",job="node",role="head",node="head-node",instance="127.0.0.1:9100"}}'
)
WORKER_UP = f'up{{cluster="{CLUSTER}",environment="test",job="dcgm",node="gpu-st-p5-1",instance="10.1.0.20:9400"}}'
OTHER_CLUSTER_UP = 'up{cluster="other",environment="test",job="node",role="head",node="head-node",instance="x:9100"}'


def slurm(partition: str, state: str) -> str:
    return f'mlcluster_slurm_nodes{{cluster="{CLUSTER}",environment="test",job="node",partition="{partition}",state="{state}"}}'


def alert(name: str, severity: str, summary: str, **labels: str) -> dict[str, Any]:
    return {"exp_labels": {"alertname": name, "severity": severity, **labels}, "exp_annotations": {"summary": summary}}


GPU = {"cluster": CLUSTER, "environment": "test", "node": "gpu-st-p5-1", "instance": "10.1.0.20:9400", "gpu": "3"}
COLLECTOR_SUMMARY = (
    "no sample from the head node/controller of ml for 10 minutes: the node, its collector or its network is down "
    "(also while no cluster runs)"
)
SLURM_SILENT_SUMMARY = (
    "Slurm on the head node/controller of ml has not answered sinfo for 10 minutes (slurmctld down or hung)"
)


def case(interval_series: list[tuple[str, str]], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """One test group: input series, then (eval time, alert name, expected alerts) checks."""
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in interval_series],
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": e} for t, a, e in checks],
    }


CASES: dict[str, dict[str, Any]] = {
    "CollectorSilent": case(
        # The head node answers for 10 minutes, is silent for 20, then answers again; another cluster's
        # head node never stops and must not hide the silence of ours.
        [(HEAD_UP, "1x10 _x20 1x20"), (OTHER_CLUSTER_UP, "1x50")],
        [
            ("9m", "CollectorSilent", []),
            ("19m", "CollectorSilent", []),  # last sample at 10m: still inside the 10 minute window
            (
                "25m",
                "CollectorSilent",
                [alert("CollectorSilent", "critical", COLLECTOR_SUMMARY, cluster=CLUSTER, job="node", role="head")],
            ),
            ("35m", "CollectorSilent", []),  # resolved: samples again since 31m
        ],
    ),
    "ExporterDown": case(
        [(WORKER_UP, "1x5 0x10 1x10"), (HEAD_UP, "1x25")],
        [
            ("4m", "ExporterDown", []),
            ("8m", "ExporterDown", []),  # down for 2 minutes: pending, not firing
            (
                "13m",
                "ExporterDown",
                [
                    alert(
                        "ExporterDown",
                        "warning",
                        "exporter dcgm on gpu-st-p5-1 (10.1.0.20:9400) of ml has not answered for 5m",
                        **{k: v for k, v in GPU.items() if k != "gpu"},
                        job="dcgm",
                    )
                ],
            ),
            ("18m", "ExporterDown", []),
        ],
    ),
    "GpuXidError": case(
        [
            (
                f"DCGM_FI_DEV_XID_ERRORS{{{','.join(f'{k}={v!r}' for k, v in GPU.items())}}}".replace("'", '"'),
                "0x5 79x5 0x5",
            ),
            (f'DCGM_FI_DEV_XID_ERRORS{{cluster="{CLUSTER}",node="gpu-st-p5-1",gpu="4"}}', "0x15"),
        ],
        [
            ("3m", "GpuXidError", []),
            (
                "7m",
                "GpuXidError",
                [
                    alert(
                        "GpuXidError",
                        "critical",
                        "GPU 3 on gpu-st-p5-1 of ml reported Xid 79 (the last Xid error DCGM saw)",
                        **GPU,
                    )
                ],
            ),
            ("13m", "GpuXidError", []),
        ],
    ),
    "GpuEccDoubleBitErrors": case(
        [
            (
                f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{','.join(f'{k}={v!r}' for k, v in GPU.items())}}}".replace("'", '"'),
                "0x5 2x5 0x5",
            ),
        ],
        [
            ("3m", "GpuEccDoubleBitErrors", []),
            (
                "7m",
                "GpuEccDoubleBitErrors",
                [
                    alert(
                        "GpuEccDoubleBitErrors",
                        "critical",
                        "GPU 3 on gpu-st-p5-1 of ml has 2 uncorrectable (double-bit) ECC errors since the driver loaded",
                        **GPU,
                    )
                ],
            ),
            ("13m", "GpuEccDoubleBitErrors", []),  # the driver reloaded (node replaced): the count is 0 again
        ],
    ),
    "NeuronHardwareEccEvents": case(
        [
            # A counter at 5 since before the window does not fire; one that rises from 5 to 6 does, for 10 minutes.
            (f'hardware_ecc_events_total{{cluster="{CLUSTER}",node="trn-st-trn1-1",neuron_device="0"}}', "5x40"),
            (f'hardware_ecc_events_total{{cluster="{CLUSTER}",node="trn-st-trn1-2",neuron_device="1"}}', "5x10 6x30"),
        ],
        [
            ("9m", "NeuronHardwareEccEvents", []),
            (
                "12m",
                "NeuronHardwareEccEvents",
                [
                    alert(
                        "NeuronHardwareEccEvents",
                        "warning",
                        "Neuron device on trn-st-trn1-2 of ml reported hardware ECC events in the last 10 minutes",
                        cluster=CLUSTER,
                        node="trn-st-trn1-2",
                        neuron_device="1",
                    )
                ],
            ),
            ("25m", "NeuronHardwareEccEvents", []),
        ],
    ),
    "SlurmNodesUnavailable": case(
        # The threshold is 2 nodes. One down node alone, and any number of healthy or powered-down nodes,
        # stay silent; from 10m a second node is drained, from 25m it is back.
        [
            (slurm("gpu", "down*"), "1x40"),
            (slurm("gpu", "drained"), "_x10 1x15 _x15"),
            (slurm("gpu", "idle"), "6x40"),
            (slurm("gpu", "idle~"), "20x40"),
            (slurm("cpu", "mixed"), "3x40"),
            (slurm("cpu", "allocated"), "3x40"),
        ],
        [
            ("8m", "SlurmNodesUnavailable", []),
            ("13m", "SlurmNodesUnavailable", []),  # pending: 2 bad nodes for 3 minutes
            (
                "20m",
                "SlurmNodesUnavailable",
                [
                    alert(
                        "SlurmNodesUnavailable",
                        "warning",
                        "2 Slurm node(s) of ml down, drained or failing for 5m",
                        cluster=CLUSTER,
                    )
                ],
            ),
            ("33m", "SlurmNodesUnavailable", []),
        ],
    ),
    "SlurmNotAnswering": case(
        [(slurm("gpu", "idle"), "2x10 _x20 2x20"), (HEAD_UP, "1x50")],
        [
            ("15m", "SlurmNotAnswering", []),
            (
                "25m",
                "SlurmNotAnswering",
                [alert("SlurmNotAnswering", "critical", SLURM_SILENT_SUMMARY, cluster=CLUSTER)],
            ),
            ("35m", "SlurmNotAnswering", []),
        ],
    ),
}


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    names = [r["alert"] for r in yaml.safe_load(rules_yaml(INPUTS))["groups"][0]["rules"]]
    assert sorted(CASES) == sorted(names)
    for name, group in CASES.items():
        checks = group["alert_rule_test"]
        assert all(c["alertname"] == name for c in checks)
        assert any(c["exp_alerts"] for c in checks) and any(not c["exp_alerts"] for c in checks), name
        # resolving: a silent check after a firing one
        first_firing = next(i for i, c in enumerate(checks) if c["exp_alerts"])
        assert any(not c["exp_alerts"] for c in checks[first_firing:]), name


def promtool_test(tmp_path: Path, rules_text: str, groups: list[dict[str, Any]]) -> str:
    (tmp_path / "rules.yml").write_text(rules_text)
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": groups})
    )
    done = run(program("promtool"), "test", "rules", "tests.yml", cwd=tmp_path)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_each_alert_fires_stays_silent_and_resolves(tmp_path: Path) -> None:
    out = promtool_test(tmp_path, rules_yaml(INPUTS), list(CASES.values()))
    assert out.startswith("exit 0\n"), out
    assert "SUCCESS" in out


@pytest.mark.parametrize(
    ("name", "rules_text"),
    [
        # A rule that ignores the cluster label would fire on nothing here, or on everything: the
        # cases are sharp enough to tell a broken rule from the real one.
        ("threshold off by one", rules_yaml(INPUTS).replace(">= 2", ">= 3")),
        ("powered-down nodes counted", rules_yaml(INPUTS).replace('state=~"(down|drain|fail|inval).*"', 'state=~".*"')),
        ("no pending time", rules_yaml(INPUTS).replace("for: 5m", "for: 0m")),
    ],
)
def test_the_cases_catch_a_broken_rule(name: str, rules_text: str, tmp_path: Path) -> None:
    assert rules_text != rules_yaml(INPUTS), name
    out = promtool_test(tmp_path, rules_text, list(CASES.values()))
    assert out.startswith("exit 1\n"), out
