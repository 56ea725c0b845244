"""What of an environment still runs in the account although the app no longer has it.

CDK never deletes a stack dropped from an app, and CloudFormation leaves every
``Retain`` resource in place when its stack is deleted or the resource leaves
the template. Every stack and resource of an environment carries the tag
``mlcluster:environment: <name>`` (``mlcluster.stacks.stage``), so the account
can be asked for them:

- stacks: CloudFormation ``DescribeStacks`` (every stack of the region), those
  tagged with the environment whose name the app does not build any more
  (nested stacks and the cluster stack ParallelCluster makes are the app's);
- resources: the Resource Groups Tagging API ``GetResources`` with the tag,
  less every physical resource of the environment's live stacks
  (``ListStackResources``), less what belongs to a live file system: FSx
  copies the file system's tags onto its backups and volumes, which no stack
  lists; a volume's ARN names its file system
  (``volume/<file-system-id>/<volume-id>``), a backup's file system is read
  with ``DescribeBackups``. A backup or volume whose file system is gone is an
  orphan. Less, too, what ParallelCluster launched for the environment's
  cluster while that cluster's stack exists: the cluster's ``Tags`` (which
  carry the environment's tag, ``mlcluster.stacks.cluster``) go onto every
  compute and login node and its volumes through the launch templates'
  ``TagSpecifications``, next to ``parallelcluster:cluster-name``, and Slurm or
  an Auto Scaling group launches those nodes, not CloudFormation. Once the
  cluster's stack is gone, a node or volume still tagged with its name is left
  over, and listed.

Each orphan comes with what it bills and how to remove it or adopt it again.
"""

from __future__ import annotations

from typing import Any

from mlcluster.cli.errors import aws_errors
from mlcluster.config import Environment
from mlcluster.config.observability import observability_enabled

#: The tag every stack and resource of an environment carries.
ENVIRONMENT_TAG = "mlcluster:environment"
#: What an orphan keeps billing, by the service part of its ARN.
BILLS = {
    "s3": "object storage (every version), every month",
    "logs": "log storage, every month",
    "kms": "a monthly key fee; scheduled deletion makes data under it unreadable",
    "aps": "metrics storage, every month",
    "grafana": "a fee per active user",
    "backup": "recovery point storage, every month",
    "ec2": "instances, NAT gateways, addresses or volumes, every hour",
    "sagemaker": "cluster instances, every hour",
    "sns": "nothing at rest",
    # The Slurm accounting database (storage.accounting) and its retained master secret, with its final snapshot.
    "rds": "database storage and snapshots every month, capacity (ACUs) every hour it is not paused",
    "secretsmanager": "a monthly secret fee",
}
#: What an FSx orphan bills, by the resource type in its ARN (:func:`_fsx_kind`; the types are the Service
#: Authorization Reference's for ``fsx``). Only a file system bills storage and throughput by the hour; a backup
#: bills backup storage by the GB-month; an association (DRA) bills nothing itself, and a volume's or snapshot's
#: data is part of its file system's storage. A type not listed (file cache, ONTAP SVM) gets the general note.
FSX_BILLS = {
    "file-system": "file system storage and throughput, every hour",
    "backup": "backup storage, per GB every month",
    "association": "nothing itself (its file system bills), but it still imports and exports, deletions too",
    "volume": "nothing itself (its data is its file system's storage)",
    "snapshot": "nothing itself (its data is its file system's storage)",
}
#: What a resource of a service or FSx type neither table names bills.
GENERAL_BILLS = "see the service's pricing"
#: The tag ParallelCluster puts on every resource it makes for a cluster, valued with the cluster's name
#: (``PCLUSTER_CLUSTER_NAME_TAG`` in aws-parallelcluster's ``pcluster/constants.py``).
PCLUSTER_CLUSTER_TAG = "parallelcluster:cluster-name"
#: The tag of a node's instance and volumes (HeadNode, Compute, LoginNode: ``PCLUSTER_NODE_TYPE_TAG``,
#: ``get_default_instance_tags`` / ``get_default_volume_tags`` in ParallelCluster's templates).
PCLUSTER_NODE_TYPE_TAG = "parallelcluster:node-type"
#: The EC2 resource types a cluster's nodes bring outside its stack: the compute and login nodes (launched
#: by Slurm's resume program with CreateFleet or RunInstances, and by an Auto Scaling group) with their
#: volumes, tagged by the launch templates' ``TagSpecifications``, the head node's volumes (tagged with
#: ``PropagateTagsToVolumeOnCreation``), and their network interfaces should one be tagged the same way.
PCLUSTER_NODE_TYPES = frozenset({"instance", "volume", "network-interface"})


