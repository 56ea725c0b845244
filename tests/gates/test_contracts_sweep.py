"""The contracts gate (mlcluster/analysis/contracts.py), every prover's whole list of proofs on small hand-built
assemblies: each proof as the gate prints it (ok or FAILS, the contract, the subject, the request and the
decision), for an assembly where each integration is granted, and one where each is refused at its edge.

The gate's output is what an operator reads when a contract breaks; a request with a wrong action, resource or
context key, or a proof that says ok where the policy refuses, is a gate that lets a broken integration ship.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from mlcluster.analysis import contracts, pcluster_policies
from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.contracts import (
    CONTRACTS,
    Proof,
    prove_alarm_key,
    prove_alarm_topic,
    prove_alert_manager_topic,
    prove_all,
    prove_amp_key,
    prove_backup,
    prove_backup_keys,
    prove_fsx_dra,
    prove_grafana,
    prove_grafana_admins,
    prove_hyperpod_roles,
    prove_lambda_trust,
    prove_log_group_keys,
    prove_pcluster_node_scripts,
    prove_pcluster_provider,
    prove_rule_topic,
)

ACCOUNT = "${AWS::AccountId}"


def sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def arn(logical_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def ref(logical_id: str) -> dict[str, str]:
    return {"Ref": logical_id}


def allow(sid: str, actions: Any, resource: Any = "*", principal: Any = None, **condition: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource}
    if principal is not None:
        statement["Principal"] = principal
    if condition:
        statement["Condition"] = condition
    return statement


def deny(sid: str, actions: Any, resource: Any = "*", principal: Any = "*", **condition: Any) -> dict[str, Any]:
    return {**allow(sid, actions, resource, principal, **condition), "Effect": "Deny"}


def document(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def role(service: str, *statements: dict[str, Any], **extra: Any) -> dict[str, Any]:
    trust = allow("Trust", "sts:AssumeRole", None, {"Service": service})
    del trust["Resource"]
    properties: dict[str, Any] = {"AssumeRolePolicyDocument": document(trust), **extra}
    if statements:
        properties["Policies"] = [{"PolicyName": "inline", "PolicyDocument": document(*statements)}]
    return {"Type": "AWS::IAM::Role", "Properties": properties}


def lines(prover: contracts.Prover, resources: dict[str, Any], stack: str = "env/Obs") -> list[str]:
    return [str(p) for p in prover(Assembly({stack: {"Resources": resources}}), "env")]


# -- alarms, rules and the alert manager notifying SNS topics -------------------------------------------------


def alerting() -> dict[str, Any]:
    """Topics: Encrypted (a key of the assembly, a topic policy), Plain (no policy: SNS's default), Managed (the
    AWS managed key); a queue; alarms, rules and AMP workspaces notifying them."""
    source = {"aws:SourceAccount": ACCOUNT}
    alarms = sub("arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*")
    topic_statements = [
        allow(
            "CloudWatch",
            "sns:Publish",
            ref("Encrypted"),
            {"Service": "cloudwatch.amazonaws.com"},
            StringEquals=source,
            ArnLike={"aws:SourceArn": alarms},
        ),
        allow("Events", "sns:Publish", ref("Encrypted"), {"Service": "events.amazonaws.com"}, StringEquals=source),
        allow(
            "Aps",
            ["sns:Publish", "sns:GetTopicAttributes"],
            ref("Encrypted"),
            {"Service": "aps.amazonaws.com"},
            StringEquals=source,
        ),
        allow("ByPolicy", "sns:Publish", ref("Encrypted"), {"AWS": arn("Unpolicied")}),
        deny("NotDenied", "sns:Publish", ref("Encrypted"), {"AWS": arn("Denied")}),
    ]
    key_statements = [
        allow(
            "Services",
            ["kms:GenerateDataKey*", "kms:Decrypt"],
            "*",
            {"Service": ["cloudwatch.amazonaws.com", "aps.amazonaws.com"]},
            StringEquals=source,
        ),
        allow("EventBridge", ["kms:GenerateDataKey*", "kms:Decrypt"], "*", {"Service": "events.amazonaws.com"}),
        allow("Publisher", "kms:GenerateDataKey*", "*", {"AWS": arn("Publisher")}),
    ]
    publish = allow("Publish", "sns:Publish", ref("Encrypted"))
    use_key = allow("UseKey", ["kms:GenerateDataKey", "kms:Decrypt"], arn("Key"))
    return {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": document(*key_statements)}},
        "Encrypted": {"Type": "AWS::SNS::Topic", "Properties": {"KmsMasterKeyId": arn("Key")}},
        "Plain": {"Type": "AWS::SNS::Topic", "Properties": {}},
        "Managed": {"Type": "AWS::SNS::Topic", "Properties": {"KmsMasterKeyId": "alias/aws/sns"}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "OtherPolicy": {
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {"Topics": [ref("Queue")], "PolicyDocument": document(deny("Nobody", "*"))},
        },
        "TopicPolicy": {
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {"Topics": [ref("Encrypted")], "PolicyDocument": document(*topic_statements)},
        },
        "Disk": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmActions": [ref("Encrypted"), "arn:aws:automate:us-east-1:ec2:reboot"],
                "OKActions": [ref("Encrypted"), ref("Queue")],
                "InsufficientDataActions": [ref("Plain")],
            },
        },
        "Nodes": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"OKActions": [ref("Managed")]}},
        "Silent": {"Type": "AWS::CloudWatch::Alarm", "Properties": {}},
        "Publisher": role("events.amazonaws.com", publish, use_key),
        "Unpolicied": role("events.amazonaws.com"),
        "Denied": role("events.amazonaws.com", publish),
        "Stranger": role("lambda.amazonaws.com", publish),
        "Direct": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Targets": [
                    {"Id": "queue", "Arn": arn("Queue")},
                    {"Id": "encrypted", "Arn": ref("Encrypted")},
                    {"Id": "plain", "Arn": ref("Plain")},
                    {"Id": "function", "Arn": "arn:aws:lambda:us-east-1:111111111111:function:f"},
                ]
            },
        },
        "ViaRoles": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Targets": [
                    {"Id": "a", "Arn": ref("Encrypted"), "RoleArn": arn("Publisher")},
                    {"Id": "b", "Arn": ref("Encrypted"), "RoleArn": arn("Unpolicied")},
                    {"Id": "c", "Arn": ref("Encrypted"), "RoleArn": arn("Denied")},
                    {"Id": "d", "Arn": ref("Plain"), "RoleArn": arn("Stranger")},
                ]
            },
        },
        "Prometheus": {
            "Type": "AWS::APS::Workspace",
            "Properties": {
                "AlertManagerDefinition": sub(
                    "receivers:\n- sns_configs:\n  - topic_arn: ${Encrypted}\n  - topic_arn: ${Encrypted}\n"
                    "  - topic_arn: ${Queue}\n  - topic_arn: ${Managed}\n"
                )
            },
        },
        "Unreceived": {"Type": "AWS::APS::Workspace", "Properties": {"AlertManagerDefinition": sub("${Plain}")}},
    }


# -- log groups, Grafana, HyperPod, Lambda ------------------------------------------------------------------


def logging() -> dict[str, Any]:
    """Log groups under a key of the assembly (named, and named by CloudFormation), one under no key, one under a
    key from elsewhere."""
    logs = {"Service": sub("logs.${AWS::Region}.amazonaws.com")}
    scoped = sub("arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/*")
    actions = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*"]
    key = document(
        allow("Logs", actions, "*", logs, ArnLike={"kms:EncryptionContext:aws:logs:arn": scoped}),
        allow("Describe", "kms:DescribeKey", "*", logs),
    )
    return {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": key}},
        "Named": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/app/slurm", "KmsKeyId": arn("Key")}},
        "Unnamed": {"Type": "AWS::Logs::LogGroup", "Properties": {"KmsKeyId": arn("Key")}},
        "Clear": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/app/clear"}},
        "Foreign": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"LogGroupName": "/app/x", "KmsKeyId": "arn:aws:kms:us-east-1:111111111111:key/k"},
        },
    }


def grafana() -> dict[str, Any]:
    """A workspace whose role reads one of two AMP workspaces and CloudWatch; one naming no role of the assembly."""
    trust_context = {"aws:SourceAccount": ACCOUNT}
    read = allow("Read", ["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata"], arn("Amp"))
    metrics = allow("Metrics", ["cloudwatch:GetMetricData"], "*")
    workspace_role = role("grafana.amazonaws.com", read, metrics)
    workspace_role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"] = {
        "StringEquals": trust_context
    }
    return {
        "Amp": {"Type": "AWS::APS::Workspace", "Properties": {}},
        "Other": {"Type": "AWS::APS::Workspace", "Properties": {}},
        "GrafanaRole": workspace_role,
        "Grafana": {"Type": "AWS::Grafana::Workspace", "Properties": {"RoleArn": arn("GrafanaRole")}},
        "Orphan": {"Type": "AWS::Grafana::Workspace", "Properties": {"RoleArn": arn("Amp")}},
    }


def grafana_admins() -> dict[str, Any]:
    """An Identity Center workspace's provisioner granted UpdatePermissions and every read, kms:Decrypt only
    through the identity store; another Lambda role without UpdatePermissions is not the provisioner."""
    workspace = sub("arn:${AWS::Partition}:grafana:${AWS::Region}:${AWS::AccountId}:/workspaces/${Grafana.Id}")
    via_store = sub("identitystore.${AWS::Region}.amazonaws.com")
    return {
        "Grafana": {"Type": "AWS::Grafana::Workspace", "Properties": {"AuthenticationProviders": ["AWS_SSO"]}},
        "Admins": {"Type": "Custom::GrafanaProvisioning", "Properties": {"WorkspaceId": ref("Grafana")}},
        "Provisioner": role(
            "lambda.amazonaws.com",
            allow("Update", "grafana:UpdatePermissions", workspace),
            allow("Reads", list(contracts.IDENTITY_CENTER_NEEDS), "*"),
            allow("Decrypt", "kms:Decrypt", "*", StringEquals={"kms:ViaService": via_store}),
        ),
        "Other": role("lambda.amazonaws.com", allow("Logs", "logs:PutLogEvents", "*")),
        "Instance": role("ec2.amazonaws.com", allow("Update", "grafana:UpdatePermissions", "*")),
    }


def hyperpod() -> dict[str, Any]:
    """Two groups: one whose role does everything SageMaker asks, in the cluster's own VPC settings, one whose
    execution role is not a role of the assembly."""
    lifecycle = {"SourceS3Uri": "s3://lifecycle/hp/", "OnCreate": "on_create.sh"}
    good = {"InstanceGroupName": "workers", "ExecutionRole": arn("Exec"), "LifeCycleConfig": lifecycle}
    bad = {"InstanceGroupName": "login", "ExecutionRole": "arn:aws:iam::1:role/x", "LifeCycleConfig": lifecycle}
    exec_role = role(
        "sagemaker.amazonaws.com",
        allow("List", "s3:ListBucket", "arn:aws:s3:::lifecycle", StringLike={"s3:prefix": "hp/*"}),
        allow("Get", "s3:GetObject", "arn:aws:s3:::lifecycle/hp/*"),
        allow("Eni", ["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces"], "*"),
    )
    vpc = {"Subnets": ["subnet-1", "subnet-2"], "SecurityGroupIds": ["sg-1"]}
    return {
        "Exec": exec_role,
        "Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [good, bad], "VpcConfig": vpc}},
    }


def functions() -> dict[str, Any]:
    """Functions with a role Lambda may assume, one it may not, and one whose role is not of the assembly."""
    return {
        "Handler": role("lambda.amazonaws.com"),
        "Wrong": role("ec2.amazonaws.com"),
        "A": {"Type": "AWS::Lambda::Function", "Properties": {"Role": arn("Handler")}},
        "B": {"Type": "AWS::Lambda::Function", "Properties": {"Role": arn("Wrong")}},
        "C": {"Type": "AWS::Lambda::Function", "Properties": {"Role": "arn:aws:iam::1:role/elsewhere"}},
        "D": {"Type": "AWS::Lambda::Function", "Properties": {}},
    }


# -- storage: backup, FSx data repository associations, AMP and vault keys -----------------------------------


def sse_kms(key: Any, *, bucket_keys: bool = False, algorithm: str = "aws:kms") -> dict[str, Any]:
    rule: dict[str, Any] = {"ServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm, "KMSMasterKeyID": key}}
    if bucket_keys:
        rule["BucketKeyEnabled"] = True
    return {"ServerSideEncryptionConfiguration": [rule]}


def storage() -> dict[str, Any]:
    """A versioned SSE-KMS bucket (S3 Bucket Keys on) and an SSE-S3 one; a bucket policy refusing plain HTTP and
    one principal; a key whose policy delegates to IAM and names FSx's role for one file system; a vault and an
    AMP workspace under it, and one under a key from elsewhere; backup selections and DRAs of both buckets."""
    root = {"AWS": sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root")}
    fsx_role = sub(
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        "AWSServiceRoleForFSxS3Access_fs-good"
    )
    via_s3 = sub("s3.${AWS::Region}.amazonaws.com")
    key = document(
        allow("Root", "kms:*", "*", root),
        allow(
            "Fsx",
            ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"],
            "*",
            {"AWS": "*"},
            StringEquals={"aws:PrincipalArn": fsx_role, "kms:ViaService": via_s3, "kms:CallerAccount": ACCOUNT},
            StringLike={"kms:EncryptionContext:aws:s3:arn": sub("arn:${AWS::Partition}:s3:::${Data}")},
        ),
    )
    tls = deny(
        "Tls",
        "s3:*",
        [arn("Data"), {"Fn::Join": ["", [arn("Data"), "/*"]]}],
        "*",
        Bool={"aws:SecureTransport": "false"},
    )
    other_role = sub(
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        "AWSServiceRoleForFSxS3Access_fs-other"
    )
    writes = deny("NoWrites", "s3:PutObject", {"Fn::Join": ["", [arn("Data"), "/*"]]}, {"AWS": other_role})
    backup_role = role(
        "backup.amazonaws.com",
        ManagedPolicyArns=[
            sub("arn:${AWS::Partition}:iam::aws:policy/AWSBackupServiceRolePolicyForS3Backup"),
            sub("arn:${AWS::Partition}:iam::aws:policy/AWSBackupServiceRolePolicyForS3Restore"),
        ],
    )
    selection = {
        "IamRoleArn": arn("BackupRole"),
        "SelectionName": "data",
        "Resources": [arn("Data"), arn("Scratch"), "arn:aws:s3:::someone-elses"],
    }
    foreign = "arn:aws:kms:us-east-1:111111111111:key/elsewhere"
    dra = "s3://${Data}/in"
    return {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": key}},
        "Data": {
            "Type": "AWS::S3::Bucket",
            "Properties": {
                "BucketEncryption": sse_kms(arn("Key"), bucket_keys=True),
                "VersioningConfiguration": {"Status": "Enabled"},
            },
        },
        "Scratch": {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": {"Status": "Suspended"}}},
        "Scratch2Policy": {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {"Bucket": ref("Scratch"), "PolicyDocument": document(deny("All", "s3:*"))},
        },
        "DataPolicy": {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {"Bucket": ref("Data"), "PolicyDocument": document(tls, writes)},
        },
        "BackupRole": backup_role,
        "Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": {"BackupSelection": selection}},
        "Elsewhere": {
            "Type": "AWS::Backup::BackupSelection",
            "Properties": {
                "BackupSelection": {"IamRoleArn": "arn:aws:iam::111111111111:role/b", "Resources": [arn("Data")]}
            },
        },
        "Vault": {"Type": "AWS::Backup::BackupVault", "Properties": {"EncryptionKeyArn": arn("Key")}},
        "PlainVault": {"Type": "AWS::Backup::BackupVault", "Properties": {}},
        "Amp": {"Type": "AWS::APS::Workspace", "Properties": {"KmsKeyArn": arn("Key")}},
        "ForeignAmp": {"Type": "AWS::APS::Workspace", "Properties": {"KmsKeyArn": foreign}},
        "PlainAmp": {"Type": "AWS::APS::Workspace", "Properties": {}},
        "ToScratch": {
            "Type": "AWS::FSx::DataRepositoryAssociation",
            "Properties": {"FileSystemId": "fs-s", "DataRepositoryPath": sub("s3://${Scratch}/")},
        },
        "Good": {
            "Type": "AWS::FSx::DataRepositoryAssociation",
            "Properties": {
                "FileSystemId": "fs-good",
                "DataRepositoryPath": sub(dra),
                "S3": {"AutoImportPolicy": {"Events": ["NEW"]}},
            },
        },
        "Other": {
            "Type": "AWS::FSx::DataRepositoryAssociation",
            "Properties": {
                "FileSystemId": "fs-other",
                "DataRepositoryPath": sub(dra),
                "S3": {"AutoExportPolicy": {"Events": ["NEW", "CHANGED"]}},
            },
        },
    }


def foreign_key_bucket() -> dict[str, Any]:
    """A bucket under a dual-layer SSE-KMS key the assembly does not hold, linked and backed up."""
    foreign = "arn:aws:kms:us-east-1:111111111111:key/elsewhere"
    selection = {"IamRoleArn": arn("BackupRole"), "SelectionName": "d", "Resources": [arn("Data")]}
    return {
        "Data": {
            "Type": "AWS::S3::Bucket",
            "Properties": {"BucketEncryption": sse_kms(foreign, algorithm="aws:kms:dsse")},
        },
        "BackupRole": role("backup.amazonaws.com"),
        "Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": {"BackupSelection": selection}},
        "Dra": {
            "Type": "AWS::FSx::DataRepositoryAssociation",
            "Properties": {"FileSystemId": "fs-1", "DataRepositoryPath": sub("s3://${Data}/")},
        },
    }


# -- ParallelCluster: the provider's role and the nodes' scripts ---------------------------------------------


def pcluster(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cluster whose provider runs with a role allowed everything but detaching the app's own node policy; the
    head node reads its script by S3Access, the queue by an attached policy, the login pool by nothing; one
    script in an SSE-KMS bucket, one in a bucket outside the app."""
    head = {
        "CustomActions": {"OnNodeConfigured": {"Script": sub("s3://${Scripts}/head.sh")}},
        "Iam": {"S3Access": [{"BucketName": ref("Scripts"), "KeyName": "head*"}]},
    }
    queue = {
        "Name": "gpu",
        "CustomActions": {
            "OnNodeStart": {
                "Sequence": [
                    {"Script": sub("s3://${Scripts}/a.sh")},
                    {"Script": sub("s3://${Scripts}/a.sh")},
                    {"Script": "s3://elsewhere/b.sh"},
                    {"Args": ["no script"]},
                ]
            },
            "OnNodeConfigured": {"Script": sub("s3://${Sealed}/c.sh")},
        },
        "Iam": {
            "S3Access": [{"BucketName": ref("Sealed")}],
            "AdditionalIamPolicies": [{"Policy": ref("NodePolicy")}, {"Policy": "arn:aws:iam::aws:policy/X"}],
        },
    }
    login = {
        "Name": "login",
        "CustomActions": {"OnNodeConfigured": {"Script": sub("s3://${Scripts}/login.sh")}},
        "Iam": {"AdditionalIamPolicies": [{"Policy": "arn:aws:iam::aws:policy/LoginOnly"}]},
    }
    default_config = {
        "HeadNode": head,
        "Scheduling": {"SlurmQueues": [queue, {"Name": "cpu"}], "SlurmSettings": {"Dns": {"DisableManagedDns": True}}},
        "LoginNodes": {"Pools": [login]},
        "Monitoring": {
            "Logs": {"CloudWatch": {"Enabled": False}},
            "Dashboards": {"CloudWatch": {"Enabled": False}},
            "Alarms": {"Enabled": False},
        },
        "SharedStorage": [{"StorageType": "FsxLustre", "FsxLustreSettings": {"FileSystemId": "fs-1"}}],
        "Iam": {"PermissionsBoundary": "arn:aws:iam::111111111111:policy/boundary"},
    }
    provider_role = role(
        "lambda.amazonaws.com",
        allow("All", "*", "*"),
        deny("KeepOwn", "iam:DetachRolePolicy", "*", None, StringLike={"iam:PolicyARN": "*CollectorRemoteWrite*"}),
    )
    read = allow("Read", "s3:GetObject", {"Fn::Join": ["", [arn("Scripts"), "/*"]]})
    return {
        "Scripts": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "Sealed": {"Type": "AWS::S3::Bucket", "Properties": {"BucketEncryption": sse_kms("arn:aws:kms:::key/k")}},
        "ScriptsPolicy": {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "Bucket": ref("Scripts"),
                "PolicyDocument": document(
                    deny("Tls", "s3:*", "*", "*", Bool={"aws:SecureTransport": "false"}),
                    deny(
                        "NoLogin",
                        "s3:GetObject",
                        {"Fn::Join": ["", [arn("Scripts"), "/login.sh"]]},
                        {"AWS": sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root")},
                    ),
                ),
            },
        },
        "NodePolicy": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": document(read)}},
        "ProviderRole": provider_role,
        "Provider": {
            "Type": "AWS::CloudFormation::Stack",
            "Properties": {"Parameters": {"CustomLambdaRole": arn("ProviderRole")}},
        },
        "Cluster": {
            "Type": "Custom::PclusterCluster",
            "Properties": {
                "ServiceToken": {"Fn::GetAtt": ["Provider", "Outputs.ServiceToken"]},
                "ClusterName": "c1",
                "ClusterConfiguration": config if config is not None else default_config,
            },
        },
    }


