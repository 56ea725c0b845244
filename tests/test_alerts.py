"""Alerting as code on the Prometheus workspace: the rules, the alert manager and who may publish to the topic.

The rules must read only metric names the exporters contract (``mlcluster/exporters.py``) lists, plus ``up``,
and select the environment's cluster; the alert manager must send every alert to the alarm topic; the topic
and its key must admit the Prometheus service for this account (and, on the topic, this workspace) only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from mlcluster.alert_rules import (
    RECEIVER,
    SLURM_BAD_STATES,
    AlertInputs,
    alertmanager,
    alertmanager_yaml,
    rules,
    rules_yaml,
)
from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.exporters import SLURM_METRICS, metric_names
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL
from tests.test_grafana import metric_identifiers

TOPIC = "arn:aws:sns:us-west-2:123456789012:alarms"
INPUTS = AlertInputs(
    cluster_name="ml-p5", unhealthy_nodes=3, collector_silent_minutes=10, topic_arn=TOPIC, region="us-west-2"
)
PROMETHEUS = {
    name for name in EXAMPLES if load_environment(ENVIRONMENTS / f"{name}.yaml").config.observability.prometheus.enabled
}


def parsed_rules(inputs: AlertInputs = INPUTS) -> dict[str, dict[str, Any]]:
    (group,) = yaml.safe_load(rules_yaml(inputs))["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


# -- the rules ----------------------------------------------------------------------------------------------------


def test_rules_cover_the_issue_and_parse() -> None:
    assert set(parsed_rules()) == {
        "CollectorSilent",
        "ExporterDown",
        "GpuXidError",
        "GpuEccDoubleBitErrors",
        "NeuronHardwareEccEvents",
        "SlurmNodesUnavailable",
        "SlurmNotAnswering",
    }
    assert yaml.safe_load(rules_yaml(INPUTS)) == rules(INPUTS)


def test_every_rule_reads_only_contract_metrics_of_its_cluster() -> None:
    allowed = metric_names() | {"up"}
    for name, rule in parsed_rules().items():
        names = metric_identifiers(rule["expr"])
        assert names, name
        assert names <= allowed, (name, names - allowed)
        # Every selector names the cluster: one workspace may hold several clusters' samples.
        selectors = re.findall(r"\{([^}]*)\}", rule["expr"])
        assert selectors and all('cluster="ml-p5"' in s for s in selectors), name
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]


def test_rule_expressions_and_thresholds() -> None:
    by_name = parsed_rules()
    # The head node/controller's own node exporter target (collector.py: static target, role "head").
    assert by_name["CollectorSilent"]["expr"] == 'absent_over_time(up{cluster="ml-p5",job="node",role="head"}[10m])'
    assert (by_name["ExporterDown"]["expr"], by_name["ExporterDown"]["for"]) == ('up{cluster="ml-p5"} == 0', "5m")
    assert by_name["GpuXidError"]["expr"] == 'DCGM_FI_DEV_XID_ERRORS{cluster="ml-p5"} > 0'
    assert by_name["GpuEccDoubleBitErrors"]["expr"] == 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{cluster="ml-p5"} > 0'
    slurm = by_name["SlurmNodesUnavailable"]
    assert slurm["expr"].endswith(">= 3") and slurm["for"] == "5m"  # unhealthy_nodes
    assert by_name["SlurmNotAnswering"]["expr"] == 'absent_over_time(mlcluster_slurm_nodes{cluster="ml-p5"}[10m])'
    assert "mlcluster_slurm_nodes" in SLURM_METRICS
    longer = parsed_rules(
        AlertInputs(cluster_name="c", unhealthy_nodes=1, collector_silent_minutes=1440, topic_arn=TOPIC, region="r")
    )
    assert longer["CollectorSilent"]["expr"].endswith("[1440m])")
    assert longer["SlurmNodesUnavailable"]["expr"].endswith(">= 1")


@pytest.mark.parametrize(
    ("state", "bad"),
    [
        ("down", True),
        ("down*", True),
        ("drained", True),
        ("draining", True),
        ("drained~", True),
        ("fail", True),
        ("failing", True),
        ("inval", True),
        ("idle", False),
        ("idle~", False),
        ("allocated", False),
        ("mixed", False),
        ("completing", False),
    ],
)
def test_slurm_states_matched(state: str, bad: bool) -> None:
    """sinfo's %T states the Slurm textfile collector writes; PromQL anchors regex matchers at both ends."""
    assert (re.fullmatch(SLURM_BAD_STATES, state) is not None) is bad


