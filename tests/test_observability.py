"""The ``observability:`` section and the ``<env>/Observability`` stack of every example.

The template checks read the session's example assembly (``example_templates``):
every dashboard widget's metric must be one its service publishes with
exactly those dimensions (table below, from the services' documentation
and ParallelCluster's source), and alarms carry the thresholds from the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.app import build_app
from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.config.observability import is_accelerated, observability_enabled, prometheus_enabled
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_METRIC, SCHEDULED_COPY_NAMESPACE
from tests.pcluster.pcluster_support import PCLUSTER_EXAMPLES
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL, write_env

#: Metrics the dashboard and alarms may use: (namespace, metric) -> dimension names -> allowed fixed values.
#: AWS/FSx: FSx for Lustre guide, "Amazon FSx for Lustre metrics and dimensions"
#:   (https://docs.aws.amazon.com/fsx/latest/LustreGuide/fs-metrics.html): network I/O, metadata and
#:   storage capacity metrics take FileSystemId; the S3 repository metric AgeOfOldestQueuedMessage takes
#:   FileSystemId and Publisher (AutoImport, AutoExport), as the CloudWatch "supported metrics" table lists.
#: AWS/S3: S3 user guide, "Metrics and dimensions" (daily storage metrics, BucketName + StorageType).
#: ParallelCluster: aws-parallelcluster cli/src/pcluster/templates/cw_dashboard_builder.py (3.x), the
#:   log-based cluster health metrics with dimension ClusterName, made when logs and the dashboard are on.
#: mlcluster/ScheduledCopy MlclusterScheduledCopy: published by the HyperPod controller's daily copy
#:   (lifecycle/hyperpod/backup.sh publish_copy_metric) with dimension ClusterName.
#: AWS/RDS: Aurora user guide, "Amazon CloudWatch metrics for Amazon Aurora" (VolumeBytesUsed is cluster-level;
#:   CPUUtilization, ACUUtilization and DatabaseConnections are instance-level) and "Amazon CloudWatch dimensions
#:   for Aurora" (DBClusterIdentifier aggregates a cluster's instances): the accounting database's alarms.
#: AWS/EC2 is not read directly: its StatusCheckFailed needs an InstanceId this stack does not know; the head
#:   node's is watched by ParallelCluster's alarm <cluster>-HeadNode-Health (cluster_stack.py), forwarded here.
PUBLISHED: dict[tuple[str, str], dict[str, tuple[str, ...] | None]] = {
    **{
        ("AWS/FSx", name): {"FileSystemId": None}
        for name in (
            "DataReadBytes",
            "DataWriteBytes",
            "DataReadOperations",
            "DataWriteOperations",
            "MetadataOperations",
            "FreeDataStorageCapacity",
        )
    },
    ("AWS/FSx", "AgeOfOldestQueuedMessage"): {"FileSystemId": None, "Publisher": ("AutoImport", "AutoExport")},
    (SCHEDULED_COPY_NAMESPACE, SCHEDULED_COPY_METRIC): {"ClusterName": None},
    **{
        ("AWS/RDS", name): {"DBClusterIdentifier": None}
        for name in ("VolumeBytesUsed", "CPUUtilization", "ACUUtilization", "DatabaseConnections")
    },
    ("AWS/S3", "BucketSizeBytes"): {"BucketName": None, "StorageType": ("StandardStorage",)},
    ("AWS/S3", "NumberOfObjects"): {"BucketName": None, "StorageType": ("AllStorageTypes",)},
    **{
        ("ParallelCluster", name): {"ClusterName": None}
        for name in (
            "IamPolicyErrors",
            "VcpuLimitErrors",
            "VolumeLimitErrors",
            "InsufficientCapacityErrors",
            "OtherInstanceLaunchFailures",
            "InstanceBootstrapTimeoutErrors",
            "EC2HealthCheckErrors",
            "ScheduledEventHealthCheckErrors",
            "NoCorrespondingInstanceErrors",
            "SlurmNodeNotRespondingErrors",
        )
    },
}
GIB = 1024**3
TOKEN = "<token>"
CLUSTER_NAMES = {name: load_environment(ENVIRONMENTS / f"{name}.yaml").cluster_name for name in EXAMPLES}


# -- the section ----------------------------------------------------------------------------------------------


def pcluster(instance_type: str, **monitoring: bool) -> dict[str, object]:
    queue = {"name": "q", "compute_resources": [{"name": "c", "instance_type": instance_type, "max_count": 2}]}
    return {"backend": "pcluster", "pcluster": {"queues": [queue], "monitoring": monitoring}}


def hyperpod(instance_type: str) -> dict[str, object]:
    workers = [{"instance_group_name": "w", "instance_type": instance_type}]
    return {"backend": "hyperpod", "hyperpod": {"workers": workers}}


@pytest.mark.parametrize(
    ("instance_type", "accelerated"),
    [
        ("p5.48xlarge", True),
        ("g4dn.xlarge", True),
        ("trn1.32xlarge", True),
        ("inf2.xlarge", True),
        ("ml.p5.48xlarge", True),
        ("g6e.12xlarge", True),  # not in the instance table: known by family
        ("p6-b200.48xlarge", True),
        ("dl1.24xlarge", True),
        ("m5.8xlarge", False),
        ("ml.m5.12xlarge", False),
        ("c7gn.16xlarge", False),
        ("gr6.4xlarge", False),
    ],
)
def test_accelerated_instance_types(instance_type: str, accelerated: bool) -> None:
    assert is_accelerated(instance_type) is accelerated


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (None, False),
        (pcluster("p5.48xlarge"), True),
        (pcluster("c5.18xlarge"), False),
        (hyperpod("ml.trn1.32xlarge"), True),
        (hyperpod("ml.c5.18xlarge"), False),
    ],
)
def test_on_by_default_only_for_accelerated_clusters(
    make_env: Callable[..., Environment], cluster: dict[str, object] | None, expected: bool
) -> None:
    data = {**MINIMAL, **({"cluster": cluster} if cluster else {})}
    assert observability_enabled(make_env(data).config) is expected


@pytest.mark.parametrize("enabled", [True, False])
def test_explicit_setting_wins(make_env: Callable[..., Environment], enabled: bool) -> None:
    cluster = pcluster("c5.18xlarge" if enabled else "p5.48xlarge")
    env = make_env({**MINIMAL, "cluster": cluster, "observability": {"enabled": enabled}})
    assert observability_enabled(env.config) is enabled


def test_defaults(make_env: Callable[..., Environment]) -> None:
    obs = make_env(MINIMAL).config.observability
    assert (obs.enabled, obs.alarm_emails) == (None, ())
    assert (obs.alarms.lustre_free_capacity_percent, obs.alarms.unhealthy_nodes) == (10, 1)


@pytest.mark.parametrize(
    ("observability", "path", "fragment"),
    [
        ({"alarm_emails": ["ops"]}, "observability.alarm_emails[0]", "e-mail addresses"),
        ({"alarm_emails": ["a@b.io", "a@b.io"]}, "observability.alarm_emails", "each address may appear once"),
        ({"alarms": {"lustre_free_capacity_percent": 0}}, "observability.alarms.lustre_free_capacity_percent", "1"),
        ({"alarms": {"lustre_free_capacity_percent": 91}}, "observability.alarms.lustre_free_capacity_percent", "90"),
        ({"alarms": {"unhealthy_nodes": 0}}, "observability.alarms.unhealthy_nodes", "from 1"),
        ({"enabled": "yes"}, "observability.enabled", "expected true or false"),
        ({"enabled": False, "alarm_emails": ["a@b.io"]}, "observability.enabled", "only used when observability"),
        (
            {"prometheus": {"scrape_interval_seconds": 9}},
            "observability.prometheus.scrape_interval_seconds",
            "10",
        ),
        ({"prometheus": {"retention_days": 1096}}, "observability.prometheus.retention_days", "1095"),
        ({"prometheus": {"retention_days": 0}}, "observability.prometheus.retention_days", "from 1"),
        ({"prometheus": {"enabled": True}}, "observability.prometheus.enabled", "set observability.enabled: true"),
        (
            {"alarmz": {}},
            "observability.alarmz",
            "allowed keys here: alarm_emails, alarms, enabled, grafana, prometheus",
        ),
    ],
)
def test_bad_values_name_key_and_allowed(
    make_env: Callable[..., Environment], observability: dict[str, object], path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_env({**MINIMAL, "observability": observability})
    (problem,) = err.value.problems
    assert problem.path == path
    assert fragment in problem.allowed
    assert "test.yaml" in str(err.value)


def test_edge_values_are_accepted(make_env: Callable[..., Environment]) -> None:
    for percent in (1, 90):
        alarms = {"lustre_free_capacity_percent": percent, "unhealthy_nodes": 1}
        obs = make_env({**MINIMAL, "observability": {"alarms": alarms, "alarm_emails": ["x@y.co"]}}).config
        assert obs.observability.alarms.lustre_free_capacity_percent == percent


def test_prometheus_edges_are_accepted(make_env: Callable[..., Environment]) -> None:
    """Off by default; on where the Observability stack is (explicitly, or by an accelerated cluster)."""
    assert not prometheus_enabled(make_env({**MINIMAL, "cluster": pcluster("p5.48xlarge")}).config)
    for low, high in ((10, 1), (300, 1095)):
        prometheus = {"enabled": True, "scrape_interval_seconds": low, "retention_days": high}
        env = make_env({**MINIMAL, "observability": {"enabled": True, "prometheus": prometheus}})
        assert prometheus_enabled(env.config)
        assert env.config.observability.prometheus.scrape_interval_seconds == low
    env = make_env(
        {**MINIMAL, "cluster": hyperpod("ml.p5.48xlarge"), "observability": {"prometheus": {"enabled": True}}}
    )
    assert prometheus_enabled(env.config)


@pytest.mark.parametrize("key", ["logs", "dashboards", "alarms"])
def test_pcluster_monitoring_off_conflicts_with_observability(make_env: Callable[..., Environment], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_env({**MINIMAL, "cluster": pcluster("p5.48xlarge", **{key: False})})
    (problem,) = err.value.problems
    assert problem.path == f"cluster.pcluster.monitoring.{key}"
    assert "observability.enabled: false" in problem.allowed
    # Turning observability off makes the same cluster valid.
    env = make_env({**MINIMAL, "cluster": pcluster("p5.48xlarge", **{key: False}), "observability": {"enabled": False}})
    assert not observability_enabled(env.config)


def test_every_example_has_observability() -> None:
    for name in EXAMPLES:
        assert observability_enabled(load_environment(ENVIRONMENTS / f"{name}.yaml").config), name


# -- the synthesized stacks -----------------------------------------------------------------------------------


def flatten(value: Any) -> str:
    """A CloudFormation string value with every intrinsic function replaced by a placeholder."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(flatten(p) for p in parts)
    return TOKEN


def resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def dashboard(template: dict[str, Any]) -> dict[str, Any]:
    (props,) = resources(template, "AWS::CloudWatch::Dashboard")
    return json.loads(flatten(props["DashboardBody"]))  # type: ignore[no-any-return]


def widget_metrics(body: dict[str, Any]) -> Iterator[tuple[str, list[Any]]]:
    for widget in body["widgets"]:
        for row in widget["properties"].get("metrics", []):
            yield widget["properties"].get("title", ""), row


@pytest.fixture(scope="module")
def observability(example_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: example_templates[f"{name}/Observability"] for name in EXAMPLES}


def alarm_metrics(template: dict[str, Any]) -> Iterator[tuple[str, list[Any]]]:
    """Each alarm's metrics in the dashboard's row form: namespace, name, then dimension name/value pairs."""
    for alarm in resources(template, "AWS::CloudWatch::Alarm"):
        stats = [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
        for metric in [alarm] if "MetricName" in alarm else stats:
            pairs = [x for d in metric["Dimensions"] for x in (d["Name"], flatten(d["Value"]))]
            yield alarm["AlarmDescription"], [metric["Namespace"], metric["MetricName"], *pairs]


def test_every_widget_and_alarm_metric_is_published_with_its_dimensions(
    observability: dict[str, dict[str, Any]],
) -> None:
    seen: set[tuple[str, str]] = set()
    for name, template in observability.items():
        for title, row in [*widget_metrics(dashboard(template)), *alarm_metrics(template)]:
            if isinstance(row[0], dict):  # a math expression over metrics listed in the same widget
                assert "expression" in row[0], (name, title, row)
                continue
            fields = [f for f in row if not isinstance(f, dict)]
            namespace, metric, *pairs = fields
            dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
            allowed = PUBLISHED.get((namespace, metric))
            assert allowed is not None, f"{name}: {title}: {namespace}/{metric} is not a published metric"
            assert set(dimensions) == set(allowed), f"{name}: {title}: {metric} dimensions {sorted(dimensions)}"
            for dim, values in allowed.items():
                if values is not None:
                    assert dimensions[dim] in values, (name, title, metric, dim)
            seen.add((namespace, metric))
    assert seen == set(PUBLISHED), f"table entries nothing uses: {set(PUBLISHED) - seen}"


def test_dashboard_shows_storage_cluster_alarms_and_log_links(observability: dict[str, dict[str, Any]]) -> None:
    for name, template in observability.items():
        body = dashboard(template)
        titles = [w["properties"].get("title", "") for w in body["widgets"]]
        texts = "\n".join(w["properties"].get("markdown", "") for w in body["widgets"])
        assert {"Lustre throughput (bytes/s)", "Lustre IOPS (operations/s)", "Alarms"} <= set(titles), name
        assert "logGroupNameFilter$3D$252Faws$252Ffsx$252F" in texts, name
        cluster = CLUSTER_NAMES.get(name)
        if name in PCLUSTER_EXAMPLES:
            assert "Nodes replaced: failed health checks (count)" in titles
            assert f"$252Faws$252Fparallelcluster$252F{cluster}-" in texts
        elif name == "hyperpod":
            assert f"$252Faws$252Fsagemaker$252FClusters$252F{cluster}$252F" in texts
        (alarm_status,) = [w for w in body["widgets"] if w["properties"].get("title") == "Alarms"]
        expected = len(resources(template, "AWS::CloudWatch::Alarm"))
        assert len(alarm_status["properties"]["alarms"]) == expected


def lustre_capacity_gib(name: str) -> int:
    return load_environment(ENVIRONMENTS / f"{name}.yaml").config.storage.lustre.storage_capacity_gib


@pytest.mark.parametrize(("name", "percent"), [("prod", 15), ("p5", 10), ("dev", 10)])
def test_free_capacity_alarm_uses_the_files_threshold(
    observability: dict[str, dict[str, Any]], name: str, percent: int
) -> None:
    alarms = resources(observability[name], "AWS::CloudWatch::Alarm")
    (alarm,) = [a for a in alarms if a.get("MetricName") == "FreeDataStorageCapacity"]
    assert alarm["Namespace"] == "AWS/FSx"
    assert alarm["Threshold"] == lustre_capacity_gib(name) * GIB * percent // 100
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Sum", 300, 3)
    assert [d["Name"] for d in alarm["Dimensions"]] == ["FileSystemId"]
    assert storage_references(alarm["Dimensions"][0]["Value"]) == [f"{name}-Storage"]  # the storage file system


@pytest.mark.parametrize(("name", "threshold"), [("p5", 1), ("p4de", 2), ("trn1", 1)])
def test_unhealthy_nodes_alarm_reads_parallelclusters_metrics(
    observability: dict[str, dict[str, Any]], name: str, threshold: int
) -> None:
    alarms = resources(observability[name], "AWS::CloudWatch::Alarm")
    (alarm,) = [a for a in alarms if "Metrics" in a]
    assert alarm["Threshold"] == threshold
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    stats = [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert {s["Metric"]["MetricName"] for s in stats} == {
        "EC2HealthCheckErrors",
        "ScheduledEventHealthCheckErrors",
        "SlurmNodeNotRespondingErrors",
    }
    for stat in stats:
        assert stat["Metric"]["Namespace"] == "ParallelCluster"
        assert stat["Metric"]["Dimensions"] == [{"Name": "ClusterName", "Value": CLUSTER_NAMES[name]}]


def reads_copy_metric(alarm: dict[str, Any]) -> bool:
    """Whether an alarm reads the daily-copy metric, directly or through a metric-math expression."""
    stats = [m.get("MetricStat", {}).get("Metric", {}) for m in alarm.get("Metrics", [])]
    return SCHEDULED_COPY_METRIC in {alarm.get("MetricName"), *(s.get("MetricName") for s in stats)}


def test_hyperpods_daily_copy_missing_two_days_sets_an_alarm_off(observability: dict[str, dict[str, Any]]) -> None:
    """Failures of the controller's daily copy reach the topic, not only the controller's journal."""
    (alarm,) = [a for a in resources(observability["hyperpod"], "AWS::CloudWatch::Alarm") if reads_copy_metric(a)]
    # Issue 33c item 1: the alarm reads FILL(m1, 0), so a day without a copy is a 0 even when other days have
    # points (CloudWatch then ignores TreatMissingData); only the expression returns data.
    assert "MetricName" not in alarm and "Period" not in alarm
    expression, source = sorted(alarm["Metrics"], key=lambda m: m["Id"] != "expr_1")
    assert set(expression) >= {"Expression", "Id"} and expression["Expression"] == "FILL(m1, 0)"
    assert expression.get("ReturnData", True) is True and expression.get("Period", 86400) == 86400
    assert source["Id"] == "m1" and source["ReturnData"] is False
    stat = source["MetricStat"]
    assert stat["Metric"]["Namespace"] == SCHEDULED_COPY_NAMESPACE
    assert stat["Metric"]["MetricName"] == SCHEDULED_COPY_METRIC
    assert stat["Metric"]["Dimensions"] == [{"Name": "ClusterName", "Value": CLUSTER_NAMES["hyperpod"]}]
    assert (stat["Stat"], stat["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (
        "Sum",
        86400,
        2,
        2,
    )
    # CloudWatch allows Period x EvaluationPeriods up to 7 days for periods of an hour or more.
    assert stat["Period"] * alarm["EvaluationPeriods"] <= 7 * 86400
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert alarm["TreatMissingData"] == "breaching"  # no point at all (a controller lost for days) still breaches
    assert "journalctl -u mlcluster-backup-scheduled" in alarm["AlarmDescription"]
    # r3 finding 6: a controller created before the daily copy never publishes the metric; the alarm says where
    # to look and how to install the scripts (docs/upgrading.md, checked below).
    assert "'mlcluster status hyperpod' shows the last copy's age" in alarm["AlarmDescription"]
    assert "docs/upgrading.md ('0.2.0: the controller's daily copy')" in alarm["AlarmDescription"]
    assert len(alarm["AlarmDescription"]) <= 1024  # PutMetricAlarm's AlarmDescription max (botocore model)
    assert len(alarm["AlarmActions"]) == 1 and alarm["AlarmActions"] == alarm["OKActions"]
    # The edge: ParallelCluster environments have no daily copy, hence no such alarm.
    for name in ("p5", "p4de", "trn1", "dev", "prod"):
        assert not [a for a in resources(observability[name], "AWS::CloudWatch::Alarm") if reads_copy_metric(a)]


def test_the_upgrade_note_installs_the_daily_copy_on_an_existing_controller() -> None:
    """The note the alarm points to exists and names steps the controller runs (a renamed step would break it)."""
    import re

    from mlcluster.lifecycle.hyperpod.plan import STEPS

    page = (Path(__file__).resolve().parents[1] / "docs" / "upgrading.md").read_text(encoding="utf-8")
    section = page.split("### 0.2.0: the controller's daily copy\n", 1)[1].split("\n### ", 1)[0]
    (command,) = re.findall(r'sudo bash "\$dir/on_create.sh" (.+)', section)
    steps = command.split()
    assert steps == ["install_tools", "scheduled_backup"]
    assert set(steps) <= {step.name for step in STEPS}
    assert "sudo systemctl start mlcluster-backup-scheduled.service" in section
    assert "LifeCycleConfig.SourceS3Uri" in section


@pytest.mark.parametrize("copy", [True, False])
def test_the_daily_copy_alarm_follows_the_lifecycle_switch(tmp_path: Path, copy: bool) -> None:
    data = yaml.safe_load((ENVIRONMENTS / "hyperpod.yaml").read_text(encoding="utf-8"))
    data["cluster"]["hyperpod"].setdefault("lifecycle", {})["scheduled_backup"] = copy
    write_env(tmp_path, "hyperpod", data)
    _, stages = build_app(tmp_path, outdir=str(tmp_path / "out"), template_checks=False)
    (stage,) = stages
    assert stage.observability_stack is not None
    ids = [alarm.node.id for alarm in stage.observability_stack.alarms]
    assert ("ScheduledCopyMissing" in ids) is copy


def test_head_node_alarm_of_parallelcluster_is_forwarded(observability: dict[str, dict[str, Any]]) -> None:
    (rule,) = resources(observability["p5"], "AWS::Events::Rule")
    pattern = rule["EventPattern"]
    assert pattern["detail-type"] == ["CloudWatch Alarm State Change"]
    (arn,) = pattern["resources"]
    assert flatten(arn).endswith(":alarm:p5-train-HeadNode-Health")
    assert rule["EventPattern"]["source"] == ["aws.cloudwatch"]


def test_hyperpod_health_events_are_forwarded(observability: dict[str, dict[str, Any]]) -> None:
    rules = {r["EventPattern"]["detail-type"][0]: r for r in resources(observability["hyperpod"], "AWS::Events::Rule")}
    assert set(rules) == {"SageMaker HyperPod Cluster Node Health Event", "SageMaker HyperPod Cluster State Change"}
    for rule in rules.values():
        assert rule["EventPattern"]["source"] == ["aws.sagemaker"]
        assert rule["EventPattern"]["detail"]["ClusterName"] == [CLUSTER_NAMES["hyperpod"]]
    health = rules["SageMaker HyperPod Cluster Node Health Event"]["EventPattern"]["detail"]["HealthSummary"]
    assert health == {"HealthStatus": [{"anything-but": ["Healthy"]}]}
    # Capacity, and the daily copy of the controller's state (test_hyperpods_daily_copy_missing...).
    alarms = resources(observability["hyperpod"], "AWS::CloudWatch::Alarm")
    assert [a.get("MetricName") for a in alarms] == ["FreeDataStorageCapacity", None]
    assert reads_copy_metric(alarms[1])


def sns_topics(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::SNS::Topic"}


def test_topic_is_encrypted_and_every_alarm_notifies_it(observability: dict[str, dict[str, Any]]) -> None:
    for name, template in observability.items():
        ((topic_id, topic),) = sns_topics(template).items()
        key_id = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]
        key = template["Resources"][key_id]["Properties"]
        assert key["EnableKeyRotation"] is True
        (publishers,) = [s for s in key["KeyPolicy"]["Statement"] if s.get("Sid") == "AlarmPublishers"]
        assert publishers["Principal"]["Service"] == "cloudwatch.amazonaws.com"
        assert publishers["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
        assert publishers["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
        for alarm in resources(template, "AWS::CloudWatch::Alarm"):
            assert alarm["AlarmActions"] == [{"Ref": topic_id}], name
            assert alarm["OKActions"] == [{"Ref": topic_id}], name
        (policy,) = resources(template, "AWS::SNS::TopicPolicy")
        # The topic policy replaces SNS's default one: CloudWatch alarms need their own allow (issue 25, finding
        # 1), scoped to this account's alarms; besides it only AMP's alert manager (tests/test_alerts.py) and the
        # stack's EventBridge rules (test_event_rules_publish_through_the_topic_policy) are admitted.
        others = ({"Service": "aps.amazonaws.com"}, {"Service": "events.amazonaws.com"})
        statements = [s for s in policy["PolicyDocument"]["Statement"] if s.get("Principal") not in others]
        (deny,) = [s for s in statements if s["Effect"] == "Deny"]
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        (alarms,) = [s for s in statements if s["Effect"] == "Allow"]
        assert alarms["Sid"] == "CloudWatchAlarms"
        assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
        assert alarms["Action"] == "sns:Publish"
        assert alarms["Resource"] == {"Ref": topic_id}
        assert alarms["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        assert alarms["Condition"]["ArnLike"]["aws:SourceArn"] == {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":cloudwatch:",
                    {"Ref": "AWS::Region"},
                    ":",
                    {"Ref": "AWS::AccountId"},
                    ":alarm:*",
                ],
            ]
        }, name
        # Only the key's account root and CloudWatch (and AMP and EventBridge, checked there) are in the key policy.
        principals = [s["Principal"] for s in key["KeyPolicy"]["Statement"] if s["Principal"] not in others]
        assert len(principals) == 2


def test_event_rules_publish_through_the_topic_policy(observability: dict[str, dict[str, Any]]) -> None:
    """EventBridge publishes to an SNS target through the topic's resource policy, not a role (its user guide:
    a role on an SNS target can make delivery to a KMS-encrypted topic fail); the policy names this stack's
    rules, the key admits EventBridge."""
    for name, full in observability.items():
        # The Grafana workspace's roles and policies are checked in tests/test_grafana.py.
        template = {"Resources": {k: r for k, r in full["Resources"].items() if not k.startswith("Grafana")}}
        rules = {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::Events::Rule"}
        assert not resources(template, "AWS::IAM::Role") and not resources(template, "AWS::IAM::Policy"), name
        ((topic_id, topic),) = sns_topics(template).items()
        (policy,) = resources(template, "AWS::SNS::TopicPolicy")
        events = [s for s in policy["PolicyDocument"]["Statement"] if s.get("Sid") == "EventBridgeRules"]
        key = template["Resources"][topic["KmsMasterKeyId"]["Fn::GetAtt"][0]]["Properties"]
        key_events = [s for s in key["KeyPolicy"]["Statement"] if s.get("Sid") == "EventBridgeRules"]
        if not rules:
            assert not events and not key_events, name
            continue
        for rule in rules.values():
            (target,) = rule["Targets"]
            assert target["Arn"] == {"Ref": topic_id} and "RoleArn" not in target, name
        (statement,) = events
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert statement["Action"] == "sns:Publish" and statement["Resource"] == {"Ref": topic_id}
        arns = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        assert sorted(json.dumps(a) for a in (arns if isinstance(arns, list) else [arns])) == sorted(
            json.dumps({"Fn::GetAtt": [rule_id, "Arn"]}) for rule_id in rules
        ), name
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        ((key_statement),) = key_events
        assert key_statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert key_statement["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]


def test_alarm_emails_subscribe(observability: dict[str, dict[str, Any]]) -> None:
    (sub,) = resources(observability["prod"], "AWS::SNS::Subscription")
    assert (sub["Protocol"], sub["Endpoint"]) == ("email", "ml-platform-oncall@example.com")
    assert not resources(observability["p5"], "AWS::SNS::Subscription")


def test_outputs_name_the_dashboards(observability: dict[str, dict[str, Any]]) -> None:
    for name, template in observability.items():
        outputs = template["Outputs"]
        url = flatten(outputs["DashboardUrl"]["Value"])
        assert (
            url
            == f"https://{TOKEN}.console.aws.amazon.com/cloudwatch/home?region={TOKEN}#dashboards/dashboard/mlcluster-{name}-{TOKEN}"
        )
        assert outputs["DashboardUrl"]["Export"] == {"Name": f"{name}-DashboardUrl"}
        (props,) = resources(template, "AWS::CloudWatch::Dashboard")
        assert flatten(props["DashboardName"]) == f"mlcluster-{name}-{TOKEN}"
        if name in PCLUSTER_EXAMPLES:
            cluster = flatten(outputs["ClusterDashboardUrl"]["Value"])
            assert cluster.endswith(f"#dashboards/dashboard/{CLUSTER_NAMES[name]}-{TOKEN}")
        else:
            assert "ClusterDashboardUrl" not in outputs


#: The examples that ask for a Prometheus workspace.
PROMETHEUS = {
    name for name in EXAMPLES if load_environment(ENVIRONMENTS / f"{name}.yaml").config.observability.prometheus.enabled
}


def test_prometheus_workspace_is_encrypted_kept_and_named_in_outputs(
    observability: dict[str, dict[str, Any]],
) -> None:
    assert {"p5", "hyperpod", "trn1"} <= PROMETHEUS  # both backends, GPU and Neuron
    for name, template in observability.items():
        workspaces = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::APS::Workspace"}
        outputs = template["Outputs"]
        if name not in PROMETHEUS:
            assert not workspaces and "PrometheusRemoteWriteUrl" not in outputs, name
            continue
        ((logical, workspace),) = workspaces.items()
        assert logical.startswith("Prometheus")  # the "Resource" child takes its parent's id
        props = workspace["Properties"]
        assert props["Alias"] == f"mlcluster-{name}"
        assert props["WorkspaceConfiguration"] == {"RetentionPeriodInDays": 150}
        # The environment's key, from the Network stack (the key every log group of the environment uses).
        reference = props["KmsKeyArn"]["Fn::GetStackOutput"]
        assert reference["StackName"] == f"{name}-Network"
        assert reference["OutputName"].startswith("PublishOutputFnGetAttEnvironmentKey")
        assert len(resources(template, "AWS::KMS::Key")) == 1  # the alarm topic's only: no key of its own
        keeps = load_environment(ENVIRONMENTS / f"{name}.yaml").config.retention.keeps_data
        # Kept on delete and replacement, but not after a failed first create (issue 25, finding 2).
        assert workspace["DeletionPolicy"] == ("RetainExceptOnCreate" if keeps else "Delete"), name
        assert workspace["UpdateReplacePolicy"] == ("Retain" if keeps else "Delete"), name
        write = outputs["PrometheusRemoteWriteUrl"]
        assert write["Export"] == {"Name": f"{name}-PrometheusRemoteWriteUrl"}
        parts = write["Value"]["Fn::Join"][1]
        assert parts == [{"Fn::GetAtt": [logical, "PrometheusEndpoint"]}, "api/v1/remote_write"]
        assert outputs["PrometheusWorkspaceId"]["Value"] == {"Fn::GetAtt": [logical, "WorkspaceId"]}
        assert outputs["PrometheusQueryUrl"]["Value"] == {"Fn::GetAtt": [logical, "PrometheusEndpoint"]}


def test_observability_outlives_the_cluster(observability: dict[str, dict[str, Any]]) -> None:
    """Only the storage (and, for the environment's key, network) stack is referenced: no cluster is."""
    for name, template in observability.items():
        referenced = set(storage_references(template))
        # The Prometheus workspace (and the Grafana provisioning's log group) use the network stack's environment key.
        expected = {f"{name}-Storage", f"{name}-Network"} if name in PROMETHEUS else {f"{name}-Storage"}
        assert referenced == expected, (name, referenced)


def storage_references(value: Any) -> list[str]:
    """The stacks whose outputs ``value`` reads (``Fn::GetStackOutput`` or ``Fn::ImportValue``)."""
    if isinstance(value, dict):
        if "Fn::GetStackOutput" in value:
            return [value["Fn::GetStackOutput"]["StackName"]]
        if "Fn::ImportValue" in value:
            return [json.dumps(value["Fn::ImportValue"])]
        return [s for v in value.values() for s in storage_references(v)]
    if isinstance(value, list):
        return [s for v in value for s in storage_references(v)]
    return []


@pytest.mark.parametrize(
    ("observability", "cluster", "built"),
    [
        ({}, None, False),
        ({"enabled": True}, None, True),
        ({}, pcluster("p5.48xlarge"), True),
        ({"enabled": False}, pcluster("p5.48xlarge"), False),
    ],
)
def test_stage_builds_the_stack_only_when_on(
    tmp_path: Path, observability: dict[str, object], cluster: dict[str, object] | None, built: bool
) -> None:
    data: dict[str, object] = {**MINIMAL, "observability": observability, **({"cluster": cluster} if cluster else {})}
    write_env(tmp_path / "envs", "solo", data)
    _, (stage,) = build_app(tmp_path / "envs", outdir=str(tmp_path / "out"))
    assert (stage.observability_stack is not None) is built
    names = [c.node.id for c in stage.node.children]
    assert ("Observability" in names) is built