def test_alarms_notify_their_topics_once_each_under_the_topic_policy_or_snss_default() -> None:
    """Each alarm's topics (alarm, OK and insufficient-data actions; a queue or an automate action is no topic) once; a topic
    policy must admit CloudWatch for that alarm, no topic policy leaves SNS's default, which admits the account."""
    assert lines(prove_alarm_topic, alerting(), "env/Obs") == [
        "ok: CloudWatch alarm -> SNS topic: env/Obs/Disk -> ${env/Obs|Encrypted}: cloudwatch.amazonaws.com sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${env/Obs|Disk}): allowed by CloudWatch",
        "ok: CloudWatch alarm -> SNS topic: env/Obs/Disk -> ${env/Obs|Plain}: no topic policy: SNS's default policy admits the account",
        "ok: CloudWatch alarm -> SNS topic: env/Obs/Nodes -> ${env/Obs|Managed}: no topic policy: SNS's default policy admits the account",
    ]


def test_alarm_topics_keys_must_let_cloudwatch_make_the_data_key() -> None:
    """An encrypted alarm topic's key policy must allow CloudWatch GenerateDataKey and Decrypt; an AWS managed key never can."""
    assert lines(prove_alarm_key, alerting(), "env/Obs") == [
        "ok: CloudWatch alarm -> topic's KMS key: env/Obs/Disk -> ${env/Obs|Encrypted}: cloudwatch.amazonaws.com kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${env/Obs|Disk}): allowed by Services",
        "ok: CloudWatch alarm -> topic's KMS key: env/Obs/Disk -> ${env/Obs|Encrypted}: cloudwatch.amazonaws.com kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${env/Obs|Disk}): allowed by Services",
        "FAILS: CloudWatch alarm -> topic's KMS key: env/Obs/Nodes -> ${env/Obs|Managed}: alias/aws/sns is not a customer managed key of the assembly: an AWS managed key (alias/aws/sns) cannot be granted to a service",
    ]


