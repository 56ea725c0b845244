"""The contracts gate (mlcluster/analysis/contracts.py) and the role statements it reads, on small hand-built assemblies.

Written for survivors of `make mutation MODULE=analysis` samples. Seed 1: ``contracts.prove_rule_topic``
mutants 14 (a rule without targets), 140 and 142 (the trust request's principal and action),
``contracts.role_policies`` mutant 35 (a managed policy's statements left out) and ``iam_calls.role_statements``
mutant 44 (inline policies left out): an alarm rule whose role EventBridge cannot assume, or whose publish right
is in a managed policy the gate skipped, is a rule that never notifies while the gate says it does, or the
reverse. Seed 3: ``prove_grafana`` 29 and ``prove_fsx_dra`` 101 (below).
"""

from __future__ import annotations

from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.contracts import (
    BACKUP_KMS,
    BACKUP_S3,
    EVENTBRIDGE_SNS,
    FSX_DRA,
    GRAFANA_READ,
    GRAFANA_SSO,
    LOGS_KMS,
    PCLUSTER,
    SAGEMAKER,
    Proof,
    _provider_requests,
    prove_backup,
    prove_backup_keys,
    prove_fsx_dra,
    prove_grafana,
    prove_grafana_admins,
    prove_hyperpod_roles,
    prove_log_group_keys,
    prove_pcluster_provider,
    prove_rule_topic,
)
from mlcluster.analysis.iam_calls import role_statements

PUBLISH = {"Effect": "Allow", "Action": "sns:Publish", "Resource": {"Ref": "Topic"}}