def expected_stacks(environment: Environment) -> list[str]:
    """The stacks the app builds for ``environment`` today (``mlcluster.stacks.stage``)."""
    cfg = environment.config
    parts = ["Network", "Storage"]
    lustre = cfg.storage.lustre
    if lustre is not None and lustre.data_repository_associations:
        parts.append("DataRepository")
    if observability_enabled(cfg):
        parts.append("Observability")
    if cfg.cluster.backend != "none":
        parts.append("Cluster")
    return [f"{environment.name}-{part}" for part in parts]


def _tagged(tags: list[dict[str, str]], name: str) -> bool:
    return any(tag.get("Key") == ENVIRONMENT_TAG and tag.get("Value") == name for tag in tags)


def orphan_stacks(cfn: Any, environment: Environment) -> list[dict[str, str]]:
    """Stacks tagged with the environment that the app does not build; each with how to remove or adopt it."""
    expected = set(expected_stacks(environment))
    found: list[dict[str, str]] = []
    with aws_errors("DescribeStacks (every stack, for the environment's tag)"):
        stacks = [stack for page in cfn.get_paginator("describe_stacks").paginate() for stack in page.get("Stacks", [])]
    # ParallelCluster's own stack (named after the cluster) belongs to ENV-Cluster, whose custom resource
    # made it, while that stack is deployed (listed itself when the app dropped it); after ENV-Cluster is
    # gone (a Retain deletion policy keeps the cluster) it is an orphan like any other.
    cluster_stack = f"{environment.name}-Cluster"
    if any(str(stack["StackName"]) == cluster_stack for stack in stacks):
        expected.add(environment.cluster_name)
    for stack in stacks:
        name = str(stack["StackName"])
        if stack.get("ParentId") or name in expected:
            continue
        if not _tagged(stack.get("Tags", []), environment.name):
            continue
        protected = bool(stack.get("EnableTerminationProtection"))
        unprotect = (
            f"aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name {name}; "
            if protected
            else ""
        )
        found.append(
            {
                "stack": name,
                "status": str(stack.get("StackStatus", "")),
                "bills": "every resource in it, as when it was in the app",
                "remove": f"{unprotect}aws cloudformation delete-stack --stack-name {name} (retained "
                "resources stay, listed below once it is gone)",
                "adopt": "put it back in the app (the environment setting that dropped it, or the file of "
                "its environment) and deploy",
            }
        )
    return found


def _physical_ids(cfn: Any, stacks: list[str]) -> tuple[set[str], set[str]]:
    """The physical ids of every resource of ``stacks`` and of their nested stacks, and which stacks exist.

    A stack not deployed (CloudFormation: "does not exist") has no resources and is not among the second set.
    A nested stack (``AWS::CloudFormation::Stack``: the ParallelCluster provider) tags its resources
    with the environment too; they are the live stack's, not orphans.
    """
    from botocore.exceptions import ClientError

    ids: set[str] = set()
    existing: set[str] = set()
    pending = list(stacks)
    while pending:
        name = pending.pop(0)
        with aws_errors(f"ListStackResources for {name}"):
            try:
                for page in cfn.get_paginator("list_stack_resources").paginate(StackName=name):
                    existing.add(name)
                    for summary in page.get("StackResourceSummaries", []):
                        physical = str(summary.get("PhysicalResourceId") or "")
                        if not physical:
                            continue
                        ids.add(physical)
                        if summary.get("ResourceType") == "AWS::CloudFormation::Stack" and physical not in stacks:
                            pending.append(physical)
            except ClientError as error:
                if "does not exist" not in str(error.response.get("Error", {}).get("Message", "")):
                    raise
    return ids, existing


def _service(arn: str) -> str:
    """The service part of ``arn`` (``arn:aws:fsx:...``: ``fsx``); empty for text that is not an ARN."""
    return arn.split(":")[2] if arn.count(":") >= 2 else ""


def _owned(arn: str, ids: set[str]) -> bool:
    """Whether ``arn`` is one of the stacks' physical resources (an ARN, or an id or name at its end)."""
    return arn in ids or any(arn.endswith((f"/{pid}", f":{pid}")) for pid in ids)


def _bills(arn: str) -> str:
    """What the orphan ``arn`` keeps billing: by its FSx resource type for FSx, else by its service."""
    kind, _ = _fsx_kind(arn)
    if kind:
        return FSX_BILLS.get(kind, GENERAL_BILLS)
    return BILLS.get(_service(arn), GENERAL_BILLS)