def test_rules_publish_directly_under_the_topic_policy_or_as_a_role_every_policy_admits() -> None:
    """Without a role: the topic policy and key policy must admit EventBridge; with a role: its trust, then publish allowed
    by the role or topic policy and denied by neither, then the key in the role's policy and in the key policy."""
    assert lines(prove_rule_topic, alerting(), "env/Obs") == [
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/Direct -> ${env/Obs|Encrypted}: events.amazonaws.com sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|Direct.Arn}): allowed by Events",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/Direct -> ${env/Obs|Encrypted} (key): events.amazonaws.com kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): allowed by EventBridge",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/Direct -> ${env/Obs|Encrypted} (key): events.amazonaws.com kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): allowed by EventBridge",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/Direct -> ${env/Obs|Plain}: no topic policy: SNS's default policy does not admit events",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (trust of Publisher): events.amazonaws.com sts:AssumeRole on ${env/Obs|Publisher.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|ViaRoles.Arn}): allowed by Trust",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted}: ${env/Obs|Publisher.Arn} sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true): role policy: allowed by Publish; resource policy: no statement allows it (implicit deny)",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Publisher.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): allowed by UseKey",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Publisher.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): allowed by Publisher",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Publisher.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): allowed by UseKey",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Publisher.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (trust of Unpolicied): events.amazonaws.com sts:AssumeRole on ${env/Obs|Unpolicied.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|ViaRoles.Arn}): allowed by Trust",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted}: ${env/Obs|Unpolicied.Arn} sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true): role policy: no statement allows it (implicit deny); resource policy: allowed by ByPolicy",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Unpolicied.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Unpolicied.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Unpolicied.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Unpolicied.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "ok: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (trust of Denied): events.amazonaws.com sts:AssumeRole on ${env/Obs|Denied.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|ViaRoles.Arn}): allowed by Trust",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted}: ${env/Obs|Denied.Arn} sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true): denied by NotDenied",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Denied.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Denied.Arn} kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (role policy): ${env/Obs|Denied.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Encrypted} (key policy): ${env/Obs|Denied.Arn} kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Plain} (trust of Stranger): events.amazonaws.com sts:AssumeRole on ${env/Obs|Stranger.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|ViaRoles.Arn}): no statement allows it (implicit deny)",
        "FAILS: EventBridge rule -> SNS topic and its KMS key: env/Obs/ViaRoles -> ${env/Obs|Plain}: ${env/Obs|Stranger.Arn} sns:Publish on ${env/Obs|Plain} (aws:SecureTransport=true): role policy: no statement allows it (implicit deny); resource policy: no statement allows it (implicit deny)",
    ]


def test_the_alert_manager_needs_each_receiver_topics_policy_and_key() -> None:
    """Each topic the alert manager definition names (once; a queue is no topic): Publish and GetTopicAttributes for that
    workspace, then the key; a topic without a policy refuses aps."""
    assert lines(prove_alert_manager_topic, alerting(), "env/Obs") == [
        "ok: AMP alert manager -> SNS topic and its KMS key: env/Obs/Prometheus -> ${env/Obs|Encrypted}: aps.amazonaws.com sns:Publish on ${env/Obs|Encrypted} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|Prometheus.Arn}): allowed by Aps",
        "ok: AMP alert manager -> SNS topic and its KMS key: env/Obs/Prometheus -> ${env/Obs|Encrypted}: aps.amazonaws.com sns:GetTopicAttributes on ${env/Obs|Encrypted} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|Prometheus.Arn}): allowed by Aps",
        "ok: AMP alert manager -> SNS topic and its KMS key: env/Obs/Prometheus -> ${env/Obs|Encrypted} (key): aps.amazonaws.com kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|Prometheus.Arn}): allowed by Services",
        "ok: AMP alert manager -> SNS topic and its KMS key: env/Obs/Prometheus -> ${env/Obs|Encrypted} (key): aps.amazonaws.com kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=${env/Obs|Prometheus.Arn}): allowed by Services",
        "FAILS: AMP alert manager -> SNS topic and its KMS key: env/Obs/Prometheus -> ${env/Obs|Managed}: no topic policy: SNS's default policy does not admit aps",
        "FAILS: AMP alert manager -> SNS topic and its KMS key: env/Obs/Unreceived -> ${env/Obs|Plain}: no topic policy: SNS's default policy does not admit aps",
    ]


