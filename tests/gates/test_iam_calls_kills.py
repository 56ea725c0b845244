"""The node-role gate (mlcluster/analysis/iam_calls.py) on small hand-built ParallelCluster assemblies.

Behaviour `make mutation` showed no test asserted: how ``aws s3 ls``/``rm`` are authorized (ListBucket
on the bucket ARN, DeleteObject on the object's), the instance role a node group names, and the KMS
key of the Slurm database's secret. Each assembly is one stack and one uploaded script folder, so a
finding's message can be compared whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.iam_calls import (
    Statement,
    _pcluster_statements,
    action_allowed,
    allowed,
    check_hyperpod,
    check_pcluster,
    collector_calls,
)

ENV = "env"
STACK = f"{ENV}/Cluster"
#: The node script the head node's custom action runs, uploaded to s3://scripts/pc/ from asset.abc.
SCRIPT = """\
#!/bin/bash
aws s3 ls s3://data-bucket/in/
aws s3 rm s3://data-bucket/in/old
"""
#: What the script needs: ListBucket is authorized on the bucket, DeleteObject on the object (S3's
#: Service Authorization Reference), and the custom action's own download of the script.
LIST = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::data-bucket"}
DELETE = {"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::data-bucket/in/*"}
FETCH = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::scripts/pc/*"}
#: Another upload to the same bucket under another prefix (asset.def): not this node's scripts, so its call is
#: never this node's.
NEIGHBOUR = "#!/bin/bash\naws ec2 terminate-instances --instance-ids i-0123\n"


def _upload(prefix: str, asset: str) -> dict[str, Any]:
    return {
        "Type": "Custom::CDKBucketDeployment",
        "Properties": {
            "DestinationBucketName": "scripts",
            "DestinationBucketKeyPrefix": prefix,
            "SourceObjectKeys": [f"{asset}.zip"],
        },
    }


def _assembly(
    tmp_path: Path,
    iam: dict[str, Any],
    resources: dict[str, Any],
    database: dict[str, Any] | None = None,
    script: str = SCRIPT,
) -> Assembly:
    """One cluster whose head node holds ``iam`` and runs ``script`` as its custom action (none with a
    ``database``); the scripts bucket also holds NEIGHBOUR under ``hyperpod/``."""
    for asset, text in (("abc", script), ("def", NEIGHBOUR)):
        (tmp_path / f"asset.{asset}").mkdir()
        (tmp_path / f"asset.{asset}" / "run.sh").write_text(text)
    config: dict[str, Any] = {"HeadNode": {"Iam": iam}}
    if database is None:
        config["HeadNode"]["CustomActions"] = {"OnNodeConfigured": {"Script": "s3://scripts/pc/run.sh"}}
    else:
        config["Scheduling"] = {"SlurmSettings": {"Database": database}}
    template = {
        "Resources": {
            "Cluster": {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": config}},
            "Upload": _upload("pc/", "abc"),
            "Neighbour": _upload("hyperpod/", "def"),
            **resources,
        }
    }
    return Assembly({STACK: template}, assets=tmp_path)


def _managed_policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": {"Statement": list(statements)}}}


def _findings(assembly: Assembly) -> list[str]:
    return [str(f) for f in check_pcluster(assembly, ENV).findings]


def test_s3_ls_and_rm_are_authorized_on_the_bucket_and_on_the_object(tmp_path: Path) -> None:
    """``aws s3 ls s3://b/p/`` needs s3:ListBucket on the bucket ARN and ``rm`` s3:DeleteObject on the object:
    a role granting exactly that has no finding (an ls judged on the object ARN, or on "*", or an rm judged
    as an action IAM does not know would each be a false finding)."""
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(LIST, DELETE, FETCH)})
    assert _findings(assembly) == []


def test_a_call_after_a_quoted_message_is_read_on_its_own_arguments(tmp_path: Path) -> None:
    """A log message in quotes before the call on the same line does not shift what is read as its arguments."""
    script = '#!/bin/bash\nlog "fetching the input" && aws s3 rm s3://data-bucket/in/old\n'
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(FETCH)}, script=script)
    assert _findings(assembly) == [
        "env: head node: run.sh:2 `aws s3 rm` needs s3:DeleteObject on "
        "arn:${AWS::Partition}:s3:::data-bucket/in/old, which its role does not allow"
    ]


def test_a_command_substitution_inside_an_argument_stays_part_of_it(tmp_path: Path) -> None:
    """``"s3://b/in/$(hostname).tar"``: the argument is read whole (not cut at the substitution's ``)``), so the
    download is judged on its object under ``in/`` and the grant on ``in/*`` allows it."""
    script = '#!/bin/bash\naws s3 cp "s3://data-bucket/in/$(hostname).tar" /tmp/in.tar\n'
    read = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data-bucket/in/*"}
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(read, FETCH)}, script=script)
    assert _findings(assembly) == []
    (tmp_path / "without").mkdir()
    assembly = _assembly(tmp_path / "without", iam, {"Policy": _managed_policy(FETCH)}, script=script)
    assert _findings(assembly) == [
        "env: head node: run.sh:2 `aws s3 cp` needs s3:GetObject on "
        "arn:${AWS::Partition}:s3:::data-bucket/in/$(hostname).tar, which its role does not allow"
    ]


def test_an_api_name_that_is_no_iam_action_is_reported_with_its_script_line(tmp_path: Path) -> None:
    """A call the gate cannot map to an IAM action (``aws s3api``: botocore names that service ``s3``) is reported
    with its script, line and name instead of passing, whatever the role holds."""
    script = "#!/bin/bash\naws s3api head-object --bucket data-bucket --key in/old\n"
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    everything = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(everything)}, script=script)
    assert _findings(assembly) == [
        "env: head node: run.sh:2 `aws s3api head-object` needs s3api:head-object on (no such IAM action: map it in "
        "API_ACTIONS), which its role does not allow"
    ]


def test_an_rm_the_role_does_not_allow_is_found_on_its_object(tmp_path: Path) -> None:
    """Without the DeleteObject grant the ``rm`` is the one finding, naming script, line, action and object ARN."""
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(LIST, FETCH)})
    assert _findings(assembly) == [
        "env: head node: run.sh:3 `aws s3 rm` needs s3:DeleteObject on "
        "arn:${AWS::Partition}:s3:::data-bucket/in/old, which its role does not allow"
    ]


def test_the_instance_role_a_node_names_is_the_one_checked(tmp_path: Path) -> None:
    """``Iam.InstanceRole`` (a role of the assembly) replaces ParallelCluster's role: its inline policies are what
    the node holds, so its grants allow the calls and a grant it lacks is found."""
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {"Policies": [{"PolicyName": "scripts", "PolicyDocument": {"Statement": [LIST, FETCH]}}]},
    }
    iam = {"InstanceRole": {"Fn::GetAtt": ["Role", "Arn"]}}
    assembly = _assembly(tmp_path, iam, {"Role": role})
    assert _findings(assembly) == [
        "env: head node: run.sh:3 `aws s3 rm` needs s3:DeleteObject on "
        "arn:${AWS::Partition}:s3:::data-bucket/in/old, which its role does not allow"
    ]


KEY_AND_SECRET = {
    "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
    "Secret": {"Type": "AWS::SecretsManager::Secret", "Properties": {"KmsKeyId": {"Fn::GetAtt": ["Key", "Arn"]}}},
}
DATABASE = {"PasswordSecretArn": {"Ref": "Secret"}}
NO_DECRYPT = (
    "env: head node: SlurmSettings.Database (ParallelCluster cookbook):0 `aws kms decrypt (through Secrets "
    "Manager)` needs kms:Decrypt on ${env/Cluster|Key.Arn}, which its role does not allow"
)


def test_the_slurm_database_secrets_key_must_be_granted_to_the_head_node(tmp_path: Path) -> None:
    """ParallelCluster grants the head node GetSecretValue on ``PasswordSecretArn``, nothing on the secret's
    customer managed key: reading the password needs kms:Decrypt on that key, found when no policy gives it."""
    assembly = _assembly(tmp_path, {}, KEY_AND_SECRET, DATABASE)
    assert _findings(assembly) == [NO_DECRYPT]


@pytest.mark.parametrize("granted", [True, False])
def test_a_kms_grant_on_the_secrets_key_satisfies_the_head_node(tmp_path: Path, granted: bool) -> None:
    """The edge: kms:Decrypt on that key in an additional policy satisfies it; on another key it does not."""
    decrypt = {"Effect": "Allow", "Action": "kms:Decrypt", "Resource": {"Fn::GetAtt": ["Key", "Arn"]}}
    other = {"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:us-east-1:1:key/other"}
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    resources = {**KEY_AND_SECRET, "Policy": _managed_policy(decrypt if granted else other)}
    assert _findings(_assembly(tmp_path, iam, resources, DATABASE)) == ([] if granted else [NO_DECRYPT])


@pytest.mark.parametrize(
    ("write", "put", "get"),
    [({"EnableWriteAccess": True}, True, True), ({"EnableWriteAccess": False}, False, True), ({}, False, True)],
)
def test_s3_access_grants_writes_only_with_enable_write_access(write: dict[str, bool], put: bool, get: bool) -> None:
    """ParallelCluster turns ``Iam.S3Access`` into ``s3:Get*``/``s3:List*``, and ``s3:*`` only with write access:
    a node script's upload to a read-only bucket is a finding, not a grant (survivor _pcluster_statements_44)."""
    iam = {"S3Access": [{"BucketName": "data-bucket", **write}]}
    statements = _pcluster_statements(Assembly({}), "env", "head", iam)
    key = "arn:aws:s3:::data-bucket/in/x"
    assert allowed(statements, "s3:PutObject", key) is put
    assert allowed(statements, "s3:GetObject", key) is get
    assert allowed(statements, "s3:ListBucket", "arn:aws:s3:::data-bucket") is get
    assert allowed(statements, "s3:GetObject", "arn:aws:s3:::other-bucket/in/x") is False


URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123/api/v1/remote_write"


@pytest.mark.parametrize(
    ("prefix", "uri", "found"),
    [
        ({}, "s3://scripts-bucket/lifecycle/", True),  # a deployment to the bucket's root holds every key
        ({"DestinationBucketKeyPrefix": "lifecycle/"}, "s3://scripts-bucket/lifecycle/", True),
        ({"DestinationBucketKeyPrefix": "other/"}, "s3://scripts-bucket/lifecycle/", False),
    ],
)
def test_the_collectors_remote_write_is_read_from_the_deployment_that_uploads_under_the_uri(
    tmp_path: Path, prefix: dict[str, str], uri: str, found: bool
) -> None:
    """``collector_calls`` mutant 23 (seed 4): a bucket deployment without a key prefix uploads to the root."""
    (tmp_path / "asset.abc").mkdir()
    (tmp_path / "asset.abc" / "collector.yml").write_text(f"remote_write:\n  - url: {URL}\n    sigv4: {{}}\n")
    deployment = {
        "Type": "Custom::CDKBucketDeployment",
        "Properties": {"DestinationBucketName": "scripts-bucket", "SourceObjectKeys": ["abc.zip"], **prefix},
    }
    assembly = Assembly({"env/Cluster": {"Resources": {"Upload": deployment}}}, assets=tmp_path)
    calls = collector_calls(assembly, "env", uri)
    assert [(c.actions, c.resources) for c in calls] == (
        [(("aps:RemoteWrite",), ("arn:${AWS::Partition}:aps:us-east-1:${AWS::AccountId}:workspace/ws-0123",))]
        if found
        else []
    )


def _hyperpod(
    tmp_path: Path, files: dict[str, str], policy: list[dict[str, object]], *, lifecycle_grants: bool = True
) -> Assembly:
    """One HyperPod group whose lifecycle folder (uploaded to s3://lifecycle-bucket/hyperpod/) holds ``files``."""
    (tmp_path / "asset.scripts").mkdir()
    for name, text in files.items():
        (tmp_path / "asset.scripts" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "asset.scripts" / name).write_text(text)
    lifecycle = [
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::lifecycle-bucket"},
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::lifecycle-bucket/hyperpod/*"},
    ]
    document = {"Version": "2012-10-17", "Statement": [*(lifecycle if lifecycle_grants else []), *policy]}
    role = {"Policies": [{"PolicyName": "node", "PolicyDocument": document}]}
    group = {
        "InstanceGroupName": "worker-group-1",
        "LifeCycleConfig": {"SourceS3Uri": "s3://lifecycle-bucket/hyperpod/", "OnCreate": "on_create.sh"},
        "ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]},
    }
    upload = {
        "DestinationBucketName": "lifecycle-bucket",
        "DestinationBucketKeyPrefix": "hyperpod/",
        "SourceObjectKeys": ["scripts.zip"],
    }
    resources = {
        "Role": {"Type": "AWS::IAM::Role", "Properties": role},
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}},
        "Upload": {"Type": "Custom::CDKBucketDeployment", "Properties": upload},
    }
    return Assembly({"env/Cluster": {"Resources": resources}}, assets=tmp_path)


def test_a_hyperpod_group_is_held_to_its_lifecycle_download_and_its_on_create_script_alone(tmp_path: Path) -> None:
    """``check_hyperpod`` mutants 80 and 168 (seed 4): SageMaker lists and downloads the lifecycle folder with the
    group's role (findings named "LifeCycleConfig (SageMaker)"); a folder holding the rendered on_create.sh
    is read for that script alone (another file there is never run by a node)."""
    files = {
        "on_create.sh": "#!/bin/bash\naws ssm get-parameter --name /mlc/flag\n",
        "notes.sh": "aws sts get-caller-identity\n",
    }
    report = check_hyperpod(_hyperpod(tmp_path, files, [], lifecycle_grants=False), "env")
    assert [str(f) for f in report.findings] == [
        "env: instance group worker-group-1: LifeCycleConfig (SageMaker):0 `aws s3 ls s3://lifecycle-bucket/hyperpod/` "
        "needs s3:ListBucket on arn:${AWS::Partition}:s3:::lifecycle-bucket, which its role does not allow",
        "env: instance group worker-group-1: LifeCycleConfig (SageMaker):0 `aws s3 cp s3://lifecycle-bucket/hyperpod/*` "
        "needs s3:GetObject on arn:${AWS::Partition}:s3:::lifecycle-bucket/hyperpod/*, which its role does not "
        "allow",
        "env: instance group worker-group-1: on_create.sh:2 `aws ssm get-parameter` needs ssm:GetParameter on "
        "/mlc/flag, which its role does not allow",
    ]


def test_a_dependent_action_the_role_lacks_is_a_finding_of_its_group(tmp_path: Path) -> None:
    """``_check`` mutant 67 (seed 4): DescribeStacks on every stack needs ListStacks too (the Service
    Authorization Reference); the finding names the group, the call and the action it depends on."""
    on_create = "#!/bin/bash\naws cloudformation describe-stacks\n"
    allow = [{"Effect": "Allow", "Action": "cloudformation:DescribeStacks", "Resource": "*"}]
    report = check_hyperpod(_hyperpod(tmp_path, {"on_create.sh": on_create}, allow), "env")
    assert [str(f) for f in report.findings] == [
        "env: instance group worker-group-1: on_create.sh:2 `aws cloudformation describe-stacks` needs "
        "cloudformation:ListStacks on * (a dependent action of cloudformation:DescribeStacks), which its role does "
        "not allow"
    ]


def test_a_lifecycle_folder_without_the_features_file_runs_the_default_steps(tmp_path: Path) -> None:
    """``_hyperpod_plan`` mutant 113 (seed 4): the plan's defaults stand for a missing mlcluster_features.json
    (as on the node), so the group's default steps are read, not a crash."""
    provisioning = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller-machine",
        "worker_groups": [{"instance_group_name": "worker-group-1", "partition_name": "p5"}],
        "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "fsx_mountname": "abcdefgh",
    }
    files = {
        "plan.py": "",
        "provisioning_parameters.json": json.dumps(provisioning),
        # A default step of a worker (docker: on unless the features file turns it off) and one it never runs.
        "steps/docker.sh": "aws ecr describe-repositories\n",
        "steps/accounting.sh": "aws secretsmanager get-secret-value --secret-id x\n",
    }
    report = check_hyperpod(_hyperpod(tmp_path, files, []), "env")
    assert [(c.script, c.command) for c in report.calls["env: instance group worker-group-1"]] == [
        ("LifeCycleConfig (SageMaker)", "s3 ls s3://lifecycle-bucket/hyperpod/"),
        ("LifeCycleConfig (SageMaker)", "s3 cp s3://lifecycle-bucket/hyperpod/*"),
        ("steps/docker.sh", "ecr describe-repositories"),
    ]
    assert [f.action for f in report.findings] == ["ecr:DescribeRepositories"]


@pytest.mark.parametrize(("resource", "allowed_"), [("*", False), ("arn:aws:s3:::bucket/secret", True)])
def test_a_deny_on_every_resource_takes_the_action_away(resource: str, allowed_: bool) -> None:
    """``action_allowed`` mutant 12 (seed 4): resources are not compared for handlers, so only a Deny on every
    resource is sure to refuse the call; one on a single resource leaves it to the resource the call names."""
    statements = [
        Statement("Allow", ("s3:*",), ("*",)),
        Statement("Deny", ("s3:GetObject",), (resource,)),
    ]
    assert action_allowed(statements, "s3:GetObject") is allowed_
    assert action_allowed(statements, "s3:PutObject") is True


def test_a_custom_action_script_the_node_cannot_download_is_a_finding(tmp_path: Path) -> None:
    """``check_pcluster`` mutant 175 (seed 4): ParallelCluster downloads the script with the node's role before
    running it; without s3:GetObject on it the finding names the event, the URI and the action."""
    script = "#!/bin/bash\necho configured\n"
    iam = {"AdditionalIamPolicies": [{"Policy": {"Ref": "Policy"}}]}
    assembly = _assembly(tmp_path, iam, {"Policy": _managed_policy(LIST)}, script=script)
    assert _findings(assembly) == [
        "env: head node: OnNodeConfigured (ParallelCluster):0 `aws s3 cp s3://scripts/pc/run.sh` needs "
        "s3:GetObject on arn:${AWS::Partition}:s3:::scripts/pc/run.sh, which its role does not allow"
    ]
