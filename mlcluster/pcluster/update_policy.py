"""What a ParallelCluster update does with each changed key, known at synth from ParallelCluster's own rules.

``Custom::PclusterCluster`` runs ParallelCluster's ``ConfigPatch`` on an
update: every changed key has an ``UpdatePolicy`` in the cluster schema, and
a change whose policy's condition fails makes the custom resource, and so
the stack update, fail. ``cluster_changes(old, new)`` makes the same
comparison here (mlcluster's venv cannot import pcluster: it pins CDK v1),
from ``update_policies.json``, the policy tree that
``tools/pcluster_update_policies.py`` reads from the pinned
aws-parallelcluster package, and sorts each change into one of four
outcomes:

============  ===============================================================
``in_place``  ParallelCluster applies it with the compute fleet running.
``fleet_stop`` ParallelCluster applies it only with the compute fleet stopped
              (``mlcluster update ENV`` stops it, deploys, starts it; a plain
              ``cdk deploy`` fails at the custom resource).
``refused``   ParallelCluster never applies it to this cluster (``UNSUPPORTED``,
              ``/home``, a managed Lustre, running login nodes): ``safe_way``
              says what to do instead.
``replaces_data`` (for the lock's guard: not produced here).
============  ===============================================================

The policies' conditions, as ``pcluster/config/update_policy.py`` (3.16)
states them, read with the cluster as mlcluster must assume it at synth:
compute capacity running (a static ``MinCount``, or jobs), the head node
running, login nodes running when the deployed configuration gives a pool a
``Count`` above 0, and ``QueueUpdateStrategy`` read from the new
configuration (ParallelCluster reads the target's):

=================================  ============================================================================
policy                             outcome
=================================  ============================================================================
SUPPORTED, IGNORED                 in_place
SUPPORTED_UNLESS_ADC               in_place (refused in the us-iso* regions, where the config's Region says so)
EXTRA_CHEF_ATTRIBUTES              in_place when only the updatable attributes change, else refused
QUEUE_UPDATE_STRATEGY              in_place under ``SlurmQueues`` with a strategy other than
                                   COMPUTE_FLEET_STOP (DRAIN, TERMINATE), else fleet_stop
RESIZE_UPDATE_STRATEGY_ON_REMOVE   in_place for an added queue or compute resource, a ``MaxCount`` that grows,
                                   a ``MinCount`` whose growth ``MaxCount`` matches, or any change under
                                   ``SlurmQueues`` with TERMINATE; else fleet_stop
MANAGED_PLACEMENT_GROUP            fleet_stop when a managed placement group goes away, else as
                                   QUEUE_UPDATE_STRATEGY
SHARED_STORAGE_UPDATE_POLICY       refused at ``/home``, for a moved ``MountDir`` (ParallelCluster's check raises
                                   on it), or with login nodes running (unless external EFS/FSx);
                                   fleet_stop unless external EFS/FSx or a queue update strategy; else in_place
COMPUTE_FLEET_STOP_ON_REMOVE       in_place when an item is added under ``SlurmQueues``, else fleet_stop
COMPUTE_FLEET_STOP                 fleet_stop
MANAGED_FSX                        refused while a managed FSx for Lustre stays; else in_place under
                                   ``SlurmQueues`` with a queue update strategy or only additions, else fleet_stop
LOGIN_NODES_POOLS_UPDATE_POLICY    in_place for an added pool or with no login nodes running, else refused
LOGIN_NODES_STOP                   in_place with no login nodes running, else refused
LOGIN_NODES_POOL_STOP              in_place with the pool's login nodes not running, else refused
COMPUTE_AND_LOGIN_NODES_STOP       refused with login nodes running, else fleet_stop
HEAD_NODE_STOP                     refused (mlcluster never stops the head node)
READ_ONLY_RESOURCE_BUCKET,         refused
UNKNOWN, UNSUPPORTED, any other
=================================  ============================================================================

Login nodes are never stopped by ``mlcluster update`` (they hold users'
sessions): a change that needs them stopped is refused with the procedure
(pool ``Count`` 0, deploy, the change, deploy, ``Count`` back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

Outcome = Literal["in_place", "fleet_stop", "refused", "replaces_data"]
OUTCOMES: tuple[Outcome, ...] = ("in_place", "fleet_stop", "refused", "replaces_data")

#: ParallelCluster's default queue update strategy, the one that needs the fleet stopped.
FLEET_STOP_STRATEGY = "COMPUTE_FLEET_STOP"
#: ParallelCluster's defaults for MinCount and MaxCount (pcluster.constants), used when one side omits them.
DEFAULT_MIN_COUNT = 0
DEFAULT_MAX_COUNT = 10
#: ExtraChefAttributes paths ParallelCluster lets change (pcluster.config.update_policy).
UPDATABLE_CHEF_ATTRIBUTES = frozenset(
    {
        "cluster.slurm.reconfigure_timeout",
        "cluster.cluster_readiness_check_enabled",
        "cluster.cluster_readiness_check_ignore_failure",
    }
)
#: Shared storage types mounted and unmounted live when external (pcluster.constants).
LIVE_STORAGE_TYPES = frozenset({"Efs", "FsxLustre", "FsxOntap", "FsxOpenZfs", "FileCache"})
#: The settings keys that make a shared storage external (an existing file system; pcluster update_policy_utils).
EXTERNAL_STORAGE_KEYS = ("VolumeId", "FileSystemId", "FileCacheId")

NEW_CLUSTER_WAY = (
    "ParallelCluster never changes this on an existing cluster. Safe way: deploy a second environment (a new "
    "cluster) with the new value next to this one, move the work, then remove the old environment"
)
QUEUE_WAY = (
    "ParallelCluster never changes this on an existing queue or compute resource. Safe way: add a new queue "
    "or compute resource (a new name) with the new value, deploy, move the jobs, then remove the old one "
    "(with 'mlcluster update ENV', which stops the fleet)"
)
HOME_WAY = (
    "ParallelCluster never changes the storage at /home of an existing cluster. Safe way: a new cluster "
    "(a second environment) with the new /home, copy the homes, then remove the old environment"
)
LOGIN_WAY = (
    "ParallelCluster applies this only with the login nodes stopped, and mlcluster update does not stop "
    "them (they hold users' sessions). Safe way: set the login pool's count to 0 and deploy, then make "
    "this change and deploy, then set the count back and deploy"
)
MANAGED_FSX_WAY = (
    "ParallelCluster refuses this while the cluster manages an FSx for Lustre file system (the update would "
    "delete it). Safe way: a new cluster, or move the file system out of the cluster (an existing file system)"
)
MOUNT_DIR_WAY = (
    "ParallelCluster cannot move a shared storage to another directory (its update check fails on it). Safe "
    "way: remove the storage from the cluster and deploy, then add it at the new directory and deploy"
)
CHEF_WAY = "ParallelCluster updates only some ExtraChefAttributes. Safe way: restore the others, or a new cluster"
ADC_WAY = "ParallelCluster refuses tag changes in the us-iso* regions. Safe way: restore the tags, or a new cluster"


#: The policies ``_outcome`` reads the condition of; any other (a new ParallelCluster release's) is refused
#: until mlcluster learns it (tests/pcluster/test_update_policy_contract.py lists the data file's).
KNOWN_POLICIES = frozenset(
    {
        "SUPPORTED",
        "IGNORED",
        "SUPPORTED_UNLESS_ADC",
        "EXTRA_CHEF_ATTRIBUTES",
        "QUEUE_UPDATE_STRATEGY",
        "RESIZE_UPDATE_STRATEGY_ON_REMOVE",
        "MANAGED_PLACEMENT_GROUP",
        "SHARED_STORAGE_UPDATE_POLICY",
        "COMPUTE_FLEET_STOP_ON_REMOVE",
        "COMPUTE_FLEET_STOP",
        "MANAGED_FSX",
        "LOGIN_NODES_POOLS_UPDATE_POLICY",
        "LOGIN_NODES_STOP",
        "LOGIN_NODES_POOL_STOP",
        "COMPUTE_AND_LOGIN_NODES_STOP",
        "HEAD_NODE_STOP",
        "READ_ONLY_RESOURCE_BUCKET",
        "UNKNOWN",
        "UNSUPPORTED",
    }
)


@dataclass(frozen=True)
class ClusterChange:
    """One changed key of the cluster configuration, its ParallelCluster update policy and what a deploy does."""

    #: Dotted path in ``ClusterConfiguration``; list items by their key, e.g.
    #: ``Scheduling.SlurmQueues[gpu].ComputeResources[p5].InstanceType``, or ``Scheduling.SlurmQueues[gpu]``
    #: for an added or removed queue.
    path: str
    #: ParallelCluster's ``UpdatePolicy`` name for the key (``SUPPORTED``, ``COMPUTE_FLEET_STOP``, ...).
    policy: str
    outcome: Outcome
    #: The deployed value (None: absent, an added item or section).
    old: object
    #: The new value (None: absent, a removed item or section).
    new: object
    #: For ``refused``: what to do instead. Empty otherwise.
    safe_way: str = ""


@dataclass(frozen=True)
class _Raw:
    """A change as ParallelCluster's ConfigPatch records it, before its policy's condition is read."""

    parents: tuple[str, ...]
    key: str
    old: object
    new: object
    policy: str
    is_list: bool
    item: str | None = None

    @property
    def path(self) -> str:
        leaf = f"{self.key}[{self.item}]" if self.is_list else self.key
        return ".".join((*self.parents, leaf))

    def under_queues(self) -> bool:
        return any(part.startswith("SlurmQueues[") for part in self.parents)


@cache
def policy_tree() -> Mapping[str, Any]:
    """The data file: ``pcluster_version`` and the ``fields`` tree (policy, ``list_key``, nested ``fields``)."""
    text = resources.files("mlcluster.pcluster").joinpath("update_policies.json").read_text()
    tree: Mapping[str, Any] = json.loads(text)
    return tree


def pcluster_version() -> str:
    """The aws-parallelcluster release the policies were read from."""
    return str(policy_tree()["pcluster_version"])


def _section(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _compare(
    base: Mapping[str, Any], target: Mapping[str, Any], fields: Mapping[str, Any], parents: tuple[str, ...]
) -> list[_Raw]:
    """ConfigPatch._compare_section: every changed field under ``fields``, in the schema's order."""
    out: list[_Raw] = []
    for key, field in fields.items():
        policy = str(field["policy"])
        if "fields" in field:
            if "list_key" in field:
                out += _compare_list(base, target, key, field, parents)
                continue
            new, old = target.get(key), base.get(key)
            if new and old:
                out += _compare(_section(old), _section(new), field["fields"], (*parents, key))
            elif new or old:
                if policy == "IGNORED":
                    out += _compare(_section(old), _section(new), field["fields"], (*parents, key))
                else:
                    out.append(_Raw(parents, key, old or None, new or None, policy, is_list=False))
            continue
        old, old_key = _value(base, key)
        new, new_key = _value(target, key)
        here = parents
        if old_key != new_key:
            # A custom action changed between one Script and a Sequence: ConfigPatch reports the action.
            here, key = parents[:-1], parents[-1]
            old, new = {old_key: old}, {new_key: new}
        else:
            key = new_key
        if old != new:
            out.append(_Raw(here, key, old, new, policy, is_list=False))
    return out


