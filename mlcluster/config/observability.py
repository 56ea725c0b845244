"""The ``observability:`` section: the environment's CloudWatch dashboard, alarms and where they notify.

On by default when the cluster runs accelerated instances (NVIDIA GPU,
Trainium, Inferentia): those are the clusters whose weeks-long jobs someone
must watch. The alarms read metrics ParallelCluster publishes only with its
logs and dashboard on, and its head-node alarms only with alarms on, so an
environment that turns those off cannot also ask for observability.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from mlcluster.config.schema import Issues, section, setting
from mlcluster.pcluster.instance_types import lookup

if TYPE_CHECKING:
    from mlcluster.config.environment import ClusterConfig, EnvironmentConfig

#: Instance families with accelerators (NVIDIA GPUs, AWS Trainium/Inferentia, Gaudi), for types not in the table.
ACCELERATED_FAMILY = re.compile(r"(p\d+[a-z]*|g\d+[a-z]*|trn\d+[a-z]*|inf\d+[a-z]*|dl\d+[a-z]*)(-[a-z0-9]+)?\..+")
EMAIL = r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}"


def is_accelerated(instance_type: str) -> bool:
    """True for an EC2 or SageMaker (``ml.``) instance type with GPUs or Neuron devices."""
    name = instance_type.removeprefix("ml.")
    info = lookup(name)
    if info is not None:
        return info.accelerator is not None
    return ACCELERATED_FAMILY.fullmatch(name) is not None


def cluster_instance_types(cluster: ClusterConfig) -> list[str]:
    """Every instance type the cluster's compute nodes use (none without a backend)."""
    if cluster.backend == "pcluster" and cluster.pcluster is not None:
        return [cr.instance_type for q in cluster.pcluster.queues for cr in q.compute_resources]
    if cluster.backend == "hyperpod" and cluster.hyperpod is not None:
        return [w.instance_type for w in cluster.hyperpod.workers]
    return []


@section
class AlarmThresholds:
    """When the environment's alarms go off."""

    lustre_free_capacity_percent: int = setting(
        default=10,
        minimum=1,
        maximum=90,
        doc="alarm when FSx for Lustre free data capacity stays below this share of its size for 15 minutes",
    )
    unhealthy_nodes: int = setting(
        default=1,
        minimum=1,
        maximum=10000,
        doc="alarm (ParallelCluster) when at least this many nodes fail EC2 or scheduled-event health checks, "
        "or stop responding to Slurm, within 5 minutes; (Prometheus) when at least this many Slurm nodes stay "
        "down, drained or failing for 5 minutes",
    )
    collector_silent_minutes: int = setting(
        default=10,
        minimum=5,
        maximum=1440,
        doc="alert (Prometheus) when the head node or controller sends no sample, or Slurm there does not answer, "
        "for this many minutes (at least two of prometheus.scrape_interval_seconds)",
    )


@section
class PrometheusConfig:
    """Amazon Managed Service for Prometheus: a workspace, exporters on every node and a collector.

    The collector runs on the head node (ParallelCluster) or the controller
    (HyperPod), scrapes the exporters of every node in Slurm's node list and
    remote-writes to the workspace with SigV4.
    """

    enabled: bool = setting(
        default=False,
        doc="an Amazon Managed Service for Prometheus workspace (encrypted with the environment's key), "
        "exporters on every node and a collector on the head node or controller",
    )
    scrape_interval_seconds: int = setting(
        default=30, minimum=10, maximum=300, doc="how often the collector scrapes every exporter"
    )
    retention_days: int = setting(
        default=150,
        minimum=1,
        maximum=1095,
        doc="days the workspace keeps samples (the service's default is 150, its quota 1095)",
    )


#: An IAM Identity Center (identity store) user or group id, as UpdatePermissions takes it (no ARN).
IDENTITY_STORE_ID = r"(?:[0-9a-f]{10}-)?[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}"
IDENTITY_STORE_ALLOWED = (
    "allowed: IAM Identity Center ids such as '906718cc3a-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901' or "
    "'1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901' (Identity Center console, Users or Groups, the user's or group's ID)"
)
#: A SAML assertion attribute name or a role value (the workspace's SAML settings take 1-256 characters).
SAML_NAME = r"[^\s].{0,255}"


