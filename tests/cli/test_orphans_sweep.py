"""``status``'s orphans, whole: the stacks and resources an environment left behind, and every request made.

Each test compares the complete list the operator reads (stack, status, bills, how to remove, how to
adopt) and the complete list of AWS requests (operation and every parameter) with ``==``, for an
account holding every kind of neighbour the lookup must tell apart: nested stacks, stacks of another
environment, ParallelCluster's own stack, resources of the live stacks named by ARN, id or name, the
backups and volumes FSx copies the file system's tags onto (issue 27, cli sweep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from mlcluster.cli import orphans
from mlcluster.cli.errors import EXIT_AWS, CliError
from mlcluster.config import Environment, load_environment
from tests.cli.conftest import REPO

ACCOUNT = "123456789012"
TAG = orphans.ENVIRONMENT_TAG


def client_error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Op")


class Recorder:
    """A client whose paginators answer the pages given per operation (or per ``StackName``) and record requests.

    ``pages[operation]`` is a list of pages, a ``{StackName: pages}`` mapping, or an exception to raise.
    """

    def __init__(self, pages: dict[str, Any]) -> None:
        self.pages = pages
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_paginator(self, operation: str) -> Any:
        recorder = self

        class Paginator:
            def paginate(self, **params: Any) -> list[dict[str, Any]]:
                recorder.calls.append((operation, params))
                answer = recorder.pages.get(operation, [{}])
                if isinstance(answer, Exception):
                    raise answer
                if isinstance(answer, dict):
                    found = answer.get(params.get("StackName"), [{}])
                    if isinstance(found, Exception):
                        raise found
                    return list(found)
                return list(answer)

        return Paginator()


def env_file(tmp_path: Path, name: str, extra: str) -> Environment:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "description: x\nretention: {on_delete: destroy}\n"
        "network: {availability_zone: us-east-1a, cidr: 10.0.0.0/16}\n" + extra
    )
    return load_environment(path)


DEV = load_environment(REPO / "environments" / "dev.yaml")
P5 = load_environment(REPO / "environments" / "p5.yaml")


def test_the_stacks_the_app_builds_follow_the_environment_file(tmp_path: Path) -> None:
    """A stack the app stopped building is an orphan; one it still builds is not: each part both ways."""
    assert orphans.expected_stacks(DEV) == ["dev-Network", "dev-Storage", "dev-DataRepository", "dev-Observability"]
    assert orphans.expected_stacks(P5) == [
        "p5-Network",
        "p5-Storage",
        "p5-DataRepository",
        "p5-Observability",
        "p5-Cluster",
    ]
    bare = env_file(tmp_path, "bare", "storage: {lustre: {data_repository_associations: []}}\n")
    assert orphans.expected_stacks(bare) == ["bare-Network", "bare-Storage"]
    dra = env_file(tmp_path, "dra", "observability: {enabled: false}\n")
    assert orphans.expected_stacks(dra) == ["dra-Network", "dra-Storage", "dra-DataRepository"]


def stack(name: str, env: str = "p5", **fields: Any) -> dict[str, Any]:
    return {"StackName": name, "Tags": [{"Key": TAG, "Value": env}], **fields}


def removal(name: str, protected: bool = False) -> dict[str, str]:
    unprotect = (
        f"aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name {name}; "
        if protected
        else ""
    )
    return {
        "bills": "every resource in it, as when it was in the app",
        "remove": f"{unprotect}aws cloudformation delete-stack --stack-name {name} (retained resources stay, "
        "listed below once it is gone)",
        "adopt": "put it back in the app (the environment setting that dropped it, or the file of its "
        "environment) and deploy",
    }


def test_orphan_stacks_are_the_tagged_stacks_the_app_no_longer_builds() -> None:
    pages = [
        {
            "Stacks": [
                stack("p5-Network", StackStatus="UPDATE_COMPLETE"),
                stack("p5-Cluster", StackStatus="CREATE_COMPLETE"),
                stack(P5.cluster_name, StackStatus="CREATE_COMPLETE"),  # ParallelCluster's, made by p5-Cluster
                stack("p5-Old", StackStatus="CREATE_COMPLETE", EnableTerminationProtection=True),
                stack("p5-Nested", StackStatus="CREATE_COMPLETE", ParentId="arn:aws:cloudformation:p5-Cluster"),
            ]
        },
        {},  # a page without Stacks
        {
            "Stacks": [
                # Stacks not of this environment, before and among the orphans: each skipped, the rest still read.
                stack("other-Network", env="other", StackStatus="CREATE_COMPLETE"),
                stack("p5-Gone"),  # no status in the answer
                {"StackName": "p5-Untagged", "StackStatus": "CREATE_COMPLETE"},
                stack("p5-Unprotected", StackStatus="ROLLBACK_COMPLETE", EnableTerminationProtection=False),
                {"StackName": "p5-Keyed", "Tags": [{"Key": "Project", "Value": "p5"}]},
            ]
        },
    ]
    cfn = Recorder({"describe_stacks": pages})
    assert orphans.orphan_stacks(cfn, P5) == [
        {"stack": "p5-Old", "status": "CREATE_COMPLETE", **removal("p5-Old", protected=True)},
        {"stack": "p5-Gone", "status": "", **removal("p5-Gone")},
        {"stack": "p5-Unprotected", "status": "ROLLBACK_COMPLETE", **removal("p5-Unprotected")},
    ]
    assert cfn.calls == [("describe_stacks", {})]


def test_parallelclusters_stack_is_an_orphan_only_once_the_cluster_stack_is_gone() -> None:
    left = [stack(P5.cluster_name, StackStatus="UPDATE_COMPLETE"), stack("p5-Clusterish")]
    assert orphans.orphan_stacks(Recorder({"describe_stacks": [{"Stacks": left}]}), P5) == [
        {"stack": P5.cluster_name, "status": "UPDATE_COMPLETE", **removal(P5.cluster_name)},
        {"stack": "p5-Clusterish", "status": "", **removal("p5-Clusterish")},
    ]


def test_describe_stacks_refused_names_the_call_and_exits_as_an_aws_failure() -> None:
    cfn = Recorder({"describe_stacks": client_error("AccessDenied", "no")})
    with pytest.raises(CliError) as caught:
        orphans.orphan_stacks(cfn, P5)
    assert caught.value.exit_code == EXIT_AWS
    assert caught.value.message == (
        "DescribeStacks (every stack, for the environment's tag) failed: AccessDenied: no\n"
        "  what to do: the credentials in use lack this permission; use a role that has it"
    )


def arn(service: str, rest: str, region: str = "us-east-1") -> str:
    return f"arn:aws:{service}:{region}:{ACCOUNT}:{rest}"


FS = "fs-0aaaaaaaaaaaaaaa1"
GONE_FS = "fs-0ddddddddddddddd9"
ADOPT = "bring it into the stack that owns it with 'npx cdk import' (same construct), then deploy"
REMOVE = (
    "take what you need from it, then delete it with its service's delete call "
    "(for a DRA: --no-delete-data-in-file-system keeps files and objects)"
)


def orphan(resource: str, bills: str) -> dict[str, str]:
    return {"resource": resource, "bills": bills, "remove": REMOVE, "adopt": ADOPT}


def test_orphan_resources_are_the_tagged_resources_no_live_stack_or_file_system_holds() -> None:
    """Every live stack (nested ones too) is listed; what it holds, by ARN, id or name, is not an orphan."""
    summaries = {
        "p5-Network": [
            {
                "StackResourceSummaries": [
                    {"PhysicalResourceId": "vpc-0123", "ResourceType": "AWS::EC2::VPC"},
                    # A topic's physical id is its ARN.
                    {"PhysicalResourceId": arn("sns", "p5-topic"), "ResourceType": "AWS::SNS::Topic"},
                ]
            },
            {"StackResourceSummaries": [{"PhysicalResourceId": "", "ResourceType": "AWS::EC2::Route"}]},
        ],
        "p5-Storage": [
            {
                "StackResourceSummaries": [
                    {"PhysicalResourceId": FS, "ResourceType": "AWS::FSx::FileSystem"},
                    {"PhysicalResourceId": "p5-data", "ResourceType": "AWS::S3::Bucket"},
                    {"ResourceType": "AWS::IAM::Role"},  # no physical id yet
                ]
            }
        ],
        "p5-DataRepository": client_error("ValidationError", "Stack with id p5-DataRepository does not exist"),
        "p5-Cluster": [
            {
                "StackResourceSummaries": [
                    {"PhysicalResourceId": "p5-Nested", "ResourceType": "AWS::CloudFormation::Stack"},
                    {"PhysicalResourceId": "p5-Network", "ResourceType": "AWS::CloudFormation::Stack"},
                ]
            }
        ],
        "p5-Nested": [{"StackResourceSummaries": [{"PhysicalResourceId": "key-1", "ResourceType": "AWS::KMS::Key"}]}],
    }
    own_volume = arn("fsx", f"volume/{FS}/fsvol-1")
    lost_volume = arn("fsx", f"volume/{GONE_FS}/fsvol-2")
    automatic = arn("fsx", "backup/backup-1")
    manual = arn("fsx", "backup/backup-2")
    resources = [
        arn("cloudformation", "stack/p5-Old/1"),
        arn("ec2", "vpc/vpc-0123"),  # held by p5-Network, by id
        arn("sns", "p5-topic"),  # held by p5-Network, by ARN
        "arn:aws:s3:::p5-data",  # held by p5-Storage, by name after ':'
        arn("kms", "key/key-1"),  # held by the nested stack
        arn("kms", "key/key-2"),
        own_volume,
        lost_volume,
        automatic,
        manual,
        arn("fsx", f"file-system/{GONE_FS}"),
        "arn:aws:s3:::p5-data-old",
        arn("logs", "log-group:/p5/old"),
        arn("aps", "workspace/ws-1"),
        arn("grafana", "/workspaces/g-1"),
        arn("backup", "backup-vault:p5"),
        arn("ec2", "natgateway/nat-1"),
        arn("sagemaker", "cluster/c-1"),
        arn("sns", "p5-alarms"),
        arn("rds", "cluster:p5-accounting"),
        arn("secretsmanager", "secret:p5-db"),
        arn("elasticfilesystem", "file-system/fs-9"),
    ]
    cfn = Recorder({"list_stack_resources": summaries})
    tagging = Recorder(
        {
            "get_resources": [
                {"ResourceTagMappingList": [{"ResourceARN": a} for a in resources[:11]]},
                {},
                {"ResourceTagMappingList": [{"ResourceARN": a} for a in resources[11:]]},
            ]
        }
    )
    fsx = Recorder(
        {
            "describe_backups": [
                {
                    "Backups": [
                        {"ResourceARN": automatic, "Type": "AUTOMATIC"},
                        {"ResourceARN": manual, "Type": "USER_INITIATED"},
                    ]
                }
            ]
        }
    )
    assert orphans.orphan_resources(cfn, tagging, fsx, P5) == [
        orphan(arn("kms", "key/key-2"), "a monthly key fee; scheduled deletion makes data under it unreadable"),
        orphan(lost_volume, "nothing itself (its data is its file system's storage)"),
        orphan(manual, "backup storage, per GB every month"),
        orphan(arn("fsx", f"file-system/{GONE_FS}"), "file system storage and throughput, every hour"),
        orphan("arn:aws:s3:::p5-data-old", "object storage (every version), every month"),
        orphan(arn("logs", "log-group:/p5/old"), "log storage, every month"),
        orphan(arn("aps", "workspace/ws-1"), "metrics storage, every month"),
        orphan(arn("grafana", "/workspaces/g-1"), "a fee per active user"),
        orphan(arn("backup", "backup-vault:p5"), "recovery point storage, every month"),
        orphan(arn("ec2", "natgateway/nat-1"), "instances, NAT gateways, addresses or volumes, every hour"),
        orphan(arn("sagemaker", "cluster/c-1"), "cluster instances, every hour"),
        orphan(arn("sns", "p5-alarms"), "nothing at rest"),
        orphan(
            arn("rds", "cluster:p5-accounting"),
            "database storage and snapshots every month, capacity (ACUs) every hour it is not paused",
        ),
        orphan(arn("secretsmanager", "secret:p5-db"), "a monthly secret fee"),
        orphan(arn("elasticfilesystem", "file-system/fs-9"), "see the service's pricing"),
    ]
    assert cfn.calls == [
        ("list_stack_resources", {"StackName": name})
        for name in (*orphans.expected_stacks(P5), P5.cluster_name, "p5-Nested")
    ]
    assert tagging.calls == [("get_resources", {"TagFilters": [{"Key": TAG, "Values": ["p5"]}]})]
    assert fsx.calls == [("describe_backups", {"Filters": [{"Name": "file-system-id", "Values": [FS]}]})]


def test_without_a_backup_or_a_live_file_system_fsx_is_not_asked() -> None:
    backup = arn("fsx", "backup/backup-1")
    tagging = Recorder({"get_resources": [{"ResourceTagMappingList": [{"ResourceARN": backup}]}]})
    fsx = Recorder({})
    # No live file system: the backup's file system is gone, so it is an orphan, and FSx is not asked.
    found = orphans.orphan_resources(Recorder({}), tagging, fsx, P5)
    assert found == [orphan(backup, "backup storage, per GB every month")]
    assert fsx.calls == []
    # A live file system but no backup among the candidates: not asked either.
    assert orphans._live_backups(fsx, [arn("fsx", f"volume/{GONE_FS}/fsvol-2")], {FS}) == set()
    assert fsx.calls == []


def test_an_fsx_orphan_bills_what_its_resource_type_bills() -> None:
    """Only a file system bills storage and throughput by the hour; each other FSx type says what it bills."""
    kinds = [
        (arn("fsx", f"file-system/{GONE_FS}"), "file system storage and throughput, every hour"),
        (arn("fsx", "backup/backup-2"), "backup storage, per GB every month"),
        (
            arn("fsx", f"association/{GONE_FS}/dra-1"),
            "nothing itself (its file system bills), but it still imports and exports, deletions too",
        ),
        (arn("fsx", f"volume/{GONE_FS}/fsvol-2"), "nothing itself (its data is its file system's storage)"),
        (arn("fsx", "snapshot/fsvol-2/fsvolsnap-3"), "nothing itself (its data is its file system's storage)"),
        # Types mlcluster never makes: the general note, not a file system's bill.
        (arn("fsx", "file-cache/fc-1"), "see the service's pricing"),
        (arn("fsx", f"storage-virtual-machine/{GONE_FS}/svm-1"), "see the service's pricing"),
        # Not an FSx ARN (four colons): by the service, which has no entry for FSx as a whole.
        ("arn:aws:fsx:us-east-1:file-system/fs-1", "see the service's pricing"),
    ]
    tagging = Recorder({"get_resources": [{"ResourceTagMappingList": [{"ResourceARN": a} for a, _ in kinds]}]})
    assert orphans.orphan_resources(Recorder({}), tagging, Recorder({}), P5) == [orphan(a, b) for a, b in kinds]


def test_the_fsx_kind_of_an_arn() -> None:
    assert orphans._fsx_kind(arn("fsx", f"volume/{FS}/fsvol-1")) == ("volume", [FS, "fsvol-1"])
    assert orphans._fsx_kind(arn("fsx", "backup/backup-1")) == ("backup", ["backup-1"])
    assert orphans._fsx_kind(arn("ec2", "volume/vol-1")) == ("", [])
    assert orphans._fsx_kind("arn:aws:fsx:us-east-1:backup/b") == ("", [])  # four colons: not an FSx ARN


@pytest.mark.parametrize(
    ("operation", "doing"),
    [
        ("list_stack_resources", "ListStackResources for p5-Network"),
        ("get_resources", "GetResources tagged mlcluster:environment=p5"),
    ],
)
def test_a_refused_lookup_names_its_call(operation: str, doing: str) -> None:
    refused = client_error("ThrottlingException", "slow down")
    cfn = Recorder({"list_stack_resources": {"p5-Network": refused}} if operation == "list_stack_resources" else {})
    tagging = Recorder({"get_resources": refused} if operation == "get_resources" else {})
    with pytest.raises(CliError) as caught:
        orphans.orphan_resources(cfn, tagging, Recorder({}), P5)
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        f"{doing} failed: ThrottlingException: slow down\n"
        "  what to do: AWS throttled the calls past the retries; wait a minute and run the command again",
    )


def test_describe_backups_refused_names_the_call() -> None:
    backup = arn("fsx", "backup/backup-1")
    cfn = Recorder(
        {
            "list_stack_resources": {
                "p5-Storage": [{"StackResourceSummaries": [{"PhysicalResourceId": FS, "ResourceType": "x"}]}]
            }
        }
    )
    tagging = Recorder({"get_resources": [{"ResourceTagMappingList": [{"ResourceARN": backup}]}]})
    fsx = Recorder({"describe_backups": client_error("AccessDeniedException", "no")})
    with pytest.raises(CliError) as caught:
        orphans.orphan_resources(cfn, tagging, fsx, P5)
    assert caught.value.message.startswith(
        "DescribeBackups (the backups of the environment's live file systems) failed: AccessDeniedException: no\n"
    )


def test_a_tagged_name_that_is_not_an_arn_is_listed_with_the_general_pricing_note() -> None:
    tagging = Recorder(
        {
            "get_resources": [
                {
                    "ResourceTagMappingList": [
                        {"ResourceARN": "arn:odd"},
                        {"ResourceARN": "x"},
                        {"ResourceARN": "arn:aws:sns"},
                    ]
                }
            ]
        }
    )
    assert orphans.orphan_resources(Recorder({}), tagging, Recorder({}), P5) == [
        orphan("arn:odd", "see the service's pricing"),
        orphan("x", "see the service's pricing"),
        orphan("arn:aws:sns", "nothing at rest"),  # two colons: the service is the third part
    ]


def test_a_list_stack_resources_error_without_its_error_element_names_the_call() -> None:
    cfn = Recorder({"list_stack_resources": {"p5-Network": ClientError({}, "ListStackResources")}})
    with pytest.raises(CliError) as caught:
        orphans.orphan_resources(cfn, Recorder({}), Recorder({}), P5)
    assert (caught.value.exit_code, caught.value.message.splitlines()[0]) == (
        EXIT_AWS,
        "ListStackResources for p5-Network failed: Unknown:",
    )


def node_tags(cluster: str, node_type: str = "Compute") -> list[dict[str, str]]:
    """The tags ParallelCluster's launch templates put on a node and its volumes (environment tag among the cluster's)."""
    return [
        {"Key": TAG, "Value": "p5"},
        {"Key": "parallelcluster:cluster-name", "Value": cluster},
        {"Key": "parallelcluster:node-type", "Value": node_type},
    ]


#: What ParallelCluster launched for p5's cluster outside its stack: a compute node, its root volume, a login
#: node's volume, the head node's root volume and a network interface, each tagged with the cluster's name.
CLUSTER_NODES = [
    (arn("ec2", "instance/i-0c0c0c0c0c0c0c0c1"), node_tags("p5-train")),
    (arn("ec2", "volume/vol-0c0c0c0c0c0c0c0c1"), node_tags("p5-train")),
    (arn("ec2", "volume/vol-0b0b0b0b0b0b0b0b1"), node_tags("p5-train", "LoginNode")),
    (arn("ec2", "volume/vol-0a0a0a0a0a0a0a0a1"), node_tags("p5-train", "HeadNode")),
    (arn("ec2", "network-interface/eni-0c0c0c0c0c0c0c0c1"), node_tags("p5-train")),
]
#: Tagged with the environment but not launched for p5's cluster: always listed.
NOT_CLUSTER_NODES = [
    # Another cluster's node that carries p5's environment tag (the edge: only the name differs).
    (arn("ec2", "instance/i-0d0d0d0d0d0d0d0d1"), node_tags("p5-train2")),
    (arn("ec2", "volume/vol-0d0d0d0d0d0d0d0d1"), node_tags("p5-trai")),
    # The cluster's name under another key, and no ParallelCluster tag at all.
    (arn("ec2", "instance/i-0e0e0e0e0e0e0e0e1"), [{"Key": TAG, "Value": "p5"}, {"Key": "Name", "Value": "p5-train"}]),
    (arn("ec2", "volume/vol-0e0e0e0e0e0e0e0e1"), [{"Key": TAG, "Value": "p5"}]),
    # Tagged with the live cluster, but not a type a node brings: a NAT gateway, a log group, an FSx backup.
    (arn("ec2", "natgateway/nat-0f0f0f0f0f0f0f0f1"), node_tags("p5-train")),
    (arn("logs", "log-group:/aws/parallelcluster/p5-train-202611281200"), node_tags("p5-train")),
    (arn("fsx", "backup/backup-0f0f0f0f0f0f0f0f1"), node_tags("p5-train")),
    # The cluster's name without a node type: a kept /home volume of an earlier cluster of the same name (its
    # shared storage carries the stack's tags only; data-loss review), still billing and to be copied over.
    (arn("ec2", "volume/vol-0a1a1a1a1a1a1a1a1"), node_tags("p5-train")[:2]),
]
GONE = client_error("ValidationError", "Stack with id p5-train does not exist")


def cluster_account(cluster_stack: Any, app_stack: Any) -> tuple[Recorder, Recorder]:
    """CloudFormation with ParallelCluster's stack and p5-Cluster as given, and GetResources with every node."""
    cfn = Recorder({"list_stack_resources": {"p5-train": cluster_stack, "p5-Cluster": app_stack}})
    mappings = [{"ResourceARN": a, "Tags": tags} for a, tags in [*CLUSTER_NODES, *NOT_CLUSTER_NODES]]
    mappings.append({"ResourceARN": arn("ec2", "instance/i-0f0f0f0f0f0f0f0f1")})  # an answer without Tags
    return cfn, Recorder({"get_resources": [{"ResourceTagMappingList": mappings}]})