def test_log_group_keys_are_proven_for_each_groups_own_arn() -> None:
    """Each encrypted log group's five key calls carry its ARN (its LogGroupName, or the generated name); a key outside the
    assembly cannot be read; an unencrypted group has nothing to prove."""
    assert lines(prove_log_group_keys, logging(), "env/Obs") == [
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Named: logs.${AWS::Region}.amazonaws.com kms:Encrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/slurm): allowed by Logs",
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Named: logs.${AWS::Region}.amazonaws.com kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/slurm): allowed by Logs",
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Named: logs.${AWS::Region}.amazonaws.com kms:ReEncryptFrom on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/slurm): allowed by Logs",
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Named: logs.${AWS::Region}.amazonaws.com kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/slurm): allowed by Logs",
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Named: logs.${AWS::Region}.amazonaws.com kms:DescribeKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/app/slurm): allowed by Describe",
        "FAILS: CloudWatch Logs -> log group's KMS key: env/Obs/Unnamed: logs.${AWS::Region}.amazonaws.com kms:Encrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${env/Obs|Unnamed}): no statement allows it (implicit deny)",
        "FAILS: CloudWatch Logs -> log group's KMS key: env/Obs/Unnamed: logs.${AWS::Region}.amazonaws.com kms:Decrypt on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${env/Obs|Unnamed}): no statement allows it (implicit deny)",
        "FAILS: CloudWatch Logs -> log group's KMS key: env/Obs/Unnamed: logs.${AWS::Region}.amazonaws.com kms:ReEncryptFrom on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${env/Obs|Unnamed}): no statement allows it (implicit deny)",
        "FAILS: CloudWatch Logs -> log group's KMS key: env/Obs/Unnamed: logs.${AWS::Region}.amazonaws.com kms:GenerateDataKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${env/Obs|Unnamed}): no statement allows it (implicit deny)",
        "ok: CloudWatch Logs -> log group's KMS key: env/Obs/Unnamed: logs.${AWS::Region}.amazonaws.com kms:DescribeKey on ${env/Obs|Key.Arn} (aws:SecureTransport=true, kms:EncryptionContext:aws:logs:arn=arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${env/Obs|Unnamed}): allowed by Describe",
        "FAILS: CloudWatch Logs -> log group's KMS key: env/Obs/Foreign: arn:aws:kms:us-east-1:111111111111:key/k is not a key of the assembly",
    ]


def test_the_grafana_role_is_trusted_for_its_workspace_and_reads_every_amp_workspace_and_cloudwatch() -> None:
    """The workspace role: Grafana's trust for this workspace, the four AMP reads on every AMP workspace, the two CloudWatch
    reads; a workspace whose role is not a role of the assembly fails."""
    assert lines(prove_grafana, grafana(), "env/Obs") == [
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/GrafanaRole (trust): grafana.amazonaws.com sts:AssumeRole on ${env/Obs|GrafanaRole.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}, aws:SourceArn=arn:${AWS::Partition}:grafana:${AWS::Region}:${AWS::AccountId}:/workspaces/${env/Obs|Grafana.Id}): allowed by Trust",
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:QueryMetrics on ${env/Obs|Amp.Arn}: allowed by Read",
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetSeries on ${env/Obs|Amp.Arn}: allowed by Read",
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetLabels on ${env/Obs|Amp.Arn}: allowed by Read",
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetMetricMetadata on ${env/Obs|Amp.Arn}: allowed by Read",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:QueryMetrics on ${env/Obs|Other.Arn}: no statement allows it (implicit deny)",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetSeries on ${env/Obs|Other.Arn}: no statement allows it (implicit deny)",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetLabels on ${env/Obs|Other.Arn}: no statement allows it (implicit deny)",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} aps:GetMetricMetadata on ${env/Obs|Other.Arn}: no statement allows it (implicit deny)",
        "ok: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} cloudwatch:GetMetricData on *: allowed by Metrics",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Grafana: ${env/Obs|GrafanaRole.Arn} cloudwatch:ListMetrics on *: no statement allows it (implicit deny)",
        "FAILS: Grafana workspace -> AMP and CloudWatch: env/Obs/Orphan: the workspace names no role of the assembly",
    ]


def test_the_grafana_provisioner_needs_update_permissions_every_identity_center_read_and_their_decrypt() -> None:
    """Only the Lambda role granted UpdatePermissions is the provisioner; each Identity Center read and each of its dependent
    actions, kms:Decrypt with the context of the service that makes it (sso or the identity store)."""
    assert lines(prove_grafana_admins, grafana_admins(), "env/Obs") == [
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} grafana:UpdatePermissions on arn:${AWS::Partition}:grafana:${AWS::Region}:${AWS::AccountId}:/workspaces/${env/Obs|Grafana.Id}: allowed by Update",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:DescribeRegisteredRegions on *: allowed by Reads",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:GetSharedSsoConfiguration on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:GetSharedSsoConfiguration needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:ListDirectoryAssociations on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:ListDirectoryAssociations needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:GetManagedApplicationInstance on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:GetManagedApplicationInstance needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:ListProfiles on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:ListProfiles needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:ListProfiles needs it): ${env/Obs|Provisioner.Arn} sso:GetProfile on *: allowed by Reads",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:GetProfile on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:GetProfile needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso:ListProfileAssociations on *: allowed by Reads",
        "FAILS: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso:ListProfileAssociations needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:sso:instance-arn=arn:${AWS::Partition}:sso:::instance/ssoins-mlc-run-time-value, kms:ViaService=sso.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso-directory:DescribeUser on *: allowed by Reads",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso-directory:DescribeUser needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:identitystore:identitystore-arn=arn:${AWS::Partition}:identitystore::${AWS::AccountId}:identitystore/d-mlc-run-time-value, kms:ViaService=identitystore.${AWS::Region}.amazonaws.com): allowed by Decrypt",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana: ${env/Obs|Provisioner.Arn} sso-directory:DescribeGroup on *: allowed by Reads",
        "ok: Grafana provisioner -> IAM Identity Center (UpdatePermissions, AWS_SSO): env/Obs/Provisioner for Grafana (sso-directory:DescribeGroup needs it): ${env/Obs|Provisioner.Arn} kms:Decrypt on * (kms:EncryptionContext:aws:identitystore:identitystore-arn=arn:${AWS::Partition}:identitystore::${AWS::AccountId}:identitystore/d-mlc-run-time-value, kms:ViaService=identitystore.${AWS::Region}.amazonaws.com): allowed by Decrypt",
    ]


def test_hyperpod_groups_are_proven_in_the_clusters_own_vpc_settings() -> None:
    """A group without OverrideVpcConfig creates its ENIs in the cluster's VpcConfig: each subnet and security group; a
    group whose role is not a role of the assembly fails."""
    assert lines(prove_hyperpod_roles, hyperpod(), "env/Obs") == [
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs/Exec (trust): sagemaker.amazonaws.com sts:AssumeRole on ${env/Obs|Exec.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}): allowed by Trust",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} s3:ListBucket on arn:${AWS::Partition}:s3:::lifecycle (s3:prefix=hp/): allowed by List",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} s3:GetObject on arn:${AWS::Partition}:s3:::lifecycle/hp/on_create.sh: allowed by Get",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} ec2:CreateNetworkInterface on arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:network-interface/mlc-run-time-value: allowed by Eni",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} ec2:CreateNetworkInterface on arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:subnet/subnet-1: allowed by Eni",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} ec2:CreateNetworkInterface on arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:subnet/subnet-2: allowed by Eni",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} ec2:CreateNetworkInterface on arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:security-group/sg-1: allowed by Eni",
        "ok: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group workers: ${env/Obs|Exec.Arn} ec2:DescribeNetworkInterfaces on *: allowed by Eni",
        "FAILS: SageMaker HyperPod -> execution role, lifecycle bucket, ENIs: env/Obs group login: the execution role is not a role of the assembly",
    ]


def test_every_lambda_functions_role_of_the_assembly_must_trust_lambda() -> None:
    """A function whose role Lambda may not assume fails; one whose role is elsewhere (or absent) is not this gate's."""
    assert lines(prove_lambda_trust, functions(), "env/Obs") == [
        "ok: Lambda -> handler roles: env/Obs/Handler (trust): lambda.amazonaws.com sts:AssumeRole on ${env/Obs|Handler.Arn} (aws:SecureTransport=true): allowed by Trust",
        "FAILS: Lambda -> handler roles: env/Obs/Wrong (trust): lambda.amazonaws.com sts:AssumeRole on ${env/Obs|Wrong.Arn} (aws:SecureTransport=true): no statement allows it (implicit deny)",
    ]