@section
class GrafanaSamlConfig:
    """How an Amazon Managed Grafana workspace trusts a SAML identity provider."""

    idp_metadata_url: str | None = setting(
        default=None,
        pattern=r"https://\S{1,2040}",
        allowed="allowed: the https:// URL where the identity provider serves its SAML metadata",
        doc="where the identity provider serves its metadata (give this or idp_metadata_xml)",
    )
    idp_metadata_xml: str | None = setting(
        default=None,
        pattern=r"\s*<(?s:.*)>\s*",
        allowed="allowed: the identity provider's SAML metadata document (XML)",
        doc="the identity provider's metadata document itself (give this or idp_metadata_url)",
    )
    role_attribute: str | None = setting(
        default=None,
        pattern=SAML_NAME,
        allowed="allowed: the name of the SAML assertion attribute that carries the user's role, e.g. 'role'",
        doc="the assertion attribute whose values say which Grafana role a user gets",
    )
    admin_role_values: tuple[str, ...] = setting(
        default=(),
        pattern=SAML_NAME,
        allowed="allowed: values of role_attribute, 1-256 characters each",
        doc="values of role_attribute that make a user a Grafana Admin (at least one)",
    )
    editor_role_values: tuple[str, ...] = setting(
        default=(),
        pattern=SAML_NAME,
        allowed="allowed: values of role_attribute, 1-256 characters each",
        doc="values of role_attribute that make a user a Grafana Editor (others are Viewers)",
    )

    def check(self, issues: Issues) -> None:
        if self.idp_metadata_url is None and self.idp_metadata_xml is None:
            issues.add(
                "idp_metadata_url", None, "required: give idp_metadata_url or idp_metadata_xml (the IdP's metadata)"
            )
        if self.idp_metadata_url is not None and self.idp_metadata_xml is not None:
            issues.add("idp_metadata_xml", "<xml>", "give idp_metadata_url or idp_metadata_xml, not both")
        if self.role_attribute is None:
            issues.add("role_attribute", None, "required: the assertion attribute that names the user's role")
        if not self.admin_role_values:
            issues.add(
                "admin_role_values",
                [],
                "required: at least one value of role_attribute that makes a user a Grafana Admin "
                "(without one nobody can administer the workspace)",
            )
        overlap = sorted(set(self.admin_role_values) & set(self.editor_role_values))
        if overlap:
            issues.add("editor_role_values", overlap, "a role value may be in admin_role_values or here, not both")


@section
class GrafanaConfig:
    """An Amazon Managed Grafana workspace reading the Prometheus workspace, its data sources and dashboards as code."""

    enabled: bool = setting(
        default=False,
        doc="an Amazon Managed Grafana workspace with the Prometheus data source and the dashboards provisioned "
        "(needs prometheus.enabled)",
    )
    authentication: Literal["AWS_SSO", "SAML"] | None = setting(
        default=None,
        doc="how users sign in: AWS_SSO (IAM Identity Center, enabled in the account or its organization) or SAML "
        "(`saml:` below); required when enabled",
    )
    admin_user_ids: tuple[str, ...] = setting(
        default=(),
        pattern=IDENTITY_STORE_ID,
        allowed=IDENTITY_STORE_ALLOWED,
        doc="IAM Identity Center users made Grafana Admins by the provisioning (AWS_SSO only)",
    )
    admin_group_ids: tuple[str, ...] = setting(
        default=(),
        pattern=IDENTITY_STORE_ID,
        allowed=IDENTITY_STORE_ALLOWED,
        doc="IAM Identity Center groups whose members become Grafana Admins (AWS_SSO only)",
    )
    saml: GrafanaSamlConfig | None = setting(
        default=None, doc="the SAML identity provider (`saml:` below); required with authentication SAML"
    )

    def check(self, issues: Issues) -> None:
        if not self.enabled:
            return
        if self.authentication is None:
            issues.add(
                "authentication",
                None,
                "required when grafana is enabled (no default is guessed): 'AWS_SSO' (IAM Identity Center must be "
                "enabled in the account or its organization) or 'SAML' (with `saml:`)",
            )
        elif self.authentication == "SAML":
            if self.saml is None:
                issues.add(
                    "saml",
                    None,
                    "required with authentication SAML: idp_metadata_url or idp_metadata_xml, role_attribute and "
                    "admin_role_values",
                )
            for key in ("admin_user_ids", "admin_group_ids"):
                if getattr(self, key):
                    issues.add(
                        key,
                        list(getattr(self, key)),
                        "only used with authentication AWS_SSO; with SAML, admins come from saml.admin_role_values",
                    )
        elif self.saml is not None:
            issues.add("saml", "<saml settings>", "only used with authentication SAML")
        for key in ("admin_user_ids", "admin_group_ids"):
            ids = getattr(self, key)
            if len(set(ids)) != len(ids):
                issues.add(key, list(ids), "each id may appear once")