HEAD = [
    {"StackResourceSummaries": [{"PhysicalResourceId": "i-0a0a0a0a0a0a0a0a1", "ResourceType": "AWS::EC2::Instance"}]}
]
APP = [{"StackResourceSummaries": [{"PhysicalResourceId": "p5-train", "ResourceType": "Custom::PclusterCluster"}]}]


@pytest.mark.parametrize("app_stack", [APP, client_error("ValidationError", "Stack with id p5-Cluster does not exist")])
def test_what_parallelcluster_launched_for_the_live_cluster_is_not_an_orphan(app_stack: Any) -> None:
    """While ParallelCluster's stack exists (p5-Cluster deployed or not: orphan_stacks lists the stack then), its
    nodes, their volumes and network interfaces are the cluster's; what names another cluster is listed."""
    cfn, tagging = cluster_account(HEAD, app_stack)
    found = [o["resource"] for o in orphans.orphan_resources(cfn, tagging, Recorder({}), P5)]
    assert found == [a for a, _ in NOT_CLUSTER_NODES] + [arn("ec2", "instance/i-0f0f0f0f0f0f0f0f1")]


def test_a_kept_parallelcluster_after_a_switch_to_hyperpod_is_not_the_environments_cluster(tmp_path: Path) -> None:
    """A HyperPod environment whose earlier ParallelCluster of the same name was kept: its stack still answers, but
    its nodes are nobody's cluster nodes here and stay listed (data-loss review)."""
    switched = env_file(tmp_path, "p5", "")
    cfn, tagging = cluster_account(HEAD, APP)
    pcluster_nodes = orphans.orphan_resources(cfn, tagging, Recorder({}), switched)
    assert [o["resource"] for o in pcluster_nodes][: len(CLUSTER_NODES)] == [a for a, _ in CLUSTER_NODES]


def test_what_parallelcluster_launched_is_an_orphan_once_the_clusters_stack_is_gone() -> None:
    """ParallelCluster's stack deleted (p5-Cluster still deployed): a node or volume left with its name is left over."""
    cfn, tagging = cluster_account(GONE, APP)
    found = orphans.orphan_resources(cfn, tagging, Recorder({}), P5)
    assert [o["resource"] for o in found] == [
        *(a for a, _ in CLUSTER_NODES),
        *(a for a, _ in NOT_CLUSTER_NODES),
        arn("ec2", "instance/i-0f0f0f0f0f0f0f0f1"),
    ]
    assert found[0] == orphan(CLUSTER_NODES[0][0], "instances, NAT gateways, addresses or volumes, every hour")
    assert ("list_stack_resources", {"StackName": "p5-train"}) in cfn.calls