@pytest.mark.parametrize("key", ["unhealthy_nodes", "collector_silent_minutes"])
def test_inputs_below_one_are_refused(key: str) -> None:
    values: dict[str, Any] = {
        "cluster_name": "c",
        "unhealthy_nodes": 1,
        "collector_silent_minutes": 1,
        "topic_arn": TOPIC,
        "region": "r",
    }
    with pytest.raises(ValueError, match=f"{key}: 0 is not valid; allowed: 1 or more"):
        AlertInputs(**{**values, key: 0})


# -- the alert manager --------------------------------------------------------------------------------------------


def test_alertmanager_sends_everything_to_the_topic() -> None:
    document = yaml.safe_load(alertmanager_yaml(INPUTS))
    assert set(document) == {"alertmanager_config"}  # the workspace's definition format, no template files
    config = yaml.safe_load(document["alertmanager_config"])
    assert config == alertmanager(INPUTS)
    assert config["route"]["receiver"] == RECEIVER
    assert "routes" not in config["route"]  # nothing routed elsewhere
    (receiver,) = config["receivers"]
    (sns,) = receiver["sns_configs"]
    assert receiver["name"] == RECEIVER and set(receiver) == {"name", "sns_configs"}
    assert (sns["topic_arn"], sns["sigv4"]) == (TOPIC, {"region": "us-west-2"})
    assert "api_url" not in sns and "http_config" not in sns  # AMP refuses both
    (inhibit,) = config["inhibit_rules"]
    assert inhibit["source_matchers"] == ['alertname="CollectorSilent"']
    assert inhibit["target_matchers"] == ['alertname="SlurmNotAnswering"']


# -- settings -----------------------------------------------------------------------------------------------------


def prometheus_env(make_env: Callable[..., Environment], alarms: dict[str, Any], interval: int = 30) -> Environment:
    prometheus = {"enabled": True, "scrape_interval_seconds": interval}
    return make_env({**MINIMAL, "observability": {"enabled": True, "prometheus": prometheus, "alarms": alarms}})


def test_collector_silent_minutes_default_and_edges(make_env: Callable[..., Environment]) -> None:
    assert make_env(MINIMAL).config.observability.alarms.collector_silent_minutes == 10
    for minutes in (5, 1440):
        env = prometheus_env(make_env, {"collector_silent_minutes": minutes})
        assert env.config.observability.alarms.collector_silent_minutes == minutes
    # Two scrapes at the longest interval (300 s) fit in 10 minutes.
    env = prometheus_env(make_env, {"collector_silent_minutes": 10}, interval=300)
    assert env.config.observability.prometheus.scrape_interval_seconds == 300


