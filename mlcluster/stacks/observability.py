"""The observability stack of an environment: a CloudWatch dashboard, alarms and their topic.

It reads the storage stack (file system id, bucket name, log group) and
knows the cluster only by name: ParallelCluster's health metrics carry a
``ClusterName`` dimension, its head-node alarm is named after the cluster,
and HyperPod's EventBridge events name the cluster. Nothing here refers to
the cluster stack, so clusters can come and go while the dashboard, the
alarms and their subscribers stay.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk.interfaces.aws_events import IRuleRef
from constructs import Construct

from mlcluster.alert_rules import AlertInputs, alertmanager_yaml, rules_yaml
from mlcluster.config import Environment
from mlcluster.config.observability import grafana_enabled, prometheus_enabled
from mlcluster.constructs.grafana_workspace import GrafanaWorkspace
from mlcluster.constructs.log_key import key_removal_policy
from mlcluster.constructs.lustre import LOG_GROUP_PREFIX
from mlcluster.constructs.prometheus_workspace import PrometheusEndpoints, PrometheusWorkspace
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_METRIC, SCHEDULED_COPY_NAMESPACE
from mlcluster.stacks.common import export_output, log_retention, removal_policy_except_on_create
from mlcluster.stacks.storage import StorageStack

FSX = "AWS/FSx"
#: Aurora metrics, per DB cluster (``DBClusterIdentifier``).
RDS = "AWS/RDS"
S3 = "AWS/S3"
#: The namespace of ParallelCluster's log-based cluster health metrics (dimension ClusterName).
PCLUSTER = "ParallelCluster"
#: ParallelCluster health metrics counting compute nodes replaced for failing a health check or Slurm.
PCLUSTER_UNHEALTHY = ("EC2HealthCheckErrors", "ScheduledEventHealthCheckErrors", "SlurmNodeNotRespondingErrors")
#: ParallelCluster health metrics counting nodes that could not be launched or bootstrapped.
PCLUSTER_LAUNCH = (
    "InsufficientCapacityErrors",
    "VcpuLimitErrors",
    "VolumeLimitErrors",
    "IamPolicyErrors",
    "OtherInstanceLaunchFailures",
    "InstanceBootstrapTimeoutErrors",
    "NoCorrespondingInstanceErrors",
)
GIB = 1024**3
WIDTH = 24


def console_url(*fragment: str) -> str:
    """A CloudWatch console link in the stack's region; ``fragment`` follows the ``#``."""
    region = cdk.Aws.REGION
    return cdk.Fn.join(
        "", ["https://", region, ".console.aws.amazon.com/cloudwatch/home?region=", region, "#", *fragment]
    )


def log_groups_url(prefix: str) -> str:
    """A console link listing the log groups whose names start with ``prefix``."""
    encoded = quote(quote(prefix, safe=""), safe="").replace("%", "$")
    return console_url(f"logsV2:log-groups$3FlogGroupNameFilter$3D{encoded}")


@jsii.implements(events.IRuleTarget)
class TopicTarget:
    """An EventBridge target: the topic, with no role; the topic and key policies admit the rules (the stack's)."""

    def __init__(self, topic: sns.ITopic) -> None:
        """Send the rule's events to ``topic``."""
        self._topic = topic

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:  # jsii names it `id`
        """The target as the rule renders it."""
        return events.RuleTargetConfig(arn=self._topic.topic_arn)