def alerts(*, service: str = "events.amazonaws.com", managed: bool = False, targets: bool = True) -> Assembly:
    """One stack: a topic, a rule publishing to it through a role, and the role's publish right."""
    document = {"Version": "2012-10-17", "Statement": [PUBLISH]}
    trust = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    role: dict[str, Any] = {"AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [trust]}}
    resources: dict[str, Any] = {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {}}}
    if managed:
        resources["Managed"] = {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": document}}
        role["ManagedPolicyArns"] = [{"Ref": "Managed"}]
    else:
        policy = {"PolicyName": "publish", "Roles": [{"Ref": "Role"}], "PolicyDocument": document}
        resources["Policy"] = {"Type": "AWS::IAM::Policy", "Properties": policy}
    resources["Role"] = {"Type": "AWS::IAM::Role", "Properties": role}
    target = {"Arn": {"Ref": "Topic"}, "Id": "alarm", "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]}}
    resources["Rule"] = {"Type": "AWS::Events::Rule", "Properties": {"Targets": [target]} if targets else {}}
    return Assembly({"env/Alerts": {"Resources": resources}})


@pytest.mark.parametrize("managed", [False, True], ids=["inline-policy", "managed-policy"])
def test_a_rule_publishing_through_a_role_eventbridge_may_assume_is_proven(managed: bool) -> None:
    proofs = list(prove_rule_topic(alerts(managed=managed), "env"))
    assert [p.ok for p in proofs] == [True, True], [str(p) for p in proofs]
    trust, publish = proofs
    assert trust.subject == "env/Alerts/Rule -> ${env/Alerts|Topic} (trust of Role)"
    assert trust.detail.startswith("events.amazonaws.com sts:AssumeRole on ${env/Alerts|Role.Arn} ")
    assert "role policy: allowed by statement 0" in publish.detail


def test_a_role_only_another_service_may_assume_fails_the_trust_proof() -> None:
    trust, publish = prove_rule_topic(alerts(service="lambda.amazonaws.com"), "env")
    assert not trust.ok and trust.detail.endswith("no statement allows it (implicit deny)")
    assert publish.ok  # the role may publish; EventBridge just cannot become it


def test_a_rule_without_targets_has_nothing_to_prove() -> None:
    assert list(prove_rule_topic(alerts(targets=False), "env")) == []


@pytest.mark.parametrize("managed", [False, True], ids=["inline-policy", "managed-policy"])
def test_the_role_statements_the_iam_gate_reads_include_inline_and_managed_policies(managed: bool) -> None:
    assembly = alerts(managed=managed)
    role = assembly.resource("${env/Alerts|Role}")
    assert role is not None
    statements = role_statements(assembly, "env", role)
    assert [(s.effect, s.actions, s.resources) for s in statements] == [
        ("Allow", ("sns:Publish",), ("${env/Alerts|Topic}",))
    ]


@pytest.mark.parametrize("role_arn", ["arn:aws:iam::111111111111:role/someone-elses", ""])
def test_a_grafana_workspace_naming_no_role_of_the_assembly_fails_its_contract(role_arn: str) -> None:
    """``contracts.prove_grafana`` mutant 29: the failure is a failed proof (ok False), printed as FAILS."""
    workspace = {"Type": "AWS::Grafana::Workspace", "Properties": {"RoleArn": role_arn}}
    assembly = Assembly({"env/Obs": {"Resources": {"Workspace": workspace}}})
    proofs = list(prove_grafana(assembly, "env"))
    assert proofs == [Proof(GRAFANA_READ, "env/Obs/Workspace", False, "the workspace names no role of the assembly")]
    assert str(proofs[0]).startswith("FAILS: ")


@pytest.mark.parametrize(
    ("s3", "actions"),
    [
        ({}, ["s3:ListBucket", "s3:GetObject"]),
        ({"AutoExportPolicy": {"Events": ["NEW"]}}, ["s3:ListBucket", "s3:GetObject", "s3:PutObject"]),
        (
            {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
            ["s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
        ),
        (
            {"AutoImportPolicy": {"Events": ["NEW"]}},
            ["s3:ListBucket", "s3:GetObject", "s3:GetBucketNotification", "s3:PutBucketNotification"],
        ),
    ],
)
def test_a_dra_is_proven_for_the_calls_fsx_makes_on_its_bucket(s3: dict[str, Any], actions: list[str]) -> None:
    """``contracts.prove_fsx_dra`` mutant 101: each request names its action as FSx's role calls it (the proof's
    detail is what the gate prints)."""
    dra = {"FileSystemId": "fs-0123", "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": "Bucket"}, "/in"]]}}
    resources = {
        "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "Dra": {"Type": "AWS::FSx::DataRepositoryAssociation", "Properties": {**dra, "S3": s3}},
    }
    proofs = list(prove_fsx_dra(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert [p.contract for p in proofs] == [FSX_DRA] * len(actions)
    assert [p.detail.split(" ")[1] for p in proofs] == actions
    assert all(p.ok for p in proofs)  # no bucket policy: nothing denies the role its own policy allows


def test_a_dra_bucket_encrypted_with_a_key_outside_the_assembly_fails_its_contract() -> None:
    """``contracts.prove_fsx_dra`` mutant 147: a key the gate cannot read is a failed proof with the key named,
    after the bucket's own requests (FSx's role needs the key policy to name it, which no one here can check)."""
    key = "arn:aws:kms:us-east-1:111111111111:key/0a1b2c3d"
    encryption = {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}
        ]
    }
    dra = {"FileSystemId": "fs-0123", "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": "Bucket"}, "/in"]]}}
    resources = {
        "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketEncryption": encryption}},
        "Dra": {"Type": "AWS::FSx::DataRepositoryAssociation", "Properties": dra},
    }
    proofs = list(prove_fsx_dra(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert [p.ok for p in proofs] == [True, True, False]
    assert proofs[-1] == Proof(
        FSX_DRA, "env/Storage/Dra", False, f"{key} is not a customer managed key of the assembly"
    )


@pytest.mark.parametrize("key_names_role", [True, False], ids=["key-policy-names-the-role", "key-policy-does-not"])
def test_an_encrypted_topic_needs_the_key_in_the_role_policy_and_in_the_key_policy(key_names_role: bool) -> None:
    """``contracts.prove_rule_topic`` mutant 235: publishing to an SSE-KMS topic as the rule's role takes
    kms:GenerateDataKey and kms:Decrypt allowed by both the role's policy and the key policy."""
    assembly = alerts()
    resources = assembly.templates["env/Alerts"]["Resources"]
    resources["Topic"]["Properties"]["KmsMasterKeyId"] = {"Fn::GetAtt": ["Key", "Arn"]}
    use = {"Effect": "Allow", "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": "*"}
    resources["Policy"]["Properties"]["PolicyDocument"]["Statement"].append(use)
    principal = {"AWS": {"Fn::GetAtt": ["Role", "Arn"]}} if key_names_role else {"AWS": "arn:aws:iam::1:role/x"}
    key_policy = {"Version": "2012-10-17", "Statement": [{**use, "Principal": principal}]}
    resources["Key"] = {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": key_policy}}
    proofs = list(prove_rule_topic(Assembly(assembly.templates), "env"))
    keys = [(p.subject.rsplit(" ", 2)[-2:], p.detail.split(" ")[1], p.ok) for p in proofs if "policy)" in p.subject]
    assert all(p.contract == EVENTBRIDGE_SNS for p in proofs)
    assert keys == [
        (["(role", "policy)"], "kms:GenerateDataKey", True),
        (["(key", "policy)"], "kms:GenerateDataKey", key_names_role),
        (["(role", "policy)"], "kms:Decrypt", True),
        (["(key", "policy)"], "kms:Decrypt", key_names_role),
    ]


def test_a_topic_under_an_aws_managed_key_fails_for_eventbridge_publishing_directly() -> None:
    """``contracts._use_key`` mutant 13 (seed 4): a rule publishing without a role uses EventBridge's own
    identity, which no AWS managed key (alias/aws/sns) can be granted to: a failed proof naming the key."""
    assembly = alerts()
    resources = assembly.templates["env/Alerts"]["Resources"]
    resources["Topic"]["Properties"]["KmsMasterKeyId"] = "alias/aws/sns"
    del resources["Rule"]["Properties"]["Targets"][0]["RoleArn"]
    publish = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sns:Publish",
        "Resource": "*",
    }
    resources["TopicPolicy"] = {
        "Type": "AWS::SNS::TopicPolicy",
        "Properties": {"Topics": [{"Ref": "Topic"}], "PolicyDocument": {"Statement": [publish]}},
    }
    keys = [p for p in prove_rule_topic(Assembly(assembly.templates), "env") if p.subject.endswith("(key)")]
    assert keys == [
        Proof(
            EVENTBRIDGE_SNS,
            "env/Alerts/Rule -> ${env/Alerts|Topic} (key)",
            False,
            "alias/aws/sns is not a customer managed key of the assembly: an AWS managed key (alias/aws/sns) cannot "
            "be granted to a service",
        )
    ]


@pytest.mark.parametrize(("name", "ok"), [("/mlcluster/app", True), ("/other/app", False)])
def test_a_named_log_groups_key_is_proven_for_that_names_encryption_context(name: str, ok: bool) -> None:
    """``prove_log_group_keys`` mutant 26 (seed 4): CloudWatch Logs asks the key with the log group's ARN, built
    from its LogGroupName; a key policy scoped to that ARN admits it, one scoped to another name does not."""
    scoped = {
        "Effect": "Allow",
        "Principal": {"Service": {"Fn::Sub": "logs.${AWS::Region}.amazonaws.com"}},
        "Action": ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
        "Resource": "*",
        "Condition": {
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": {
                    "Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/mlcluster/*"
                }
            }
        },
    }
    resources = {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": [scoped]}}},
        "Logs": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"LogGroupName": name, "KmsKeyId": {"Fn::GetAtt": ["Key", "Arn"]}},
        },
    }
    proofs = list(prove_log_group_keys(Assembly({"env/Obs": {"Resources": resources}}), "env"))
    assert [(p.contract, p.subject, p.detail.split(" ")[1]) for p in proofs] == [
        (LOGS_KMS, "env/Obs/Logs", action)
        for action in ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:GenerateDataKey", "kms:DescribeKey")
    ]
    assert all(p.ok is ok for p in proofs), [str(p) for p in proofs]


