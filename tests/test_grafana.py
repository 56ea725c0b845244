"""``observability.grafana``: the settings, the dashboards' queries and the workspace in the synthesized template."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, Environment, load_environment
from mlcluster.config.observability import grafana_enabled
from mlcluster.constructs.grafana_workspace import GRAFANA_VERSION, HANDLERS_DIR, IDENTITY_CENTER_ACTIONS
from mlcluster.exporters import metric_names
from mlcluster.grafana_dashboards import DASHBOARDS, PROMETHEUS_UID, dashboards_json, data_sources_json
from tests.support import ENVIRONMENTS, EXAMPLES, MINIMAL, cfn_lint, synth_dir, write_env

GROUP = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
STORE_GROUP = "906718cc3a-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f902"
#: An environment whose Observability stack and Prometheus workspace are on.
ON: dict[str, Any] = {**MINIMAL, "observability": {"enabled": True, "prometheus": {"enabled": True}}}
SAML = {"idp_metadata_url": "https://idp.example.com/metadata", "role_attribute": "role", "admin_role_values": ["ops"]}


def with_grafana(grafana: dict[str, Any], prometheus: bool = True) -> dict[str, Any]:
    return {**MINIMAL, "observability": {"enabled": True, "prometheus": {"enabled": prometheus}, "grafana": grafana}}


# -- the settings -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grafana", "path", "fragment"),
    [
        ({"enabled": True}, "observability.grafana.authentication", "required when grafana is enabled"),
        ({"enabled": True, "authentication": "OKTA"}, "observability.grafana.authentication", "'AWS_SSO', 'SAML'"),
        (
            {"enabled": True, "authentication": "SAML"},
            "observability.grafana.saml",
            "required with authentication SAML",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "idp_metadata_url": None}},
            "observability.grafana.saml.idp_metadata_url",
            "give idp_metadata_url or idp_metadata_xml",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "idp_metadata_xml": "<m/>"}},
            "observability.grafana.saml.idp_metadata_xml",
            "not both",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "idp_metadata_url": "http://idp/m"}},
            "observability.grafana.saml.idp_metadata_url",
            "https:// URL",
        ),
        (
            {
                "enabled": True,
                "authentication": "SAML",
                "saml": {**SAML, "idp_metadata_url": None, "idp_metadata_xml": "x"},
            },
            "observability.grafana.saml.idp_metadata_xml",
            "metadata document (XML)",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "role_attribute": None}},
            "observability.grafana.saml.role_attribute",
            "names the user's role",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "admin_role_values": []}},
            "observability.grafana.saml.admin_role_values",
            "at least one value",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": {**SAML, "editor_role_values": ["ops"]}},
            "observability.grafana.saml.editor_role_values",
            "not both",
        ),
        (
            {"enabled": True, "authentication": "SAML", "saml": SAML, "admin_group_ids": [GROUP]},
            "observability.grafana.admin_group_ids",
            "only used with authentication AWS_SSO",
        ),
        (
            {"enabled": True, "authentication": "AWS_SSO", "saml": SAML},
            "observability.grafana.saml",
            "only used with authentication SAML",
        ),
        (
            {"enabled": True, "authentication": "AWS_SSO", "admin_user_ids": ["alice"]},
            "observability.grafana.admin_user_ids[0]",
            "IAM Identity Center ids",
        ),
        (
            {
                "enabled": True,
                "authentication": "AWS_SSO",
                "admin_group_ids": [f"arn:aws:identitystore:::group/{GROUP}"],
            },
            "observability.grafana.admin_group_ids[0]",
            "IAM Identity Center ids",
        ),
        (
            {"enabled": True, "authentication": "AWS_SSO", "admin_group_ids": [GROUP, GROUP]},
            "observability.grafana.admin_group_ids",
            "each id may appear once",
        ),
        ({"enabled": "yes"}, "observability.grafana.enabled", "expected true or false"),
        ({"enable": True}, "observability.grafana.enable", "allowed keys here"),
    ],
)
def test_bad_values_name_key_and_allowed(
    make_env: Callable[..., Environment], grafana: dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_env(with_grafana(grafana))
    (problem,) = err.value.problems
    assert problem.path == path
    assert fragment in problem.allowed
    assert "test.yaml" in str(err.value)


def test_grafana_needs_prometheus(make_env: Callable[..., Environment]) -> None:
    with pytest.raises(ConfigError) as err:
        make_env(with_grafana({"enabled": True, "authentication": "AWS_SSO"}, prometheus=False))
    (problem,) = err.value.problems
    assert problem.path == "observability.grafana.enabled"
    assert "set observability.prometheus.enabled: true" in problem.allowed


def test_edges_are_accepted(make_env: Callable[..., Environment]) -> None:
    # Off by default, and settings left in place while off are not judged.
    assert not grafana_enabled(make_env(ON).config)
    assert not grafana_enabled(make_env(with_grafana({"authentication": "SAML"})).config)
    # AWS_SSO without admins (assigned by hand), and with user and group ids in both id forms.
    assert grafana_enabled(make_env(with_grafana({"enabled": True, "authentication": "AWS_SSO"})).config)
    env = make_env(
        with_grafana(
            {"enabled": True, "authentication": "AWS_SSO", "admin_user_ids": [GROUP], "admin_group_ids": [STORE_GROUP]}
        )
    )
    assert env.config.observability.grafana.admin_group_ids == (STORE_GROUP,)
    # SAML with metadata as XML, one admin value and editors.
    saml = {
        **SAML,
        "idp_metadata_url": None,
        "idp_metadata_xml": "<md:EntityDescriptor/>",
        "editor_role_values": ["dev"],
    }
    env = make_env(with_grafana({"enabled": True, "authentication": "SAML", "saml": saml}))
    assert grafana_enabled(env.config)
    assert env.config.observability.grafana.saml is not None
    assert env.config.observability.grafana.saml.editor_role_values == ("dev",)


def test_the_example_turning_grafana_on() -> None:
    on = [name for name in EXAMPLES if grafana_enabled(load_environment(ENVIRONMENTS / f"{name}.yaml").config)]
    assert on == ["p5"]


# -- dashboards -----------------------------------------------------------------------------------------------------

#: PromQL words that are not metric names: functions are recognised by the "(" after them.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_identifiers(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, ranges, groupings and functions removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group()
        if text[match.end() :].lstrip().startswith("(") or word in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def test_metric_identifier_parser() -> None:
    assert metric_identifiers('sum by (instance) (rate(a_total{device!="lo"}[10m])) / b') == {"a_total", "b"}
    assert metric_identifiers("100 * (1 - x / y) > 0") == {"x", "y"}
    assert metric_identifiers("rate(c[5m]) / 1e6") == {"c"}


def all_queries() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (board["uid"], panel["title"], target)
        for board in dashboards_json("t")
        for panel in board["panels"]
        for target in panel["targets"]
    ]


def test_every_query_uses_only_exporter_metrics_and_the_prometheus_uid() -> None:
    known = metric_names()
    used: set[str] = set()
    for uid, title, target in all_queries():
        names = metric_identifiers(target["expr"])
        assert names, (uid, title)
        assert names <= known, (uid, title, names - known)
        assert target["datasource"] == {"type": "prometheus", "uid": PROMETHEUS_UID}
        used |= names
    # Every exporter metric is on some dashboard (a name added to the contract gets a panel).
    assert used == known


def test_dashboards_cover_the_issue() -> None:
    titles = {board["uid"]: [p["title"] for p in board["panels"]] for board in dashboards_json("t")}
    assert set(titles) == {
        "mlcluster-gpu",
        "mlcluster-network",
        "mlcluster-slurm",
        "mlcluster-nodes",
        "mlcluster-neuron",
    }
    gpu = " ".join(titles["mlcluster-gpu"]).lower()
    for word in ("utilisation", "memory", "power", "temperature", "xid", "ecc", "thermal"):
        assert word in gpu, word
    assert any("EFA" in t for t in titles["mlcluster-network"])
    assert titles["mlcluster-slurm"] == ["Nodes by state", "Jobs by state"]


def test_dashboard_layout_and_ids() -> None:
    for board in dashboards_json("p5"):
        assert board["title"].startswith("mlcluster p5: ")
        assert len(board["uid"]) <= 40
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
            assert panel["datasource"]["uid"] == PROMETHEUS_UID
    assert len({d.uid for d in DASHBOARDS}) == len(DASHBOARDS)


def test_prometheus_data_source_signs_with_the_workspace_role() -> None:
    prometheus, cloudwatch = data_sources_json("https://aps/workspaces/ws/", "eu-west-1")
    assert prometheus["uid"] == PROMETHEUS_UID and prometheus["type"] == "prometheus"
    assert prometheus["url"] == "https://aps/workspaces/ws/"
    assert prometheus["jsonData"] == {
        "httpMethod": "POST",
        "sigV4Auth": True,
        "sigV4AuthType": "ec2_iam_role",
        "sigV4Region": "eu-west-1",
    }
    assert cloudwatch["jsonData"] == {"authType": "ec2_iam_role", "defaultRegion": "eu-west-1"}


# -- the template ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def p5(example_templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return example_templates["p5/Observability"]


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_only_p5_has_a_grafana_workspace(example_templates: dict[str, dict[str, Any]]) -> None:
    for name, template in example_templates.items():
        if name.endswith("/Observability"):
            expected = 1 if name == "p5/Observability" else 0
            assert len(of_type(template, "AWS::Grafana::Workspace")) == expected, name
            assert ("GrafanaUrl" in template.get("Outputs", {})) is (expected == 1), name


def test_workspace_properties(p5: dict[str, Any]) -> None:
    ((logical, workspace),) = of_type(p5, "AWS::Grafana::Workspace").items()
    props = workspace["Properties"]
    assert props["AccountAccessType"] == "CURRENT_ACCOUNT"
    assert props["AuthenticationProviders"] == ["AWS_SSO"]
    assert props["PermissionType"] == "CUSTOMER_MANAGED"
    assert props["GrafanaVersion"] == GRAFANA_VERSION == "10.4"
    assert props["PluginAdminEnabled"] is False
    assert "SamlConfiguration" not in props
    role = props["RoleArn"]["Fn::GetAtt"][0]
    assert p5["Resources"][role]["Type"] == "AWS::IAM::Role"
    keeps = load_environment(ENVIRONMENTS / "p5.yaml").config.retention.keeps_data
    # A rolled-back first create deletes the workspace; otherwise it is kept (issue 25, finding 2).
    assert workspace["DeletionPolicy"] == ("RetainExceptOnCreate" if keeps else "Delete")
    url = p5["Outputs"]["GrafanaUrl"]
    assert url["Value"] == {"Fn::Join": ["", ["https://", {"Fn::GetAtt": [logical, "Endpoint"]}]]}
    assert url["Export"] == {"Name": "p5-GrafanaUrl"}


def test_workspace_role_trust_and_least_privilege(p5: dict[str, Any]) -> None:
    ((_, workspace),) = of_type(p5, "AWS::Grafana::Workspace").items()
    role_id = workspace["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    (statement,) = p5["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "grafana.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source = statement["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Join"][1]
    assert source[-1] == ":/workspaces/*" and ":grafana:" in source
    policies = [
        p for p in of_type(p5, "AWS::IAM::ManagedPolicy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    (policy,) = policies
    assert not of_type(p5, "AWS::IAM::Policy") or all(
        {"Ref": role_id} not in p["Properties"].get("Roles", []) for p in of_type(p5, "AWS::IAM::Policy").values()
    )
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"QueryPrometheus", "ReadCloudWatchMetrics"}
    (amp,) = of_type(p5, "AWS::APS::Workspace")
    assert statements["QueryPrometheus"]["Resource"] == {"Fn::GetAtt": [amp, "Arn"]}
    assert sorted(statements["QueryPrometheus"]["Action"]) == [
        "aps:GetLabels",
        "aps:GetMetricMetadata",
        "aps:GetSeries",
        "aps:QueryMetrics",
    ]
    cloudwatch = statements["ReadCloudWatchMetrics"]
    assert cloudwatch["Resource"] == "*"
    assert sorted(cloudwatch["Action"]) == [
        "cloudwatch:GetMetricData",
        "cloudwatch:GetMetricStatistics",
        "cloudwatch:ListMetrics",
    ]


def test_provisioning_resource_and_function(p5: dict[str, Any]) -> None:
    ((_, provisioning),) = of_type(p5, "Custom::GrafanaProvisioning").items()
    props = provisioning["Properties"]
    ((workspace_id, _),) = of_type(p5, "AWS::Grafana::Workspace").items()
    assert props["WorkspaceId"] == {"Fn::GetAtt": [workspace_id, "Id"]}
    assert props["WorkspaceEndpoint"] == {"Fn::GetAtt": [workspace_id, "Endpoint"]}
    assert props["AdminGroupIds"] == [GROUP] and props["AdminUserIds"] == []
    assert json.loads(props["Dashboards"]) == dashboards_json("p5")
    assert len(props["Dashboards"]) < 64 * 1024  # well inside a custom resource request
    (amp,) = of_type(p5, "AWS::APS::Workspace")
    assert {"Fn::GetAtt": [amp, "PrometheusEndpoint"]} in props["DataSources"]["Fn::Join"][1]
    functions = {
        k: r
        for k, r in of_type(p5, "AWS::Lambda::Function").items()
        if r["Properties"].get("Handler", "").startswith("grafana_")
    }
    (function,) = functions.values()
    assert function["Properties"]["Handler"] == "grafana_provisioner.app.on_event"
    assert function["Properties"]["Timeout"] == 180
    # No environment at all: nothing, the token least of all, is handed to the function that way.
    assert "Environment" not in function["Properties"]
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy,) = [
        p for p in of_type(p5, "AWS::IAM::ManagedPolicy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    grant = statements["ProvisionWorkspace"]
    assert grant["Resource"]["Fn::Join"][1][-2:] == [":/workspaces/", {"Fn::GetAtt": [workspace_id, "Id"]}]
    assert all(a.startswith("grafana:") for a in grant["Action"])
    assert "grafana:CreateWorkspaceServiceAccountToken" in grant["Action"]
    assert "grafana:UpdatePermissions" in grant["Action"]
    # p5 signs in with IAM Identity Center: UpdatePermissions (the admins) needs its reads (finding 2 of issue 25).
    assert set(statements) == {
        "OwnLogs",
        "ProvisionWorkspace",
        "ReadIdentityCenter",
        "DecryptThroughIdentityCenter",
        "DecryptThroughIdentityStore",
    }
    # The reads' dependent kms:Decrypt (Service Authorization Reference), only through Identity Center.
    for sid, service in (("DecryptThroughIdentityCenter", "sso"), ("DecryptThroughIdentityStore", "identitystore")):
        assert statements[sid]["Action"] == "kms:Decrypt"
        assert statements[sid]["Condition"]["StringLike"] == {"kms:ViaService": f"{service}.*.amazonaws.com"}
    assert sorted(statements["ReadIdentityCenter"]["Action"]) == sorted(IDENTITY_CENTER_ACTIONS)
    assert statements["ReadIdentityCenter"]["Resource"] == "*"
    assert {a.split(":")[0] for a in IDENTITY_CENTER_ACTIONS} == {"sso", "sso-directory"}
    # No output and no other resource carries a token.
    assert "glsa_" not in json.dumps(p5)


def test_the_function_ships_its_own_package_only(p5: dict[str, Any], examples_outdir: Path) -> None:
    """The asset holds ``grafana_provisioner`` at its root (the handler string) and not the HyperPod checks."""
    (function,) = [
        r
        for r in of_type(p5, "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == "grafana_provisioner.app.on_event"
    ]
    asset = examples_outdir / f"asset.{function['Properties']['Code']['S3Key'].removesuffix('.zip')}"
    shipped = sorted(str(p.relative_to(asset)) for p in asset.rglob("*") if p.is_file())
    assert shipped == ["__init__.py", "grafana_provisioner/__init__.py", "grafana_provisioner/app.py"]
    assert (HANDLERS_DIR / "grafana_provisioner" / "app.py").is_file()


@pytest.fixture(scope="module")
def saml_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small environment (no cluster) with Grafana signing in through SAML, synthesized with cdk-nag on."""
    folder = tmp_path_factory.mktemp("saml")
    saml = {**SAML, "editor_role_values": ["dev"]}
    write_env(folder / "envs", "samlenv", with_grafana({"enabled": True, "authentication": "SAML", "saml": saml}))
    synth_dir(folder / "envs", folder / "out")
    return folder / "out"