def _value(section: Mapping[str, Any], key: str) -> tuple[object, str]:
    """A field's value; a custom action's ``Script`` may be a ``Sequence`` of actions instead."""
    value = section.get(key)
    if key == "Script" and value is None and section.get("Sequence") is not None:
        return section["Sequence"], "Sequence"
    return value, key


def _compare_list(
    base: Mapping[str, Any], target: Mapping[str, Any], key: str, field: Mapping[str, Any], parents: tuple[str, ...]
) -> list[_Raw]:
    """ConfigPatch._compare_list: items paired by the list's key; unpaired ones are added or removed."""
    list_key = field["list_key"]
    policy = str(field["policy"])
    old_items = [_section(item) for item in base.get(key) or []]
    visited: set[int] = set()
    out: list[_Raw] = []
    for new_item in [_section(item) for item in target.get(key) or []]:
        name = new_item.get(list_key) if list_key else None
        match = next(
            (i for i, old_item in enumerate(old_items) if (old_item.get(list_key) if list_key else None) == name),
            None,
        )
        if match is not None:
            visited.add(match)
            out += _compare(old_items[match], new_item, field["fields"], (*parents, f"{key}[{name}]"))
        else:
            out.append(_Raw(parents, key, None, new_item, policy, is_list=True, item=str(name)))
    for i, old_item in enumerate(old_items):
        if i not in visited:
            name = old_item.get(list_key) if list_key else None
            out.append(_Raw(parents, key, old_item, None, policy, is_list=True, item=str(name)))
    return out