def _cluster_node(arn: str, tags: list[dict[str, str]], cluster: str | None) -> bool:
    """Whether ``arn`` is a node, or a node's volume or network interface, ParallelCluster launched for ``cluster``.

    ``cluster`` is the environment's ParallelCluster cluster while its stack exists, else None (nothing is the
    cluster's). Only what carries a node's tags counts (``parallelcluster:node-type``, which ParallelCluster's
    default instance and volume tags hold): a volume of the cluster's shared storage (a kept ``/home`` volume of
    an earlier cluster of the same name) carries the cluster's name but no node type, and stays listed.
    """
    if cluster is None or arn.count(":") < 5 or _service(arn) != "ec2":
        return False
    kind = arn.split(":", 5)[5].partition("/")[0]
    keys = {(tag.get("Key"), tag.get("Value")) for tag in tags}
    return (
        kind in PCLUSTER_NODE_TYPES
        and (PCLUSTER_CLUSTER_TAG, cluster) in keys
        and any(key == PCLUSTER_NODE_TYPE_TAG for key, _ in keys)
    )


def _fsx_kind(arn: str) -> tuple[str, list[str]]:
    """An FSx ARN's resource type and the parts of its id: ``volume/fs-1/fsvol-2`` is ``("volume", ["fs-1", ...])``."""
    if arn.count(":") < 5 or arn.split(":")[2] != "fsx":
        return "", []
    kind, _, rest = arn.split(":", 5)[5].partition("/")
    return kind, rest.split("/")


def _live_backups(fsx: Any, arns: list[str], live_file_systems: set[str]) -> set[str]:
    """The ARNs among ``arns`` of the automatic FSx backups of a live file system (one of the stacks').

    Only ``AUTOMATIC`` backups belong to the file system: they follow its backup retention and go with it.
    ``USER_INITIATED`` and ``AWS_BACKUP`` ones (DescribeBackups returns them too under the same filter) are
    kept after the file system and bill until someone deletes them, so they stay listed.
    """
    backups = [arn for arn in arns if _fsx_kind(arn)[0] == "backup"]
    if not backups or not live_file_systems:
        return set()
    live: set[str] = set()
    systems = sorted(live_file_systems)
    with aws_errors("DescribeBackups (the backups of the environment's live file systems)"):
        for start in range(0, len(systems), 20):  # a filter takes at most 20 values
            pages = fsx.get_paginator("describe_backups").paginate(
                Filters=[{"Name": "file-system-id", "Values": systems[start : start + 20]}]
            )
            for page in pages:
                live.update(
                    str(backup.get("ResourceARN", ""))
                    for backup in page.get("Backups", [])
                    if backup.get("Type") == "AUTOMATIC"
                )
    return live & set(backups)


def orphan_resources(cfn: Any, tagging: Any, fsx: Any, environment: Environment) -> list[dict[str, str]]:
    """Resources tagged with the environment that none of its live stacks holds (retained after a delete).

    FSx backups and volumes of a live file system carry the environment's tag (copied from the file
    system) but no stack lists them: they are the file system's, not orphans. So are the nodes (and
    their volumes) ParallelCluster launched for the environment's cluster while the cluster's own stack
    exists: deleting that stack terminates them, and ``orphan_stacks`` lists the stack itself once the
    app no longer builds it.
    """
    # ParallelCluster's own stack is asked too: ENV-Cluster's custom resource made it, and it may outlive it.
    ids, existing = _physical_ids(cfn, [*expected_stacks(environment), environment.cluster_name])
    # A kept ParallelCluster after a switch to HyperPod is not the environment's cluster: its nodes stay listed.
    pcluster = environment.config.cluster.backend == "pcluster"
    cluster = environment.cluster_name if pcluster and environment.cluster_name in existing else None
    live_file_systems = {pid for pid in ids if pid.startswith("fs-")}
    candidates: list[str] = []
    with aws_errors(f"GetResources tagged {ENVIRONMENT_TAG}={environment.name}"):
        pages = tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": ENVIRONMENT_TAG, "Values": [environment.name]}]
        )
        for page in pages:
            for item in page.get("ResourceTagMappingList", []):
                arn = str(item["ResourceARN"])
                if _service(arn) == "cloudformation" or _owned(arn, ids):
                    continue  # stacks are listed by orphan_stacks
                if _cluster_node(arn, item.get("Tags", []), cluster):
                    continue
                kind, parts = _fsx_kind(arn)
                if kind == "volume" and parts[0] in live_file_systems:
                    continue
                candidates.append(arn)
    live_backups = _live_backups(fsx, candidates, live_file_systems)
    return [
        {
            "resource": arn,
            "bills": _bills(arn),
            "remove": "take what you need from it, then delete it with its service's delete call "
            "(for a DRA: --no-delete-data-in-file-system keeps files and objects)",
            "adopt": "bring it into the stack that owns it with 'npx cdk import' (same construct), then deploy",
        }
        for arn in candidates
        if arn not in live_backups
    ]
