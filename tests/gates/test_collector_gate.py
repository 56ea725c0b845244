"""Gate: the metrics collector of every example with a Prometheus workspace, proved on the synthesized assembly.

- The configuration uploaded next to the node scripts parses, scrapes exactly the
  exporter contract's jobs from their file_sd files at the file's interval, and
  remote-writes with SigV4 to the Observability stack's workspace endpoint.
- Only the head node (ParallelCluster) or the controller's role (HyperPod) may
  ``aps:RemoteWrite``, on that workspace only; no other statement names ``aps:``;
  the IAM-calls gate reads the collector's remote write from the uploaded
  configuration and checks it against that node's role (and finds it missing
  when the grant is broken).
- The collector's node group reaches every exporter port on every node group
  through security groups, and no rule admits those ports from an address range;
  breaking either fails the proof with a message naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fnmatch import fnmatch
from typing import Any

import pytest
import yaml

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.iam_calls import check_environment, workspace_arn
from mlcluster.analysis.reachability import exporter_problems
from mlcluster.collector import CONFIG_FILE, TARGETS_CONFIG_FILE, TARGETS_DIR, targets_file
from mlcluster.config import load_environments
from mlcluster.exporters import EXPORTERS
from tests.gates.gate_support import Templates, one, resources
from tests.support import ENVIRONMENTS

ENVS = {env.name: env for env in load_environments(ENVIRONMENTS)}
WITH_PROMETHEUS = sorted(name for name, env in ENVS.items() if env.config.observability.prometheus.enabled)
PORTS = sorted({e.port for e in EXPORTERS})
ENDPOINT = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-test/"


def collector_group(env: str) -> str:
    cluster = ENVS[env].config.cluster
    if cluster.backend == "hyperpod" and cluster.hyperpod is not None:
        return f"instance group {cluster.hyperpod.controller.instance_group_name}"
    return "head node"


def test_the_examples_cover_both_backends() -> None:
    assert {ENVS[name].config.cluster.backend for name in WITH_PROMETHEUS} == {"pcluster", "hyperpod"}
    assert {"p5", "trn1", "hyperpod"} <= set(WITH_PROMETHEUS)


def uploaded(examples: Assembly, env: str, name: str) -> tuple[str, dict[str, Any]]:
    """The text of an uploaded generated file of ``env``'s cluster stack and its deploy-time markers."""
    stack = f"{env}/Cluster"
    for deployment in resources(examples.templates, stack, "Custom::CDKBucketDeployment").values():
        props = deployment["Properties"]
        for index, key in enumerate(props["SourceObjectKeys"]):
            folder = examples.asset_folder(key)
            if folder is not None and (folder / name).is_file():
                return (folder / name).read_text(), props.get("SourceMarkers", [{}] * (index + 1))[index]
    raise AssertionError(f"{stack}: no upload carries {name}")


def filled(text: str, markers: dict[str, Any], env: str) -> str:
    """``text`` with each deploy-time marker replaced by what CloudFormation would put there."""
    for marker, value in markers.items():
        flat = json.dumps(value)
        if "PrometheusEndpoint" in flat and f"{env}-Observability" in flat:
            text = text.replace(marker, ENDPOINT)
        elif value == {"Ref": "AWS::Region"}:
            text = text.replace(marker, "us-west-2")
        else:
            raise AssertionError(f"{env}: unexpected deploy-time value in the collector's files: {flat}")
    return text


@pytest.mark.parametrize("env", WITH_PROMETHEUS)
def test_the_uploaded_configuration_scrapes_the_contract_and_writes_to_the_workspace(
    examples: Assembly, env: str
) -> None:
    text, markers = uploaded(examples, env, CONFIG_FILE)
    config = yaml.safe_load(filled(text, markers, env))
    interval = ENVS[env].config.observability.prometheus.scrape_interval_seconds
    assert config["global"]["scrape_interval"] == f"{interval}s"
    assert set(config) == {"global", "scrape_configs", "remote_write"}  # agent mode: no rules, no alerting
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert list(jobs) == [e.job for e in EXPORTERS]
    for exporter in EXPORTERS:
        job = jobs[exporter.job]
        files = [f for sd in job.get("file_sd_configs", []) for f in sd["files"]]
        assert files == ([] if exporter.nodes == "controller" else [targets_file(exporter.job)])
        local = [t for s in job.get("static_configs", []) for t in s["targets"]]
        assert local == ([f"127.0.0.1:{exporter.port}"] if exporter.nodes in ("all", "controller") else [])
    (remote,) = config["remote_write"]
    assert remote["url"] == f"{ENDPOINT}api/v1/remote_write"
    assert remote["sigv4"] == {"region": "us-west-2"}
    targets_text, targets_markers = uploaded(examples, env, TARGETS_CONFIG_FILE)
    assert not targets_markers
    targets = json.loads(targets_text)
    assert targets["output_dir"] == TARGETS_DIR
    assert [(j["job"], j["port"], j["nodes"]) for j in targets["jobs"]] == [
        (e.job, e.port, e.nodes) for e in EXPORTERS if e.nodes != "controller"
    ]


