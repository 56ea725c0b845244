"""Whether a deploy of an edit can succeed, told at synth from the lock and the services' own rules.

The data guard (``mlcluster.lockfile``) stops edits that replace data. This
module stops the edits that synthesize cleanly and then fail at deploy,
rolling the stack back, and says which need ``mlcluster update ENV``:

- ParallelCluster (``Custom::PclusterCluster``): the lock records the
  deployed ``ClusterConfiguration``; ``mlcluster.pcluster.update_policy``
  sorts each changed key by ParallelCluster's own update policy. A change
  ParallelCluster refuses on this cluster fails synth naming the environment
  key, the old and new value and the safe way; a change that needs the
  compute fleet stopped passes with a note that ``mlcluster update ENV`` must
  deploy it (a plain ``cdk deploy`` fails at the custom resource).
- ParallelCluster's release (``cluster.pcluster.version``): the provider
  stack would move to the new release while the cluster stays on the one it
  was created with, and ParallelCluster never upgrades a cluster in place:
  refused with the procedure (a new cluster).
- FSx ``StorageCapacity`` lowered: FSx cannot shrink a file system
  (``UpdateFileSystem``: "The value must be greater than the current storage
  capacity"): refused. Raised: a note (the increase runs for hours and a
  second one waits for it).
- Lustre ``PerUnitStorageThroughput`` changed: FSx's ``UpdateFileSystem``
  can change it, the registry schema cfn-lint bundles does not list it as
  create-only, but the CloudFormation resource specification the CDK CLI
  ships (``db.json.gz``: ``causesReplacement: yes``) says replacement. Treated
  as the strictest, a replacement of the file system: refused, with the
  in-place way (the FSx API) named. (A file system replaced anyway, by a
  create-only change the data guard allowed, may change it too.)
- A replaced DRA (its ``FileSystemPath`` or ``DataRepositoryPath`` changed):
  CloudFormation creates the new association before it removes the old one,
  which ``DeletionPolicy: Retain`` keeps; FSx refuses a DRA whose paths
  overlap another's, so the create fails while the old one holds its paths.
  Refused even with the allowance, with the two-step way.

- The managed accounting database's rule admitting MySQL from every node's
  group (``network.security_group``) removed while the lock shows no rule for
  the controller's client group: the running controller was created before
  that group and reaches the database only through the removed rule, so
  slurmdbd would be cut off until the cluster is created again. Refused with
  the way through (``storage.accounting.admit_node_group``, docs/upgrading.md),
  also in the edit that creates the cluster anew (its create may roll back to
  the old controller). A HyperPod cluster counts as created anew only when a
  create-only path of ``AWS::SageMaker::Cluster`` changes (ClusterName,
  VpcConfig, Orchestrator): a kept group's instance type, role or threads per
  core, and a new controller group, are the data guard's "replace" reasons
  that CloudFormation applies in place (:func:`creates_cluster_anew`).

- A HyperPod instance group kept under its ``InstanceGroupName`` whose
  ``OverrideVpcConfig`` (subnets or security groups) changes, or is added or
  removed, on a cluster that is not replaced. CloudFormation's schema for
  ``AWS::SageMaker::Cluster`` (the one cfn-lint bundles) does not mark it
  create-only, so the deploy sends it to SageMaker's ``UpdateCluster``. That
  API takes the same ``ClusterInstanceGroupSpecification`` as CreateCluster
  (botocore's model; its text on ``OverrideVpcConfig`` speaks only of
  multi-AZ deployments), but the SageMaker Developer Guide's page for Slurm
  clusters ("Update cluster configuration",
  sagemaker-hyperpod-operate-slurm-cli-command.html) says what an update
  changes on an existing group: its instance count (down to 0) and its
  lifecycle script's entrypoint and path, while the group keeps the instance
  type, execution role and threads per core it was created with
  (``mlcluster.replacement`` counts a change of those as a replacement); a
  group's network is not among them, and the running nodes' network
  interfaces stay where they were created. Not tried against the service:
  refused, with the ways that create the nodes anew (a new group name, or a
  new cluster). A group added with an override, or one whose override is
  unchanged, passes.

- A subnet or security group that a kept group holds through its
  ``OverrideVpcConfig``, read from another stack's output
  (``Fn::GetStackOutput``), replaced by the edit (an extra zone moved or its
  CIDR changed; the accounting database's client group made again): the
  cluster's template stays as it was, but the deploy re-reads the output and
  sends UpdateCluster the new id for the running group, the same change as
  above. Refused the same way. For a security group it is worse: the Storage
  or Network stack deploys first, so whatever admits the new group (the
  database's MySQL rule, for its client group) stops admitting the running
  nodes, and CloudFormation cannot delete the old group while their network
  interfaces hold it.

Settings a lock written before they were recorded lacks are not compared: a
note says to run ``mlcluster lock``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from mlcluster.config import Environment, Problem
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.pcluster.update_policy import ClusterChange, cluster_changes, rollback_changes
from mlcluster.replacement import (
    CONTROLLER_KEY,
    GROUP_KEY,
    GROUP_NETWORKS_KEY,
    HYPERPOD_TYPE,
    PCLUSTER_TYPE,
    Change,
    ResourceState,
    Snapshot,
    StackState,
    compare,
)

FSX_TYPE = "AWS::FSx::FileSystem"
DRA_TYPE = "AWS::FSx::DataRepositoryAssociation"
STACK_TYPE = "AWS::CloudFormation::Stack"
#: ParallelCluster's provider template names its release: ``.../parallelcluster/<version>/templates/...``.
PROVIDER_VERSION = re.compile(r"/parallelcluster/(\d+\.\d+\.\d+)/templates/custom_resource/")
CAPACITY = "StorageCapacity"
THROUGHPUT = "LustreConfiguration/PerUnitStorageThroughput"
CONFIGURATION = "ClusterConfiguration"

#: The environment key behind a ClusterConfiguration path: ``(pattern, key)``, the first match wins; ``{q}`` and
#: ``{c}`` are the queue's and the compute resource's names.
CLUSTER_KEYS: tuple[tuple[str, str], ...] = (
    (r"HeadNode\.InstanceType$", "cluster.pcluster.head_node.instance_type"),
    (r"HeadNode\.Networking\.", "cluster.pcluster.head_node.subnet"),
    (r"HeadNode\.Ssh\.KeyName$", "cluster.pcluster.head_node.key_name"),
    (r"HeadNode\.LocalStorage\.", "cluster.pcluster.head_node.root_volume_gib"),
    (r"HeadNode\.CustomActions\.", "cluster.pcluster.head_node.custom_actions"),
    (r"HeadNode\.Iam\.", "cluster.pcluster.head_node.additional_iam_policies"),
    (r"HeadNode\b", "cluster.pcluster.head_node"),
    (r"Image\.Os$", "cluster.pcluster.os"),
    (r"Image\b", "cluster.pcluster.custom_ami"),
    (r"Scheduling\.SlurmSettings\.ScaledownIdletime$", "cluster.pcluster.slurm.scaledown_idle_minutes"),
    (r"Scheduling\.SlurmSettings\.Database\b", "cluster.pcluster.slurm.accounting"),
    (r"Scheduling\.SlurmSettings\.CustomSlurmSettings\b", "cluster.pcluster.slurm.custom_settings"),
    (r"Scheduling\.SlurmSettings\b", "cluster.pcluster.slurm"),
    (
        r"ComputeResources\[(?P<c>[^\]]*)\]\.InstanceType$",
        "cluster.pcluster.queues[{q}].compute_resources[{c}].instance_type",
    ),
    (r"ComputeResources\[(?P<c>[^\]]*)\]\.MinCount$", "cluster.pcluster.queues[{q}].compute_resources[{c}].min_count"),
    (r"ComputeResources\[(?P<c>[^\]]*)\]\.MaxCount$", "cluster.pcluster.queues[{q}].compute_resources[{c}].max_count"),
    (r"ComputeResources\[(?P<c>[^\]]*)\]\.Efa\.", "cluster.pcluster.queues[{q}].compute_resources[{c}].efa"),
    (
        r"ComputeResources\[(?P<c>[^\]]*)\]\.Networking\.",
        "cluster.pcluster.queues[{q}].compute_resources[{c}].placement_group",
    ),
    (r"ComputeResources\[(?P<c>[^\]]*)\]", "cluster.pcluster.queues[{q}].compute_resources[{c}]"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]\.ComputeSettings\.", "cluster.pcluster.queues[{q}].root_volume_gib"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]\.Networking\.", "cluster.pcluster.queues[{q}].zones"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]\.CustomActions\.", "cluster.pcluster.queues[{q}].custom_actions"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]\.CapacityType$", "cluster.pcluster.queues[{q}].capacity_type"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]\.Image\.", "cluster.pcluster.queues[{q}].custom_ami"),
    (r"SlurmQueues\[(?P<q>[^\]]*)\]", "cluster.pcluster.queues[{q}]"),
    (r"SharedStorage\[home\]", "cluster.pcluster.shared_storage.home_volume"),
    (r"SharedStorage\[apps\]", "cluster.pcluster.shared_storage.apps"),
    (r"SharedStorage\[fsx\]", "storage.lustre"),
    (r"SharedStorage\b", "cluster.pcluster.shared_storage"),
    (r"Monitoring\.DetailedMonitoring$", "cluster.pcluster.monitoring.detailed_monitoring"),
    (r"Monitoring\b", "cluster.pcluster.monitoring"),
    (r"LoginNodes\.Pools\[[^\]]*\]\.InstanceType$", "cluster.pcluster.login_nodes.instance_type"),
    (r"LoginNodes\.Pools\[[^\]]*\]\.Count$", "cluster.pcluster.login_nodes.count"),
    (r"LoginNodes\b", "cluster.pcluster.login_nodes"),
    (r"Tags\b", "cluster.pcluster.tags"),
)


#: The ClusterConfiguration path ``storage.accounting`` (the managed database) writes, in place of
#: ``cluster.pcluster.slurm.accounting`` (a database of the operator's own).
MANAGED_DATABASE = re.compile(r"Scheduling\.SlurmSettings\.Database\b")


def cluster_key(path: str, *, managed_database: bool = False) -> str:
    """The environment key whose edit changes ``path`` of the ClusterConfiguration (``cluster.pcluster`` when
    no finer key is known); ``managed_database``: the environment has ``storage.accounting``, which then
    writes ``SlurmSettings.Database``."""
    if managed_database and MANAGED_DATABASE.search(path):
        return "storage.accounting"
    queue = re.search(r"SlurmQueues\[(?P<q>[^\]]*)\]", path)
    for pattern, key in CLUSTER_KEYS:
        found = re.search(pattern, path)
        if found:
            names = {"q": queue.group("q") if queue else "", **found.groupdict()}
            return key.format(**names)
    return "cluster.pcluster"


def _show(value: object) -> str:
    if value is None:
        return "(absent)"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _kept(locked: Snapshot, snapshot: Snapshot, kind: str) -> list[tuple[str, str, ResourceState, ResourceState]]:
    """``(stack, logical id, locked, new)`` of every resource of ``kind`` both sides have whose properties change
    (an unchanged resource is left alone by the deploy)."""
    return [
        (stack, lid, old, snapshot[stack].resources[lid])
        for stack in sorted(set(locked) & set(snapshot))
        for lid, old in sorted(locked[stack].resources.items())
        if old.type == kind
        and lid in snapshot[stack].resources
        and snapshot[stack].resources[lid].type == kind
        and snapshot[stack].resources[lid].digest != old.digest
    ]


def _unrecorded(environment: Environment, what: str) -> str:
    return (
        f"{environment.source}: the lock does not record {what} as deployed, so this synth cannot tell whether the "
        f"deploy can apply the edit: run 'mlcluster lock {environment.name}' (it reads the deployed stacks)"
    )


def _key(environment: Environment, path: str) -> str:
    """:func:`cluster_key` of ``path`` in ``environment``."""
    return cluster_key(path, managed_database=environment.config.storage.accounting is not None)


def _cluster_problem(environment: Environment, stack: str, change: ClusterChange) -> Problem:
    return Problem(
        _key(environment, change.path),
        NOT_A_VALUE,
        f"this edit changes {change.path} of the ParallelCluster cluster in {stack} from {_show(change.old)} to "
        f"{_show(change.new)}, and ParallelCluster refuses that change on this cluster (update policy "
        f"{change.policy}): the deploy would fail at the cluster resource and roll the stack back. "
        f"{change.safe_way}.",
    )


def _fleet_note(environment: Environment, stack: str, changes: Sequence[ClusterChange], *, rollback: bool) -> str:
    listed = "; ".join(f"{_key(environment, c.path)} ({c.path}: {_show(c.old)} -> {_show(c.new)})" for c in changes)
    if rollback:
        return (
            f"{environment.source}: the cluster in {stack} applies this edit with its fleet running, but should "
            f"anything else in the same deploy fail after the cluster is updated, ParallelCluster takes the "
            f"rollback's changes back only with the fleet stopped: {listed}. Deploy it with 'mlcluster update "
            f"{environment.name}' (it stops the fleet for such an edit too, so a rollback can complete); a plain "
            f"'cdk deploy' keeps the fleet running, and if its rollback stops in UPDATE_ROLLBACK_FAILED, stop the "
            f"fleet ('pcluster update-compute-fleet --status STOP_REQUESTED') and run 'aws cloudformation "
            f"continue-update-rollback --stack-name {stack}'"
        )
    return (
        f"{environment.source}: the cluster in {stack} applies these changes only with its compute fleet stopped: "
        f"{listed}. Deploy them with 'mlcluster update {environment.name}' (it stops the fleet, deploys and starts "
        "it again); a plain 'cdk deploy' fails at the cluster resource and rolls the stack back"
    )


def _stuck_note(environment: Environment, stack: str, change: ClusterChange) -> str:
    return (
        f"{environment.source}: {_key(environment, change.path)}: should this deploy fail after the cluster in "
        f"{stack} is updated, ParallelCluster would refuse the rollback's change of {change.path} "
        f"({_show(change.old)} -> {_show(change.new)}, update policy {change.policy}) and the stack would stop in "
        "UPDATE_ROLLBACK_FAILED. "
        "Deploy this edit on its own (no other change in the same deploy); if the rollback stops anyway: 'aws "
        f"cloudformation continue-update-rollback --stack-name {stack} --resources-to-skip <the cluster's logical "
        f"id>', then 'mlcluster lock {environment.name}'"
    )


def _version(template_url: object) -> str | None:
    found = PROVIDER_VERSION.search(json.dumps(template_url, default=str))
    return found.group(1) if found else None


def _version_problem(environment: Environment, stack: str, old: str, new: str, cluster: object) -> Problem:
    name = environment.name
    accounting = ""
    if environment.config.storage.accounting is not None:
        region = environment.config.region or "<region>"
        accounting = (
            " The accounting database (storage.accounting) outlives the cluster, and the new release's slurmdbd, "
            "if its Slurm is newer, converts its tables in place on its first start: no older slurmdbd starts on "
            "them again (Slurm does not downgrade a database). So, in this order, before the new cluster's first "
            f"deploy: once its jobs are done, delete the old cluster if it is kept (retained): 'pcluster "
            f"delete-cluster -n {cluster} --region {region}' (its older slurmdbd must not write into the converted "
            "tables, and the new cluster takes the same name; a kept /home volume stays and bills until 'aws ec2 "
            "delete-volume'); then take a snapshot of the database: 'aws rds create-db-cluster-snapshot "
            "--db-cluster-identifier <the accounting database's cluster id> --db-cluster-snapshot-identifier "
            f"{name}-before-{new.replace('.', '-')} --region {region}' (the way back to {old}; it bills until 'aws "
            "rds delete-db-cluster-snapshot')."
        )
    return Problem(
        "cluster.pcluster.version",
        NOT_A_VALUE,
        f"this edit moves ParallelCluster's provider in {stack} from {old} to {new}, but ParallelCluster never "
        f"upgrades a cluster in place: the cluster stays on {old} and the new provider refuses every later change "
        f"of it. Safe way: keep version: {old} for this cluster. To move to {new}, build a new cluster: either a "
        f"second environment with version {new} next to this one (move users and jobs, copy what /home holds, "
        f"then tear this one down), or, with no jobs running and /home copied, destroy the cluster stack (npx cdk "
        f"destroy --exclusively '{name}/Cluster'; the storage stacks keep the data), set version: {new}, run "
        f"'mlcluster lock {name}', and deploy.{accounting}",
    )


def _version_checks(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> tuple[list[Problem], list[str]]:
    """The provider stack of a cluster both sides keep (under the same name) moved to another release."""
    problems: list[Problem] = []
    notes: list[str] = []
    for stack, _, old_provider, new_provider in _kept(locked, snapshot, STACK_TYPE):
        clusters = [
            (lid, old)
            for lid, old in locked[stack].resources.items()
            if old.type == PCLUSTER_TYPE
            and lid in snapshot[stack].resources
            and snapshot[stack].resources[lid].create_only.get("ClusterName") == old.create_only.get("ClusterName")
        ]
        if not clusters:
            continue
        before = _version(old_provider.settings.get("TemplateURL"))
        after = _version(new_provider.settings.get("TemplateURL"))
        if "TemplateURL" not in old_provider.settings:
            notes.append(_unrecorded(environment, f"ParallelCluster's release in {stack}"))
        elif before and after and before != after:
            cluster = clusters[0][1].create_only.get("ClusterName", "<cluster name>")
            problems.append(_version_problem(environment, stack, before, after, cluster))
    return problems, notes


def _database(configuration: Mapping[str, object]) -> Mapping[str, object] | None:
    """``Scheduling.SlurmSettings.Database`` of a ClusterConfiguration, or None."""
    found: object = configuration
    for part in ("Scheduling", "SlurmSettings", "Database"):
        found = found.get(part) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else None


def _database_moved_notes(
    environment: Environment, stack: str, before: Mapping[str, object], after: Mapping[str, object]
) -> list[str]:
    """A note when the edit points a kept cluster's slurmdbd at another database (``DatabaseName`` or ``Uri`` of
    ``Scheduling.SlurmSettings.Database``). ParallelCluster applies it in place, with the fleet running for a
    name (update policy SUPPORTED) or stopped for a Uri (COMPUTE_FLEET_STOP), and slurmdbd then creates empty
    tables in the new database: the job history, accounts, associations, QOS and fair-share usage stay behind
    in the old one, which nothing deletes."""
    old, new = _database(before), _database(after)
    if old is None or new is None:
        return []
    moved = [field for field in ("DatabaseName", "Uri") if old.get(field) != new.get(field)]
    if not moved:
        return []
    # With the managed database its name is the key an operator edits; its Uri changes only with the database.
    managed = environment.config.storage.accounting is not None
    key = (
        "storage.accounting.database_name"
        if managed and moved == ["DatabaseName"]
        else _key(environment, "Scheduling.SlurmSettings.Database")
    )
    listed = "; ".join(f"{field} {_show(old.get(field))} -> {_show(new.get(field))}" for field in moved)
    # DatabaseName is SUPPORTED (fleet running); Uri is COMPUTE_FLEET_STOP (update_policies.json).
    when = "with the compute fleet stopped" if "Uri" in moved else "with the fleet running"
    return [
        f"{environment.source}: {key}: this edit points slurmdbd of the cluster in {stack} at another database "
        f"({listed}), in place ({when}): slurmdbd starts on empty tables there, so the job history, "
        "accounts, associations, QOS and fair-share usage in the old database no longer show (sacct, sacctmgr, "
        "sshare), and the old database stays as it was. To keep them, keep the old value; or carry them over "
        "before the deploy: 'sacctmgr dump <cluster> file=cluster.cfg' (accounts, associations, QOS; load with "
        "'sacctmgr load file=cluster.cfg') and, for the job history, 'mysqldump' the old database into the new "
        "one with slurmdbd stopped"
    ]


def _cluster_checks(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    notes: list[str] = []
    for stack, _, old, new in _kept(locked, snapshot, PCLUSTER_TYPE):
        if old.create_only.get("ClusterName") != new.create_only.get("ClusterName"):
            continue  # a rename: the data guard refuses it (lockfile.cluster_rename_refusal)
        if CONFIGURATION not in old.settings:
            notes.append(_unrecorded(environment, f"the cluster configuration of {stack}"))
            continue
        before, after = old.settings[CONFIGURATION], new.settings.get(CONFIGURATION, {})
        changes = cluster_changes(before, after)
        refused = [c for c in changes if c.outcome == "refused"]
        problems += [_cluster_problem(environment, stack, c) for c in refused]
        if refused:
            continue
        notes += _database_moved_notes(environment, stack, before, after)
        back = rollback_changes(before, after)
        stops = [c for c in changes if c.outcome == "fleet_stop"]
        stops_back = [c for c in back if c.outcome == "fleet_stop"]
        if stops or stops_back:
            notes.append(_fleet_note(environment, stack, stops or stops_back, rollback=not stops))
        notes += [_stuck_note(environment, stack, c) for c in back if c.outcome == "refused"]
    return problems, notes + _database_replaced_notes(environment, locked, snapshot)


#: Where the replaced accounting database's history is carried over, step by step.
DATABASE_MOVE_DOC = "docs/contributing/design.md, 'A replaced accounting database under a kept cluster'"


def _database_replaced_notes(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> list[str]:
    """A note when the edit replaces the managed accounting database (its allowance given) under a kept cluster,
    changed by the edit or not (its template may read the same: see below).

    The cluster's ``SlurmSettings.Database.Uri`` is read from the Storage stack's output, so the locked and new
    configurations read the same and :func:`cluster_changes` sees nothing; yet the deploy hands the cluster a new
    endpoint (COMPUTE_FLEET_STOP: refused while the fleet runs), and the Storage stack, deployed first, has deleted
    the old database (a final snapshot, which bills) under the running slurmdbd."""
    if environment.config.storage.accounting is None:
        return []
    changes = compare(locked, snapshot)
    anew = {
        (c.stack, c.logical_id)
        for c in changes
        if c.type == HYPERPOD_TYPE and c.action == "replace" and creates_cluster_anew(c.reasons)
    }
    # A HyperPod cluster this edit creates anew gets the new endpoint from its lifecycle steps: not kept.
    kept = [
        (stack, old.type)
        for stack in sorted(set(locked) & set(snapshot))
        for lid, old in locked[stack].resources.items()
        if old.type in (PCLUSTER_TYPE, HYPERPOD_TYPE) and lid in snapshot[stack].resources and (stack, lid) not in anew
    ]
    replaced = [c for c in changes if c.type == "AWS::RDS::DBCluster" and c.action == "replace"]
    # slurmdbd stopped before the dump: what it wrote after would be lost with the old database; slurmctld queues
    # the records meanwhile (up to MaxDBDMsgs) and sends them once slurmdbd is back on the new one.
    way = f"(the way, step by step, with the commands: {DATABASE_MOVE_DOC})"
    accounting = environment.config.storage.accounting
    database = accounting.database_name if accounting is not None else "slurm_acct_db"

    def fate(change: Change) -> str:
        # A replacement applies UpdateReplacePolicy (retention.on_delete: destroy renders Delete); AWS does not
        # say whether the deployed or the new template's counts, so a snapshot is promised only when both say so.
        policies = {
            state[change.stack].resources[change.logical_id].update_replace_policy for state in (locked, snapshot)
        }
        if policies == {"Snapshot"}:
            return "keeping a final snapshot, which bills until deleted"
        return (
            "perhaps with no final snapshot: the UpdateReplacePolicy is not Snapshot in both the deployed and the "
            "new template; take a manual snapshot first ('aws rds create-db-cluster-snapshot')"
        )

    def note(stack: str, kind: str, change: Change) -> str:
        head = (
            f"{environment.source}: storage.accounting: this edit replaces the accounting database ({change.path}) "
            f"that slurmdbd of the cluster in {stack} uses: the Storage stack deploys first and deletes the old "
            f"database ({fate(change)}), "
        )
        if kind == HYPERPOD_TYPE:
            # The lifecycle step wrote StorageHost into slurmdbd.conf when the controller was created; a deploy runs
            # no lifecycle script on it, and the secret tool rewrites the password, never the host.
            return head + (
                "and the deploy leaves the running controller as it is: its slurmdbd.conf keeps the old host "
                "(StorageHost, written by the lifecycle step when the controller was created; lifecycle scripts "
                "run on new nodes and on a patch, not on a deploy), so accounting stops when the old database goes "
                "(jobs still run). In order: before the deploy, stop slurmdbd on the controller and dump the "
                f"database ({database}); deploy the Storage stack alone ('cdk deploy {environment.name}/Storage'); "
                "load the dump into the new database (mysql --sandbox, over TLS checked against the RDS roots); "
                "deploy the rest; set StorageHost to the host part of the Storage stack's AccountingDatabaseEndpoint "
                "output (StoragePort stays); start slurmdbd; only then lock and remove the allowance "
                f"{way}"
            )
        return head + (
            "and the cluster gets the new endpoint (SlurmSettings.Database.Uri), which ParallelCluster takes only "
            "with the compute fleet stopped: 'mlcluster update "
            f"{environment.name}' cannot see this change (both templates read the Storage stack's output) and "
            "would not stop it. In order: before the deploy, stop the compute fleet ('pcluster "
            "update-compute-fleet --status STOP_REQUESTED'), stop slurmdbd on the head node and dump the "
            f"database ({database}); deploy the Storage stack alone ('cdk deploy {environment.name}/Storage'); "
            "load the dump into the new database (mysql --sandbox, over TLS checked against the RDS roots); "
            "deploy the rest (ParallelCluster starts slurmdbd on the loaded database) and start the compute fleet; "
            f"only then lock and remove the allowance {way}"
        )

    return [note(stack, kind, c) for stack, kind in kept for c in replaced]


def _storage_key(path: str) -> str:
    return "storage.openzfs" if "OpenZfs" in path else "storage.lustre"


def _file_system_checks(
    environment: Environment, locked: Snapshot, snapshot: Snapshot
) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    notes: list[str] = []
    for stack, _, old, new in _kept(locked, snapshot, FSX_TYPE):
        key = _storage_key(new.path)
        if CAPACITY not in old.settings:
            notes.append(_unrecorded(environment, f"the capacity of {stack}/{new.path}"))
            continue
        before, after = old.settings.get(CAPACITY), new.settings.get(CAPACITY)
        if isinstance(before, int) and isinstance(after, int) and after < before:
            problems.append(
                Problem(
                    f"{key}.storage_capacity_gib",
                    NOT_A_VALUE,
                    f"this edit lowers the storage capacity of {stack}/{new.path} from {before} to {after} GiB, but "
                    "FSx cannot shrink a file system (UpdateFileSystem takes only a larger capacity): the deploy "
                    f"would fail and roll the stack back. Safe way: keep storage_capacity_gib: {before} (or more). "
                    "A smaller file system is a new one: copy its data out first (for Lustre an export data "
                    "repository task per DRA path, and what lies outside them to S3), then replace it "
                    "deliberately and let the DRAs import again.",
                )
            )
        elif isinstance(before, int) and isinstance(after, int) and after > before:
            notes.append(
                f"{environment.source}: {key}.storage_capacity_gib: {stack}/{new.path} grows from {before} to "
                f"{after} GiB in place; FSx then optimizes the storage for hours (performance can vary meanwhile) "
                "and refuses another capacity increase until 6 hours after this one was requested and its "
                "optimization has finished (whichever is later): a second increase deployed sooner fails and rolls "
                "back"
            )
        old_throughput, new_throughput = old.settings.get(THROUGHPUT), new.settings.get(THROUGHPUT)
        replaced = old.create_only != new.create_only  # a new file system anyway (the data guard decides on it)
        if THROUGHPUT in old.settings and old_throughput != new_throughput and not replaced:
            problems.append(
                Problem(
                    f"{key}.throughput_mbps_per_tib",
                    NOT_A_VALUE,
                    f"this edit changes the per-unit throughput of {stack}/{new.path} from {_show(old_throughput)} "
                    f"to {_show(new_throughput)} MB/s/TiB. FSx can change it in place (UpdateFileSystem), but "
                    "CloudFormation's resource specification marks the property as replacing the file system, so "
                    "a deploy may create a new, empty file system. Safe way: keep the value in this file and change "
                    "the throughput with 'aws fsx update-file-system --file-system-id ID --lustre-configuration "
                    f"PerUnitStorageThroughput={_show(new_throughput)}' (in place, the data stays). A new file "
                    "system with another throughput is a replacement: a create-only change such as the deployment "
                    "type, with its second copy taken and retention.allow_replacement.",
                )
            )
    return problems, notes


def _path_text(value: object) -> str:
    """A DRA path as text; an intrinsic (the bucket's name) as its JSON, so equal tokens compare equal."""
    if isinstance(value, Mapping) and list(value) == ["Fn::Join"]:
        sep, parts = value["Fn::Join"]
        return str(sep).join(p if isinstance(p, str) else json.dumps(p, sort_keys=True) for p in parts)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _dra_pairs(locked: Snapshot, snapshot: Snapshot) -> list[tuple[str, ResourceState, ResourceState, str]]:
    """``(stack, old, new, how)`` of every DRA the deploy creates while a retained one stays in its place: a kept
    logical id whose create-only paths change (a replacement), or one removed (retained, so it keeps running)
    while another is added in the same stack (a new ``file_system_path`` is a new construct id)."""
    pairs: list[tuple[str, ResourceState, ResourceState, str]] = []
    for stack in sorted(set(locked) & set(snapshot)):
        before, after = locked[stack].resources, snapshot[stack].resources
        for lid, old in sorted(before.items()):
            if old.type != DRA_TYPE or old.deletion_policy not in ("Retain", "RetainExceptOnCreate"):
                continue
            if lid in after and after[lid].type == DRA_TYPE:
                if after[lid].create_only != old.create_only:
                    pairs.append((stack, old, after[lid], "replaces"))
                continue
            added = [r for k, r in sorted(after.items()) if k not in before and r.type == DRA_TYPE]
            pairs += [(stack, old, new, "removes (and keeps) and adds beside it") for new in added]
    return pairs


def _dra_checks(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> list[Problem]:
    problems: list[Problem] = []
    name = environment.name
    for stack, old, new, how in _dra_pairs(locked, snapshot):
        same_fs = old.create_only.get("FileSystemId") == new.create_only.get("FileSystemId")
        clash = [
            field
            for field in ("FileSystemPath", "DataRepositoryPath")
            if field in old.create_only
            and field in new.create_only
            and _overlap(_path_text(old.create_only[field]), _path_text(new.create_only[field]))
        ]
        if not same_fs or not clash:
            continue
        path = old.create_only.get("FileSystemPath")
        problems.append(
            Problem(
                "storage.lustre.data_repository_associations",
                NOT_A_VALUE,
                f"this edit {how} the DRA {stack}/{old.path} ({_show(path)} -> "
                f"{_show(new.create_only.get('FileSystemPath'))}): CloudFormation creates the new association "
                f"while the old one, which DeletionPolicy {old.deletion_policy} keeps, still holds its paths, and FSx "
                f"refuses an association whose {' and '.join(clash)} overlaps another's, so the deploy fails and "
                "rolls back (retention.allow_replacement does not help). Safe way, in two deploys: (1) run an "
                f"export data repository task for {_show(path)}, remove this association from the file and deploy, "
                "then delete the retained one with 'aws fsx delete-data-repository-association --association-id ID "
                f"--no-delete-data-in-file-system' and run 'mlcluster lock {name}'; (2) add it back with the new "
                "paths and deploy.",
            )
        )
    return problems


#: The construct path of an ingress rule of the accounting database's security group (below the stage).
DATABASE_INGRESS = "Storage/AccountingDatabase/SecurityGroup/from "
#: The logical ID of the database's own client group: a rule whose source names it admits that group.
CLIENT_GROUP = re.compile(r"^AccountingDatabaseClientSecurityGroup[0-9A-F]{8}$")


def _database_sources(stack: StackState) -> dict[str, str]:
    """The accounting database's MySQL ingress rules of a stack: ``{logical id: "client" or "nodes"}``. The
    client group's rule names the group in the same stack (``Fn::GetAtt``); the node group's names the Network
    stack's group (a cross-stack reference); the rotation function's (another port, a ``GetAtt`` of the
    endpoint's port) is neither."""
    out: dict[str, str] = {}
    for lid, resource in stack.resources.items():
        if resource.type != "AWS::EC2::SecurityGroupIngress" or not resource.path.startswith(DATABASE_INGRESS):
            continue
        if resource.create_only.get("FromPort") != 3306:
            continue
        source = resource.create_only.get("SourceSecurityGroupId")
        attribute = source.get("Fn::GetAtt") if isinstance(source, Mapping) else None
        if isinstance(attribute, list) and attribute and CLIENT_GROUP.match(str(attribute[0])):
            out[lid] = "client"
        elif isinstance(source, Mapping) and ({"Fn::GetStackOutput", "Fn::ImportValue"} & set(source)):
            out[lid] = "nodes"
    return out


def _holds_client_group(locked: Snapshot, cluster: ResourceState) -> bool | None:
    """Whether the locked HyperPod cluster's controller group holds the accounting database's client group in its
    ``OverrideVpcConfig`` (an output of another locked stack whose target is :data:`CLIENT_GROUP`); None when the
    lock does not record the groups' networks (:data:`GROUP_NETWORKS_KEY`). A lock that does not name the
    controller group (:data:`CONTROLLER_KEY`) is read by any group: the construct gives the client group to the
    controller alone."""
    networks = cluster.settings.get(GROUP_NETWORKS_KEY)
    if not isinstance(networks, Mapping):
        return None
    controller = cluster.create_only.get(CONTROLLER_KEY)
    for group, override in networks.items():
        if controller is not None and group != controller:
            continue
        ids = override.get("SecurityGroupIds") if isinstance(override, Mapping) else None
        for value in ids if isinstance(ids, list) else []:
            source = value.get("Fn::GetStackOutput") if isinstance(value, Mapping) else None
            if not isinstance(source, Mapping) or str(source.get("StackName")) not in locked:
                continue
            targets = locked[str(source.get("StackName"))].outputs.get(str(source.get("OutputName")), [])
            if any(CLIENT_GROUP.match(target) for target in targets):
                return True
    return False


def creates_cluster_anew(reasons: Sequence[str]) -> bool:
    """Whether a HyperPod cluster's "replace" reasons (``mlcluster.replacement``) make CloudFormation create the
    cluster anew: a change of a create-only path of ``AWS::SageMaker::Cluster`` (cfn-lint's schema: ClusterName,
    VpcConfig, Orchestrator) or of the type. The data guard's own reasons, a kept group's InstanceType,
    ExecutionRole or ThreadsPerCore (``GROUP_KEY``) and a new controller group (``CONTROLLER_KEY``), are changes
    CloudFormation sends to UpdateCluster on the running cluster: the same controller may run on."""
    return any(not reason.startswith((GROUP_KEY, CONTROLLER_KEY)) for reason in reasons)


def _cut_off(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> list[str]:
    """Why the locked HyperPod controller may still need the node group's rule although the lock shows the client
    group's: one text per locked cluster, kept or created anew by this edit, whose locked controller group does
    not hold the client group, or whose lock does not record the groups' networks. Only a cluster this edit
    removes while no HyperPod cluster stays in the app is no reason. A cluster created anew in the same edit is
    one, under its logical id or a new one (a removal plus an addition: CloudFormation creates the new before it
    deletes the old): should its create fail, the Cluster stack rolls back to the old cluster, whose controller
    (restarted, docs/upgrading.md step 2) reaches the database only through the rule the Storage stack, deployed
    first, has already removed."""
    changes = compare(locked, snapshot)
    removed = {(c.stack, c.logical_id) for c in changes if c.type == HYPERPOD_TYPE and c.action == "remove"}
    anew = {
        (c.stack, c.logical_id)
        for c in changes
        if c.type == HYPERPOD_TYPE and c.action == "replace" and creates_cluster_anew(c.reasons)
    }
    stays = any(r.type == HYPERPOD_TYPE for state in snapshot.values() for r in state.resources.values())
    reasons: list[str] = []
    for stack in sorted(locked):
        for lid, cluster in sorted(locked[stack].resources.items()):
            if cluster.type != HYPERPOD_TYPE or ((stack, lid) in removed and not stays):
                continue
            held = _holds_client_group(locked, cluster)
            group = cluster.create_only.get(CONTROLLER_KEY, "the controller")
            if held is None:
                reason = (
                    f"the lock does not record the instance groups' OverrideVpcConfig of the HyperPod cluster in "
                    f"{stack}, so it cannot show that {group} holds the client group (run 'mlcluster lock "
                    f"{environment.name}' to record it)"
                )
            elif not held:
                reason = (
                    f"the lock shows the HyperPod cluster in {stack} with controller group {group} outside the client "
                    "group (its OverrideVpcConfig does not hold it): the running controller was created before it "
                    "and reaches the database only through this rule"
                )
            else:
                continue
            if (stack, lid) in anew or (stack, lid) in removed:
                reason += (
                    "; this edit also creates that cluster anew, and should the create fail the Cluster stack rolls "
                    "back to the old cluster, whose controller needs the rule: deploy the new cluster first (with "
                    f"admit_node_group: true), run 'mlcluster lock {environment.name}', then set "
                    "admit_node_group: false"
                )
            reasons.append(reason)
    return reasons


def _accounting_checks(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> list[Problem]:
    """The node group's MySQL rule removed while the running controller still reaches the database through it.

    A lock without the client group's rule (written before it) refuses the removal. A lock with it refuses
    unless its HyperPod controller group holds the client group (:func:`_holds_client_group`) or this edit removes
    the cluster: the Storage stack deploys before the Cluster stack, so the rule would be gone while the
    controller created before the client group still runs (bridge steps 1 and 2 of docs/upgrading.md), and an
    edit that also creates the cluster anew leaves it so if that create fails and rolls back (step 3 waits for
    the new cluster's lock).
    """
    problems: list[Problem] = []
    for stack in sorted(set(locked) & set(snapshot)):
        before = _database_sources(locked[stack])
        removed = [
            lid for lid, source in sorted(before.items()) if source == "nodes" and lid not in snapshot[stack].resources
        ]
        if not removed:
            continue
        if "client" in before.values():
            reasons = _cut_off(environment, locked, snapshot)
            if not reasons:
                continue
            why = "; ".join(reasons)
        else:
            why = (
                "the lock shows no rule for the controller's client group: the running controller was created "
                "before that group and reaches the database only through this rule"
            )
        problems += [
            Problem(
                "storage.accounting.admit_node_group",
                NOT_A_VALUE,
                f"this edit removes {stack}/{lid}, the rule that admits MySQL to the Slurm accounting database "
                f"from every node's group, and {why}, so slurmdbd would lose its database until the cluster is "
                "created again. Safe way: set storage.accounting.admit_node_group: true and deploy (the rule stays "
                "beside the client group's), recreate the cluster, run "
                f"'mlcluster lock {environment.name}', then set it back to false (docs/upgrading.md)",
            )
            for lid in removed
        ]
    return problems


#: Network resources a HyperPod instance group can hold through its ``OverrideVpcConfig``.
NETWORK_TYPES = frozenset({"AWS::EC2::SecurityGroup", "AWS::EC2::Subnet"})
#: The environment key of the HyperPod controller group: a new name for it is a new Slurm controller.
CONTROLLER_GROUP_KEY = "cluster.hyperpod.controller"


def _group_key(environment: Environment, group: str) -> str:
    """The environment key of HyperPod instance group ``group`` (``cluster.hyperpod.workers[1]``)."""
    hyperpod = environment.config.cluster.hyperpod
    for path, found in hyperpod.groups() if hyperpod is not None else []:
        if found.instance_group_name == group:
            return f"cluster.hyperpod.{path}"
    return "cluster.hyperpod"


def _network_change(old: object, new: object) -> str:
    """What an ``OverrideVpcConfig`` change is, in words."""
    if old is None:
        return "gains an OverrideVpcConfig (its own subnets or security groups)"
    if new is None:
        return "loses its OverrideVpcConfig (back to the cluster's VpcConfig)"
    parts = [
        field
        for field in ("Subnets", "SecurityGroupIds")
        if not isinstance(old, Mapping) or not isinstance(new, Mapping) or old.get(field) != new.get(field)
    ]
    return f"changes the {' and '.join(parts) or 'settings'} of its OverrideVpcConfig"


def _token(value: object) -> str:
    """A subnet or security group id as text; another stack's output as ``<stack output>``, a reference as
    ``<logical id>``."""
    if isinstance(value, Mapping) and isinstance(value.get("Fn::GetStackOutput"), Mapping):
        source = value["Fn::GetStackOutput"]
        return f"<{source.get('StackName')} {source.get('OutputName')}>"
    if isinstance(value, Mapping) and len(value) == 1:
        inner = next(iter(value.values()))
        return f"<{inner[0] if isinstance(inner, list) and inner else inner}>"
    return str(value)


def _network_text(override: object) -> str:
    """An ``OverrideVpcConfig`` as ``subnets [..] security groups [..]``, or ``(none: the cluster's VpcConfig)``."""
    if not isinstance(override, Mapping):
        return "(none: the cluster's VpcConfig)"
    parts = []
    for field, label in (("Subnets", "subnets"), ("SecurityGroupIds", "security groups")):
        items = override.get(field)
        listed = ", ".join(_token(item) for item in items) if isinstance(items, list) else _token(items)
        parts.append(f"{label} [{listed}]")
    return " ".join(parts)


def _network_problem(
    environment: Environment, stack: str, cluster: str, group: str, old: object, new: object
) -> Problem:
    key = _group_key(environment, group)
    recreate = (
        "create the cluster again (drain the partitions, copy what the controller holds, set a new cluster.name "
        "and name Cluster/Cluster in retention.allow_replacement for that deploy; a controller without "
        "/opt/sagemaker keeps its state on FSx, /fsx/.mlcluster/controller: stop the old controller's slurmctld, "
        "slurmdbd and mariadb first, as the new one starts on those folders while the old one still runs)"
    )
    if key == CONTROLLER_GROUP_KEY:
        # A new controller group name would drop the controller's /opt/sagemaker (slurmctld's state, the local
        # accounting database): the data guard refuses it (replacement.CONTROLLER_KEY); only a new cluster is a way.
        ways = (
            "Safe way, which creates the nodes anew: "
            + recreate
            + ". A new instance_group_name for the controller is no way: it would be a new Slurm controller without "
            "the old one's state (/opt/sagemaker), refused like a new cluster. Or keep the group's network as deployed."
        )
    else:
        ways = (
            "Safe ways, each of which creates the nodes anew: give the group a new instance_group_name in "
            f"{key} (a new group is created with the new network; move the work, then remove the old group), or "
            + recreate
            + ". Or keep the group's network as deployed."
        )
    return Problem(
        key,
        NOT_A_VALUE,
        f"this edit keeps instance group {group} of the HyperPod cluster {cluster} ({stack}) under its name but "
        f"{_network_change(old, new)}: {_network_text(old)} -> {_network_text(new)}. The deploy would send it to "
        "SageMaker's UpdateCluster, which changes an existing group's instance count and lifecycle script, not "
        "its network (the running nodes keep the network interfaces they were created with): it may fail and "
        "roll the stack back, or leave the nodes on the old network. This can be the group's zones, or for the "
        "controller the accounting database's client group (storage.accounting with accounting.mode managed). " + ways,
    )


def _kept_groups(resource: ResourceState) -> set[str]:
    """The instance groups a HyperPod cluster's state names: its record of the groups' networks, and the groups'
    create-only fields (which a lock written before that record holds too)."""
    names = set(resource.settings.get(GROUP_NETWORKS_KEY, {}))
    names |= {key[len(GROUP_KEY) :].split("]", 1)[0] for key in resource.create_only if key.startswith(GROUP_KEY)}
    return names


def _replaced_network_problems(
    environment: Environment,
    snapshot: Snapshot,
    stack: str,
    cluster: str,
    old: ResourceState,
    new: ResourceState,
    replaced: Mapping[tuple[str, str], str],
    *,
    edited: set[str],
) -> list[Problem]:
    """A problem for each subnet or security group that a kept group of the HyperPod cluster ``new`` holds
    through its ``OverrideVpcConfig``, read from another stack's output (``Fn::GetStackOutput``), and that this
    edit replaces: the cluster's template is unchanged, but the deploy sends UpdateCluster the new id for the
    running group, the same change :func:`_network_problem` refuses when the override itself is edited."""
    problems: list[Problem] = []
    kept = _kept_groups(old)
    overrides = new.settings.get(GROUP_NETWORKS_KEY, {})
    for group, override in sorted(overrides.items()):
        if group not in kept or group in edited or not isinstance(override, Mapping):
            continue
        found: dict[tuple[str, str], str] = {}
        for field in ("Subnets", "SecurityGroupIds"):
            values = override.get(field, [])
            for value in values if isinstance(values, list) else []:
                source = value.get("Fn::GetStackOutput") if isinstance(value, Mapping) else None
                if not isinstance(source, Mapping) or str(source.get("StackName")) not in snapshot:
                    continue
                producer = str(source.get("StackName"))
                for target in snapshot[producer].outputs.get(str(source.get("OutputName")), []):
                    if (producer, target) in replaced:
                        found[producer, replaced[producer, target]] = (
                            "subnet" if field == "Subnets" else "security group"
                        )
        for (producer, path), kind in sorted(found.items()):
            problems.append(_replaced_network_problem(environment, stack, cluster, group, producer, path, kind))
    return problems


def _replaced_network_problem(
    environment: Environment, stack: str, cluster: str, group: str, producer: str, path: str, kind: str
) -> Problem:
    key = _group_key(environment, group)
    held = (
        "The Storage and Network stacks deploy before the Cluster stack: from then on whatever admits the new "
        "group (the accounting database's rule, for its client group) no longer admits the running nodes, so "
        "slurmdbd loses its database, and CloudFormation cannot delete the old group while their network "
        "interfaces hold it. "
        if kind == "security group"
        else "CloudFormation cannot delete the old subnet while the running nodes' network interfaces are in it. "
    )
    ways = (
        "Safe ways: keep the security group as deployed, or create the cluster again in this deploy (drain the "
        "partitions, copy what the controller holds, set a new cluster.name and name Cluster/Cluster in "
        "retention.allow_replacement; the old group is left behind while the old cluster holds it: delete it by "
        "hand once the old cluster is gone)."
        if kind == "security group" or key == CONTROLLER_GROUP_KEY
        else f"Safe ways: keep the {kind} as deployed, or first, in a deploy of its own, move the group's work to "
        f"a group of a new instance_group_name that does not use it and remove this group from {key}, then make "
        "this edit; or create the cluster again (drain the partitions, copy what the controller holds, set a new "
        "cluster.name and name Cluster/Cluster in retention.allow_replacement)."
    )
    return Problem(
        key,
        NOT_A_VALUE,
        f"this edit replaces the {kind} {path} (stack {producer}), which instance group {group} of the HyperPod "
        f"cluster {cluster} ({stack}) holds through its OverrideVpcConfig. The cluster's template stays as it was (it "
        f"reads the id from {producer}'s output), but the deploy sends the new {kind}'s id to SageMaker's "
        "UpdateCluster for the running group: the network change of an existing group that this synth refuses "
        f"when the group's zones or groups are edited. {held}{ways}",
    )


def _hyperpod_network_checks(
    environment: Environment, locked: Snapshot, snapshot: Snapshot
) -> tuple[list[Problem], list[str]]:
    """Kept HyperPod instance groups whose ``OverrideVpcConfig`` changes, or whose override's subnet or security
    group is replaced in another stack (both refused), on a cluster the edit does not replace."""
    problems: list[Problem] = []
    notes: list[str] = []
    clusters = [
        (stack, lid, old)
        for stack in sorted(set(locked) & set(snapshot))
        for lid, old in sorted(locked[stack].resources.items())
        if old.type == HYPERPOD_TYPE
        and lid in snapshot[stack].resources
        and snapshot[stack].resources[lid].type == HYPERPOD_TYPE
    ]
    if not clusters:
        return problems, notes
    changes = compare(locked, snapshot)
    replaced = {(c.stack, c.logical_id): c.path for c in changes if c.action == "replace"}
    networks_replaced = {
        key: path for key, path in replaced.items() if locked[key[0]].resources[key[1]].type in NETWORK_TYPES
    }
    new_clusters = {
        (c.stack, c.logical_id) for c in changes if c.action == "replace" and creates_cluster_anew(c.reasons)
    }
    for stack, lid, old in clusters:
        if (stack, lid) in new_clusters:
            continue  # a new cluster: every group is created with its network
        new = snapshot[stack].resources[lid]
        name = str(new.create_only.get("ClusterName", lid))
        changed: set[str] = set()
        if new.digest != old.digest and GROUP_NETWORKS_KEY not in old.settings:
            notes.append(
                _unrecorded(environment, f"the instance groups' OverrideVpcConfig of the HyperPod cluster in {stack}")
                + " (until then a kept group's network change is not refused, and UpdateCluster may not take it)"
            )
        elif new.digest != old.digest:
            before, after = old.settings[GROUP_NETWORKS_KEY], new.settings.get(GROUP_NETWORKS_KEY, {})
            changed = {group for group in before.keys() & after.keys() if before[group] != after[group]}
            problems += [
                _network_problem(environment, stack, name, group, before[group], after[group])
                for group in sorted(changed)
            ]
        # A group whose override is edited is refused above already.
        problems += _replaced_network_problems(
            environment, snapshot, stack, name, old, new, networks_replaced, edited=changed
        )
    return problems, notes


def outcome_checks(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> tuple[list[Problem], list[str]]:
    """The problems (edits whose deploy would fail) and notes (edits that need ``mlcluster update``) of an edit."""
    problems: list[Problem] = []
    notes: list[str] = []
    for check in (_version_checks, _cluster_checks, _file_system_checks, _hyperpod_network_checks):
        more, more_notes = check(environment, locked, snapshot)
        problems += more
        notes += more_notes
    return problems + _dra_checks(environment, locked, snapshot) + _accounting_checks(
        environment, locked, snapshot
    ), notes
