"""Alert rules and the alert manager configuration of an environment's Prometheus workspace.

Amazon Managed Service for Prometheus evaluates the rules below on the
samples the collector remote-writes (external labels ``cluster`` and
``environment``, jobs of :data:`mlcluster.exporters.EXPORTERS`; the head
node/controller's own targets carry ``role="head"``, see
:mod:`mlcluster.collector`) and its alert manager sends every firing or
resolved alert to the environment's alarm topic. They watch what CloudWatch
cannot: a head node/controller whose collector went silent (HyperPod has no
controller metric), exporters that stopped answering, GPU Xid and ECC
double-bit errors, Neuron hardware ECC events, Slurm nodes down, drained or
failing, and a Slurm controller that stopped answering ``sinfo``. Every
expression selects the environment's cluster by its ``cluster`` label, so
one workspace may hold several clusters' samples. Lustre's free capacity is
alarmed in CloudWatch already.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

#: The rule group's name in the workspace's rule groups namespace.
GROUP = "mlcluster"
#: How long an exporter must stay unreachable before its alert fires.
EXPORTER_DOWN_FOR = "5m"
#: How long Slurm nodes must stay down, drained or failing before their alert fires.
SLURM_NODES_FOR = "5m"
#: sinfo's extended states (``%T``) of nodes Slurm will not run jobs on; a suffix (``*`` not responding,
#: ``~`` powered off...) may follow. PromQL regex matchers are anchored at both ends.
SLURM_BAD_STATES = "(down|drain|fail|inval).*"
#: The receiver every alert goes to.
RECEIVER = "alarm-topic"


@dataclass(frozen=True, kw_only=True)
class AlertInputs:
    """What the rules and the alert manager configuration are made of (strings may be CDK tokens).

    :param cluster_name: the ``cluster`` label the collector puts on every sample.
    :param unhealthy_nodes: Slurm nodes down, drained or failing at once that raise an alert.
    :param collector_silent_minutes: minutes without a sample from the head node/controller that raise an alert.
    :param topic_arn: the alarm topic every alert is published to.
    :param region: the topic's region, for the alert manager's SigV4 signing.
    """

    cluster_name: str
    unhealthy_nodes: int
    collector_silent_minutes: int
    topic_arn: str
    region: str

    def __post_init__(self) -> None:
        """Reject thresholds the rules could not express, naming them."""
        for key in ("unhealthy_nodes", "collector_silent_minutes"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: {getattr(self, key)} is not valid; allowed: 1 or more")


def _alert(name: str, expr: str, summary: str, severity: str, for_: str | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ is not None:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary}
    return rule


def rules(inputs: AlertInputs) -> dict[str, Any]:
    """The Prometheus rules file (one group of alerting rules) as a dict."""
    c = f'cluster="{inputs.cluster_name}"'
    head = f'up{{{c},job="node",role="head"}}'
    minutes = inputs.collector_silent_minutes
    return {
        "groups": [
            {
                "name": GROUP,
                "rules": [
                    _alert(
                        "CollectorSilent",
                        f"absent_over_time({head}[{minutes}m])",
                        f"no sample from the head node/controller of {{{{ $labels.cluster }}}} for {minutes} "
                        "minutes: the node, its collector or its network is down (also while no cluster runs)",
                        "critical",
                    ),
                    _alert(
                        "ExporterDown",
                        f"up{{{c}}} == 0",
                        "exporter {{ $labels.job }} on {{ $labels.node }} ({{ $labels.instance }}) of "
                        "{{ $labels.cluster }} has not answered for " + EXPORTER_DOWN_FOR,
                        "warning",
                        EXPORTER_DOWN_FOR,
                    ),
                    _alert(
                        "GpuXidError",
                        f"DCGM_FI_DEV_XID_ERRORS{{{c}}} > 0",
                        "GPU {{ $labels.gpu }} on {{ $labels.node }} of {{ $labels.cluster }} reported Xid "
                        "{{ $value }} (the last Xid error DCGM saw)",
                        "critical",
                    ),
                    _alert(
                        "GpuEccDoubleBitErrors",
                        f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{c}}} > 0",
                        "GPU {{ $labels.gpu }} on {{ $labels.node }} of {{ $labels.cluster }} has {{ $value }} "
                        "uncorrectable (double-bit) ECC errors since the driver loaded",
                        "critical",
                    ),
                    _alert(
                        "NeuronHardwareEccEvents",
                        f"increase(hardware_ecc_events_total{{{c}}}[10m]) > 0",
                        "Neuron device on {{ $labels.node }} of {{ $labels.cluster }} reported hardware ECC "
                        "events in the last 10 minutes",
                        "warning",
                    ),
                    _alert(
                        "SlurmNodesUnavailable",
                        f'sum by (cluster) (mlcluster_slurm_nodes{{{c},state=~"{SLURM_BAD_STATES}"}}) '
                        f">= {inputs.unhealthy_nodes}",
                        "{{ $value }} Slurm node(s) of {{ $labels.cluster }} down, drained or failing for "
                        + SLURM_NODES_FOR,
                        "warning",
                        SLURM_NODES_FOR,
                    ),
                    _alert(
                        "SlurmNotAnswering",
                        f"absent_over_time(mlcluster_slurm_nodes{{{c}}}[{minutes}m])",
                        f"Slurm on the head node/controller of {{{{ $labels.cluster }}}} has not answered sinfo "
                        f"for {minutes} minutes (slurmctld down or hung)",
                        "critical",
                    ),
                ],
            }
        ]
    }


def alertmanager(inputs: AlertInputs) -> dict[str, Any]:
    """The alert manager configuration: every alert to the alarm topic; a silent collector mutes Slurm's alert."""
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["cluster", "alertname"],
            "group_wait": "1m",
            "group_interval": "5m",
            "repeat_interval": "12h",
        },
        # Without the collector no Slurm sample arrives either: one alert says so, not two.
        "inhibit_rules": [
            {
                "source_matchers": ['alertname="CollectorSilent"'],
                "target_matchers": ['alertname="SlurmNotAnswering"'],
                "equal": ["cluster"],
            }
        ],
        "receivers": [
            {
                "name": RECEIVER,
                "sns_configs": [
                    {
                        "topic_arn": inputs.topic_arn,
                        "sigv4": {"region": inputs.region},
                        "subject": "mlcluster alert {{ .GroupLabels.alertname }} "
                        "({{ .GroupLabels.cluster }}, {{ .Status }})",
                        "send_resolved": True,
                    }
                ],
            }
        ],
    }


def _dump(value: dict[str, Any]) -> str:
    return yaml.safe_dump(value, sort_keys=False, width=1 << 16)


def rules_yaml(inputs: AlertInputs) -> str:
    """The rules file as the workspace's rule groups namespace takes it."""
    return _dump(rules(inputs))


def alertmanager_yaml(inputs: AlertInputs) -> str:
    """The alert manager definition as the workspace takes it: ``template_files`` (none) and ``alertmanager_config``."""
    body = _dump(alertmanager(inputs))
    return "alertmanager_config: |\n" + "".join(f"  {line}\n" for line in body.splitlines())