def test_every_identity_center_workspace_is_proven_whatever_is_listed_before_it() -> None:
    """``prove_grafana_admins`` mutant 35 (seed 4): provisioners of a workspace made elsewhere and of one without
    Identity Center, listed first, are skipped, and the next workspace's provisioner is still held to
    UpdatePermissions."""
    trust = {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    update = {
        "Effect": "Allow",
        "Action": "grafana:UpdatePermissions",
        "Resource": "arn:aws:grafana:*:*:/workspaces/other",
    }
    role = {
        "AssumeRolePolicyDocument": {"Statement": [trust]},
        "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [update]}}],
    }
    resources = {
        "Saml": {"Type": "AWS::Grafana::Workspace", "Properties": {"AuthenticationProviders": ["SAML"]}},
        "Sso": {"Type": "AWS::Grafana::Workspace", "Properties": {"AuthenticationProviders": ["AWS_SSO"]}},
        "Elsewhere": {"Type": "Custom::GrafanaProvisioning", "Properties": {"WorkspaceId": "g-0123456789"}},
        "A": {"Type": "Custom::GrafanaProvisioning", "Properties": {"WorkspaceId": {"Ref": "Saml"}}},
        "B": {"Type": "Custom::GrafanaProvisioning", "Properties": {"WorkspaceId": {"Ref": "Sso"}}},
        "Provisioner": {"Type": "AWS::IAM::Role", "Properties": role},
    }
    proofs = list(prove_grafana_admins(Assembly({"env/Obs": {"Resources": resources}}), "env"))
    assert proofs and {p.contract for p in proofs} == {GRAFANA_SSO}
    assert {p.subject.split(" (")[0] for p in proofs} == {"env/Obs/Provisioner for Sso"}
    (update_proof,) = [p for p in proofs if "grafana:UpdatePermissions" in p.detail]
    assert not update_proof.ok  # its grant names another workspace


@pytest.mark.parametrize("role_arn", ["arn:aws:iam::111111111111:role/someone-elses", ""])
def test_a_backup_selection_whose_role_is_not_of_the_assembly_fails_its_contract(role_arn: str) -> None:
    """``prove_backup`` mutant 37 (seed 4): the failure names the selection it is about."""
    selection = {"BackupSelection": {"IamRoleArn": role_arn, "SelectionName": "data", "Resources": []}}
    resources = {"Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": selection}}
    proofs = list(prove_backup(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert proofs == [
        Proof(BACKUP_S3, "env/Storage/Selection", False, "the selection's role is not a role of the assembly")
    ]


@pytest.mark.parametrize("restore", [True, False], ids=["both-policies", "backup-only"])
def test_a_backup_selection_is_proven_for_its_role_and_bucket_each_proof_naming_it(restore: bool) -> None:
    """``prove_backup`` mutant 85 (seed 4): every proof of a selection names it; the role needs both AWS managed
    S3 policies, and the bucket must be versioned."""
    trust = {"Effect": "Allow", "Principal": {"Service": "backup.amazonaws.com"}, "Action": "sts:AssumeRole"}
    policies = [
        "AWSBackupServiceRolePolicyForS3Backup",
        *(["AWSBackupServiceRolePolicyForS3Restore"] if restore else []),
    ]
    role = {
        "AssumeRolePolicyDocument": {"Statement": [trust]},
        "ManagedPolicyArns": [f"arn:aws:iam::aws:policy/service-role/{p}" for p in policies],
    }
    selection = {
        "BackupSelection": {
            "IamRoleArn": {"Fn::GetAtt": ["BackupRole", "Arn"]},
            "SelectionName": "data",
            "Resources": [{"Fn::GetAtt": ["Data", "Arn"]}],
        }
    }
    resources = {
        "BackupRole": {"Type": "AWS::IAM::Role", "Properties": role},
        "Data": {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": {"Status": "Enabled"}}},
        "Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": selection},
    }
    proofs = list(prove_backup(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert [(p.subject, p.ok, p.detail) for p in proofs[1:]] == [
        ("env/Storage/Selection", True, "BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Backup"),
        ("env/Storage/Selection", restore, "BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Restore"),
        ("env/Storage/Selection", True, "Data versioning is Enabled"),
    ]
    assert proofs[0].subject == "env/Storage/BackupRole (trust)" and proofs[0].ok


def test_a_vault_under_a_key_outside_the_assembly_fails_and_a_selection_without_resources_reads_no_key() -> None:
    """``_deployer_grants`` mutant 13 and ``prove_backup_keys`` mutant 67 (seed 4): a vault encrypted with a key
    the gate cannot read is a failed proof naming it; a selection that lists no resources has no bucket key to
    prove (Resources is optional beside ListOfTags and Conditions), not a crash."""
    key = "arn:aws:kms:us-east-1:111111111111:key/0a1b2c3d"
    selection = {"BackupSelection": {"IamRoleArn": "arn:aws:iam::111111111111:role/backup", "SelectionName": "x"}}
    resources = {
        "Vault": {"Type": "AWS::Backup::BackupVault", "Properties": {"BackupVaultName": "v", "EncryptionKeyArn": key}},
        "Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": selection},
    }
    proofs = list(prove_backup_keys(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert proofs == [
        Proof(BACKUP_KMS, "env/Storage/Vault", False, f"{key} is not a customer managed key of the assembly")
    ]


def test_a_statement_without_a_decision_fails_and_the_ones_after_it_are_still_proven(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_provider_requests`` mutant 6 (seed 4): one undecided statement of ParallelCluster's policy is reported
    and the next statements still yield their requests."""
    from mlcluster.analysis import contracts, pcluster_policies

    decided = [(sid, contracts.PCLUSTER_PROVIDER_USES[sid]) for _, sid, _ in pcluster_policies.STATEMENTS]
    first = decided[0][0]
    every = list(_provider_requests("c", ["always"]))
    monkeypatch.delitem(contracts.PCLUSTER_PROVIDER_USES, first)
    without = list(_provider_requests("c", ["always"]))
    policy = next(p for p, sid, _ in pcluster_policies.STATEMENTS if sid == first)
    assert without[0] == (f"undecided {policy} {first}", "", "", {})
    others = [r for r in every if not r[0].endswith(f" {first}")]
    assert without[1:] == others and len(others) > 10


@pytest.mark.parametrize("parameters", [{}, {"CustomLambdaRole": "arn:aws:iam::111111111111:role/elsewhere"}])
def test_a_provider_stack_without_a_lambda_role_of_the_assembly_fails_its_contract(parameters: dict[str, str]) -> None:
    """``prove_pcluster_provider`` mutant 62 (seed 4): ParallelCluster's provider then runs with a role the gate
    cannot read; the failed proof says so, naming the parameter."""
    provider = {"Type": "AWS::CloudFormation::Stack", "Properties": {"Parameters": parameters}}
    cluster = {
        "Type": "Custom::PclusterCluster",
        "Properties": {"ServiceToken": {"Fn::GetAtt": ["Provider", "Outputs.ServiceToken"]}, "ClusterName": "c"},
    }
    proofs = list(
        prove_pcluster_provider(
            Assembly({"env/Cluster": {"Resources": {"Provider": provider, "Cluster": cluster}}}), "env"
        )
    )
    assert proofs == [
        Proof(
            PCLUSTER, "env/Cluster/Cluster", False, "the provider stack runs with no CustomLambdaRole of the assembly"
        )
    ]


@pytest.mark.parametrize("entry", ["OnCreate", "OnInitComplete"])
def test_a_hyperpod_group_is_proven_for_the_entrypoint_sagemaker_downloads(entry: str) -> None:
    """``prove_hyperpod_roles`` mutant 100 (seed 4): SageMaker lists the lifecycle prefix and downloads the
    entrypoint the group names, OnCreate or (extended mode) OnInitComplete, with the group's role."""
    trust = {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
    read = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::lifecycle-bucket/hyperpod/start.sh"}
    role = {
        "AssumeRolePolicyDocument": {"Statement": [trust]},
        "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [read]}}],
    }
    group = {
        "InstanceGroupName": "workers",
        "ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]},
        "LifeCycleConfig": {"SourceS3Uri": "s3://lifecycle-bucket/hyperpod/", entry: "start.sh"},
        "OverrideVpcConfig": {"Subnets": [], "SecurityGroupIds": []},
    }
    resources = {
        "Role": {"Type": "AWS::IAM::Role", "Properties": role},
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}},
    }
    proofs = list(prove_hyperpod_roles(Assembly({"env/Cluster": {"Resources": resources}}), "env"))
    (download,) = [p for p in proofs if " s3:GetObject " in p.detail]
    assert download.contract == SAGEMAKER and download.ok, str(download)
    assert "s3:GetObject on arn:${AWS::Partition}:s3:::lifecycle-bucket/hyperpod/start.sh" in download.detail


def test_a_hyperpod_groups_role_is_held_to_every_call_sagemaker_makes_with_it() -> None:
    """``prove_hyperpod_roles`` mutants 102, 108, 112, 181 and 203 (seed 4): the trust, the lifecycle listing and
    download, and an ENI's CreateNetworkInterface on the interface, each subnet and each security group, then
    DescribeNetworkInterfaces; each request named as SageMaker makes it."""
    trust = {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
    role = {"AssumeRolePolicyDocument": {"Statement": [trust]}}
    group = {
        "InstanceGroupName": "workers",
        "ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]},
        "LifeCycleConfig": {"SourceS3Uri": "s3://lifecycle-bucket/hyperpod/", "OnCreate": "on_create.sh"},
        "OverrideVpcConfig": {"Subnets": ["subnet-0a"], "SecurityGroupIds": ["sg-0b"]},
    }
    resources = {
        "Role": {"Type": "AWS::IAM::Role", "Properties": role},
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}},
    }
    proofs = list(prove_hyperpod_roles(Assembly({"env/Cluster": {"Resources": resources}}), "env"))
    ec2 = "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}"
    assert [[*p.detail.split(" ")[1:3], p.detail.split(" ")[3].rstrip(":")] for p in proofs] == [
        ["sts:AssumeRole", "on", "${env/Cluster|Role.Arn}"],
        ["s3:ListBucket", "on", "arn:${AWS::Partition}:s3:::lifecycle-bucket"],
        ["s3:GetObject", "on", "arn:${AWS::Partition}:s3:::lifecycle-bucket/hyperpod/on_create.sh"],
        ["ec2:CreateNetworkInterface", "on", f"{ec2}:network-interface/mlc-run-time-value"],
        ["ec2:CreateNetworkInterface", "on", f"{ec2}:subnet/subnet-0a"],
        ["ec2:CreateNetworkInterface", "on", f"{ec2}:security-group/sg-0b"],
        ["ec2:DescribeNetworkInterfaces", "on", "*"],
    ]
    assert [p.ok for p in proofs] == [True] + [False] * 6  # trusted, and its own policy grants nothing yet
    assert {p.subject for p in proofs} == {"env/Cluster group workers", "env/Cluster/Role (trust)"}


def test_a_role_without_a_trust_policy_is_trusted_by_no_service() -> None:
    """``role_trust`` mutant 10 (seed 4): a role written without AssumeRolePolicyDocument (CloudFormation requires
    one, a hand-made template may lack it) fails the trust proof, not the gate."""
    group = {
        "InstanceGroupName": "workers",
        "ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]},
        "LifeCycleConfig": {"SourceS3Uri": "s3://b/p/", "OnCreate": "on_create.sh"},
        "OverrideVpcConfig": {"Subnets": [], "SecurityGroupIds": []},
    }
    resources = {
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}},
    }
    (trust, *_) = prove_hyperpod_roles(Assembly({"env/Cluster": {"Resources": resources}}), "env")
    assert trust.subject == "env/Cluster/Role (trust)" and not trust.ok


def test_a_dra_to_a_bucket_outside_the_assembly_fails_its_contract() -> None:
    """``prove_fsx_dra`` mutant 44 (seed 4): the gate cannot read another bucket's policy; a failed proof names it."""
    dra = {"FileSystemId": "fs-0123", "DataRepositoryPath": "s3://someone-elses-bucket/in"}
    resources = {"Dra": {"Type": "AWS::FSx::DataRepositoryAssociation", "Properties": dra}}
    proofs = list(prove_fsx_dra(Assembly({"env/Storage": {"Resources": resources}}), "env"))
    assert proofs == [Proof(FSX_DRA, "env/Storage/Dra", False, "someone-elses-bucket is not a bucket of the assembly")]