class ObservabilityStack(cdk.Stack):
    """One CloudWatch dashboard per environment and alarms on an encrypted SNS topic.

    Dashboard: FSx for Lustre throughput, IOPS, metadata operations, free
    capacity, DRA export/import backlog, the data bucket's size, the
    cluster's node health (ParallelCluster) and links to the log groups.
    Alarms: Lustre free capacity below the file's share; ParallelCluster
    nodes failing health checks (its own metrics) and its head-node health
    alarm forwarded; HyperPod node-health and cluster-failure events
    forwarded, and no daily copy of its controller's Slurm state for two days; with Prometheus, the
    workspace's alert rules
    (``mlcluster.alert_rules``). Everything notifies one topic, encrypted
    with a key of this stack; the topic and key policies let CloudWatch, EventBridge (and AMP) publish.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        storage: StorageStack,
        environment_key: kms.IKey,
        **kwargs: Any,
    ) -> None:
        """Build the dashboard and alarms of ``environment`` over ``storage`` and its cluster (by name).

        ``environment_key``: the environment's key (Network stack), which
        encrypts the Prometheus workspace when there is one.
        """
        super().__init__(scope, construct_id, **kwargs)
        self.settings = environment
        self.environment_key = environment_key
        cfg = environment.config
        obs = cfg.observability
        self.cluster_name = environment.cluster_name
        self.backend = cfg.cluster.backend
        self.file_system_id = storage.lustre.file_system_id

        self.topic = self._topic(removal_policy_except_on_create(environment))
        for address in obs.alarm_emails:
            self.topic.add_subscription(subs.EmailSubscription(address))
        self.alarms: list[cw.Alarm] = []
        self.alarms.append(self._capacity_alarm(cfg.storage.lustre.storage_capacity_gib))
        if storage.accounting is not None:
            managed = cfg.cluster.hyperpod is not None and cfg.cluster.hyperpod.lifecycle.accounting.mode == "managed"
            database = cfg.storage.accounting
            assert database is not None  # the Storage stack builds the database from this section
            self.alarms.extend(
                self._accounting_alarms(
                    storage.accounting.cluster.cluster_identifier,
                    volume_gib=database.alarm_volume_gib,
                    busy_percent=database.alarm_busy_percent,
                    in_use=self.backend == "hyperpod" and managed,
                )
            )
        self.rules: list[events.Rule] = []
        if self.backend == "pcluster":
            self.alarms.append(self._pcluster_unhealthy_alarm(obs.alarms.unhealthy_nodes))
            self.rules.append(self._pcluster_head_node_rule())
        elif self.backend == "hyperpod":
            self.rules.extend(self._hyperpod_rules())
            if cfg.cluster.hyperpod is not None and cfg.cluster.hyperpod.lifecycle.scheduled_backup:
                self.alarms.append(self._scheduled_copy_alarm())
        if self.rules:
            self._admit_event_rules(self.rules)

        self.dashboard_name = cdk.Fn.join("-", ["mlcluster", environment.name, cdk.Aws.REGION])
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=self.dashboard_name,
            default_interval=cdk.Duration.hours(3),
            widgets=self._widgets(storage),
        )
        self.dashboard_url = console_url("dashboards/dashboard/", self.dashboard_name)
        export_output(self, environment, "DashboardUrl", self.dashboard_url, "CloudWatch dashboard of this environment")
        export_output(self, environment, "AlarmTopicArn", self.topic.topic_arn, "SNS topic the alarms notify")
        self.prometheus: PrometheusEndpoints | None = None
        self.grafana: GrafanaWorkspace | None = None
        if prometheus_enabled(cfg):
            self.prometheus = self._prometheus(environment)
            if grafana_enabled(cfg):
                self.grafana = self._grafana(environment, self.prometheus)
        if self.backend == "pcluster":
            url = console_url("dashboards/dashboard/", self.cluster_name, "-", cdk.Aws.REGION)
            export_output(
                self, environment, "ClusterDashboardUrl", url, "ParallelCluster's own dashboard of the cluster"
            )

    # -- Prometheus -------------------------------------------------------

    def _prometheus(self, environment: Environment) -> PrometheusEndpoints:
        """The environment's AMP workspace, encrypted with the environment's key, and its endpoints as outputs."""
        settings = environment.config.observability.prometheus
        policy = removal_policy_except_on_create(environment)
        workspace = PrometheusWorkspace(
            self,
            "Prometheus",
            environment_name=environment.name,
            key=self.environment_key,
            retention_days=settings.retention_days,
            removal_policy=policy,
        )
        self._alerting(environment, workspace)
        endpoints = workspace.endpoints
        export_output(
            self, environment, "PrometheusWorkspaceId", workspace.workspace.attr_workspace_id, "AMP workspace"
        )
        export_output(
            self, environment, "PrometheusRemoteWriteUrl", endpoints.remote_write_url, "where collectors write"
        )
        export_output(self, environment, "PrometheusQueryUrl", endpoints.query_url, "the workspace's query endpoint")
        return endpoints

    def _alerting(self, environment: Environment, workspace: PrometheusWorkspace) -> None:
        """Alert rules in the workspace; its alert manager publishes every alert to the alarm topic.

        Permissions as the AMP user guide gives them ("Giving Amazon Managed
        Service for Prometheus permission to send alert messages to your Amazon
        SNS topic", AMP-alertmanager-receiver-AMPpermission): the topic policy
        lets ``aps.amazonaws.com`` publish (and read the topic's attributes)
        for this account and this workspace only; an encrypted topic's key
        must let the service use it (``kms:GenerateDataKey*``, ``kms:Decrypt``).
        The key's statement cannot name the workspace's ARN (the workspace
        names the topic, the topic its key: a cycle), so, like CloudWatch's,
        it admits the service acting for this account only.
        """
        alarms = environment.config.observability.alarms
        inputs = AlertInputs(
            cluster_name=self.cluster_name,
            unhealthy_nodes=alarms.unhealthy_nodes,
            collector_silent_minutes=alarms.collector_silent_minutes,
            topic_arn=self.topic.topic_arn,
            region=cdk.Aws.REGION,
        )
        workspace.add_alerting(rules_yaml=rules_yaml(inputs), alertmanager_yaml=alertmanager_yaml(inputs))
        workspace_arn = workspace.endpoints.workspace_arn
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PrometheusAlertManager",
                principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": workspace_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                },
            )
        )
        self.topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PrometheusAlertManager",
                principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}},
            )
        )

    def _grafana(self, environment: Environment, prometheus: PrometheusEndpoints) -> GrafanaWorkspace:
        """The Amazon Managed Grafana workspace over ``prometheus``, its URL as an output."""
        workspace = GrafanaWorkspace(
            self,
            "Grafana",
            environment_name=environment.name,
            settings=environment.config.observability.grafana,
            prometheus=prometheus,
            removal_policy=removal_policy_except_on_create(environment),
            log_retention=log_retention(environment),
        )
        export_output(self, environment, "GrafanaUrl", workspace.url, "Amazon Managed Grafana workspace (sign in)")
        return workspace

    # -- topic ------------------------------------------------------------

    def _topic(self, policy: cdk.RemovalPolicy) -> sns.Topic:
        key = kms.Key(
            self,
            "AlarmTopicKey",
            description=f"mlcluster {self.settings.name}: encrypts the alarm topic",
            enable_key_rotation=True,
            removal_policy=key_removal_policy(policy),
        )
        # CloudWatch alarms publish to an encrypted topic only if the key lets them (EventBridge: _admit_event_rules).
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AlarmPublishers",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}},
            )
        )
        topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name=f"mlcluster {self.settings.name} alarms",
            master_key=key,
            enforce_ssl=True,
        )
        # The topic policy (TLS-only deny, AMP's allow) replaces SNS's default policy, so CloudWatch alarms need
        # an allow of their own, or every alarm action fails with "not authorized to perform: SNS:Publish" (AWS
        # Knowledge Center, cloudwatch-receive-sns-for-alarm-trigger). Scoped against the confused deputy as the
        # SNS guide's access policy examples do: alarms of this account, in this region.
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.alarm_arn_pattern()},
                    "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                },
            )
        )
        self.topic_key = key
        return topic

    def alarm_arn_pattern(self) -> str:
        """The ARNs of every CloudWatch alarm of this account in this region (``...:alarm:*``)."""
        return cdk.Stack.of(self).format_arn(
            service="cloudwatch", resource="alarm", resource_name="*", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
        )

    def _forward(self, rule: events.Rule) -> events.Rule:
        """Send ``rule``'s events to the alarm topic (admitted by ``_admit_event_rules``)."""
        rule.add_target(TopicTarget(self.topic))
        return rule

    def _admit_event_rules(self, rules: list[events.Rule]) -> None:
        """Let ``rules`` publish to the alarm topic through the topic's and the key's policies.

        EventBridge publishes to SNS through the topic's resource policy; its
        user guide ("Using resource-based policies for Amazon EventBridge")
        warns that a role on an SNS target can make delivery fail for a KMS-
        encrypted topic. The topic policy admits exactly these rules
        (``aws:SourceArn``) of this account; the key policy admits EventBridge
        without conditions, which KMS requests from EventBridge do not carry.
        """
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeRules",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": [rule.rule_arn for rule in rules]},
                    "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                },
            )
        )
        self.topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeRules",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
            )
        )

    def _alarm(self, alarm: cw.Alarm) -> cw.Alarm:
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        return alarm

    # -- alarms -----------------------------------------------------------

    def lustre_metric(self, name: str, statistic: str, minutes: int = 1) -> cw.Metric:
        """An ``AWS/FSx`` metric of the environment's Lustre file system over ``minutes``."""
        return cw.Metric(
            namespace=FSX,
            metric_name=name,
            dimensions_map={"FileSystemId": self.file_system_id},
            statistic=statistic,
            period=cdk.Duration.minutes(minutes),
        )

    def _capacity_alarm(self, capacity_gib: int) -> cw.Alarm:
        percent = self.settings.config.observability.alarms.lustre_free_capacity_percent
        threshold = capacity_gib * GIB * percent // 100
        alarm = cw.Alarm(
            self,
            "LustreFreeCapacityLow",
            alarm_description=f"FSx for Lustre /fsx has less than {percent}% of its {capacity_gib} GiB free "
            f"({threshold} bytes) for 15 minutes",
            metric=self.lustre_metric("FreeDataStorageCapacity", "Sum", 5),
            threshold=threshold,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=3,
            treat_missing_data=cw.TreatMissingData.MISSING,
        )
        return self._alarm(alarm)

    def _accounting_alarms(
        self, cluster_identifier: str, *, volume_gib: int, busy_percent: int, in_use: bool
    ) -> list[cw.Alarm]:
        """Storage, CPU, capacity and (while a cluster uses it) connections of the Slurm accounting database."""

        def metric(name: str, statistic: str) -> cw.Metric:
            return cw.Metric(
                namespace=RDS,
                metric_name=name,
                dimensions_map={"DBClusterIdentifier": cluster_identifier},
                statistic=statistic,
                period=cdk.Duration.minutes(5),
            )

        busy = busy_percent
        volume = volume_gib
        # A paused database (0 ACUs) sends no CPU or capacity data: missing data is not a breach.
        specs: list[tuple[str, str, cw.Metric, float, cw.ComparisonOperator, cw.TreatMissingData]] = [
            (
                "AccountingDatabaseStorageHigh",
                f"The Slurm accounting database holds more than {volume} GiB (VolumeBytesUsed)",
                metric("VolumeBytesUsed", "Maximum"),
                volume * GIB,
                cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                cw.TreatMissingData.MISSING,
            ),
            (
                "AccountingDatabaseCpuHigh",
                f"The Slurm accounting database's CPU stayed at or above {busy}% for 15 minutes",
                metric("CPUUtilization", "Average"),
                busy,
                cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                cw.TreatMissingData.NOT_BREACHING,
            ),
            (
                "AccountingDatabaseCapacityHigh",
                f"The Slurm accounting database used {busy}% or more of max_capacity_acu for 15 minutes "
                "(ACUUtilization): raise storage.accounting.max_capacity_acu",
                metric("ACUUtilization", "Average"),
                busy,
                cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                cw.TreatMissingData.NOT_BREACHING,
            ),
        ]
        if in_use:
            # slurmdbd keeps a connection open while the cluster runs; none means accounting stopped
            # (the controller is down, or slurmdbd lost the database, e.g. with a password rotated under it).
            specs.append(
                (
                    "AccountingDatabaseNoConnections",
                    f"Nothing has been connected to the Slurm accounting database for 15 minutes while cluster "
                    f"{self.cluster_name} uses it: slurmdbd is not recording jobs",
                    metric("DatabaseConnections", "Maximum"),
                    1,
                    cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                    cw.TreatMissingData.BREACHING,
                )
            )
        alarms = []
        for construct_id, description, measured, threshold, comparison, missing in specs:
            alarm = cw.Alarm(
                self,
                construct_id,
                alarm_description=description,
                metric=measured,
                threshold=threshold,
                comparison_operator=comparison,
                evaluation_periods=3,
                treat_missing_data=missing,
            )
            alarms.append(self._alarm(alarm))
        return alarms

    def _scheduled_copy_alarm(self) -> cw.Alarm:
        """No daily copy of the HyperPod controller's Slurm state reached S3 for two days.

        Each copy that reached the patch backup bucket publishes one data point (``mlcluster-backup
        scheduled``), and the ``scheduled_backup`` step publishes one when it installs the timer, so the
        two-day clock starts at node creation (the first copy runs only after the next midnight plus up to an
        hour). A failed run, a stopped timer or a lost controller publishes none. The alarm reads
        ``FILL(m1, 0)``: CloudWatch ignores TreatMissingData once any real point is in the evaluation range, so
        a day without a point must be a 0, not a gap; with no point at all (no seed yet, a controller lost
        for days) missing data still breaches. Two daily periods (``datapoints_to_alarm`` 2 of 2) leave room
        for the timer's random delay and a day skipped while a patch backup held the tool's lock.
        """
        copies = cw.Metric(
            namespace=SCHEDULED_COPY_NAMESPACE,
            metric_name=SCHEDULED_COPY_METRIC,
            dimensions_map={"ClusterName": self.cluster_name},
            statistic="Sum",
            period=cdk.Duration.days(1),
        )
        metric = cw.MathExpression(
            expression="FILL(m1, 0)",
            using_metrics={"m1": copies},
            period=cdk.Duration.days(1),
            label="Daily copies (a day without one is 0)",
        )
        alarm = cw.Alarm(
            self,
            "ScheduledCopyMissing",
            alarm_description=f"No daily copy of HyperPod cluster {self.cluster_name}'s Slurm state (slurmctld "
            "state, local accounting) reached the patch backup bucket for two days. "
            f"'mlcluster status {self.settings.name}' shows the last copy's age. On the controller: "
            "'journalctl -u mlcluster-backup-scheduled' and 'systemctl list-timers mlcluster-backup-scheduled'. "
            "A controller created before the daily copy existed has neither the timer nor the tool that "
            "publishes this metric: docs/upgrading.md ('0.2.0: the controller's daily copy') says how to "
            "install the new lifecycle scripts on it. It also goes off while the cluster is deleted",
            metric=metric,
            threshold=1,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=2,
            datapoints_to_alarm=2,
            treat_missing_data=cw.TreatMissingData.BREACHING,
        )
        return self._alarm(alarm)

    def pcluster_metric(self, name: str) -> cw.Metric:
        """A ``ParallelCluster`` health metric of this environment's cluster (summed per 5 minutes)."""
        return cw.Metric(
            namespace=PCLUSTER,
            metric_name=name,
            dimensions_map={"ClusterName": self.cluster_name},
            statistic="Sum",
            period=cdk.Duration.minutes(5),
        )

    def _pcluster_unhealthy_alarm(self, threshold: int) -> cw.Alarm:
        metrics = {f"m{i}": self.pcluster_metric(name) for i, name in enumerate(PCLUSTER_UNHEALTHY)}
        unhealthy = cw.MathExpression(
            expression="SUM([" + ",".join(metrics) + "])",
            using_metrics=metrics,
            label="Nodes failing health checks",
            period=cdk.Duration.minutes(5),
        )
        alarm = cw.Alarm(
            self,
            "NodesUnhealthy",
            alarm_description=f"At least {threshold} node(s) of cluster {self.cluster_name} failed an EC2 or "
            "scheduled-event health check or stopped responding to Slurm in 5 minutes (ParallelCluster metrics)",
            metric=unhealthy,
            threshold=threshold,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        return self._alarm(alarm)

    def _pcluster_head_node_rule(self) -> events.Rule:
        # ParallelCluster names its head-node status-check alarm <cluster>-HeadNode-Health (AWS/EC2 StatusCheckFailed).
        alarm_arn = cdk.Stack.of(self).format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{self.cluster_name}-HeadNode-Health",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        rule = events.Rule(
            self,
            "HeadNodeUnhealthy",
            description=f"Head node of {self.cluster_name} fails its EC2 status checks (ParallelCluster's alarm)",
            event_pattern=events.EventPattern(
                source=["aws.cloudwatch"],
                detail_type=["CloudWatch Alarm State Change"],
                resources=[alarm_arn],
                detail={"state": {"value": ["ALARM", "OK"]}},
            ),
        )
        return self._forward(rule)

    def _hyperpod_rules(self) -> list[events.Rule]:
        nodes = events.Rule(
            self,
            "NodesUnhealthy",
            description=f"A node of HyperPod cluster {self.cluster_name} is reported unhealthy",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker HyperPod Cluster Node Health Event"],
                detail={
                    "ClusterName": [self.cluster_name],
                    "HealthSummary": {"HealthStatus": [{"anything-but": ["Healthy"]}]},
                },
            ),
        )
        cluster = events.Rule(
            self,
            "ClusterFailed",
            description=f"HyperPod cluster {self.cluster_name} failed or rolls back (controller included)",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker HyperPod Cluster State Change"],
                detail={"ClusterName": [self.cluster_name], "ClusterStatus": ["Failed", "RollingBack"]},
            ),
        )
        return [self._forward(nodes), self._forward(cluster)]

    # -- dashboard --------------------------------------------------------

    def _per_second(self, label: str, names: tuple[str, ...]) -> cw.MathExpression:
        # Ids unique within a graph: CloudWatch rejects two different metrics under one id.
        metrics = {f"{label.lower()}{i}": self.lustre_metric(name, "Sum") for i, name in enumerate(names)}
        first = next(iter(metrics))
        return cw.MathExpression(
            expression="SUM([" + ",".join(metrics) + f"])/PERIOD({first})",
            using_metrics=metrics,
            label=label,
            period=cdk.Duration.minutes(1),
        )

    def _widgets(self, storage: StorageStack) -> list[list[cw.IWidget]]:
        lustre: list[cw.IWidget] = [
            cw.GraphWidget(
                title="Lustre throughput (bytes/s)",
                left=[
                    self._per_second("Read", ("DataReadBytes",)),
                    self._per_second("Write", ("DataWriteBytes",)),
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="Lustre IOPS (operations/s)",
                left=[
                    self._per_second("Read", ("DataReadOperations",)),
                    self._per_second("Write", ("DataWriteOperations",)),
                    self._per_second("Metadata", ("MetadataOperations",)),
                ],
                width=8,
            ),
            cw.AlarmWidget(title="Lustre free capacity (bytes)", alarm=self.alarms[0], width=8),
        ]
        bucket = storage.data_bucket.bucket.bucket_name
        data: list[cw.IWidget] = [
            cw.GraphWidget(
                title="DRA backlog: age of oldest queued change (s)",
                left=[
                    cw.Metric(
                        namespace=FSX,
                        metric_name="AgeOfOldestQueuedMessage",
                        dimensions_map={"FileSystemId": self.file_system_id, "Publisher": publisher},
                        statistic="Maximum",
                        period=cdk.Duration.minutes(1),
                        label=publisher,
                    )
                    for publisher in ("AutoImport", "AutoExport")
                ],
                width=8,
            ),
            _daily_bucket_widget("Data bucket size (bytes, daily)", bucket, "BucketSizeBytes", "StandardStorage"),
            _daily_bucket_widget("Data bucket objects (daily)", bucket, "NumberOfObjects", "AllStorageTypes"),
        ]
        rows: list[list[cw.IWidget]] = [
            [cw.TextWidget(markdown=f"# mlcluster {self.settings.name}: storage", width=WIDTH, height=1)],
            lustre,
            data,
        ]
        if self.backend == "pcluster":
            rows.append(
                [
                    cw.TextWidget(markdown=f"# Cluster {self.cluster_name} (ParallelCluster)", width=WIDTH, height=1),
                    cw.GraphWidget(
                        title="Nodes replaced: failed health checks (count)",
                        left=[self.pcluster_metric(name) for name in PCLUSTER_UNHEALTHY],
                        width=12,
                    ),
                    cw.GraphWidget(
                        title="Nodes not launched or not bootstrapped (count)",
                        left=[self.pcluster_metric(name) for name in PCLUSTER_LAUNCH],
                        width=12,
                    ),
                ]
            )
        rows.append([cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=WIDTH)])
        rows.append([cw.TextWidget(markdown=self._links_markdown(storage), width=WIDTH, height=5)])
        return rows

    def _links_markdown(self, storage: StorageStack) -> str:
        lines = ["## Logs and other views"]
        if storage.lustre.log_group is not None:
            # By prefix, not by the group's name: the name ends with the storage stack's deployment suffix
            # (deployment_name.py) and an import of it would tie this stack to that one's exports.
            prefix = f"{LOG_GROUP_PREFIX}lustre/"
            lines.append(f"* [FSx for Lustre log group: named {prefix}...]({log_groups_url(prefix)})")
        if self.backend == "pcluster":
            prefix = f"/aws/parallelcluster/{self.cluster_name}-"
            lines.append(
                f"* [Node logs (head node, compute nodes, lifecycle scripts): groups named {prefix}...]"
                f"({log_groups_url(prefix)})"
            )
            lines.append(
                "* ParallelCluster's own dashboard (head node, EBS, logs): "
                + cdk.Fn.join("", ["[", self.cluster_name, "-", cdk.Aws.REGION, "]("])
                + console_url("dashboards/dashboard/", self.cluster_name, "-", cdk.Aws.REGION)
                + ")"
            )
        elif self.backend == "hyperpod":
            prefix = f"/aws/sagemaker/Clusters/{self.cluster_name}/"
            lines.append(f"* [Node and lifecycle-script logs: groups named {prefix}...]({log_groups_url(prefix)})")
            lines.append(
                "* HyperPod publishes no node-count metric to CloudWatch; node-health and cluster-state events "
                "reach the alarm topic through EventBridge."
            )
        return "\n".join(lines)


def _daily_bucket_widget(title: str, bucket: str, metric_name: str, storage_type: str) -> cw.GraphWidget:
    """A graph of one of S3's daily storage metrics of ``bucket`` (published once a day, per storage type)."""
    metric = cw.Metric(
        namespace=S3,
        metric_name=metric_name,
        dimensions_map={"BucketName": bucket, "StorageType": storage_type},
        statistic="Average",
        period=cdk.Duration.days(1),
    )
    return cw.GraphWidget(title=title, left=[metric], width=8)