def _strategy(config: Mapping[str, Any]) -> str:
    slurm = _section(_section(config.get("Scheduling")).get("SlurmSettings"))
    return str(slurm.get("QueueUpdateStrategy", FLEET_STOP_STRATEGY))


def _login_pools_running(config: Mapping[str, Any]) -> set[str]:
    """The login pools the deployed configuration keeps running (``Count`` above 0; ParallelCluster's default is 1)."""
    pools = _section(config.get("LoginNodes")).get("Pools") or []
    return {str(pool.get("Name")) for pool in map(_section, pools) if _count(pool.get("Count"), 1) > 0}


def _count(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return default


def _pool_of(raw: _Raw) -> str | None:
    for part in raw.parents:
        if part.startswith("Pools["):
            return part[len("Pools[") : -1]
    return None


def _storage_live(raw: _Raw) -> bool:
    """ParallelCluster's SharedStorageChangeInfo: an external EFS/FSx mounts and unmounts on running nodes."""
    storage = _section(raw.new if raw.new is not None else raw.old)
    storage_type = str(storage.get("StorageType", ""))
    settings = _section(storage.get(f"{storage_type}Settings"))
    return any(key in settings for key in EXTERNAL_STORAGE_KEYS) and storage_type in LIVE_STORAGE_TYPES


def _is_home(raw: _Raw) -> bool:
    if raw.key != "SharedStorage":
        return False
    return any(_section(v).get("MountDir") in ("home", "/home") for v in (raw.old, raw.new))


def _managed_lustre_names(config: Mapping[str, Any]) -> set[str]:
    return {
        str(storage.get("Name"))
        for storage in map(_section, config.get("SharedStorage") or [])
        if storage.get("StorageType") == "FsxLustre"
        and "FileSystemId" not in _section(storage.get("FsxLustreSettings"))
    }


def _placement_group_managed(queue: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    group = _section(_section(resource.get("Networking")).get("PlacementGroup")) or _section(
        _section(queue.get("Networking")).get("PlacementGroup")
    )
    return bool(group.get("Enabled")) and not (group.get("Name") or group.get("Id"))


def _queue_and_resource(raw: _Raw, config: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    queue: Mapping[str, Any] = {}
    resource: Mapping[str, Any] = {}
    for part in raw.parents:
        if part.startswith("SlurmQueues["):
            name = part[len("SlurmQueues[") : -1]
            queues = _section(config.get("Scheduling")).get("SlurmQueues") or []
            queue = next((q for q in map(_section, queues) if q.get("Name") == name), {})
        elif part.startswith("ComputeResources["):
            name = part[len("ComputeResources[") : -1]
            resource = next(
                (r for r in map(_section, queue.get("ComputeResources") or []) if r.get("Name") == name), {}
            )
    return queue, resource


def _chef_paths(old: object, new: object) -> list[str]:
    """The ExtraChefAttributes leaf paths that differ (ParallelCluster's get_dictionary_diff)."""

    def parse(value: object) -> Mapping[str, Any]:
        if not isinstance(value, str) or not value:
            return {}
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return _section(parsed)

    def diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str) -> list[str]:
        paths: list[str] = []
        for key in sorted(set(a) | set(b)):
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(a.get(key), Mapping) and isinstance(b.get(key), Mapping):
                paths += diff(a[key], b[key], path)
            elif a.get(key) != b.get(key) or (key in a) != (key in b):
                paths.append(path)
        return paths

    return diff(parse(old), parse(new), "")


def _outcome(raw: _Raw, raws: Sequence[_Raw], old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Outcome, str]:
    """The outcome of one change, and the safe way when refused."""
    strategy = _strategy(new)
    strategy_set = strategy != FLEET_STOP_STRATEGY
    logins = _login_pools_running(old)
    policy = raw.policy
    if policy in ("SUPPORTED", "IGNORED"):
        return "in_place", ""
    if policy == "SUPPORTED_UNLESS_ADC":
        adc = str(new.get("Region") or old.get("Region") or "").startswith("us-iso")
        return ("refused", ADC_WAY) if adc else ("in_place", "")
    if policy == "EXTRA_CHEF_ATTRIBUTES":
        fixed = [p for p in _chef_paths(raw.old, raw.new) if p not in UPDATABLE_CHEF_ATTRIBUTES]
        return ("refused", CHEF_WAY) if fixed else ("in_place", "")
    if policy == "QUEUE_UPDATE_STRATEGY":
        return ("in_place", "") if raw.under_queues() and strategy_set else ("fleet_stop", "")
    if policy == "RESIZE_UPDATE_STRATEGY_ON_REMOVE":
        return ("in_place", "") if _resize_in_place(raw, raws, strategy) else ("fleet_stop", "")
    if policy == "MANAGED_PLACEMENT_GROUP":
        deleted = _placement_group_managed(*_queue_and_resource(raw, old)) and not _placement_group_managed(
            *_queue_and_resource(raw, new)
        )
        if deleted:
            return "fleet_stop", ""
        return ("in_place", "") if raw.under_queues() and strategy_set else ("fleet_stop", "")
    if policy == "SHARED_STORAGE_UPDATE_POLICY":
        if _is_home(raw):
            return "refused", HOME_WAY
        if not raw.is_list:
            return "refused", MOUNT_DIR_WAY
        live = _storage_live(raw)
        if logins and not live:
            return "refused", LOGIN_WAY
        return ("in_place", "") if live or strategy_set else ("fleet_stop", "")
    if policy == "COMPUTE_FLEET_STOP_ON_REMOVE":
        added = raw.is_list and raw.under_queues() and raw.old is None and raw.new is not None
        return ("in_place", "") if added else ("fleet_stop", "")
    if policy == "COMPUTE_FLEET_STOP":
        return "fleet_stop", ""
    if policy == "MANAGED_FSX":
        if _managed_lustre_names(old) & _managed_lustre_names(new):
            return "refused", MANAGED_FSX_WAY
        only_added = isinstance(raw.old, list) and isinstance(raw.new, list) and all(v in raw.new for v in raw.old)
        return ("in_place", "") if raw.under_queues() and (strategy_set or only_added) else ("fleet_stop", "")
    if policy == "LOGIN_NODES_POOLS_UPDATE_POLICY":
        added = raw.is_list and raw.old is None and raw.new is not None
        return ("in_place", "") if added or not logins else ("refused", LOGIN_WAY)
    if policy == "LOGIN_NODES_STOP":
        return ("refused", LOGIN_WAY) if logins else ("in_place", "")
    if policy == "LOGIN_NODES_POOL_STOP":
        return ("refused", LOGIN_WAY) if _pool_of(raw) in logins else ("in_place", "")
    if policy == "COMPUTE_AND_LOGIN_NODES_STOP":
        return ("refused", LOGIN_WAY) if logins else ("fleet_stop", "")
    return "refused", _refused_way(raw)


def _resize_in_place(raw: _Raw, raws: Sequence[_Raw], strategy: str) -> bool:
    """condition_checker_resize_update_strategy_on_remove with the fleet running."""
    if raw.under_queues() or raw.key == "SlurmQueues":
        if strategy == "TERMINATE":
            return True
        if raw.is_list and raw.old is None and raw.new is not None:
            return True
    if raw.key == "MaxCount":
        return _count(raw.new, DEFAULT_MAX_COUNT) >= _count(raw.old, DEFAULT_MAX_COUNT)
    if raw.key == "MinCount":
        for other in raws:
            if other.parents == raw.parents and other.key == "MaxCount":
                grown_max = _count(other.new, DEFAULT_MAX_COUNT) - _count(other.old, DEFAULT_MAX_COUNT)
                grown_min = _count(raw.new, DEFAULT_MIN_COUNT) - _count(raw.old, DEFAULT_MIN_COUNT)
                return grown_max >= grown_min
    return False


def _refused_way(raw: _Raw) -> str:
    """The safe way for a change ParallelCluster refuses whatever the cluster's state."""
    if raw.under_queues():
        return QUEUE_WAY
    return NEW_CLUSTER_WAY


def cluster_changes(old_config: Mapping[str, Any], new_config: Mapping[str, Any]) -> list[ClusterChange]:
    """Every change from the deployed ``ClusterConfiguration`` to the new one, with ParallelCluster's policy
    and what a deploy does with it (see the module's table)."""
    raws = _compare(old_config, new_config, policy_tree()["fields"], ())
    out: list[ClusterChange] = []
    for raw in raws:
        outcome, way = _outcome(raw, raws, old_config, new_config)
        out.append(ClusterChange(raw.path, raw.policy, outcome, raw.old, raw.new, way))
    return out


def rollback_changes(old_config: Mapping[str, Any], new_config: Mapping[str, Any]) -> list[ClusterChange]:
    """What CloudFormation's rollback of the deploy ``old_config`` -> ``new_config`` asks ParallelCluster when the
    cluster was updated and something after it failed: the changes back, judged on the cluster as updated.

    A rollback the provider refuses stops the stack in ``UPDATE_ROLLBACK_FAILED``; one that needs the fleet
    stopped succeeds only while the fleet still is: ``mlcluster update`` stops the fleet whenever either
    direction needs it (``Plan.stops_fleet`` in ``mlcluster.cli.update``) and starts it again only once both
    cluster stacks are settled (``Run.start_blocker``).
    """
    return cluster_changes(new_config, old_config)
