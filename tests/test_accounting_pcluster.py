"""A ParallelCluster environment with the managed Slurm accounting database, synthesized whole (issue 30e).

The stage runs NIST 800-53 R5 and AwsSolutions: synth fails on any unacknowledged finding. The
templates then show slurmdbd's own user made through the Data API (its secret a bare password,
never a property), ``SlurmSettings.Database`` pointing at it, the head node alone carrying the
database's client group and the key grant, the provider reading only that secret, and the
reachability and IAM gates proving it, and refusing each way to widen or break it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import cx_api
from aws_cdk.assertions import Template

from mlcluster.analysis.assembly import Assembly, load_assembly
from mlcluster.analysis.iam_calls import check_environment as iam_check
from mlcluster.analysis.reachability import check_assembly
from mlcluster.app import build_app
from mlcluster.config import ConfigError, load_environment
from mlcluster.constructs.accounting_database import MASTER_USER_NAME, AccountingDatabase
from mlcluster.constructs.accounting_database_user import AccountingDatabaseUser
from mlcluster.handlers.accounting_user import app as accounting_app
from tests.support import stack_templates, write_env

ENVIRONMENT: dict[str, Any] = {
    "region": "us-west-2",
    "compliance": {"packs": ["nist-800-53-r5"]},
    "retention": {"on_delete": "retain"},
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "storage": {"accounting": {"database_name": "train_history"}},
    "cluster": {
        "backend": "pcluster",
        "name": "acct-train",
        "pcluster": {
            "queues": [
                {"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "efa": False}]}
            ],
            "login_nodes": {"instance_type": "m5.xlarge"},
        },
    },
}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("accounting-pcluster")
    write_env(tmp / "envs", "acct", ENVIRONMENT)
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


@pytest.fixture(scope="module")
def templates(outdir: Path) -> dict[str, dict[str, Any]]:
    return stack_templates(cx_api.CloudAssembly(str(outdir)))


@pytest.fixture(scope="module")
def assembly(outdir: Path) -> Assembly:
    return load_assembly(outdir)


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def user_secret(storage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, v)
        for k, v in of_type(storage, "AWS::SecretsManager::Secret").items()
        if "bare, for ParallelCluster" in v["Properties"].get("Description", "")
    ]
    return found


def pcluster_config(templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (cluster,) = of_type(templates["acct/Cluster"], "Custom::PclusterCluster").values()
    return cluster["Properties"]["ClusterConfiguration"]  # type: ignore[no-any-return]


def output_of(value: Any) -> str:
    """The Storage/Network output a cross-stack value reads."""
    return str(value["Fn::GetStackOutput"]["OutputName"])


def test_the_data_api_is_on_and_the_secret_holds_a_generated_bare_password(templates: dict[str, Any]) -> None:
    storage = templates["acct/Storage"]
    (database,) = of_type(storage, "AWS::RDS::DBCluster").values()
    assert database["Properties"]["EnableHttpEndpoint"] is True
    name, secret = user_secret(storage)
    generate = secret["Properties"]["GenerateSecretString"]
    assert generate == {
        "ExcludePunctuation": True,
        "IncludeSpace": False,
        "PasswordLength": 32,
        "RequireEachIncludedType": True,
    }
    assert "SecretStringTemplate" not in generate  # a bare password, not JSON
    assert secret["Properties"]["KmsKeyId"]
    assert (secret["DeletionPolicy"], secret["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
    # Not rotated: the only rotation schedule is the master secret's.
    (rotation,) = of_type(storage, "AWS::SecretsManager::RotationSchedule").values()
    assert name not in json.dumps(rotation)


def test_the_custom_resource_names_the_secret_never_the_password(templates: dict[str, Any]) -> None:
    storage = templates["acct/Storage"]
    (user,) = of_type(storage, "Custom::AccountingDatabaseUser").values()
    props = user["Properties"]
    name, _ = user_secret(storage)
    assert props["UserSecretArn"] == {"Ref": name}
    assert (props["UserName"], props["DatabaseName"]) == ("slurmdbd", "train_history")
    assert set(props) == {"ServiceToken", "ClusterArn", "MasterSecretArn", "UserSecretArn", "UserName", "DatabaseName"}
    (writer,) = of_type(storage, "AWS::RDS::DBInstance")
    assert user["DependsOn"] == [writer]


def test_the_function_runs_sql_on_this_cluster_with_these_secrets_only(templates: dict[str, Any]) -> None:
    storage = templates["acct/Storage"]
    (function,) = [
        f
        for f in of_type(storage, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "accounting_user.app.on_event"
    ]
    assert "VpcConfig" not in function["Properties"]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy,) = [
        p
        for p in of_type(storage, "AWS::IAM::ManagedPolicy").values()
        if p["Properties"].get("Roles") == [{"Ref": role}]
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"OwnLogs", "DataApi", "Secrets", "DecryptSecrets"}
    (database,) = of_type(storage, "AWS::RDS::DBCluster")
    assert statements["DataApi"]["Action"] == "rds-data:ExecuteStatement"
    assert database in json.dumps(statements["DataApi"]["Resource"])
    assert statements["Secrets"]["Action"] == "secretsmanager:GetSecretValue"
    (attachment,) = of_type(storage, "AWS::SecretsManager::SecretTargetAttachment")
    name, _ = user_secret(storage)
    assert statements["Secrets"]["Resource"] == [{"Ref": attachment}, {"Ref": name}]
    decrypt = statements["DecryptSecrets"]
    assert decrypt["Action"] == "kms:Decrypt" and "Fn::GetStackOutput" in decrypt["Resource"]
    assert list(decrypt["Condition"]["StringEquals"]) == ["kms:ViaService"]


def test_the_function_acts_only_on_the_targets_its_environment_declares(templates: dict[str, Any]) -> None:
    """The handler refuses an event whose properties differ from these (a direct invoke can only re-run them)."""
    storage = templates["acct/Storage"]
    (function,) = [
        f
        for f in of_type(storage, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "accounting_user.app.on_event"
    ]
    (user,) = of_type(storage, "Custom::AccountingDatabaseUser").values()
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables == {variable: user["Properties"][key] for key, variable in accounting_app.DECLARED.items()}
    assert variables["USER_NAME"] == "slurmdbd" and "DATABASE_NAME" not in variables
    # The database name is the event's (a rollback carries the old one), checked by the handler.
    assert user["Properties"]["DatabaseName"] == "train_history"


def bare_user(**options: Any) -> tuple[cdk.Stack, AccountingDatabaseUser]:
    """An AccountingDatabaseUser in a stack of its own (no compliance packs), with ``options``."""
    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0)
    key = kms.Key(stack, "Key")
    database = AccountingDatabase(stack, "Db", vpc=vpc, subnets=vpc.isolated_subnets, encryption_key=key)
    user = AccountingDatabaseUser(
        stack, "User", cluster=database.cluster, master_secret=database.secret, encryption_key=key, **options
    )
    return stack, user


@pytest.mark.parametrize("user_name", [MASTER_USER_NAME, "root", "rdsadmin"])
def test_the_construct_refuses_the_master_user_and_reserved_accounts(user_name: str) -> None:
    with pytest.raises(ValueError, match=f"user_name: '{re.escape(user_name)}' is the database's master user"):
        bare_user(user_name=user_name)


def test_a_bumped_password_serial_updates_the_user_and_nothing_else() -> None:
    """A new property value is what makes CloudFormation send the Update that ALTERs the user."""
    stack, _ = bare_user(password_serial=1)
    (user,) = Template.from_stack(stack).find_resources("Custom::AccountingDatabaseUser").values()
    assert user["Properties"]["PasswordSerial"] == "1"
    stack, _ = bare_user()
    (user,) = Template.from_stack(stack).find_resources("Custom::AccountingDatabaseUser").values()
    assert "PasswordSerial" not in user["Properties"]  # the default leaves deployed templates as they were
    with pytest.raises(ValueError, match="password_serial: -1; allowed: 0 or more"):
        bare_user(password_serial=-1)


def test_slurm_settings_point_at_the_database_as_slurmdbd(templates: dict[str, Any]) -> None:
    storage = templates["acct/Storage"]
    database = pcluster_config(templates)["Scheduling"]["SlurmSettings"]["Database"]
    host, port = database["Uri"]["Fn::Join"][1]
    assert port == ":3306" and "Endpoint" in output_of(host)
    assert (database["UserName"], database["DatabaseName"]) == ("slurmdbd", "train_history")
    name, _ = user_secret(storage)
    assert name in output_of(database["PasswordSecretArn"])


def test_only_the_head_node_carries_the_client_group_and_the_key_grant(templates: dict[str, Any]) -> None:
    config = pcluster_config(templates)
    head = config["HeadNode"]
    client = [g for g in head["Networking"]["AdditionalSecurityGroups"] if "ClientSecurityGroup" in json.dumps(g)]
    assert len(client) == 1
    others = [*config["Scheduling"]["SlurmQueues"], *config["LoginNodes"]["Pools"]]
    for group in others:
        assert "ClientSecurityGroup" not in json.dumps(group), group["Name"]
        assert "AccountingSecretKey" not in json.dumps(group), group["Name"]
    assert {"Policy": {"Ref": "AccountingSecretKey97DA5B27"}} in head["Iam"]["AdditionalIamPolicies"]
    (policy,) = [
        p
        for k, p in of_type(templates["acct/Cluster"], "AWS::IAM::ManagedPolicy").items()
        if k.startswith("AccountingSecretKey")
    ]
    assert policy["Properties"]["Path"] == "/parallelcluster/"
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "kms:Decrypt"
    condition = statement["Condition"]["StringEquals"]
    assert set(condition) == {"kms:ViaService", "kms:EncryptionContext:SecretARN"}
    name, _ = user_secret(templates["acct/Storage"])
    assert name in output_of(condition["kms:EncryptionContext:SecretARN"])


def test_the_provider_describes_that_secret_only_and_may_attach_the_key_policy(templates: dict[str, Any]) -> None:
    cluster = templates["acct/Cluster"]
    text = json.dumps(cluster)
    (role,) = [r for k, r in of_type(cluster, "AWS::IAM::Role").items() if k.startswith("ProviderRole")]
    (provider,) = role["Properties"]["Policies"]
    statements = {s.get("Sid"): s for s in provider["PolicyDocument"]["Statement"]}
    secret = statements["AccountingSecret"]
    assert secret["Action"] == "secretsmanager:DescribeSecret"
    name, _ = user_secret(templates["acct/Storage"])
    (resource,) = secret["Resource"] if isinstance(secret["Resource"], list) else [secret["Resource"]]
    assert name in output_of(resource)
    assert "AccountingDatabaseSecretArn" not in text  # the master secret is not the cluster's to read
    assert "AccountingSecretKey97DA5B27" in json.dumps(provider)


def test_the_gates_prove_the_paths_and_grants(assembly: Assembly) -> None:
    (report,) = check_assembly(assembly)
    assert report.problems == []
    iam = iam_check(assembly, "acct")
    assert iam.findings == []
    head = [c for c in iam.calls["acct: head node"] if c.script.startswith("SlurmSettings.Database")]
    assert [c.actions for c in head] == [("secretsmanager:GetSecretValue",), ("kms:Decrypt",)]


def edited(assembly: Assembly, change: Callable[[dict[str, Any]], None]) -> Assembly:
    templates = copy.deepcopy(assembly.templates)
    (cluster,) = of_type(templates["acct/Cluster"], "Custom::PclusterCluster").values()
    change(cluster["Properties"]["ClusterConfiguration"])
    return Assembly(templates, assets=assembly.assets, stack_names=assembly.stack_names)


def _client_on_the_queue(config: dict[str, Any]) -> None:
    client = config["HeadNode"]["Networking"]["AdditionalSecurityGroups"][-1]
    config["Scheduling"]["SlurmQueues"][0]["Networking"]["AdditionalSecurityGroups"].append(client)


def _client_on_the_login_pool(config: dict[str, Any]) -> None:
    client = config["HeadNode"]["Networking"]["AdditionalSecurityGroups"][-1]
    config["LoginNodes"]["Pools"][0]["Networking"]["AdditionalSecurityGroups"].append(client)


def _no_client_on_the_head_node(config: dict[str, Any]) -> None:
    config["HeadNode"]["Networking"]["AdditionalSecurityGroups"].pop()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_client_on_the_queue, "admit TCP 3306 from queue gpu, which does not run slurmdbd"),
        (_client_on_the_login_pool, "admit TCP 3306 from login pool"),
        (_no_client_on_the_head_node, "its security groups admit no TCP 3306 from head node's groups"),
    ],
)
def test_the_reachability_gate_refuses_another_client_or_none(
    assembly: Assembly, change: Callable[[dict[str, Any]], None], problem: str
) -> None:
    (report,) = check_assembly(edited(assembly, change))
    assert any(problem in p for p in report.problems), report.problems


def _no_key_policy(config: dict[str, Any]) -> None:
    policies = config["HeadNode"]["Iam"]["AdditionalIamPolicies"]
    policies[:] = [p for p in policies if "AccountingSecretKey" not in json.dumps(p)]


def test_the_iam_gate_refuses_a_head_node_that_cannot_decrypt_the_secret(assembly: Assembly) -> None:
    findings = iam_check(edited(assembly, _no_key_policy), "acct").findings
    assert [(f.group, f.action) for f in findings] == [("acct: head node", "kms:Decrypt")]


def with_version(version: str) -> dict[str, Any]:
    data = copy.deepcopy(ENVIRONMENT)
    data["cluster"]["pcluster"]["version"] = version
    return data


@pytest.mark.parametrize("version", ["3.7.2", "3.7.0", "3.6.1"])
def test_parallelcluster_before_3_8_is_refused_with_the_managed_database(tmp_path: Path, version: str) -> None:
    """SlurmSettings.Database.DatabaseName, which the managed path always sets, exists from 3.8.0 only."""
    path = write_env(tmp_path, "acct", with_version(version))
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    (line,) = [x for x in str(caught.value).splitlines() if x.startswith(f"{path}: cluster.pcluster.version: ")]
    assert version in line
    assert "SlurmSettings.Database.DatabaseName" in line and "allowed: 3.8.0 or later" in line


def test_parallelcluster_3_8_0_is_accepted_with_the_managed_database(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "acct", with_version("3.8.0")))
    assert env.config.cluster.pcluster is not None and env.config.cluster.pcluster.version == "3.8.0"
    assert env.config.storage.accounting is not None


def test_the_user_functions_log_groups_outlive_a_rolled_back_first_create(templates: dict[str, Any]) -> None:
    """AWS review: with RetainExceptOnCreate a failed first create of the Storage stack (at this custom resource, say)
    deleted the two log groups that say why; the environment's diagnostic logs' policy keeps them (Retain)."""
    storage = templates["acct/Storage"]
    groups = {
        name: group
        for name, group in of_type(storage, "AWS::Logs::LogGroup").items()
        if name.startswith("AccountingDatabaseSlurmdbdUser")
    }
    assert len(groups) == 2, sorted(groups)
    assert {g["DeletionPolicy"] for g in groups.values()} == {"Retain"}
    assert {g["UpdateReplacePolicy"] for g in groups.values()} == {"Retain"}