def test_a_backup_selection_needs_both_aws_managed_policies_and_versioned_buckets() -> None:
    """Every bucket of the assembly the selection names must be versioned (Suspended is not Enabled); a bucket outside the
    app is its owner's."""
    assert lines(prove_backup, storage(), "env/Storage") == [
        "ok: AWS Backup -> data bucket: env/Storage/BackupRole (trust): backup.amazonaws.com sts:AssumeRole on ${env/Storage|BackupRole.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}): allowed by Trust",
        "ok: AWS Backup -> data bucket: env/Storage/Selection: BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Backup",
        "ok: AWS Backup -> data bucket: env/Storage/Selection: BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Restore",
        "ok: AWS Backup -> data bucket: env/Storage/Selection: Data versioning is Enabled",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: Scratch versioning is Suspended",
        "FAILS: AWS Backup -> data bucket: env/Storage/Elsewhere: the selection's role is not a role of the assembly",
    ]


def test_the_vault_key_admits_the_deployer_and_the_source_buckets_key_the_backup_role() -> None:
    """The vault's key: the deployer's four calls through Backup; the SSE-KMS source bucket's key: the backup role's Decrypt and
    DescribeKey through S3; an unencrypted vault or bucket has no key to prove."""
    assert lines(prove_backup_keys, storage(), "env/Storage") == [
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Vault: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:CreateGrant on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=backup.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Vault: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:DescribeKey on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=backup.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Vault: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:GenerateDataKey on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=backup.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Vault: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:Decrypt on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=backup.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Selection reads Data: ${env/Storage|BackupRole.Arn} kms:Decrypt on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=s3.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: AWS Backup -> vault key and the source bucket's key: env/Storage/Selection reads Data: ${env/Storage|BackupRole.Arn} kms:DescribeKey on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=s3.${AWS::Region}.amazonaws.com): allowed by Root",
    ]


def test_an_amp_workspace_key_admits_the_deployer_through_aps() -> None:
    """The deployer's four calls through aps on the workspace's key; a key outside the assembly fails; no key, nothing."""
    assert lines(prove_amp_key, storage(), "env/Storage") == [
        "ok: Amazon Managed Prometheus -> its KMS key: env/Storage/Amp: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:CreateGrant on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=aps.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: Amazon Managed Prometheus -> its KMS key: env/Storage/Amp: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:DescribeKey on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=aps.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: Amazon Managed Prometheus -> its KMS key: env/Storage/Amp: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:GenerateDataKey on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=aps.${AWS::Region}.amazonaws.com): allowed by Root",
        "ok: Amazon Managed Prometheus -> its KMS key: env/Storage/Amp: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region} kms:Decrypt on ${env/Storage|Key.Arn} (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=aps.${AWS::Region}.amazonaws.com): allowed by Root",
        "FAILS: Amazon Managed Prometheus -> its KMS key: env/Storage/ForeignAmp: arn:aws:kms:us-east-1:111111111111:key/elsewhere is not a customer managed key of the assembly",
    ]


def test_each_dra_is_proven_for_its_own_file_systems_role_and_events() -> None:
    """Each DRA: the calls its import and export events make, not denied by the bucket policy (a deny of that role's writes
    fails); with S3 Bucket Keys the key calls carry the bucket's ARN and the key policy must name that file system's role."""
    assert lines(prove_fsx_dra, storage(), "env/Storage") == [
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/ToScratch: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-s s3:ListBucket on arn:${AWS::Partition}:s3:::${env/Storage|Scratch} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-s, aws:SecureTransport=true, s3:TlsVersion=1.2): denied by All (resource policy)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/ToScratch: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-s s3:GetObject on arn:${AWS::Partition}:s3:::${env/Storage|Scratch}/mlc-run-time-value (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-s, aws:SecureTransport=true, s3:TlsVersion=1.2): denied by All (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good s3:ListBucket on arn:${AWS::Partition}:s3:::${env/Storage|Data} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good s3:GetObject on arn:${AWS::Partition}:s3:::${env/Storage|Data}/mlc-run-time-value (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good s3:GetBucketNotification on arn:${AWS::Partition}:s3:::${env/Storage|Data} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good s3:PutBucketNotification on arn:${AWS::Partition}:s3:::${env/Storage|Data} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good kms:Encrypt on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): allowed by Fsx",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good kms:Decrypt on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): allowed by Fsx",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good kms:ReEncryptFrom on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): allowed by Fsx",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Good (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good kms:GenerateDataKey on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-good, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): allowed by Fsx",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other s3:ListBucket on arn:${AWS::Partition}:s3:::${env/Storage|Data} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other s3:GetObject on arn:${AWS::Partition}:s3:::${env/Storage|Data}/mlc-run-time-value (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other s3:PutObject on arn:${AWS::Partition}:s3:::${env/Storage|Data}/mlc-run-time-value (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, s3:TlsVersion=1.2): denied by NoWrites (resource policy)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other kms:Encrypt on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): no statement allows it (implicit deny)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other kms:Decrypt on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): no statement allows it (implicit deny)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other kms:ReEncryptFrom on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): no statement allows it (implicit deny)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Other (key): arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other kms:GenerateDataKey on ${env/Storage|Key.Arn} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-other, aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:EncryptionContext:aws:s3:arn=arn:${AWS::Partition}:s3:::${env/Storage|Data}, kms:ViaService=s3.${AWS::Region}.amazonaws.com, s3:TlsVersion=1.2): no statement allows it (implicit deny)",
    ]


def test_a_backup_of_a_bucket_under_a_foreign_key_fails_every_check() -> None:
    """A role without the AWS managed policies and an unversioned bucket fail, each naming what is missing."""
    assert lines(prove_backup, foreign_key_bucket(), "env/Storage") == [
        "ok: AWS Backup -> data bucket: env/Storage/BackupRole (trust): backup.amazonaws.com sts:AssumeRole on ${env/Storage|BackupRole.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}): allowed by Trust",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Backup",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: BackupRole has the AWS managed AWSBackupServiceRolePolicyForS3Restore",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: Data versioning is None",
    ]


def test_a_backup_role_cannot_read_a_bucket_under_a_key_the_assembly_does_not_hold() -> None:
    """A dual-layer SSE-KMS key outside the assembly: no key policy is read, so nothing allows the role."""
    assert lines(prove_backup_keys, foreign_key_bucket(), "env/Storage") == [
        "FAILS: AWS Backup -> vault key and the source bucket's key: env/Storage/Selection reads Data: ${env/Storage|BackupRole.Arn} kms:Decrypt on arn:aws:kms:us-east-1:111111111111:key/elsewhere (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=s3.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
        "FAILS: AWS Backup -> vault key and the source bucket's key: env/Storage/Selection reads Data: ${env/Storage|BackupRole.Arn} kms:DescribeKey on arn:aws:kms:us-east-1:111111111111:key/elsewhere (aws:SecureTransport=true, kms:CallerAccount=${AWS::AccountId}, kms:ViaService=s3.${AWS::Region}.amazonaws.com): no statement allows it (implicit deny)",
    ]