@section
class ObservabilityConfig:
    """The environment's CloudWatch dashboard and alarms, in their own stack (``<env>/Observability``)."""

    enabled: bool | None = setting(
        default=None,
        doc="build the Observability stack; unset: on when the cluster has GPU, Trainium or Inferentia instances",
    )
    alarm_emails: tuple[str, ...] = setting(
        default=(),
        pattern=EMAIL,
        allowed="allowed: e-mail addresses such as 'ops@example.com'",
        doc="addresses subscribed to the alarm topic (each confirms by e-mail); empty: subscribe by hand",
    )
    alarms: AlarmThresholds = setting(default=AlarmThresholds())
    prometheus: PrometheusConfig = setting(
        default=PrometheusConfig(), doc="metrics from every node in a Prometheus workspace (`prometheus:` below)"
    )
    grafana: GrafanaConfig = setting(
        default=GrafanaConfig(), doc="an Amazon Managed Grafana workspace over that workspace (`grafana:` below)"
    )

    def check(self, issues: Issues) -> None:
        if len(set(self.alarm_emails)) != len(self.alarm_emails):
            issues.add("alarm_emails", list(self.alarm_emails), "each address may appear once")
        if self.enabled is False and (self.alarm_emails or self.alarms != AlarmThresholds()):
            issues.add("enabled", False, "alarm_emails and alarms are only used when observability is on")
        silent = self.alarms.collector_silent_minutes
        if self.prometheus.enabled and silent * 60 < 2 * self.prometheus.scrape_interval_seconds:
            issues.add(
                "alarms.collector_silent_minutes",
                silent,
                f"at least two scrapes must fit: with prometheus.scrape_interval_seconds "
                f"{self.prometheus.scrape_interval_seconds}, allowed: "
                f"{-(-2 * self.prometheus.scrape_interval_seconds // 60)} or more",
            )
        if self.grafana.enabled and not self.prometheus.enabled:
            issues.add(
                "grafana.enabled",
                True,
                "Grafana reads the Prometheus workspace, which is off; set observability.prometheus.enabled: true",
            )


def observability_enabled(config: EnvironmentConfig) -> bool:
    """Whether the environment gets its Observability stack (explicit setting, else accelerated cluster)."""
    explicit = config.observability.enabled
    if explicit is not None:
        return explicit
    return any(is_accelerated(t) for t in cluster_instance_types(config.cluster))


def prometheus_enabled(config: EnvironmentConfig) -> bool:
    """Whether the environment gets a Prometheus workspace, exporters and a collector."""
    return observability_enabled(config) and config.observability.prometheus.enabled


def grafana_enabled(config: EnvironmentConfig) -> bool:
    """Whether the environment gets an Amazon Managed Grafana workspace over its Prometheus workspace."""
    return prometheus_enabled(config) and config.observability.grafana.enabled


def check_observability(issues: Issues, config: EnvironmentConfig) -> None:
    """ParallelCluster publishes what the alarms read only with its logs, dashboard and alarms on.

    A Prometheus workspace asked for in an environment whose observability is
    off by default (no accelerated instances) is refused rather than ignored.
    """
    if config.observability.prometheus.enabled and not observability_enabled(config):
        issues.add(
            "observability.prometheus.enabled",
            True,
            "the workspace lives in the Observability stack, which is off for this environment; "
            "set observability.enabled: true",
        )
    pcluster = config.cluster.pcluster
    if not observability_enabled(config) or config.cluster.backend != "pcluster" or pcluster is None:
        return
    for key in ("logs", "dashboards", "alarms"):
        if not getattr(pcluster.monitoring, key):
            issues.add(
                f"cluster.pcluster.monitoring.{key}",
                False,
                "observability needs it true: ParallelCluster then publishes the node-health metrics and "
                "head-node alarm the environment's alarms read (or set observability.enabled: false)",
            )