@pytest.fixture(scope="module")
def saml_template(saml_out: Path) -> dict[str, Any]:
    (path,) = (saml_out / "assembly-samlenv").glob("*Observability*.template.json")
    template: dict[str, Any] = json.loads(path.read_text())
    return template


def test_saml_workspace_is_cfn_lint_clean(saml_out: Path) -> None:
    (path,) = (saml_out / "assembly-samlenv").glob("*Observability*.template.json")
    assert cfn_lint([path]) == {str(path): []}


def test_saml_workspace(saml_template: dict[str, Any]) -> None:
    ((_, workspace),) = of_type(saml_template, "AWS::Grafana::Workspace").items()
    props = workspace["Properties"]
    assert props["AuthenticationProviders"] == ["SAML"]
    assert props["SamlConfiguration"] == {
        "IdpMetadata": {"Url": "https://idp.example.com/metadata"},
        "AssertionAttributes": {"Role": "role"},
        "RoleValues": {"Admin": ["ops"], "Editor": ["dev"]},
    }
    ((_, provisioning),) = of_type(saml_template, "Custom::GrafanaProvisioning").items()
    assert provisioning["Properties"]["AdminUserIds"] == [] and provisioning["Properties"]["AdminGroupIds"] == []


def test_saml_provisioner_gets_no_identity_center_reads(saml_template: dict[str, Any]) -> None:
    """Only an AWS_SSO workspace's provisioner resolves Identity Center users and groups."""
    statements = [
        s
        for policy in of_type(saml_template, "AWS::IAM::ManagedPolicy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert "ProvisionWorkspace" in {s.get("Sid") for s in statements}
    assert not [s for s in statements if any(str(a).startswith("sso") for a in s["Action"])]