def test_a_dra_bucket_under_a_dual_layer_key_outside_the_assembly_fails() -> None:
    """aws:kms:dsse is SSE-KMS too: after the bucket's requests, the key the gate cannot read fails."""
    assert lines(prove_fsx_dra, foreign_key_bucket(), "env/Storage") == [
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Dra: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-1 s3:ListBucket on arn:${AWS::Partition}:s3:::${env/Storage|Data} (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-1, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "ok: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Dra: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-1 s3:GetObject on arn:${AWS::Partition}:s3:::${env/Storage|Data}/mlc-run-time-value (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-1, aws:SecureTransport=true, s3:TlsVersion=1.2): no statement allows it (implicit deny) (resource policy)",
        "FAILS: FSx data repository association -> S3 bucket and its KMS key: env/Storage/Dra: arn:aws:kms:us-east-1:111111111111:key/elsewhere is not a customer managed key of the assembly",
    ]


def test_node_scripts_are_proven_per_group_by_s3_access_or_an_attached_policy() -> None:
    """Each group's scripts once (a Sequence's steps; a step without a script is skipped): S3Access matching the key or an
    attached managed policy; the bucket policy's deny; an SSE-KMS bucket; a bucket outside the app only its own check."""
    assert lines(prove_pcluster_node_scripts, pcluster(), "env/C") == [
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster HeadNode s3://${env/C|Scripts}/head.sh: S3Access grants s3:GetObject on ${env/C|Scripts}/head.sh; attached policies: no statement allows it (implicit deny)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster HeadNode s3://${env/C|Scripts}/head.sh: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value s3:GetObject on arn:${AWS::Partition}:s3:::${env/C|Scripts}/head.sh (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value, aws:SecureTransport=true): no statement allows it (implicit deny) (resource policy)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster HeadNode s3://${env/C|Scripts}/head.sh: SSE-S3: S3Access needs no key grant",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Scripts}/a.sh: S3Access grants no s3:GetObject on ${env/C|Scripts}/a.sh; attached policies: allowed by Read",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Scripts}/a.sh: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value s3:GetObject on arn:${AWS::Partition}:s3:::${env/C|Scripts}/a.sh (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value, aws:SecureTransport=true): no statement allows it (implicit deny) (resource policy)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Scripts}/a.sh: SSE-S3: S3Access needs no key grant",
        "FAILS: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://elsewhere/b.sh: S3Access grants no s3:GetObject on elsewhere/b.sh; attached policies: no statement allows it (implicit deny)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Sealed}/c.sh: S3Access grants s3:GetObject on ${env/C|Sealed}/c.sh; attached policies: no statement allows it (implicit deny)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Sealed}/c.sh: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value s3:GetObject on arn:${AWS::Partition}:s3:::${env/C|Sealed}/c.sh (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value, aws:SecureTransport=true): no statement allows it (implicit deny) (resource policy)",
        "FAILS: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster gpu s3://${env/C|Sealed}/c.sh: SSE-KMS with arn:aws:kms:::key/k: ParallelCluster's S3Access grants no kms:Decrypt",
        "FAILS: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster LoginNodes login s3://${env/C|Scripts}/login.sh: S3Access grants no s3:GetObject on ${env/C|Scripts}/login.sh; attached policies: no statement allows it (implicit deny)",
        "FAILS: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster LoginNodes login s3://${env/C|Scripts}/login.sh: arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value s3:GetObject on arn:${AWS::Partition}:s3:::${env/C|Scripts}/login.sh (aws:PrincipalArn=arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-Rolemlc-run-time-value, aws:SecureTransport=true): denied by NoLogin (resource policy)",
        "ok: ParallelCluster nodes -> their CustomActions scripts: env/C/Cluster LoginNodes login s3://${env/C|Scripts}/login.sh: SSE-S3: S3Access needs no key grant",
    ]


def _statement_actions(sid: str) -> tuple[str, ...]:
    """The actions of the statement ``sid`` of ParallelCluster's documented policy (the copy the gate reads)."""
    (actions,) = [a for _, s, a in pcluster_policies.STATEMENTS if s == sid]
    return actions


#: One request of ParallelCluster's provider: (what, action, resource ARN, context).
ProviderRequest = tuple[str, str, str, Mapping[str, str]]
TAGGED = {"aws:TagKeys": "parallelcluster:cluster-name"}
PREFIX = "arn:${AWS::Partition}:"
REGION_ACCOUNT = "${AWS::Region}:${AWS::AccountId}"


def test_an_existing_file_system_and_a_login_pool_need_their_statements_on_their_resources() -> None:
    """An existing FSx file system is described and tagged (not created); a login pool's Auto Scaling and load
    balancer calls, tagged where ParallelCluster's statement requires it, and their two service-linked roles."""
    slr = f"{PREFIX}iam::${{AWS::AccountId}}:role/aws-service-role"
    file_system = f"{PREFIX}fsx:{REGION_ACCOUNT}:file-system/mlc-run-time-value"
    expected: list[ProviderRequest] = [
        (f"{contracts._FSX} FSx", action, file_system, {})
        for action in ("fsx:Describe*", "fsx:ListTagsForResource", "fsx:TagResource")
    ]
    expected += [
        (f"{contracts._LOGIN} LoginNodesFunctionalities", action, "*", TAGGED)
        for action in _statement_actions("LoginNodesFunctionalities")
    ]
    expected += [
        (f"{contracts._LOGIN} LoginNodesFunctionalitiesNoCondition", action, "*", {})
        for action in _statement_actions("LoginNodesFunctionalitiesNoCondition")
    ]
    expected += [
        (
            f"{contracts._LOGIN} IamRole",
            "iam:CreateServiceLinkedRole",
            f"{slr}/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling",
            {"iam:AWSServiceName": "autoscaling.amazonaws.com"},
        ),
        (
            f"{contracts._LOGIN} IamRole",
            "iam:CreateServiceLinkedRole",
            f"{slr}/elasticloadbalancing.amazonaws.com/AWSServiceRoleForElasticLoadBalancing",
            {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"},
        ),
    ]
    assert list(contracts._provider_requests("c1", [contracts._FSX, contracts._LOGIN])) == expected


def test_dns_dashboards_logs_and_efs_need_every_action_of_their_statements() -> None:
    """Each feature's statement, all its actions: Route 53 and CloudWatch on *, EFS on a file system, Logs on *."""
    expected: list[ProviderRequest] = [
        (f"{contracts._DNS} Route53HostedZones", a, "*", {}) for a in _statement_actions("Route53HostedZones")
    ]
    expected += [(f"{contracts._DASHBOARDS} CloudWatch", a, "*", {}) for a in _statement_actions("CloudWatch")]
    expected += [
        (f"{contracts._EFS} EFS", a, f"{PREFIX}elasticfilesystem:{REGION_ACCOUNT}:file-system/mlc-run-time-value", {})
        for a in _statement_actions("EFS")
    ]
    expected += [(f"{contracts._LOGS} CloudWatchLogs", a, "*", {}) for a in _statement_actions("CloudWatchLogs")]
    features = [contracts._DNS, contracts._DASHBOARDS, contracts._LOGS, contracts._EFS]
    got = list(contracts._provider_requests("c1", features))
    assert sorted(got, key=str) == sorted(expected, key=str) and len(got) == len(expected)


def test_every_cluster_needs_the_always_statements_on_that_clusters_own_resources() -> None:
    """What every cluster needs: each target (with its context) named for cluster ``c1``, each statement's
    actions on each of its targets (IamRole: only DeleteRole and TagRole on the cluster's roles)."""
    node = f"{PREFIX}iam::${{AWS::AccountId}}:role/parallelcluster/c1/c1-RoleHeadNode-mlc-run-time-value"
    cleanup = (
        f"{PREFIX}iam::${{AWS::AccountId}}:role/parallelcluster/c1-CleanupResourcesFunctionExecutionRole-"
        "mlc-run-time-value"
    )
    profile = f"{PREFIX}iam::${{AWS::AccountId}}:instance-profile/parallelcluster/c1/mlc-run-time-value"
    stack = f"{PREFIX}cloudformation:{REGION_ACCOUNT}:stack/c1/mlc-run-time-value"
    bucket = f"{PREFIX}s3:::parallelcluster-mlc-run-time-value-v1-do-not-delete"
    targets: dict[str, list[tuple[str, Mapping[str, str]]]] = {
        "EC2ReadAndWrite": [("*", {})],
        "DynamoDB": [(f"{PREFIX}dynamodb:{REGION_ACCOUNT}:table/parallelcluster-c1", {})],
        "CloudFormationCreateAndUpdate": [(stack, TAGGED)],
        "CloudFormationReadAndDelete": [(stack, {})],
        "IamRead": [(node, {}), (cleanup, {}), (profile, {})],
        "IamInstanceProfile": [(profile, {})],
        "IamPassRole": [
            (node, {"iam:PassedToService": "ec2.amazonaws.com"}),
            (cleanup, {"iam:PassedToService": "lambda.amazonaws.com"}),
        ],
        "Lambda": [(f"{PREFIX}lambda:{REGION_ACCOUNT}:function:pcluster-mlc-run-time-value", {})],
        "S3ResourcesBucket": [(bucket, {}), (f"{bucket}/x", {})],
        "S3ParallelClusterReadOnly": [(f"{PREFIX}s3:::${{AWS::Region}}-aws-parallelcluster/mlc-run-time-value", {})],
        "ResourceGroupRead": [(f"{PREFIX}resource-groups:{REGION_ACCOUNT}:group/mlc-run-time-value", {})],
        "IamRole": [(node, {}), (cleanup, {})],
        "IamInlinePolicyAndCreateRole": [(node, {}), (cleanup, {})],
    }
    expected: list[ProviderRequest] = []
    for _, sid, actions in pcluster_policies.STATEMENTS:
        if sid not in targets:
            continue
        uses = ("iam:DeleteRole", "iam:TagRole") if sid == "IamRole" else actions
        if sid == "IamPassRole":
            expected += [(f"always {sid}", a, r, c) for r, c in targets[sid] for a in uses]
        else:
            expected += [(f"always {sid}", a, r, c) for a in uses for r, c in targets[sid]]
    assert list(contracts._provider_requests("c1", [contracts._ALWAYS])) == expected


def test_a_use_naming_an_action_its_statement_lacks_is_undecided(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision that claims an action ParallelCluster's statement does not hold is reported, not proven."""
    use = contracts.ProviderUse(contracts._EFS, (("*", {}),), ("elasticfilesystem:DescribeFileSystems", "s3:PutObject"))
    monkeypatch.setitem(contracts.PCLUSTER_PROVIDER_USES, "EFS", (use,))
    (policy,) = [p for p, sid, _ in pcluster_policies.STATEMENTS if sid == "EFS"]
    assert list(contracts._provider_requests("c1", [contracts._EFS])) == [
        (f"{contracts._EFS} EFS", "elasticfilesystem:DescribeFileSystems", "*", {}),
        (f"undecided {policy} EFS (s3:PutObject is not the statement's)", "", "", {}),
    ]


@pytest.mark.parametrize(
    ("config", "features"),
    [
        ({}, ["always", "dns", "dashboards", "logs"]),
        ({"Scheduling": {"SlurmSettings": {"Dns": {"DisableManagedDns": True}}}}, ["always", "dashboards", "logs"]),
        (
            {"Scheduling": {"SlurmSettings": {"Dns": {"DisableManagedDns": False}}}},
            ["always", "dns", "dashboards", "logs"],
        ),
        ({"Monitoring": {"Dashboards": {"CloudWatch": {"Enabled": False}}}}, ["always", "dns", "dashboards", "logs"]),
        ({"Monitoring": {"Alarms": {"Enabled": False}}}, ["always", "dns", "dashboards", "logs"]),
        (
            {"Monitoring": {"Dashboards": {"CloudWatch": {"Enabled": False}}, "Alarms": {"Enabled": False}}},
            ["always", "dns", "logs"],
        ),
        ({"Monitoring": {"Logs": {"CloudWatch": {"Enabled": False}}}}, ["always", "dns", "dashboards"]),
        (
            {"SharedStorage": [{"StorageType": "FsxLustre", "FsxLustreSettings": {}}]},
            ["always", "dns", "dashboards", "logs"],
        ),
        (
            {"SharedStorage": [{"StorageType": "FsxLustre", "FsxLustreSettings": {"FileSystemId": "fs-1"}}]},
            ["always", "dns", "dashboards", "logs", "fsx"],
        ),
        (
            {"SharedStorage": [{"StorageType": "Efs", "FsxLustreSettings": {"FileSystemId": "fs-1"}}]},
            ["always", "dns", "dashboards", "logs", "efs"],
        ),
        ({"LoginNodes": {"Pools": []}}, ["always", "dns", "dashboards", "logs"]),
        ({"LoginNodes": {"Pools": [{"Name": "login"}]}}, ["always", "dns", "dashboards", "logs", "login"]),
    ],
)
def test_the_features_of_a_configuration_follow_parallelclusters_defaults(
    config: dict[str, Any], features: list[str]
) -> None:
    """Managed DNS, dashboards, alarms and logs are on unless turned off (ParallelCluster's defaults); dashboards'
    rights stay while either dashboards or alarms are on; FSx only for an existing file system; login pools only
    when one is listed."""
    names = {
        "always": contracts._ALWAYS,
        "dns": contracts._DNS,
        "dashboards": contracts._DASHBOARDS,
        "logs": contracts._LOGS,
        "fsx": contracts._FSX,
        "efs": contracts._EFS,
        "login": contracts._LOGIN,
    }
    assert contracts._pcluster_features(config) == [names[f] for f in features]


def test_the_provider_role_is_held_to_every_request_of_the_clusters_features_and_policies() -> None:
    """The provider's proofs in order: Lambda's trust; every request of the configuration's features, with the
    region and the configuration's permissions boundary; attach and detach of each configured policy once (no
    CloudWatch agent policy with logs off); detaching the app's own node policy, refused here by the role."""
    boundary = "arn:aws:iam::111111111111:policy/boundary"
    context = f"aws:RequestedRegion=${{AWS::Region}}, iam:PermissionsBoundary={boundary}"
    head = "on arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-RoleHeadNode-mlc-run-time-value"
    who = "ok: ParallelCluster provider -> what it creates for the cluster: env/C/Cluster"
    features = [contracts._ALWAYS, contracts._FSX, contracts._LOGIN]
    expected = [
        "ok: ParallelCluster provider -> what it creates for the cluster: env/C/ProviderRole (trust): "
        "lambda.amazonaws.com sts:AssumeRole on ${env/C|ProviderRole.Arn} (aws:SecureTransport=true): allowed by Trust"
    ]
    for what, action, target, extra in contracts._provider_requests("c1", features):
        keys = ", ".join(
            f"{k}={v}"
            for k, v in sorted(
                {**extra, "aws:RequestedRegion": "${AWS::Region}", "iam:PermissionsBoundary": boundary}.items()
            )
        )
        expected.append(f"{who} ({what}): ${{env/C|ProviderRole.Arn}} {action} on {target} ({keys}): allowed by All")
    for policy in ("${env/C|NodePolicy}", "arn:aws:iam::aws:policy/X", "arn:aws:iam::aws:policy/LoginOnly"):
        for action in ("iam:AttachRolePolicy", "iam:DetachRolePolicy"):
            expected.append(
                f"{who} (AdditionalIamPolicies): ${{env/C|ProviderRole.Arn}} {action} {head} ({context}, "
                f"iam:PolicyARN={policy}): allowed by All"
            )
    expected.append(
        "FAILS: ParallelCluster provider -> what it creates for the cluster: env/C/Cluster (an edit drops a policy): "
        f"${{env/C|ProviderRole.Arn}} iam:DetachRolePolicy {head} ({context}, iam:PolicyARN=arn:${{AWS::Partition}}:"
        "iam::${AWS::AccountId}:policy/parallelcluster/env-C-CollectorRemoteWrite121D47A5-mlc-run-time-value): "
        "denied by KeepOwn"
    )
    assert lines(prove_pcluster_provider, pcluster(), "env/C") == expected


def test_with_logs_on_the_provider_attaches_the_cloudwatch_agent_policy_and_names_the_deployed_stack() -> None:
    """Logs on (the default) add CloudWatchAgentServerPolicy to the policies attached; no boundary, no boundary key;
    the dropped policy's ARN is named after the stack's CloudFormation name (``env-C`` for ``env/C``)."""
    config = {
        "HeadNode": {"Iam": {"AdditionalIamPolicies": [{"Policy": "arn:aws:iam::aws:policy/X"}]}},
        "Scheduling": {"SlurmSettings": {"Dns": {"DisableManagedDns": True}}},
        "Monitoring": {"Dashboards": {"CloudWatch": {"Enabled": False}}, "Alarms": {"Enabled": False}},
    }
    assembly = Assembly({"env/C": {"Resources": pcluster(config)}})
    proofs = [p for p in prove_pcluster_provider(assembly, "env") if "Policies" in p.subject or "drops" in p.subject]
    head = "on arn:${AWS::Partition}:iam::${AWS::AccountId}:role/parallelcluster/c1/c1-RoleHeadNode-mlc-run-time-value"
    agent = "arn:${AWS::Partition}:iam::aws:policy/CloudWatchAgentServerPolicy"
    owned = "arn:${AWS::Partition}:iam::${AWS::AccountId}:policy/parallelcluster/env-C-CollectorRemoteWrite121D47A5-mlc-run-time-value"
    assert [(p.ok, p.subject, p.detail) for p in proofs] == [
        (
            True,
            f"env/C/Cluster ({subject})",
            f"${{env/C|ProviderRole.Arn}} {action} {head} (aws:RequestedRegion=${{AWS::Region}}, iam:PolicyARN={policy}): {decision}",
        )
        for subject, action, policy, decision in [
            ("AdditionalIamPolicies", "iam:AttachRolePolicy", "arn:aws:iam::aws:policy/X", "allowed by All"),
            ("AdditionalIamPolicies", "iam:DetachRolePolicy", "arn:aws:iam::aws:policy/X", "allowed by All"),
            ("AdditionalIamPolicies", "iam:AttachRolePolicy", agent, "allowed by All"),
            ("AdditionalIamPolicies", "iam:DetachRolePolicy", agent, "allowed by All"),
        ]
    ] + [
        (
            False,
            "env/C/Cluster (an edit drops a policy)",
            f"${{env/C|ProviderRole.Arn}} iam:DetachRolePolicy {head} (aws:RequestedRegion=${{AWS::Region}}, "
            f"iam:PolicyARN={owned}): denied by KeepOwn",
        )
    ]


# -- the readers every prover shares ------------------------------------------------------------------------


def test_a_roles_statements_are_its_inline_attached_and_pointing_policies_and_no_other_roles() -> None:
    """Inline policies, customer managed policies it lists, and AWS::IAM::Policy / ManagedPolicy resources naming it
    in Roles; an AWS managed ARN (not readable here), another role's policy and non-statement entries are left out."""
    one = allow("Inline", "s3:GetObject")
    listed = allow("Listed", "s3:PutObject")
    pointing = allow("Pointing", "sqs:SendMessage")
    managed_pointing = allow("ManagedPointing", "sns:Publish")
    resources = {
        "Target": role("lambda.amazonaws.com", one, ManagedPolicyArns=[ref("Listed"), "arn:aws:iam::aws:policy/X"]),
        "Other": role("lambda.amazonaws.com"),
        "Listed": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Properties": {"PolicyDocument": {"Statement": [listed, "junk"]}},
        },
        "Pointing": {
            "Type": "AWS::IAM::Policy",
            "Properties": {"Roles": [ref("Other"), ref("Target")], "PolicyDocument": document(pointing)},
        },
        "ManagedPointing": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Properties": {"Roles": [ref("Target")], "PolicyDocument": document(managed_pointing)},
        },
        "ForOther": {
            "Type": "AWS::IAM::Policy",
            "Properties": {"Roles": [ref("Other")], "PolicyDocument": document(deny("No", "*"))},
        },
        "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
    }
    resources["Target"]["Properties"]["ManagedPolicyArns"].append(ref("Bucket"))
    assembly = Assembly({"env/S": {"Resources": resources}})
    target = assembly.resource("${env/S|Target}")
    assert target is not None
    assert contracts.role_policies(assembly, "env", target) == [one, listed, pointing, managed_pointing]


def test_a_policy_document_that_is_not_a_document_has_no_statements() -> None:
    """A document rendered to a string (an intrinsic the gate leaves unresolved) or without Statement: none."""
    assembly = Assembly({"env/S": {"Resources": {}}})
    assert contracts._statements(assembly, "env/S", {"Fn::If": ["c", {}, {}]}) == []
    assert contracts._statements(assembly, "env/S", {"Version": "2012-10-17"}) == []


def test_topic_keys_and_key_policies_are_read_only_from_the_assembly() -> None:
    """A topic's rendered key (none: unencrypted; a topic the assembly lacks: none); a key reference resolves only to
    an AWS::KMS::Key of the assembly, with its policy's statements."""
    statement = allow("Root", "kms:*", "*", {"AWS": "arn:aws:iam::111111111111:root"})
    resources = {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": document(statement)}},
        "Alias": {"Type": "AWS::KMS::Alias", "Properties": {}},
        "Sealed": {"Type": "AWS::SNS::Topic", "Properties": {"KmsMasterKeyId": arn("Key")}},
        "Open": {"Type": "AWS::SNS::Topic", "Properties": {}},
    }
    assembly = Assembly({"env/S": {"Resources": resources}})
    assert contracts.topic_key(assembly, "${env/S|Sealed}") == "${env/S|Key.Arn}"
    assert contracts.topic_key(assembly, "${env/S|Open}") is None
    assert contracts.topic_key(assembly, "${env/S|Missing}") is None
    key, statements = contracts.key_policy(assembly, "${env/S|Key.Arn}")
    assert key is not None and key.logical_id == "Key" and statements == [statement]
    assert contracts.key_policy(assembly, "${env/S|Alias}") == (None, [])
    assert contracts.key_policy(assembly, "arn:aws:kms:us-east-1:111111111111:key/k") == (None, [])


@pytest.mark.parametrize(
    ("encryption", "expected"),
    [
        ({}, (None, False)),
        (sse_kms("k1"), ("k1", False)),
        (sse_kms("k1", bucket_keys=True), ("k1", True)),
        (sse_kms("k1", algorithm="aws:kms:dsse"), ("k1", False)),
        (sse_kms("k1", algorithm="AES256"), (None, False)),
        (sse_kms("", bucket_keys=True), (None, False)),
        (
            {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}},
                    *sse_kms("k2", bucket_keys=True)["ServerSideEncryptionConfiguration"],
                ]
            },
            ("k2", True),
        ),
    ],
    ids=["sse-s3-default", "sse-kms", "bucket-keys", "dsse", "aes256-with-key", "no-key-id", "second-rule"],
)
def test_a_buckets_key_is_its_sse_kms_rules_key(encryption: dict[str, Any], expected: tuple[str | None, bool]) -> None:
    """SSE-KMS (or dual-layer) with a key ID names the key and whether S3 Bucket Keys are on; SSE-S3 names none."""
    properties = {"BucketEncryption": encryption} if encryption else {}
    assembly = Assembly({"env/S": {"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": properties}}}})
    bucket = assembly.resource("${env/S|B}")
    assert bucket is not None
    assert contracts.bucket_key(assembly, bucket) == expected