@pytest.mark.parametrize(
    ("minutes", "interval", "fragment"),
    [
        (4, 30, "from 5"),
        (1441, 30, "1440"),
        (9, 300, "at least two scrapes must fit: with prometheus.scrape_interval_seconds 300, allowed: 10 or more"),
        (5, 151, "allowed: 6 or more"),
    ],
)
def test_collector_silent_minutes_bad_values(
    make_env: Callable[..., Environment], minutes: int, interval: int, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        prometheus_env(make_env, {"collector_silent_minutes": minutes}, interval)
    (problem,) = err.value.problems
    assert problem.path == "observability.alarms.collector_silent_minutes"
    assert fragment in problem.allowed
    assert "test.yaml" in str(err.value)


# -- the synthesized Observability stacks ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def observability(example_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: example_templates[f"{name}/Observability"] for name in EXAMPLES}


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def join(value: Any) -> str:
    """A string with each reference replaced by ``<Ref:id>`` (``<Ref:AWS::Region>``...)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(join(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<Ref:{value['Ref']}>"
    raise AssertionError(f"unexpected intrinsic {value}")


def test_rules_and_alert_manager_on_each_prometheus_workspace(observability: dict[str, dict[str, Any]]) -> None:
    assert {"p5", "trn1", "hyperpod"} <= PROMETHEUS
    for name in PROMETHEUS:
        template = observability[name]
        config = load_environment(ENVIRONMENTS / f"{name}.yaml")
        ((workspace_id, workspace),) = of_type(template, "AWS::APS::Workspace").items()
        ((_, namespace),) = of_type(template, "AWS::APS::RuleGroupsNamespace").items()
        ((topic_id, _),) = of_type(template, "AWS::SNS::Topic").items()
        props = namespace["Properties"]
        assert props["Workspace"] == {"Fn::GetAtt": [workspace_id, "Arn"]}
        alarms = config.config.observability.alarms
        expected = AlertInputs(
            cluster_name=config.cluster_name,
            unhealthy_nodes=alarms.unhealthy_nodes,
            collector_silent_minutes=alarms.collector_silent_minutes,
            topic_arn=f"<Ref:{topic_id}>",
            region="<Ref:AWS::Region>",
        )
        assert props["Data"] == rules_yaml(expected), name
        definition = join(workspace["Properties"]["AlertManagerDefinition"])
        assert definition == alertmanager_yaml(expected), name
        manager = yaml.safe_load(yaml.safe_load(definition)["alertmanager_config"])
        (receiver,) = manager["receivers"]
        assert receiver["sns_configs"][0]["topic_arn"] == f"<Ref:{topic_id}>"


def test_only_aps_of_this_account_and_workspace_may_publish(observability: dict[str, dict[str, Any]]) -> None:
    for name, template in observability.items():
        ((topic_id, topic),) = of_type(template, "AWS::SNS::Topic").items()
        ((_, policy),) = of_type(template, "AWS::SNS::TopicPolicy").items()
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
        key_statements = template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
        aps_topic = [s for s in statements if s.get("Principal") == {"Service": "aps.amazonaws.com"}]
        aps_key = [s for s in key_statements if s.get("Principal") == {"Service": "aps.amazonaws.com"}]
        if name not in PROMETHEUS:
            assert not aps_topic and not aps_key and not of_type(template, "AWS::APS::RuleGroupsNamespace"), name
            continue
        ((workspace_id, _),) = of_type(template, "AWS::APS::Workspace").items()
        account = {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        assert aps_topic == [
            {
                "Sid": "PrometheusAlertManager",
                "Effect": "Allow",
                "Principal": {"Service": "aps.amazonaws.com"},
                "Action": ["sns:GetTopicAttributes", "sns:Publish"],
                "Resource": {"Ref": topic_id},
                "Condition": {
                    "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [workspace_id, "Arn"]}},
                    "StringEquals": account,
                },
            }
        ], name
        # Only the TLS-only deny, CloudWatch's alarms and EventBridge's rules (tests/test_observability.py) and
        # that grant.
        assert sorted(str((s["Effect"], s.get("Principal"))) for s in statements) == sorted(
            str(entry)
            for entry in [
                ("Deny", "*"),
                ("Allow", {"Service": "cloudwatch.amazonaws.com"}),
                ("Allow", {"Service": "aps.amazonaws.com"}),
                *([("Allow", {"Service": "events.amazonaws.com"})] if of_type(template, "AWS::Events::Rule") else []),
            ]
        ), name
        assert aps_key == [
            {
                "Sid": "PrometheusAlertManager",
                "Effect": "Allow",
                "Principal": {"Service": "aps.amazonaws.com"},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
                "Condition": {"StringEquals": account},
            }
        ], name
        # The account root, CloudWatch, AMP and (with rules) EventBridge: nobody else.
        assert len(key_statements) == 3 + bool(of_type(template, "AWS::Events::Rule")), name


def test_docs_list_every_alert() -> None:
    page = (ENVIRONMENTS.parent / "docs/contributing/design.md").read_text(encoding="utf-8")
    for name in parsed_rules():
        assert f"| `{name}` |" in page, name