def test_each_example_tells_its_accelerators_apart(examples: Assembly) -> None:
    kinds = {env: json.loads(uploaded(examples, env, TARGETS_CONFIG_FILE)[0])["partitions"] for env in WITH_PROMETHEUS}
    assert kinds["p5"] and all(v == ["gpu"] for v in kinds["p5"].values())
    assert kinds["trn1"] and all(v == ["neuron"] for v in kinds["trn1"].values())
    assert kinds["hyperpod"] == {"p5": ["gpu"]}


def aps_statements(templates: Templates, env: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(stack, logical id, statement) of every IAM statement in ``env`` whose actions cover ``aps:RemoteWrite``.

    (Grafana's role, when the environment has one, only queries the workspace: ``aps:QueryMetrics`` and friends.)
    """
    out = []
    for stack, template in templates.items():
        if not stack.startswith(f"{env}/"):
            continue
        for logical, resource in template.get("Resources", {}).items():
            props = resource.get("Properties", {})
            documents = [props.get("PolicyDocument")] + [p.get("PolicyDocument") for p in props.get("Policies", [])]
            for document in filter(None, documents):
                for statement in document.get("Statement", []):
                    actions = statement.get("Action", [])
                    actions = [actions] if isinstance(actions, str) else actions
                    writes = [
                        a for a in actions if a.lower().startswith("aps:") and fnmatch("aps:remotewrite", a.lower())
                    ]
                    if writes or "aps:" in json.dumps(statement.get("NotAction")):
                        out.append((stack, logical, statement))
    return out


@pytest.mark.parametrize("env", WITH_PROMETHEUS)
def test_only_the_collectors_node_may_remote_write_and_only_to_the_workspace(examples: Assembly, env: str) -> None:
    templates = examples.templates
    ((stack, logical, statement),) = aps_statements(templates, env)
    assert stack == f"{env}/Cluster"
    assert statement["Effect"] == "Allow" and statement["Action"] == "aps:RemoteWrite"
    assert "Condition" not in statement
    resource = statement["Resource"]
    assert resource["Fn::GetStackOutput"]["StackName"] == f"{env}-Observability"
    workspace = one(templates, f"{env}/Observability", "AWS::APS::Workspace")
    assert workspace  # the output is the workspace's ARN:
    assert "Arn" in resource["Fn::GetStackOutput"]["OutputName"]
    policy = templates[stack]["Resources"][logical]
    if ENVS[env].config.cluster.backend == "pcluster":
        assert policy["Properties"]["Path"] == "/parallelcluster/"
        config = one(templates, stack, "Custom::PclusterCluster")["Properties"]["ClusterConfiguration"]
        head = [p["Policy"] for p in config["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
        assert {"Ref": logical} in head
        others = [*config["Scheduling"]["SlurmQueues"], *config.get("LoginNodes", {}).get("Pools", [])]
        for group in others:
            assert {"Ref": logical} not in [p["Policy"] for p in group.get("Iam", {}).get("AdditionalIamPolicies", [])]
        steps = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
        assert "collector" in steps
        for queue in config["Scheduling"]["SlurmQueues"]:
            for action in queue.get("CustomActions", {}).get("OnNodeConfigured", {}).get("Sequence", []):
                assert "collector" not in action.get("Args", [])
    else:
        (role,) = policy["Properties"]["Roles"]
        controller = ENVS[env].config.cluster.hyperpod
        assert controller is not None
        cluster = one(templates, stack, "AWS::SageMaker::Cluster")["Properties"]
        roles = {g["InstanceGroupName"]: g["ExecutionRole"] for g in cluster["InstanceGroups"]}
        assert roles[controller.controller.instance_group_name] == {"Fn::GetAtt": [role["Ref"], "Arn"]}


def test_environments_without_prometheus_get_no_collector(examples: Assembly) -> None:
    without = sorted(set(ENVS) - set(WITH_PROMETHEUS))
    assert without
    for env in without:
        assert aps_statements(examples.templates, env) == []
        assert CONFIG_FILE not in json.dumps(examples.templates.get(f"{env}/Cluster", {}))


@pytest.mark.parametrize("env", WITH_PROMETHEUS)
def test_the_collector_reaches_every_exporter_and_nothing_wider_does(examples: Assembly, env: str) -> None:
    assert exporter_problems(examples, env, collector_group(env), PORTS) == []


def node_security_group_rule(rule: dict[str, Any]) -> Callable[[Templates], None]:
    def change(t: Templates) -> None:
        group = one(t, "p5/Network", "AWS::EC2::SecurityGroup", lambda k, r: k.startswith("NetworkSecurityGroup"))
        group["Properties"]["SecurityGroupIngress"] = [rule]

    return change


def drop_self_ingress(t: Templates) -> None:
    ingress = resources(t, "p5/Network", "AWS::EC2::SecurityGroupIngress")
    for logical in [k for k in ingress if "SelfIngress" in k]:
        del t["p5/Network"]["Resources"][logical]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            node_security_group_rule({"IpProtocol": "tcp", "FromPort": 9100, "ToPort": 9100, "CidrIp": "10.0.0.0/16"}),
            "admits port 9100 from 10.0.0.0/16, wider than the cluster's own security groups",
        ),
        (
            node_security_group_rule({"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"}),
            "admits port 9400 from 0.0.0.0/0",
        ),
        (drop_self_ingress, "port 9410: no security group of it admits the collector's groups"),
    ],
)
def test_a_wider_or_missing_rule_fails_the_proof(
    broken: Callable[[Callable[[Templates], object]], Assembly], change: Callable[[Templates], None], expected: str
) -> None:
    problems = exporter_problems(broken(change), "p5", "head node", PORTS)
    assert any(expected in p for p in problems), problems


def test_an_unknown_collector_group_is_named(examples: Assembly) -> None:
    (problem,) = exporter_problems(examples, "p5", "login pool nope", PORTS)
    assert "no node group named 'login pool nope'" in problem


@pytest.mark.parametrize("env", WITH_PROMETHEUS)
def test_the_iam_calls_gate_checks_the_collectors_remote_write_on_its_node_only(examples: Assembly, env: str) -> None:
    report = check_environment(examples, env)
    writers = {group for group, calls in report.calls.items() if any("aps:RemoteWrite" in c.actions for c in calls)}
    assert writers == {f"{env}: {collector_group(env)}"}
    assert report.findings == []


def remote_write_elsewhere(t: Templates) -> None:
    policy = one(t, "p5/Cluster", "AWS::IAM::ManagedPolicy", lambda k, r: "aps:" in json.dumps(r))
    policy["Properties"]["PolicyDocument"]["Statement"][0]["Resource"] = (
        "arn:aws:aps:us-west-2:111122223333:workspace/x"
    )


def controller_policy_detached(t: Templates) -> None:
    policy = one(t, "hyperpod/Cluster", "AWS::IAM::ManagedPolicy", lambda k, r: "aps:" in json.dumps(r))
    policy["Properties"]["Roles"] = []


@pytest.mark.parametrize(
    ("env", "change"),
    [("p5", remote_write_elsewhere), ("hyperpod", controller_policy_detached)],
    ids=["p5", "hyperpod"],
)
def test_a_missing_remote_write_grant_is_found(
    broken: Callable[[Callable[[Templates], object]], Assembly], env: str, change: Callable[[Templates], None]
) -> None:
    (finding,) = check_environment(broken(change), env).findings
    text = str(finding)
    assert f"{env}: {collector_group(env)}: collector.yml:0" in text
    assert f"needs aps:RemoteWrite on ${{{env}/Observability|" in text


@pytest.mark.parametrize(
    ("url", "arn"),
    [
        (
            "${p5/Observability|Prometheus2BCCDD01.PrometheusEndpoint}api/v1/remote_write",
            "${p5/Observability|Prometheus2BCCDD01.Arn}",
        ),
        (
            "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-0a1b2c3d/api/v1/remote_write",
            "arn:${AWS::Partition}:aps:eu-west-1:${AWS::AccountId}:workspace/ws-0a1b2c3d",
        ),
        ("https://example.com/push", "https://example.com/push"),  # not a workspace: no grant can cover it
    ],
)
def test_workspace_arn_of_a_remote_write_url(url: str, arn: str) -> None:
    assert workspace_arn(url) == arn