def test_a_buckets_policy_is_the_one_naming_that_bucket() -> None:
    """The statements of the BucketPolicy whose Bucket is that bucket; a bucket without one has none."""
    mine = deny("Mine", "s3:*")
    resources = {
        "A": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "B": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "C": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "APolicy": {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {"Bucket": ref("A"), "PolicyDocument": document(deny("NotMine", "s3:*"))},
        },
        "BPolicy": {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {"Bucket": ref("B"), "PolicyDocument": document(mine)},
        },
    }
    assembly = Assembly({"env/S": {"Resources": resources}})
    assert contracts.bucket_policy(assembly, "env", "${env/S|B}") == [mine]
    assert contracts.bucket_policy(assembly, "env", "${env/S|C}") == []


def test_a_proof_prints_ok_or_fails_then_contract_subject_and_detail() -> None:
    assert str(Proof("c", "s", True, "d")) == "ok: c: s: d"
    assert str(Proof("c", "s", False, "d")) == "FAILS: c: s: d"


def test_prove_all_runs_every_contract_over_every_environment_in_order() -> None:
    """Environments in name order, contracts in table order: here two environments' Lambda and log group proofs."""
    templates = {
        f"{env}/Obs": {"Resources": {**functions(), **{k: v for k, v in logging().items() if k in ("Key", "Foreign")}}}
        for env in ("b", "a")
    }
    proofs = prove_all(Assembly(templates))
    assert [(p.contract, p.subject, p.ok) for p in proofs] == [
        (contracts.LOGS_KMS, "a/Obs/Foreign", False),
        (contracts.LAMBDA, "a/Obs/Handler (trust)", True),
        (contracts.LAMBDA, "a/Obs/Wrong (trust)", False),
        (contracts.LOGS_KMS, "b/Obs/Foreign", False),
        (contracts.LAMBDA, "b/Obs/Handler (trust)", True),
        (contracts.LAMBDA, "b/Obs/Wrong (trust)", False),
    ]
    assert [c.prove for c in CONTRACTS].index(prove_log_group_keys) < [c.prove for c in CONTRACTS].index(
        prove_lambda_trust
    )


def test_a_cluster_whose_service_token_is_not_a_provider_of_the_assembly_fails() -> None:
    """A ServiceToken the assembly does not hold (a provider deployed elsewhere): no role can be read, a failed proof."""
    cluster = {
        "Type": "Custom::PclusterCluster",
        "Properties": {"ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:provider", "ClusterName": "c"},
    }
    assert lines(prove_pcluster_provider, {"Cluster": cluster}, "env/C") == [
        "FAILS: ParallelCluster provider -> what it creates for the cluster: env/C/Cluster: the provider stack runs "
        "with no CustomLambdaRole of the assembly"
    ]


def test_a_backup_selection_without_a_body_has_nothing_to_prove() -> None:
    """A selection written without BackupSelection (CloudFormation requires it; a hand-made template may lack it):
    no role and no bucket, so its proofs fail for the role and no key is read, not a crash of the gate."""
    resources = {"Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": {}}}
    assert lines(prove_backup_keys, resources, "env/Storage") == []
    assert lines(prove_backup, resources, "env/Storage") == [
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: the selection's role is not a role of the assembly"
    ]


def test_a_decision_may_spell_an_action_in_another_case_than_parallelclusters_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """IAM action names are not case-sensitive: ParallelCluster's CloudWatchLogs statement spells
    ``logs:deleteMetricFilter``; a decision naming ``logs:DeleteMetricFilter`` is the statement's, not undecided."""
    assert "logs:deleteMetricFilter" in _statement_actions("CloudWatchLogs")
    use = contracts.ProviderUse(contracts._LOGS, (("*", {}),), ("logs:DeleteMetricFilter",))
    monkeypatch.setitem(contracts.PCLUSTER_PROVIDER_USES, "CloudWatchLogs", (use,))
    assert list(contracts._provider_requests("c1", [contracts._LOGS])) == [
        (f"{contracts._LOGS} CloudWatchLogs", "logs:DeleteMetricFilter", "*", {})
    ]


def test_a_selection_by_tags_alone_proves_its_role_and_no_bucket() -> None:
    """Resources is optional (ListOfTags selects instead): the role's trust and policies are proven, no bucket."""
    selection = {"IamRoleArn": arn("Role"), "SelectionName": "tagged", "ListOfTags": [{"ConditionKey": "backup"}]}
    resources = {
        "Role": role("backup.amazonaws.com"),
        "Selection": {"Type": "AWS::Backup::BackupSelection", "Properties": {"BackupSelection": selection}},
    }
    assert lines(prove_backup, resources, "env/Storage") == [
        "ok: AWS Backup -> data bucket: env/Storage/Role (trust): backup.amazonaws.com sts:AssumeRole on "
        "${env/Storage|Role.Arn} (aws:SecureTransport=true, aws:SourceAccount=${AWS::AccountId}): allowed by Trust",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: Role has the AWS managed "
        "AWSBackupServiceRolePolicyForS3Backup",
        "FAILS: AWS Backup -> data bucket: env/Storage/Selection: Role has the AWS managed "
        "AWSBackupServiceRolePolicyForS3Restore",
    ]


def test_a_configuration_without_a_head_node_has_no_script_to_prove() -> None:
    """HeadNode is required by ParallelCluster; a hand-made configuration without one (and a queue without
    CustomActions) proves no script rather than stopping the gate."""
    assert lines(prove_pcluster_node_scripts, pcluster({"Scheduling": {"SlurmQueues": [{"Name": "q"}]}}), "env/C") == []


def test_a_group_without_a_name_is_printed_with_a_question_mark() -> None:
    """Name is required of queues and login pools; a hand-made configuration without one still names the group's
    kind in the proof, with ``?`` where the name would be."""
    script = {"CustomActions": {"OnNodeConfigured": {"Script": "s3://elsewhere/x.sh"}}}
    config = {"Scheduling": {"SlurmQueues": [script]}, "LoginNodes": {"Pools": [script]}}
    proofs = prove_pcluster_node_scripts(Assembly({"env/C": {"Resources": pcluster(config)}}), "env")
    assert [p.subject for p in proofs] == [
        "env/C/Cluster ? s3://elsewhere/x.sh",
        "env/C/Cluster LoginNodes ? s3://elsewhere/x.sh",
    ]
