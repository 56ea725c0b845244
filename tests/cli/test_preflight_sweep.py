"""``mlcluster preflight``: each check's whole list of rows and every AWS request it makes (issue 27, sweep).

The checks run here against a recorded account: each answer is given by hand, each call (service, operation,
every parameter) is kept in order and compared with ``==``, and each check's rows (id, status, level, key and
the full line the operator reads) are compared with ``==``, on inputs right at each rule's edge. The
environment and its plan are built by hand (no YAML, no synthesis), so each test is a few milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from mlcluster.cli import preflight
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_OK, CliError
from mlcluster.cli.plan import FileSystem, NodeGroup, Plan
from mlcluster.cli.preflight import Result

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
REGION = "us-east-2"
ENV = "train"
CLUSTER = "train-cluster"
Call = tuple[str, str, dict[str, Any]]


def client_error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Operation")


class Account:
    """AWS as a table of answers per operation (a value, an exception, or a function of the parameters);
    every call and paginated call is recorded as (service, operation, parameters)."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[Call] = []

    def client(self, service: str) -> Any:
        account = self

        class Client:
            def get_paginator(self, operation: str) -> Any:
                return SimpleNamespace(paginate=lambda **params: account.call(service, operation, params))

            def __getattr__(self, operation: str) -> Callable[..., Any]:
                return lambda **params: account.call(service, operation, params)

        return Client()

    def call(self, service: str, operation: str, params: dict[str, Any]) -> Any:
        self.calls.append((service, operation, params))
        answer = self.answers[operation]
        if callable(answer):
            answer = answer(params)
        if isinstance(answer, Exception):
            raise answer
        return answer


def environment(
    *,
    backend: str = "pcluster",
    os: str = "alinux2023",
    custom_ami: str | None = None,
    head: str = "c5.xlarge",
    network: Any = None,
    bucket: str | None = None,
    associations: tuple[Any, ...] = (),
    observability: bool = False,
) -> Any:
    pcluster = SimpleNamespace(
        os=os, custom_ami=custom_ami, head_node=SimpleNamespace(instance_type=head), version="3.16.1"
    )
    return SimpleNamespace(
        name=ENV,
        cluster_name=CLUSTER,
        config=SimpleNamespace(
            network=network,
            cluster=SimpleNamespace(backend=backend, pcluster=pcluster if backend == "pcluster" else None),
            storage=SimpleNamespace(
                lustre=SimpleNamespace(data_repository_associations=associations),
                data_bucket=SimpleNamespace(name=bucket),
            ),
            observability=SimpleNamespace(enabled=observability),
        ),
    )


def context(
    account: Account,
    *,
    groups: tuple[NodeGroup, ...] = (),
    file_systems: tuple[FileSystem, ...] = (),
    nat_gateways: int = 1,
    new_vpc: bool = True,
    env: Any = None,
) -> preflight.Context:
    plan = Plan(
        groups=groups,
        file_systems=file_systems,
        nat_gateways=nat_gateways,
        new_vpc=new_vpc,
        zones=(),
        extra_volumes_gib=(),
        prometheus=False,
        grafana=False,
    )
    return preflight.Context(
        env=cast(Any, env if env is not None else environment()),
        plan=plan,
        region=REGION,
        client=account.client,
        margin=timedelta(days=7),
        now=NOW,
    )


def group(key: str, instance_type: str, max_count: int, *zones: str, **changes: Any) -> NodeGroup:
    return NodeGroup(key, "compute", instance_type, 0, max_count, zones or ("us-east-2a",), **changes)


def quota_table(table: dict[str, tuple[str, float]]) -> Callable[[dict[str, Any]], Any]:
    """GetServiceQuota answered from {code: (name, value)}."""

    def answer(params: dict[str, Any]) -> Any:
        name, value = table[params["QuotaCode"]]
        return {
            "Quota": {
                "ServiceCode": params["ServiceCode"],
                "QuotaCode": params["QuotaCode"],
                "QuotaName": name,
                "Value": value,
            }
        }

    return answer


def quota_call(service: str, code: str) -> Call:
    return ("service-quotas", "get_service_quota", {"ServiceCode": service, "QuotaCode": code})


# --- family, quota values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [
        ("p5.48xlarge", "p"),
        ("p4de.24xlarge", "p"),
        ("trn1.32xlarge", "trn"),
        ("trn2.48xlarge", "trn"),
        ("inf2.xlarge", "inf"),
        ("dl1.24xlarge", "dl"),
        ("g5.xlarge", "g"),
        ("vt1.3xlarge", "vt"),
        ("f1.2xlarge", "f"),
        ("x2idn.16xlarge", "x"),
        ("hpc7g.16xlarge", "hpc"),
        ("u-6tb1.112xlarge", "u"),
        ("c5.large", "c"),
        ("im4gn.large", "i"),  # two letters: the Standard family of its first letter
        ("mac1.metal", "mac"),  # three letters not in the table: no quota family
        ("p", "p"),  # no digit at all: the whole name
        ("zzz", "zzz"),
    ],
)
def test_the_quota_family_of_an_instance_type(instance_type: str, expected: str) -> None:
    assert preflight.family(instance_type) == expected


def test_a_quota_aws_could_not_read_is_an_aws_error_naming_it() -> None:
    quota = {
        "QuotaName": "Running On-Demand P instances",
        "ServiceCode": "ec2",
        "QuotaCode": "L-417A185B",
        "Value": 384.0,
        "ErrorReason": {"ErrorCode": "DEPENDENCY_ACCESS_DENIED_ERROR", "ErrorMessage": "no access"},
    }
    with pytest.raises(CliError) as raised:
        preflight.quota_value(quota)
    assert (raised.value.message, raised.value.exit_code) == (
        "Service Quotas could not read Running On-Demand P instances (ec2/L-417A185B): "
        "DEPENDENCY_ACCESS_DENIED_ERROR: no access - check it in the Service Quotas console",
        EXIT_AWS,
    )
    with pytest.raises(CliError) as raised:
        preflight.quota_value({"ErrorReason": {"Other": "x"}})
    assert raised.value.message == (
        "Service Quotas could not read ? (?/?): ?:  - check it in the Service Quotas console"
    )


def test_a_quota_without_a_value_is_an_aws_error_and_a_value_is_a_float() -> None:
    with pytest.raises(CliError) as raised:
        preflight.quota_value({"QuotaName": "VPCs per Region", "ServiceCode": "vpc", "QuotaCode": "L-F678F1CE"})
    assert (raised.value.message, raised.value.exit_code) == (
        "Service Quotas returned no value for VPCs per Region (vpc/L-F678F1CE): check it in the Service Quotas console",
        EXIT_AWS,
    )
    assert preflight.quota_value({"Value": 0, "ErrorReason": {}}) == 0.0
    assert isinstance(preflight.quota_value({"Value": 5}), float)


def test_a_quota_never_changed_falls_back_to_the_aws_default() -> None:
    account = Account(
        get_service_quota=client_error("NoSuchResourceException"),
        get_aws_default_service_quota={"Quota": {"Value": 5.0}},
    )
    assert preflight._quota(context(account), "vpc", "L-F678F1CE") == (5.0, "L-F678F1CE")
    assert account.calls == [
        quota_call("vpc", "L-F678F1CE"),
        ("service-quotas", "get_aws_default_service_quota", {"ServiceCode": "vpc", "QuotaCode": "L-F678F1CE"}),
    ]


@pytest.mark.parametrize("code", ["AccessDeniedException", "TooManyRequestsException"])
def test_a_quota_refused_is_not_read_from_the_default(code: str) -> None:
    account = Account(get_service_quota=client_error(code), get_aws_default_service_quota={"Quota": {"Value": 1}})
    with pytest.raises(ClientError):
        preflight._quota(context(account), "vpc", "L-F678F1CE")
    assert account.calls == [quota_call("vpc", "L-F678F1CE")]


def test_vcpus_are_fetched_once_per_type_in_sorted_order() -> None:
    def answer(params: dict[str, Any]) -> list[dict[str, Any]]:
        table = {"p5.48xlarge": 192, "c5.xlarge": 4, "g5.xlarge": 4}
        return [
            {"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": table[t]}}]}
            for t in params["InstanceTypes"]
        ]

    account = Account(describe_instance_types=answer)
    ctx = context(account)
    assert ctx.vcpus(["p5.48xlarge", "c5.xlarge", "p5.48xlarge"]) == {"c5.xlarge": 4, "p5.48xlarge": 192}
    assert ctx.vcpus(["c5.xlarge", "g5.xlarge"]) == {"c5.xlarge": 4, "p5.48xlarge": 192, "g5.xlarge": 4}
    assert ctx.vcpus(["g5.xlarge"]) == {"c5.xlarge": 4, "p5.48xlarge": 192, "g5.xlarge": 4}
    assert account.calls == [
        ("ec2", "describe_instance_types", {"InstanceTypes": ["c5.xlarge", "p5.48xlarge"]}),
        ("ec2", "describe_instance_types", {"InstanceTypes": ["g5.xlarge"]}),
    ]


# --- vCPU quotas -----------------------------------------------------------------------------------------

VCPUS = {"p5.48xlarge": 192, "p4d.24xlarge": 96, "c5.xlarge": 4, "mac1.metal": 12}
RUNNING_FILTER = {"Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]}


def _types(params: dict[str, Any]) -> list[dict[str, Any]]:
    known = [t for t in params["InstanceTypes"] if t in VCPUS]
    return [{"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": VCPUS[t]}} for t in known]}]


def _instance(itype: str, *tags: tuple[str, str], spot: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {"InstanceType": itype, "Tags": [{"Key": k, "Value": v} for k, v in tags]}
    if spot:
        found["InstanceLifecycle"] = "spot"
    return found


def vcpu_rows(p_on_demand: float, p_spot: float) -> tuple[list[Result], list[Call]]:
    """A cluster of On-Demand P (p5 x2 + p4d x1), Standard (c5 x3), Spot P (p5 x1) and mac queues, an
    ml. group (not EC2's), beside other instances of the account (two pages of describe_instances)."""
    groups = (
        group("q[0]", "p5.48xlarge", 2),
        group("q[1]", "c5.xlarge", 3),
        group("q[2]", "p5.48xlarge", 1, spot=True),
        group("q[3]", "mac1.metal", 1),
        group("q[4]", "p4d.24xlarge", 1),
        group("hp", "ml.p5.48xlarge", 5),
    )
    instances = [
        {"Reservations": [{"Instances": [_instance("p5.48xlarge"), _instance("p4d.24xlarge", spot=True)]}]},
        {
            "Reservations": [
                {"Instances": [_instance("p5.48xlarge", ("parallelcluster:cluster-name", CLUSTER))]},
                {"Instances": [_instance("p5.48xlarge", (preflight.ENV_TAG, ENV), spot=True)]},
                {"Instances": [_instance("c5.xlarge", ("Name", CLUSTER))]},
                {"Instances": [_instance("c5.xlarge", ("parallelcluster:cluster-name", "other"))]},
                {"Instances": [_instance("zz1.large")]},
            ]
        },
    ]
    account = Account(
        describe_instance_types=_types,
        describe_instances=instances,
        get_service_quota=quota_table(
            {
                "L-1216C47A": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", 20.0),
                "L-417A185B": ("Running On-Demand P instances", p_on_demand),
                "L-7212CCBC": ("All P Spot Instance Requests", p_spot),
            }
        ),
    )
    results = preflight.check_vcpu_quota(context(account, groups=groups))
    return results, account.calls


VCPU_CALLS = [
    ("ec2", "describe_instance_types", {"InstanceTypes": ["c5.xlarge", "mac1.metal", "p4d.24xlarge", "p5.48xlarge"]}),
    ("ec2", "describe_instances", RUNNING_FILTER),
    ("ec2", "describe_instance_types", {"InstanceTypes": ["zz1.large"]}),
    quota_call("ec2", "L-1216C47A"),
    quota_call("ec2", "L-417A185B"),
    quota_call("ec2", "L-7212CCBC"),
]


def test_vcpu_quota_rows_per_market_and_family_at_the_edge() -> None:
    """Need = DefaultVCpus x max_count summed per quota; used = the account's other instances (not those
    tagged with this cluster's or environment's name) per market; exactly at the quota passes."""
    results, calls = vcpu_rows(p_on_demand=672.0, p_spot=288.0)
    assert results == [
        Result(
            "vcpu-quota",
            "fail",
            "WARNING",
            "q[3]",
            "no On-Demand vCPU quota known for this family; check it in the Service Quotas console",
        ),
        Result(
            "vcpu-quota",
            "pass",
            "ERROR",
            "q[1]",
            "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances (L-1216C47A) 20 >= 8 running + 12 needed",
        ),
        Result(
            "vcpu-quota",
            "pass",
            "ERROR",
            "q[0], q[4]",
            "Running On-Demand P instances (L-417A185B) 672 >= 192 running + 480 needed",
        ),
        Result(
            "vcpu-quota",
            "pass",
            "ERROR",
            "q[2]",
            "All P Spot Instance Requests (L-7212CCBC) 288 >= 96 running + 192 needed",
        ),
    ]
    assert calls == VCPU_CALLS


def test_vcpu_quota_one_below_the_need_fails_with_the_number_to_request() -> None:
    results, calls = vcpu_rows(p_on_demand=671.0, p_spot=287.0)
    assert results[2:] == [
        Result(
            "vcpu-quota",
            "fail",
            "ERROR",
            "q[0], q[4]",
            "Running On-Demand P instances (L-417A185B) is 671 vCPUs; 192 run already and max_count needs 480: "
            "request 672 in Service Quotas or lower max_count",
        ),
        Result(
            "vcpu-quota",
            "fail",
            "ERROR",
            "q[2]",
            "All P Spot Instance Requests (L-7212CCBC) is 287 vCPUs; 96 Spot run already and max_count needs 192: "
            "request 288 in Service Quotas or lower max_count",
        ),
    ]
    assert calls == VCPU_CALLS


def test_a_spot_family_without_a_spot_quota_is_a_warning() -> None:
    account = Account(describe_instance_types=_types, describe_instances=[{"Reservations": []}])
    results = preflight.check_vcpu_quota(context(account, groups=(group("q[0]", "mac1.metal", 1, spot=True),)))
    assert results == [
        Result(
            "vcpu-quota",
            "fail",
            "WARNING",
            "q[0]",
            "no Spot vCPU quota known for this family; check it in the Service Quotas console",
        )
    ]
    assert account.calls == [
        ("ec2", "describe_instance_types", {"InstanceTypes": ["mac1.metal"]}),
        ("ec2", "describe_instances", RUNNING_FILTER),
    ]


def test_no_ec2_group_asks_nothing() -> None:
    account = Account()
    assert preflight.check_vcpu_quota(context(account, groups=(group("hp", "ml.p5.48xlarge", 4),))) == []
    assert preflight.check_vcpu_quota(context(account)) == []
    assert account.calls == []


# --- HyperPod quotas ---------------------------------------------------------------------------------------

HP_TOTAL = preflight.HYPERPOD_TOTAL_QUOTA
HP_PER_CLUSTER = preflight.HYPERPOD_PER_CLUSTER_QUOTA


def hyperpod_rows(total: float | None, per_cluster: float | None) -> tuple[list[Result], list[Call]]:
    """ml.p5 x2 + x1 and ml.g5 x4 and ml.trn1 x1 (no quota in the region), beside two other clusters."""
    listed = [
        {"QuotaName": "ml.p5.48xlarge for cluster usage", "QuotaCode": "L-P5", "Value": 5.0},
        {"QuotaName": "ml.g5.xlarge for cluster usage", "QuotaCode": "L-G5", "Value": 4.0},
    ]
    if total is not None:
        listed.append({"QuotaName": HP_TOTAL, "QuotaCode": "L-T", "Value": total})
    if per_cluster is not None:
        listed.append({"QuotaName": HP_PER_CLUSTER, "QuotaCode": "L-PC", "Value": per_cluster})
    clusters = {
        "other1": {
            "InstanceGroups": [
                {"InstanceType": "ml.p5.48xlarge", "CurrentCount": 2},
                {"InstanceType": "ml.g5.xlarge", "CurrentCount": 1},
            ]
        },
        "other2": {"InstanceGroups": [{"InstanceType": "ml.g5.xlarge"}]},
        "other3": {},
    }
    account = Account(
        list_service_quotas=[{"Quotas": listed[:2]}, {"Quotas": listed[2:]}],
        list_clusters=[
            {"ClusterSummaries": [{"ClusterName": CLUSTER}, {"ClusterName": "other1"}]},
            {"ClusterSummaries": [{"ClusterName": "other2"}, {"ClusterName": "other3"}]},
        ],
        describe_cluster=lambda params: clusters[params["ClusterName"]],
    )
    groups = (
        group("a", "ml.p5.48xlarge", 2),
        group("b", "ml.p5.48xlarge", 1),
        group("c", "ml.g5.xlarge", 4),
        group("d", "ml.trn1.32xlarge", 1),
        group("q", "p5.48xlarge", 9),
    )
    return preflight.check_sagemaker_quota(context(account, groups=groups)), account.calls


HYPERPOD_CALLS = [
    ("service-quotas", "list_service_quotas", {"ServiceCode": "sagemaker"}),
    ("sagemaker", "list_clusters", {}),
    ("sagemaker", "describe_cluster", {"ClusterName": "other1"}),
    ("sagemaker", "describe_cluster", {"ClusterName": "other2"}),
    ("sagemaker", "describe_cluster", {"ClusterName": "other3"}),
]
HYPERPOD_TYPE_ROWS = [
    Result(
        "sagemaker-quota",
        "fail",
        "ERROR",
        "c",
        "ml.g5.xlarge for cluster usage (L-G5) is 4; 1 run in other HyperPod clusters and the groups need 4: "
        "request 5 or lower instance_count",
    ),
    Result(
        "sagemaker-quota",
        "pass",
        "ERROR",
        "a, b",
        "ml.p5.48xlarge for cluster usage (L-P5) 5 >= 2 in other HyperPod clusters + 3",
    ),
    Result(
        "sagemaker-quota",
        "fail",
        "ERROR",
        "d",
        "no quota 'ml.trn1.32xlarge for cluster usage' in this region: the type is not offered for HyperPod here; "
        "choose another instance_type or region",
    ),
]


def test_hyperpod_quotas_count_other_clusters_and_pass_at_the_edge() -> None:
    results, calls = hyperpod_rows(total=11.0, per_cluster=8.0)
    assert results == [
        *HYPERPOD_TYPE_ROWS,
        Result(
            "sagemaker-quota",
            "pass",
            "ERROR",
            "cluster.hyperpod",
            f"{HP_TOTAL} (L-T) 11 >= 3 in other HyperPod clusters + 8",
        ),
        Result("sagemaker-quota", "pass", "ERROR", "cluster.hyperpod", f"{HP_PER_CLUSTER} (L-PC) 8 >= 8"),
    ]
    assert calls == HYPERPOD_CALLS


def test_hyperpod_quotas_one_below_fail_and_a_missing_quota_is_a_warning() -> None:
    results, _ = hyperpod_rows(total=10.0, per_cluster=7.0)
    assert results[3:] == [
        Result(
            "sagemaker-quota",
            "fail",
            "ERROR",
            "cluster.hyperpod",
            f"{HP_TOTAL} (L-T) is 10; 3 run in other HyperPod clusters and the groups need 8: "
            "request 11 or lower instance_count",
        ),
        Result(
            "sagemaker-quota",
            "fail",
            "ERROR",
            "cluster.hyperpod",
            f"{HP_PER_CLUSTER} (L-PC) is 7; the groups need 8: request 8 or lower instance_count",
        ),
    ]
    results, _ = hyperpod_rows(total=None, per_cluster=None)
    assert results[3:] == [
        Result(
            "sagemaker-quota",
            "fail",
            "WARNING",
            "cluster.hyperpod",
            f"no quota {name!r} found: check it in Service Quotas > Amazon SageMaker by hand",
        )
        for name in (HP_TOTAL, HP_PER_CLUSTER)
    ]


def test_no_hyperpod_group_asks_nothing() -> None:
    account = Account()
    assert preflight.check_sagemaker_quota(context(account, groups=(group("q", "p5.48xlarge", 1),))) == []
    assert account.calls == []


# --- FSx quotas ---------------------------------------------------------------------------------------------


def _fs(kind: str, capacity: int | None, *, deployment: str | None = None, **changes: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"FileSystemType": kind, "Lifecycle": "AVAILABLE"}
    if capacity is not None:
        found["StorageCapacity"] = capacity
    if deployment is not None:
        found["LustreConfiguration"] = {"DeploymentType": deployment}
    found.update(changes)
    return found


EXISTING_FILE_SYSTEMS = [
    {
        "FileSystems": [
            _fs("LUSTRE", 1200, deployment="PERSISTENT_2"),
            _fs("LUSTRE", None, deployment="PERSISTENT_2"),
            _fs("LUSTRE", 9000, deployment="PERSISTENT_2", Lifecycle="DELETING"),
            _fs("LUSTRE", 9000, deployment="PERSISTENT_2", Lifecycle="FAILED"),
            _fs("LUSTRE", 9000, deployment="PERSISTENT_1"),
            _fs("LUSTRE", 9000),
        ]
    },
    {
        "FileSystems": [
            _fs("LUSTRE", 9000, deployment="PERSISTENT_2", Tags=[{"Key": preflight.ENV_TAG, "Value": ENV}]),
            _fs("LUSTRE", 100, deployment="PERSISTENT_2", Tags=[{"Key": preflight.ENV_TAG, "Value": "other"}]),
            _fs("OPENZFS", 500, StorageType="SSD"),
            _fs("OPENZFS", 300),
            _fs("OPENZFS", 9000, StorageType="INTELLIGENT_TIERING"),
            _fs("ONTAP", 9000, StorageType="SSD"),
            _fs("WINDOWS", 9000, deployment="PERSISTENT_2"),
        ]
    },
]
NEW_FILE_SYSTEMS = (
    FileSystem("storage.lustre", "LUSTRE", "PERSISTENT_2", 2400, 250),
    FileSystem("storage.openzfs", "OPENZFS", "SINGLE_AZ_HA_2", 1000, 320),
)


def fsx_rows(
    values: dict[str, float], file_systems: tuple[FileSystem, ...] = NEW_FILE_SYSTEMS
) -> tuple[list[Result], list[Call]]:
    codes = {
        "Lustre Persistent_2 storage capacity": "L-8F1B9C74",
        "Lustre Persistent_2 file systems": "L-FD6F2F22",
        "OpenZFS SSD storage capacity": "L-Z1",
        "OpenZFS SSD storage capacity (per file system)": "L-Z2",
    }
    listed = [{"QuotaName": name, "QuotaCode": codes[name], "Value": value} for name, value in values.items()]
    account = Account(list_service_quotas=[{"Quotas": listed}], describe_file_systems=EXISTING_FILE_SYSTEMS)
    return preflight.check_fsx_quota(context(account, file_systems=file_systems)), account.calls


def test_fsx_quotas_count_only_other_file_systems_of_the_same_type_and_pass_at_the_edge() -> None:
    """Used: 1,300 GiB of Lustre Persistent_2 in three file systems not this environment's (deleting, failed,
    other types left out); 800 GiB of OpenZFS SSD; the per-file-system quota compares the new one alone."""
    results, calls = fsx_rows(
        {
            "Lustre Persistent_2 storage capacity": 3700.0,
            "Lustre Persistent_2 file systems": 4.0,
            "OpenZFS SSD storage capacity": 1800.0,
            "OpenZFS SSD storage capacity (per file system)": 1000.0,
        }
    )
    assert results == [
        Result(
            "fsx-quota",
            "pass",
            "ERROR",
            "storage.lustre.storage_capacity_gib",
            "Lustre Persistent_2 storage capacity (L-8F1B9C74) 3700 >= 1300 used + 2400",
        ),
        Result(
            "fsx-quota",
            "pass",
            "ERROR",
            "storage.lustre",
            "Lustre Persistent_2 file systems (L-FD6F2F22) 4 >= 3 used + 1",
        ),
        Result(
            "fsx-quota",
            "pass",
            "ERROR",
            "storage.openzfs.storage_capacity_gib",
            "OpenZFS SSD storage capacity (L-Z1) 1800 >= 800 used + 1000",
        ),
        Result(
            "fsx-quota",
            "pass",
            "ERROR",
            "storage.openzfs.storage_capacity_gib",
            "OpenZFS SSD storage capacity (per file system) (L-Z2) 1000 >= 1000",
        ),
    ]
    assert calls == [
        ("service-quotas", "list_service_quotas", {"ServiceCode": "fsx"}),
        ("fsx", "describe_file_systems", {}),
    ]


def test_fsx_quotas_one_below_fail_with_what_is_used() -> None:
    results, _ = fsx_rows(
        {
            "Lustre Persistent_2 storage capacity": 3699.0,
            "Lustre Persistent_2 file systems": 3.0,
            "OpenZFS SSD storage capacity": 1799.0,
            "OpenZFS SSD storage capacity (per file system)": 999.0,
        }
    )
    fix = "request an increase or make it smaller"
    assert results == [
        Result(
            "fsx-quota",
            "fail",
            "ERROR",
            "storage.lustre.storage_capacity_gib",
            "Lustre Persistent_2 storage capacity (L-8F1B9C74) is 3699; 1300 GiB used by other PERSISTENT_2 file "
            f"systems and 2400 GiB needed: {fix}",
        ),
        Result(
            "fsx-quota",
            "fail",
            "ERROR",
            "storage.lustre",
            "Lustre Persistent_2 file systems (L-FD6F2F22) is 3; 3 file systems used by other PERSISTENT_2 file "
            f"systems and 1 file systems needed: {fix}",
        ),
        Result(
            "fsx-quota",
            "fail",
            "ERROR",
            "storage.openzfs.storage_capacity_gib",
            "OpenZFS SSD storage capacity (L-Z1) is 1799; 800 GiB used by other SINGLE_AZ_HA_2 file systems and "
            f"1000 GiB needed: {fix}",
        ),
        Result(
            "fsx-quota",
            "fail",
            "ERROR",
            "storage.openzfs.storage_capacity_gib",
            f"OpenZFS SSD storage capacity (per file system) (L-Z2) is 999; 1000 GiB needed: {fix}",
        ),
    ]


def test_fsx_quotas_not_listed_are_a_warning_naming_them() -> None:
    file_systems = (
        *NEW_FILE_SYSTEMS,
        FileSystem("storage.old", "LUSTRE", "PERSISTENT_1", 1200, 200),
        FileSystem("storage.scratch", "LUSTRE", "SCRATCH_2", 1200, 200),
    )
    results, _ = fsx_rows({"Lustre Persistent_2 file systems": 4.0}, file_systems)
    hand = "check Service Quotas > Amazon FSx by hand"
    assert results == [
        Result(
            "fsx-quota",
            "pass",
            "ERROR",
            "storage.lustre",
            "Lustre Persistent_2 file systems (L-FD6F2F22) 4 >= 3 used + 1",
        ),
        Result(
            "fsx-quota",
            "fail",
            "WARNING",
            "storage.openzfs",
            "no FSx quota for OPENZFS SINGLE_AZ_HA_2 found ('OpenZFS SSD storage capacity', "
            f"'OpenZFS SSD storage capacity (per file system)'); {hand}",
        ),
        Result(
            "fsx-quota",
            "fail",
            "WARNING",
            "storage.old",
            f"no FSx quota for LUSTRE PERSISTENT_1 found ('Lustre Persistent_1 storage capacity'); {hand}",
        ),
        Result(
            "fsx-quota",
            "fail",
            "WARNING",
            "storage.scratch",
            f"no FSx quota for LUSTRE SCRATCH_2 found (none known); {hand}",
        ),
    ]


# --- VPCs, Elastic IPs, NAT gateways -------------------------------------------------------------------

OURS = [{"Key": preflight.ENV_TAG, "Value": ENV}]
VPCS_CALL: Call = ("ec2", "describe_vpcs", {})


def _vpcs(ours: bool) -> list[dict[str, Any]]:
    return [
        {"Vpcs": [{"VpcId": "vpc-1"}, {"VpcId": "vpc-2", "Tags": [{"Key": preflight.ENV_TAG, "Value": "other"}]}]},
        {"Vpcs": [{"VpcId": "vpc-3", "Tags": OURS if ours else [{"Key": "Name", "Value": ENV}]}]},
    ]


@pytest.mark.parametrize(
    ("ours", "value", "expected"),
    [
        (False, 4.0, ("pass", "VPCs per Region (L-F678F1CE) is 4; 3 exist, 1 more needed")),
        (
            False,
            3.0,
            ("fail", "VPCs per Region (L-F678F1CE) is 3; 3 exist, 1 more needed: delete one or request an increase"),
        ),
        (True, 3.0, ("pass", "VPCs per Region (L-F678F1CE) is 3; 3 exist, 0 more needed")),
        (
            True,
            2.0,
            ("fail", "VPCs per Region (L-F678F1CE) is 2; 3 exist, 0 more needed: delete one or request an increase"),
        ),
    ],
)
def test_vpc_quota_needs_one_more_unless_the_vpc_is_ours(ours: bool, value: float, expected: tuple[str, str]) -> None:
    account = Account(
        describe_vpcs=_vpcs(ours), get_service_quota=quota_table({"L-F678F1CE": ("VPCs per Region", value)})
    )
    assert preflight.check_vpc_quota(context(account)) == [
        Result("vpc-quota", expected[0], "ERROR", "network", expected[1])
    ]  # type: ignore[arg-type]
    assert account.calls == [VPCS_CALL, quota_call("vpc", "L-F678F1CE")]


@pytest.mark.parametrize(
    ("ours", "value", "expected"),
    [
        (False, 5.0, ("pass", "EC2-VPC Elastic IPs (L-0263D0A3) is 5; 3 allocated, 2 needed for NAT gateways")),
        (
            False,
            4.0,
            (
                "fail",
                "EC2-VPC Elastic IPs (L-0263D0A3) is 4; 3 allocated, 2 needed for NAT gateways: "
                "release unused addresses or request an increase",
            ),
        ),
        (True, 3.0, ("pass", "EC2-VPC Elastic IPs (L-0263D0A3) is 3; 3 allocated, 0 needed for NAT gateways")),
    ],
)
def test_eip_quota_needs_one_per_nat_gateway(ours: bool, value: float, expected: tuple[str, str]) -> None:
    account = Account(
        describe_vpcs=_vpcs(ours),
        describe_addresses={"Addresses": [{"PublicIp": f"192.0.2.{i}"} for i in range(3)]},
        get_service_quota=quota_table({"L-0263D0A3": ("EC2-VPC Elastic IPs", value)}),
    )
    results = preflight.check_eip_quota(context(account, nat_gateways=2))
    assert results == [Result("eip-quota", expected[0], "ERROR", "network.nat_gateways", expected[1])]  # type: ignore[arg-type]
    assert account.calls == [VPCS_CALL, ("ec2", "describe_addresses", {}), quota_call("ec2", "L-0263D0A3")]


def test_network_quotas_ask_nothing_without_a_new_vpc_or_nat_gateways() -> None:
    account = Account()
    for ctx in (context(account, new_vpc=False), context(account, nat_gateways=0)):
        assert preflight.check_eip_quota(ctx) == []
        assert preflight.check_nat_quota(ctx) == []
    assert preflight.check_vpc_quota(context(account, new_vpc=False)) == []
    assert account.calls == []


def network(primary: str | None, primary_id: str | None, nat: str, *extra: tuple[str | None, str | None]) -> Any:
    zones = [SimpleNamespace(availability_zone=n, availability_zone_id=i, label=n or i or "") for n, i in extra]
    return SimpleNamespace(
        availability_zone=primary,
        availability_zone_id=primary_id,
        primary_zone_label=primary or primary_id or "",
        nat_gateways=nat,
        extra_zones=zones,
    )


def test_nat_zones_are_the_primary_and_with_per_zone_each_extra_zone() -> None:
    per_zone = network("us-east-2a", None, "per_zone", ("us-east-2b", None), ("us-east-2a", None), (None, None))
    assert preflight._nat_zones(context(Account(), env=environment(network=per_zone))) == {
        "us-east-2a": ("network.availability_zone", 2),
        "us-east-2b": ("network.extra_zones[0]", 1),
    }
    one = network(None, "use2-az1", "one", ("us-east-2b", None))
    assert preflight._nat_zones(context(Account(), env=environment(network=one))) == {
        "use2-az1": ("network.availability_zone_id", 1)
    }
    none = network(None, None, "one")
    assert preflight._nat_zones(context(Account(), env=environment(network=none))) == {}
    account = Account()
    assert preflight.check_nat_quota(context(account, env=environment(network=none))) == []
    assert account.calls == []


def test_nat_quota_counts_gateways_per_zone_by_name_or_id() -> None:
    net = network("us-east-2a", None, "per_zone", (None, "use2-az2"))
    gateways = [
        {"NatGateways": [{"SubnetId": "subnet-a"}, {"SubnetId": "subnet-a"}]},
        {
            "NatGateways": [
                {"SubnetId": "subnet-b"},
                {"SubnetId": "subnet-b"},
                {"SubnetId": "subnet-b"},
                {"SubnetId": "subnet-gone"},
            ]
        },
    ]
    account = Account(
        describe_vpcs=_vpcs(False),
        describe_nat_gateways=gateways,
        describe_subnets={
            "Subnets": [
                {"SubnetId": "subnet-a", "AvailabilityZone": "us-east-2a", "AvailabilityZoneId": "use2-az1"},
                {"SubnetId": "subnet-b", "AvailabilityZone": "us-east-2b", "AvailabilityZoneId": "use2-az2"},
            ]
        },
        get_service_quota=quota_table({"L-FE5A380F": ("NAT gateways per Availability Zone", 3.0)}),
    )
    results = preflight.check_nat_quota(context(account, nat_gateways=2, env=environment(network=net)))
    assert results == [
        Result(
            "nat-quota",
            "pass",
            "ERROR",
            "network.availability_zone",
            "NAT gateways per Availability Zone (L-FE5A380F) is 3; 2 in us-east-2a, 1 needed",
        ),
        Result(
            "nat-quota",
            "fail",
            "ERROR",
            "network.extra_zones[0]",
            "NAT gateways per Availability Zone (L-FE5A380F) is 3; 3 in use2-az2, 1 needed: "
            "request an increase or choose another zone",
        ),
    ]
    assert account.calls == [
        VPCS_CALL,
        ("ec2", "describe_nat_gateways", {"Filter": [{"Name": "state", "Values": ["pending", "available"]}]}),
        ("ec2", "describe_subnets", {"SubnetIds": ["subnet-a", "subnet-b", "subnet-gone"]}),
        quota_call("vpc", "L-FE5A380F"),
    ]


def test_nat_quota_of_our_own_vpc_needs_none_and_no_gateway_asks_no_subnet() -> None:
    net = network("us-east-2a", None, "one")
    account = Account(
        describe_vpcs=_vpcs(True),
        describe_nat_gateways=[{"NatGateways": []}],
        get_service_quota=quota_table({"L-FE5A380F": ("NAT gateways per Availability Zone", 0.0)}),
    )
    assert preflight.check_nat_quota(context(account, env=environment(network=net))) == [
        Result(
            "nat-quota",
            "pass",
            "ERROR",
            "network.availability_zone",
            "NAT gateways per Availability Zone (L-FE5A380F) is 0; 0 in us-east-2a, 0 needed",
        ),
    ]
    assert [operation for _, operation, _ in account.calls] == [
        "describe_vpcs",
        "describe_nat_gateways",
        "get_service_quota",
    ]


# --- zones and offerings -----------------------------------------------------------------------------------


def test_each_zone_of_the_file_is_asked_by_name_or_id() -> None:
    net = network(
        "us-east-2a", None, "one", (None, "use2-az2"), ("us-east-2z", None), (None, None), ("us-east-2c", None)
    )
    states = {"us-east-2a": "available", "use2-az2": "available", "us-east-2c": "impaired"}

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        zone = params["Filters"][0]["Values"][0]
        return {"AvailabilityZones": [{"ZoneName": zone, "State": states[zone]}] if zone in states else []}

    account = Account(describe_availability_zones=answer)
    fix = "choose a zone `aws ec2 describe-availability-zones` lists as available"
    assert preflight.check_zones_exist(context(account, env=environment(network=net))) == [
        Result("zone-exists", "pass", "ERROR", "network.availability_zone", "us-east-2a is available"),
        Result("zone-exists", "pass", "ERROR", "network.extra_zones[0].availability_zone_id", "use2-az2 is available"),
        Result(
            "zone-exists",
            "fail",
            "ERROR",
            "network.extra_zones[1].availability_zone",
            f"EC2 lists no zone us-east-2z in us-east-2 for this account: {fix}",
        ),
        Result(
            "zone-exists", "fail", "ERROR", "network.extra_zones[3].availability_zone", f"us-east-2c is impaired: {fix}"
        ),
    ]
    assert account.calls == [
        ("ec2", "describe_availability_zones", {"Filters": [{"Name": kind, "Values": [zone]}]})
        for kind, zone in (
            ("zone-name", "us-east-2a"),
            ("zone-id", "use2-az2"),
            ("zone-name", "us-east-2z"),
            ("zone-name", "us-east-2c"),
        )
    ]


def test_offerings_are_asked_per_zone_by_name_or_id_over_every_page() -> None:
    offered = {("us-east-2a", "p5.48xlarge"), ("use2-az2", "c5.xlarge")}

    def answer(params: dict[str, Any]) -> list[dict[str, Any]]:
        zone, itype = params["Filters"][0]["Values"][0], params["Filters"][1]["Values"][0]
        return [
            {"InstanceTypeOfferings": []},
            {"InstanceTypeOfferings": [{"InstanceType": itype}] if (zone, itype) in offered else []},
        ]

    account = Account(describe_instance_type_offerings=answer)
    groups = (
        group("q[0]", "p5.48xlarge", 1, "us-east-2a", "use2-az2"),
        group("q[1]", "c5.xlarge", 1, "subnet-0123"),
        group("q[2]", "ml.c5.xlarge", 1, "use2-az2"),
    )
    fix = "choose another instance_type or zone (network.availability_zone)"
    assert preflight.check_offerings(context(account, groups=groups)) == [
        Result("instance-offered", "pass", "ERROR", "q[0]", "p5.48xlarge is offered in us-east-2a"),
        Result("instance-offered", "fail", "ERROR", "q[0]", f"p5.48xlarge is not offered in use2-az2: {fix}"),
        Result(
            "instance-offered", "fail", "WARNING", "q[1]", "zone unknown (network.existing); check the offering by hand"
        ),
        Result("instance-offered", "pass", "ERROR", "q[2]", "c5.xlarge is offered in use2-az2"),
    ]

    def call(kind: str, zone: str, itype: str) -> Call:
        filters = [{"Name": "location", "Values": [zone]}, {"Name": "instance-type", "Values": [itype]}]
        return ("ec2", "describe_instance_type_offerings", {"LocationType": kind, "Filters": filters})

    assert account.calls == [
        call("availability-zone", "us-east-2a", "p5.48xlarge"),
        call("availability-zone-id", "use2-az2", "p5.48xlarge"),
        call("availability-zone-id", "use2-az2", "c5.xlarge"),
    ]


# --- capacity reservations ---------------------------------------------------------------------------------

RID = "cr-0123456789abcdef0"


def _reservation(**changes: Any) -> dict[str, Any]:
    found = {
        "CapacityReservationId": RID,
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "Tenancy": "default",
        "AvailabilityZone": "us-east-2a",
        "AvailabilityZoneId": "use2-az1",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 3,
        "State": "active",
        "EndDateType": "limited",
        "EndDate": NOW + timedelta(days=7, seconds=1),
        "ReservationType": "default",
    }
    found.update(changes)
    return {key: value for key, value in found.items() if value is not None}


def _own_instances() -> list[dict[str, Any]]:
    return [
        {"Reservations": [{"Instances": [{"CapacityReservationId": RID}, {"CapacityReservationId": "cr-other"}]}]},
        {"Reservations": [{"Instances": [{}]}]},
    ]


OWN_CALL: Call = (
    "ec2",
    "describe_instances",
    {
        "Filters": [
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
            {"Name": "tag:parallelcluster:cluster-name", "Values": [CLUSTER]},
        ]
    },
)


def reservation_rows(
    found: dict[str, Any], grp: NodeGroup | None = None, **env: Any
) -> tuple[list[Result], list[Call]]:
    account = Account(
        describe_capacity_reservations={"CapacityReservations": [found]}, describe_instances=_own_instances()
    )
    grp = grp or group("q[0]", "p5.48xlarge", 4, reservation_id=RID)
    results = preflight.check_reservations(context(account, groups=(grp,), env=environment(**env)))
    return results, account.calls


def _row(status: str, level: str, message: str) -> Result:
    return Result("capacity-reservation", status, level, "q[0].capacity_reservation_id", message)  # type: ignore[arg-type]


def test_a_reservation_that_fits_passes_with_its_free_and_own_instances_at_the_edge() -> None:
    """3 free + 1 already this cluster's = max_count 4; it ends one second past the 7-day margin."""
    results, calls = reservation_rows(_reservation())
    assert results == [_row("pass", "ERROR", f"{RID}: active p5.48xlarge x4 in us-east-2a until 2026-12-04")]
    assert calls == [("ec2", "describe_capacity_reservations", {"CapacityReservationIds": [RID]}), OWN_CALL]


def test_a_reservation_one_short_or_ending_within_the_margin_or_ended_fails() -> None:
    results, _ = reservation_rows(_reservation(AvailableInstanceCount=2, EndDate=NOW + timedelta(days=7)))
    assert results == [
        _row(
            "fail",
            "ERROR",
            f"{RID}: 2 of its 4 instances are free and 1 are this cluster's; max_count is 4: "
            "other instances use the rest",
        ),
        _row("fail", "WARNING", f"{RID}: it ends 2026-12-04 12:00 UTC, within 7 days: extend it"),
    ]
    results, _ = reservation_rows(_reservation(EndDate=NOW))
    assert results == [
        _row("fail", "ERROR", f"{RID}: it ended 2026-11-27 12:00 UTC: renew it or remove capacity_reservation_id")
    ]


def test_an_unlimited_reservation_by_zone_id_passes_with_no_end_date() -> None:
    grp = group("q[0]", "p5.48xlarge", 4, "use2-az1", reservation_id=RID)
    results, _ = reservation_rows(_reservation(EndDateType="unlimited", EndDate=None), grp)
    assert results == [_row("pass", "ERROR", f"{RID}: active p5.48xlarge x4 in use2-az1 with no end date")]
    results, _ = reservation_rows(_reservation(EndDateType="unlimited", EndDate=NOW - timedelta(days=1)), grp)
    assert results == [_row("pass", "ERROR", f"{RID}: active p5.48xlarge x4 in use2-az1 until 2026-11-26")]


def test_a_reservation_wrong_in_every_way_lists_every_problem() -> None:
    grp = group("q[0]", "p5.48xlarge", 5, "us-east-2b", reservation_id=RID, capacity_block=True)
    found = _reservation(State="expired", InstanceType="p4d.24xlarge", InstancePlatform="Windows", Tenancy="dedicated")
    results, calls = reservation_rows(found, grp)
    assert results == [
        _row(
            "fail",
            "ERROR",
            f"{RID}: the queue's capacity_type is CAPACITY_BLOCK but this is an On-Demand Capacity Reservation",
        ),
        _row(
            "fail",
            "ERROR",
            f"{RID}: state is expired, not active: buy or renew the reservation, or remove capacity_reservation_id",
        ),
        _row("fail", "ERROR", f"{RID}: it reserves p4d.24xlarge, the group uses p5.48xlarge"),
        _row("fail", "ERROR", f"{RID}: it is for Windows instances, the cluster's OS runs as Linux/UNIX"),
        _row("fail", "ERROR", f"{RID}: its tenancy is dedicated; the cluster launches default tenancy"),
        _row(
            "fail", "ERROR", f"{RID}: it is in us-east-2a, the group in us-east-2b: set the group's zone to us-east-2a"
        ),
        _row("fail", "ERROR", f"{RID}: it holds 4 instances, max_count is 5"),
    ]
    assert [operation for _, operation, _ in calls] == ["describe_capacity_reservations"]


def test_a_scheduled_capacity_block_is_a_warning_and_other_zones_cannot_use_it() -> None:
    grp = group("q[0]", "p5.48xlarge", 4, "us-east-2a", "us-east-2b", reservation_id=RID, capacity_block=True)
    found = _reservation(
        State="scheduled",
        ReservationType="capacity-block",
        AvailabilityZone="us-east-2b",
        StartDate=NOW + timedelta(days=1),
        AvailableInstanceCount=0,
        InstancePlatform=None,
        Tenancy=None,
    )
    results, calls = reservation_rows(found, grp)
    assert results == [
        _row("fail", "WARNING", f"{RID}: capacity block starts 2026-11-28 12:00 UTC; nodes cannot launch before"),
        _row("fail", "WARNING", f"{RID}: nodes launched in us-east-2a cannot use it (it is in us-east-2b only)"),
    ]
    assert [operation for _, operation, _ in calls] == ["describe_capacity_reservations"]
    results, _ = reservation_rows(_reservation(State="scheduled", ReservationType="capacity-block"), grp)
    assert results[0] == _row(
        "fail",
        "ERROR",
        f"{RID}: state is scheduled, not active: buy or renew the reservation, or remove capacity_reservation_id",
    )
    results, _ = reservation_rows(
        _reservation(State="scheduled", StartDate=NOW), group("q[0]", "p5.48xlarge", 4, reservation_id=RID)
    )
    assert results == [
        _row(
            "fail",
            "ERROR",
            f"{RID}: state is scheduled, not active: buy or renew the reservation, or remove capacity_reservation_id",
        )
    ]


def test_a_rhel_cluster_needs_a_red_hat_reservation() -> None:
    results, _ = reservation_rows(_reservation(), os="rhel9")
    assert results == [
        _row(
            "fail", "ERROR", f"{RID}: it is for Linux/UNIX instances, the cluster's OS runs as Red Hat Enterprise Linux"
        )
    ]
    results, _ = reservation_rows(_reservation(InstancePlatform="Red Hat Enterprise Linux"), os="rhel8")
    assert [r.status for r in results] == ["pass"]
    results, _ = reservation_rows(_reservation(InstancePlatform="Red Hat Enterprise Linux"), backend="hyperpod")
    assert results == [
        _row(
            "fail", "ERROR", f"{RID}: it is for Red Hat Enterprise Linux instances, the cluster's OS runs as Linux/UNIX"
        )
    ]


def test_a_reservation_aws_does_not_know_is_a_row_and_a_refusal_is_raised() -> None:
    groups = (group("q[0]", "p5.48xlarge", 1), group("q[1]", "p5.48xlarge", 1, reservation_id=RID))
    missing = f"{RID} does not exist in us-east-2 for these credentials: fix the ID or the region/account"
    for answer in (client_error("InvalidCapacityReservationId.NotFound"), {"CapacityReservations": []}):
        account = Account(describe_capacity_reservations=answer)
        assert preflight.check_reservations(context(account, groups=groups)) == [
            Result("capacity-reservation", "fail", "ERROR", "q[1].capacity_reservation_id", missing)
        ]
        assert account.calls == [("ec2", "describe_capacity_reservations", {"CapacityReservationIds": [RID]})]
    account = Account(describe_capacity_reservations=client_error("UnauthorizedOperation"))
    with pytest.raises(ClientError):
        preflight.check_reservations(context(account, groups=groups))


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({"ReservationType": "capacity-block", "TotalInstanceCount": 4}, ("capacity-block", 4)),
        (
            {
                "TotalInstanceCount": 0,
                "Tags": [
                    {"Key": preflight.RESERVATION_TYPE_TAG, "Value": "capacity-block"},
                    {"Key": preflight.RESERVATION_QUANTITY_TAG, "Value": "8"},
                ],
            },
            ("capacity-block", 8),
        ),
        (
            {"TotalInstanceCount": 4, "Tags": [{"Key": preflight.RESERVATION_QUANTITY_TAG, "Value": "2"}]},
            ("default", 4),
        ),
        ({"Tags": [{"Key": preflight.RESERVATION_QUANTITY_TAG, "Value": "many"}]}, ("default", 0)),
        ({"ReservationType": "", "Tags": [{"Key": "other", "Value": "capacity-block"}]}, ("default", 0)),
    ],
)
def test_reservation_kind_and_size_as_parallelcluster_reads_them(
    found: dict[str, Any], expected: tuple[str, int]
) -> None:
    assert preflight.reservation_kind_and_size(found) == expected


# --- training plans -------------------------------------------------------------------------------------------

ARN = "arn:aws:sagemaker:us-east-2:123456789012:training-plan/p5-plan"


def _plan(**changes: Any) -> dict[str, Any]:
    found = {
        "TrainingPlanName": "p5-plan",
        "Status": "Active",
        "TargetResources": ["training-job", "hyperpod-cluster"],
        "StartTime": NOW - timedelta(days=1),
        "EndTime": NOW + timedelta(days=7, seconds=1),
        "ReservedCapacitySummaries": [
            {
                "InstanceType": "ml.p5.48xlarge",
                "TotalInstanceCount": 2,
                "AvailabilityZone": "us-east-2a",
                "AvailabilityZoneId": "use2-az1",
            },
            {
                "InstanceType": "ml.p5.48xlarge",
                "TotalInstanceCount": 2,
                "AvailabilityZone": "us-east-2a",
                "AvailabilityZoneId": "use2-az1",
            },
            {
                "InstanceType": "ml.g5.xlarge",
                "TotalInstanceCount": 9,
                "AvailabilityZone": "us-east-2b",
                "AvailabilityZoneId": "use2-az2",
            },
        ],
    }
    found.update(changes)
    return {key: value for key, value in found.items() if value is not None}


def plan_rows(found: Any, *zones: str) -> tuple[list[Result], list[Call]]:
    account = Account(describe_training_plan=found)
    groups = (group("g[0]", "ml.p5.48xlarge", 1), group("g[1]", "ml.p5.48xlarge", 4, *zones, training_plan_arn=ARN))
    return preflight.check_training_plans(
        context(account, groups=groups, env=environment(backend="hyperpod"))
    ), account.calls


def _plan_row(status: str, level: str, message: str) -> Result:
    return Result("training-plan", status, level, "g[1].training_plan_arn", message)  # type: ignore[arg-type]


def test_a_training_plan_that_covers_the_group_passes_at_the_edge() -> None:
    results, calls = plan_rows(_plan())
    assert results == [_plan_row("pass", "ERROR", "p5-plan: Active ml.p5.48xlarge x4 until 2026-12-04")]
    assert calls == [("sagemaker", "describe_training_plan", {"TrainingPlanName": "p5-plan"})]
    results, _ = plan_rows(_plan(EndTime=None), "use2-az1")
    assert results == [_plan_row("pass", "ERROR", "p5-plan: Active ml.p5.48xlarge x4 ")]


def test_a_training_plan_short_elsewhere_or_ending_fails_with_each_problem() -> None:
    found = _plan(Status="Expired", TargetResources=["training-job"], EndTime=NOW)
    results, _ = plan_rows(found, "us-east-2b")
    assert results == [
        _plan_row(
            "fail", "ERROR", "p5-plan: status is Expired, not Active: buy a new plan or remove training_plan_arn"
        ),
        _plan_row("fail", "ERROR", "p5-plan: the plan is not for hyperpod-cluster (TargetResources)"),
        _plan_row("fail", "ERROR", "p5-plan: its capacity is in us-east-2a, the group in us-east-2b"),
        _plan_row("fail", "ERROR", "p5-plan: it ended 2026-11-27 12:00 UTC"),
    ]
    summaries = [{"InstanceType": "ml.p5.48xlarge", "TotalInstanceCount": 3, "AvailabilityZoneId": "use2-az1"}]
    found = _plan(
        Status="Scheduled",
        StartTime=NOW + timedelta(days=2),
        EndTime=NOW + timedelta(days=7),
        ReservedCapacitySummaries=summaries,
    )
    results, _ = plan_rows(found, "use2-az2")
    assert results == [
        _plan_row("fail", "WARNING", "p5-plan: scheduled to start 2026-11-29 12:00 UTC; nodes cannot launch before"),
        _plan_row("fail", "ERROR", "p5-plan: it reserves 3 ml.p5.48xlarge, instance_count is 4"),
        _plan_row("fail", "ERROR", "p5-plan: its capacity is in use2-az1, the group in use2-az2"),
        _plan_row("fail", "WARNING", "p5-plan: it ends 2026-12-04 12:00 UTC, within 7 days"),
    ]
    results, _ = plan_rows(_plan(Status="Scheduled", StartTime=None, ReservedCapacitySummaries=[]), "us-east-2b")
    assert results == [
        _plan_row(
            "fail", "ERROR", "p5-plan: status is Scheduled, not Active: buy a new plan or remove training_plan_arn"
        ),
        _plan_row("fail", "ERROR", "p5-plan: it reserves 0 ml.p5.48xlarge, instance_count is 4"),
    ]


def test_a_training_plan_aws_does_not_know_is_a_row_and_a_refusal_is_raised() -> None:
    for code in ("ResourceNotFound", "ResourceNotFoundException"):
        results, calls = plan_rows(client_error(code))
        assert results == [_plan_row("fail", "ERROR", "p5-plan does not exist in us-east-2: fix the ARN")]
        assert calls == [("sagemaker", "describe_training_plan", {"TrainingPlanName": "p5-plan"})]
    with pytest.raises(ClientError):
        plan_rows(client_error("AccessDeniedException"))


# --- ParallelCluster image -------------------------------------------------------------------------------------


def image_rows(images: list[dict[str, Any]], archs: list[str] | None, **env: Any) -> tuple[list[Result], list[Call]]:
    info = {"InstanceTypes": [] if archs is None else [{"ProcessorInfo": {"SupportedArchitectures": archs}}]}
    account = Account(describe_instance_types=info, describe_images={"Images": images})
    return preflight.check_pcluster_image(context(account, env=environment(**env))), account.calls


def _images_call(pattern: str) -> Call:
    filters = [{"Name": "name", "Values": [pattern]}, {"Name": "state", "Values": ["available"]}]
    return ("ec2", "describe_images", {"Owners": ["amazon"], "Filters": filters, "IncludeDeprecated": True})


def test_the_newest_official_image_for_the_version_os_and_architecture_passes() -> None:
    images = [
        {"ImageId": "ami-old", "Name": "old", "CreationDate": "2026-10-01T00:00:00.000Z"},
        {"ImageId": "ami-new", "Name": "new", "CreationDate": "2026-11-01T00:00:00.000Z"},
        {"ImageId": "ami-undated"},
    ]
    results, calls = image_rows(images, ["x86_64", "i386"], head="c5.xlarge")
    assert results == [Result("pcluster-image", "pass", "ERROR", "cluster.pcluster.version", "ami-new (new)")]
    assert calls == [
        ("ec2", "describe_instance_types", {"InstanceTypes": ["c5.xlarge"]}),
        _images_call("aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64*"),
    ]


@pytest.mark.parametrize(
    ("archs", "os", "pattern"),
    [
        (["arm64"], "ubuntu2404", "aws-parallelcluster-3.16.1-ubuntu-2404-lts-hvm-arm64*"),
        (["arm64", "x86_64"], "rhel9", "aws-parallelcluster-3.16.1-rhel9-hvm-x86_64*"),
        (None, "alinux2", "aws-parallelcluster-3.16.1-amzn2-hvm-x86_64*"),
    ],
)
def test_no_official_image_fails_naming_the_pattern(archs: list[str] | None, os: str, pattern: str) -> None:
    results, calls = image_rows([], archs, os=os)
    assert results == [
        Result(
            "pcluster-image",
            "fail",
            "ERROR",
            "cluster.pcluster.version",
            f"no official image {pattern} owned by amazon in us-east-2: choose a released version/os or set custom_ami",
        )
    ]
    assert calls[1:] == [_images_call(pattern)]


def test_an_os_without_official_images_or_a_custom_ami_are_checked_as_such() -> None:
    results, calls = image_rows([], ["x86_64"], os="centos7")
    assert results == [
        Result(
            "pcluster-image",
            "fail",
            "ERROR",
            "cluster.pcluster.os",
            "ParallelCluster publishes no image for centos7: set custom_ami",
        )
    ]
    assert [operation for _, operation, _ in calls] == ["describe_instance_types"]
    ami = "ami-0123456789abcdef0"
    custom_call: Call = (
        "ec2",
        "describe_images",
        {
            "Filters": [{"Name": "image-id", "Values": [ami]}, {"Name": "state", "Values": ["available"]}],
            "IncludeDeprecated": True,
        },
    )
    results, calls = image_rows([{"ImageId": ami}], None, custom_ami=ami)
    assert (results, calls) == (
        [Result("pcluster-image", "pass", "ERROR", "cluster.pcluster.custom_ami", f"{ami} exists")],
        [custom_call],
    )
    results, calls = image_rows([], None, custom_ami=ami)
    assert results == [
        Result(
            "pcluster-image",
            "fail",
            "ERROR",
            "cluster.pcluster.custom_ami",
            f"{ami} not found, or not available, in us-east-2: copy it here or fix the ID",
        )
    ]
    account = Account()
    assert preflight.check_pcluster_image(context(account, env=environment(backend="hyperpod"))) == []
    env = environment()
    env.config.cluster.backend = "hyperpod"
    assert preflight.check_pcluster_image(context(account, env=env)) == []
    assert account.calls == []


# --- names -----------------------------------------------------------------------------------------------------

MISSING_STACK = client_error("ValidationError", "Stack with id x does not exist")


def names_rows(stacks: dict[str, Any], **env: Any) -> tuple[list[Result], list[Call]]:
    """check_names with DescribeStacks answered per stack name (absent: does not exist)."""

    def describe(params: dict[str, Any]) -> Any:
        found = stacks.get(params["StackName"], MISSING_STACK)
        return found if isinstance(found, Exception) else {"Stacks": [found]}

    account = Account(describe_stacks=describe, list_stack_resources=[{"StackResourceSummaries": []}])
    return preflight.check_names(context(account, env=environment(**env))), account.calls


def _stack(status: str, ours: bool = True) -> dict[str, Any]:
    return {"StackStatus": status, "Tags": OURS if ours else [{"Key": preflight.ENV_TAG, "Value": "other"}]}


def _stack_calls(*names: str) -> list[Call]:
    return [("cloudformation", "describe_stacks", {"StackName": name}) for name in names]


def test_names_of_a_first_deploy_are_free() -> None:
    results, calls = names_rows({})
    assert results == [
        Result("names", "pass", "ERROR", "(file name)", "stack train-Network is free"),
        Result("names", "pass", "ERROR", "(file name)", "stack train-Storage is free"),
        Result("names", "pass", "ERROR", "(file name)", "stack train-Cluster is free"),
        Result("names", "pass", "ERROR", "cluster.name", "stack train-cluster is free"),
    ]
    assert calls == _stack_calls("train-Network", "train-Storage", "train-Cluster", "train-cluster")
    _, calls = names_rows({}, associations=({"path": "/data"},), observability=True)
    assert calls == _stack_calls(
        "train-Network",
        "train-Storage",
        "train-Cluster",
        "train-DataRepository",
        "train-Observability",
        "train-cluster",
    )


def test_names_taken_by_another_environment_or_blocked_fail_and_ours_pass() -> None:
    stacks = {
        "train-Network": _stack("UPDATE_COMPLETE"),
        "train-Storage": _stack("CREATE_COMPLETE", ours=False),
        "train-Cluster": _stack("UPDATE_IN_PROGRESS"),
        "train-cluster": _stack("CREATE_COMPLETE", ours=False),
    }
    results, _ = names_rows(stacks)
    other = f"without tag {preflight.ENV_TAG}=train"
    assert results == [
        Result("names", "pass", "ERROR", "(file name)", "stack train-Network is this environment's (UPDATE_COMPLETE)"),
        Result(
            "names",
            "fail",
            "ERROR",
            "(file name)",
            f"stack train-Storage exists {other}: rename the environment or cluster.name",
        ),
        Result(
            "names",
            "fail",
            "ERROR",
            "(file name)",
            "stack train-Cluster (this environment's) is UPDATE_IN_PROGRESS: wait for it to finish, or fix or "
            "delete it in the CloudFormation console, before `cdk deploy`",
        ),
        Result(
            "names",
            "fail",
            "ERROR",
            "cluster.name",
            f"stack train-cluster exists {other}: rename the environment or cluster.name",
        ),
    ]


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("DELETE_FAILED", False),
        ("ROLLBACK_FAILED", False),
        ("IMPORT_ROLLBACK_FAILED", False),
        ("DELETE_IN_PROGRESS", False),
        ("UPDATE_ROLLBACK_COMPLETE", True),
        ("ROLLBACK_COMPLETE", True),
    ],
)
def test_our_stack_in_a_state_a_deploy_cannot_leave_fails(status: str, ok: bool) -> None:
    results, _ = names_rows({"train-Network": _stack(status)})
    assert (
        results[0].status,
        results[0].message.startswith(f"stack train-Network (this environment's) is {status}: wait"),
    ) == (("pass", False) if ok else ("fail", True))


def test_our_cluster_stack_is_judged_by_parallelclusters_table() -> None:
    for status, verdict in (
        ("CREATE_COMPLETE", "pass"),
        ("UPDATE_ROLLBACK_COMPLETE", "pass"),
        ("ROLLBACK_COMPLETE", "fail"),
        ("UPDATE_IN_PROGRESS", "fail"),
        ("REVIEW_IN_PROGRESS", "fail"),
    ):
        results, _ = names_rows({"train-cluster": _stack(status), "train-Cluster": _stack("CREATE_COMPLETE")})
        state = preflight.cluster_stack_state(status)
        assert results[3] == Result(
            "names", verdict, "ERROR", "cluster.name", f"cluster stack train-cluster is {status}: {state.reason}"
        )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("app_stack", "said"),
    [(None, "does not exist"), ("ROLLBACK_COMPLETE", "is ROLLBACK_COMPLETE and holds none")],
    ids=["absent", "rolled-back"],
)
def test_a_kept_parallelcluster_without_the_apps_cluster_stack_fails_the_names_check(
    app_stack: str | None, said: str
) -> None:
    """ParallelCluster's stack kept (Retain) after the app's Cluster stack went: the custom resource's create would
    call create-cluster for a name in use (user review)."""
    stacks = {"train-cluster": _stack("CREATE_COMPLETE")}
    if app_stack is not None:
        stacks["train-Cluster"] = _stack(app_stack)
    results, _ = names_rows(stacks)
    assert results[3] == Result(
        "names",
        "fail",
        "ERROR",
        "cluster.name",
        f"cluster stack train-cluster (CREATE_COMPLETE) is this environment's, but stack train-Cluster {said}: the "
        "deploy would create the cluster again and ParallelCluster refuses a name in use; delete the kept cluster "
        "(`pcluster delete-cluster`) once nothing of it is needed, or choose another cluster.name",
    )


def test_our_stack_in_update_rollback_failed_names_the_resources_to_skip() -> None:
    pages = [
        {
            "StackResourceSummaries": [
                {"LogicalResourceId": "Queue", "ResourceType": "AWS::SQS::Queue", "ResourceStatus": "UPDATE_FAILED"},
                {"LogicalResourceId": "Fine", "ResourceType": "AWS::SNS::Topic", "ResourceStatus": "UPDATE_COMPLETE"},
            ]
        },
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": "Cluster",
                    "ResourceType": "Custom::PclusterCluster",
                    "ResourceStatus": "UPDATE_FAILED",
                },
                {"LogicalResourceId": "Untyped", "ResourceStatus": "UPDATE_FAILED"},
            ]
        },
        {},
    ]
    account = Account(list_stack_resources=pages)
    assert preflight._rollback_failed(account.client("cloudformation"), "train-Cluster") == (
        "stack train-Cluster (this environment's) is UPDATE_ROLLBACK_FAILED (Cluster (Custom::PclusterCluster), "
        "Queue (AWS::SQS::Queue), Untyped ()): CloudFormation refuses every update until the rollback is continued: "
        "`aws cloudformation continue-update-rollback --stack-name train-Cluster --resources-to-skip Cluster Queue "
        "Untyped`, then `mlcluster status` and deploy"
    )
    assert account.calls == [("cloudformation", "list_stack_resources", {"StackName": "train-Cluster"})]
    results, calls = names_rows({"train-Network": _stack("UPDATE_ROLLBACK_FAILED")})
    assert results[0] == Result(
        "names",
        "fail",
        "ERROR",
        "(file name)",
        "stack train-Network (this environment's) is UPDATE_ROLLBACK_FAILED (no resource in UPDATE_FAILED): "
        "CloudFormation refuses every update until the rollback is continued: `aws cloudformation "
        "continue-update-rollback --stack-name train-Network --resources-to-skip <logical id of the resource that "
        "failed>`, then `mlcluster status` and deploy",
    )
    assert calls[1] == ("cloudformation", "list_stack_resources", {"StackName": "train-Network"})


def test_a_stack_that_cannot_be_described_is_raised() -> None:
    with pytest.raises(ClientError):
        names_rows({"train-Network": client_error("AccessDenied", "not authorized")})


ACCOUNT = "123456789012"
BUCKET_KEY = "storage.data_bucket.name"
HEAD: Call = ("s3", "head_bucket", {"Bucket": "train-data", "ExpectedBucketOwner": ACCOUNT})
TAGGING: Call = ("s3", "get_bucket_tagging", {"Bucket": "train-data", "ExpectedBucketOwner": ACCOUNT})
WHO: Call = ("sts", "get_caller_identity", {})
HELD: Call = ("cloudformation", "list_stack_resources", {"StackName": "train-Storage"})


def bucket_rows(
    head: Any, tagging: Any = None, storage: dict[str, Any] | None = None, pages: Any = None
) -> tuple[list[Result], list[Call]]:
    """check_names' data bucket row and the calls after the four DescribeStacks; ``storage`` is the
    train-Storage stack DescribeStacks returns (None: it does not exist), ``pages`` its ListStackResources."""

    def describe(params: dict[str, Any]) -> Any:
        found = storage if params["StackName"] == "train-Storage" else None
        return MISSING_STACK if found is None else {"Stacks": [found]}

    account = Account(
        describe_stacks=describe,
        get_caller_identity={"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/op"},
        head_bucket=head,
        get_bucket_tagging=tagging,
        list_stack_resources=pages,
    )
    results = preflight.check_names(context(account, env=environment(bucket="train-data")))
    return results[4:], account.calls[4:]


def bucket_resource(status: str = "CREATE_COMPLETE", kind: str = "AWS::S3::Bucket", name: str = "train-data") -> Any:
    return {
        "LogicalResourceId": "DataBucket",
        "PhysicalResourceId": name,
        "ResourceType": kind,
        "ResourceStatus": status,
    }


def test_the_data_bucket_is_free_or_someone_elses() -> None:
    """Both S3 calls name this account as the expected owner (another account's bucket answers 403)."""
    other = f"bucket train-data exists in this account without tag {preflight.ENV_TAG}=train: choose another name"
    assert bucket_rows({}, {"TagSet": [{"Key": "Name", "Value": "train"}]}) == (
        [Result("names", "fail", "ERROR", BUCKET_KEY, other)],
        [WHO, HEAD, TAGGING],
    )
    assert bucket_rows({}, {"TagSet": [{"Key": preflight.ENV_TAG, "Value": "other"}]})[0] == [
        Result("names", "fail", "ERROR", BUCKET_KEY, other)
    ]
    assert bucket_rows({}, client_error("NoSuchTagSet"))[0] == [Result("names", "fail", "ERROR", BUCKET_KEY, other)]
    for code in ("404", "NoSuchBucket", "NotFound"):
        assert bucket_rows(client_error(code)) == (
            [Result("names", "pass", "ERROR", BUCKET_KEY, "bucket train-data is free")],
            [WHO, HEAD],
        )
    with pytest.raises(ClientError):
        bucket_rows(client_error("400"))
    with pytest.raises(ClientError):
        bucket_rows({}, client_error("InternalError"))
    account = Account(describe_stacks=MISSING_STACK)
    preflight.check_names(context(account, env=environment()))
    assert [service for service, _, _ in account.calls] == ["cloudformation"] * 4


def test_a_refused_bucket_read_is_a_names_failure_that_claims_neither_cause() -> None:
    """HeadBucket 403 (with ExpectedBucketOwner): another account's bucket, or this account's without
    s3:ListBucket for these credentials. GetBucketTagging 403 after HeadBucket answered for this account:
    the tags are unreadable. Before the fix the first said "belongs to another account" and the second was
    an AWS error row telling the operator the credentials lack a permission."""
    refused = (
        f"bucket train-data exists and HeadBucket as account {ACCOUNT} was refused: either another account owns "
        "it (choose another name), or this account does and these credentials lack s3:ListBucket on it (grant "
        "it and run again)"
    )
    for code in ("403", "AccessDenied", "Forbidden"):
        assert bucket_rows(client_error(code)) == ([Result("names", "fail", "ERROR", BUCKET_KEY, refused)], [WHO, HEAD])
    tags_refused = (
        f"bucket train-data exists in account {ACCOUNT}, and these credentials cannot read its tags "
        "(GetBucketTagging refused): grant s3:GetBucketTagging on it and run again, or choose another name"
    )
    for code in ("403", "AccessDenied", "Forbidden"):
        assert bucket_rows({}, client_error(code, "denied")) == (
            [Result("names", "fail", "ERROR", BUCKET_KEY, tags_refused)],
            [WHO, HEAD, TAGGING],
        )


def kept(where: str) -> str:
    return (
        f"bucket train-data carries tag {preflight.ENV_TAG}=train but stack train-Storage {where}: it was kept from "
        "an earlier deploy (deleted with its stack, or left it, and retained), and `cdk deploy` would fail creating "
        "it again (already exists): bring it into the stack with `npx cdk import 'train/Storage'` (then deploy), or "
        "take what you need from it, empty and delete it, or choose another storage.data_bucket.name"
    )


def test_our_bucket_passes_only_while_the_storage_stack_holds_it() -> None:
    """A bucket tagged for this environment is this environment's only while its Storage stack holds it; kept
    after a `cdk destroy` (stack absent or DELETE_COMPLETE) the next create fails "already exists". Before the
    fix all of these passed as "bucket train-data exists"."""
    tagged = {"TagSet": OURS}
    stack = {"StackName": "train-Storage", "StackStatus": "UPDATE_COMPLETE", "Tags": OURS}
    held = [{"StackResourceSummaries": [bucket_resource("CREATE_COMPLETE", name="train-data-logs"), bucket_resource()]}]
    assert bucket_rows({}, tagged, stack, held) == (
        [Result("names", "pass", "ERROR", BUCKET_KEY, "bucket train-data exists, held by stack train-Storage")],
        [WHO, HEAD, TAGGING, HELD],
    )
    # On a later page, and in any status but gone (an update in flight is the stacks' row to fail).
    later = [
        {"StackResourceSummaries": [bucket_resource(name="other")]},
        {"StackResourceSummaries": [bucket_resource("UPDATE_FAILED")]},
    ]
    assert bucket_rows({}, tagged, stack, later)[0][0].status == "pass"
    # The edge: absent, and present but DELETE_COMPLETE, are the same (no ListStackResources on a deleted stack).
    for storage in (None, stack | {"StackStatus": "DELETE_COMPLETE"}):
        assert bucket_rows({}, tagged, storage) == (
            [Result("names", "fail", "ERROR", BUCKET_KEY, kept("does not exist"))],
            [WHO, HEAD, TAGGING],
        )
    # A live Storage stack that does not hold it: kept by a rolled-back create, or another bucket of the name.
    rolled_back = stack | {"StackStatus": "ROLLBACK_COMPLETE"}
    for resources in (
        [bucket_resource("DELETE_SKIPPED")],
        [bucket_resource("DELETE_COMPLETE")],
        [bucket_resource(kind="AWS::S3::BucketPolicy")],
        [bucket_resource(name="train-data-2")],
        [],
    ):
        assert bucket_rows({}, tagged, rolled_back, [{"StackResourceSummaries": resources}]) == (
            [Result("names", "fail", "ERROR", BUCKET_KEY, kept("(ROLLBACK_COMPLETE) does not hold it"))],
            [WHO, HEAD, TAGGING, HELD],
        )
    with pytest.raises(ClientError):
        bucket_rows({}, tagged, stack, client_error("AccessDenied", "not authorized"))


def hyperpod_names(
    describe: Any, tags: Any = None, cluster_stack: str | None = "CREATE_COMPLETE"
) -> tuple[list[Result], list[Call]]:
    """check_names' HyperPod rows and calls after the three DescribeStacks; ``cluster_stack`` is the status of
    train-Cluster (None: it does not exist)."""

    def stacks(params: dict[str, Any]) -> Any:
        if params["StackName"] != "train-Cluster" or cluster_stack is None:
            return MISSING_STACK
        return {"Stacks": [{"StackName": "train-Cluster", "StackStatus": cluster_stack, "Tags": OURS}]}

    account = Account(describe_stacks=stacks, describe_cluster=describe, list_tags=tags)
    results = preflight.check_names(context(account, env=environment(backend="hyperpod")))
    return results[3:], account.calls[3:]


@pytest.mark.parametrize(
    ("status", "way"),
    [
        ("Deleting", "wait until its deletion has finished"),
        (
            "InService",
            "delete it if nothing of it is needed (its nodes' disks go with it), or choose another cluster.name",
        ),
        (
            "Failed",
            "delete it if nothing of it is needed (its nodes' disks go with it), or choose another cluster.name",
        ),
    ],
)
@pytest.mark.parametrize(
    ("cluster_stack", "said"),
    [
        (None, "does not exist"),
        ("DELETE_COMPLETE", "does not exist"),
        # A create that rolled back holds no cluster either (AWS review: it passed, and the next create failed).
        ("ROLLBACK_COMPLETE", "is ROLLBACK_COMPLETE and holds none"),
    ],
    ids=["absent", "deleted", "rolled-back"],
)
def test_our_hyperpod_cluster_without_its_cluster_stack_fails_the_names_check(
    status: str, way: str, cluster_stack: str | None, said: str
) -> None:
    """A cluster kept (or still being deleted) after the Cluster stack went: the deploy would create it again and the
    cluster's handler refuses the name, after the network and storage stacks were made (user review)."""
    found = {"ClusterArn": "arn:aws:sagemaker:us-east-2:123456789012:cluster/abc", "ClusterStatus": status}
    assert hyperpod_names(found, {"Tags": OURS}, cluster_stack)[0] == [
        Result(
            "names",
            "fail",
            "ERROR",
            "cluster.name",
            f"HyperPod cluster train-cluster ({status}) is this environment's, but stack train-Cluster {said}: the "
            f"deploy would create the cluster again and be refused for the name; {way}",
        )
    ]


def test_the_hyperpod_cluster_name_is_free_ours_or_someone_elses() -> None:
    arn = "arn:aws:sagemaker:us-east-2:123456789012:cluster/abc"
    found = {"ClusterArn": arn}
    calls = [
        ("sagemaker", "describe_cluster", {"ClusterName": CLUSTER}),
        ("sagemaker", "list_tags", {"ResourceArn": arn}),
    ]
    assert hyperpod_names(found, {"Tags": OURS}) == (
        [Result("names", "pass", "ERROR", "cluster.name", "HyperPod cluster train-cluster exists")],
        calls,
    )
    other = [
        Result(
            "names",
            "fail",
            "ERROR",
            "cluster.name",
            f"HyperPod cluster train-cluster exists without tag {preflight.ENV_TAG}=train: choose another cluster.name",
        )
    ]
    assert hyperpod_names(found, {})[0] == other
    assert hyperpod_names(found, {"Tags": [{"Key": preflight.ENV_TAG, "Value": "other"}]})[0] == other
    assert hyperpod_names(client_error("ResourceNotFound")) == (
        [Result("names", "pass", "ERROR", "cluster.name", "HyperPod cluster name train-cluster is free")],
        calls[:1],
    )
    with pytest.raises(ClientError):
        hyperpod_names(client_error("ValidationException"))


# --- CDK bootstrap -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ([{"OutputKey": "BootstrapVersion", "OutputValue": "33"}], ("pass", "ERROR", "bootstrap version 33")),
        ([{"OutputKey": "BootstrapVersion", "OutputValue": "40"}], ("pass", "ERROR", "bootstrap version 40")),
        (
            [{"OutputKey": "BootstrapVersion", "OutputValue": "32"}],
            ("fail", "WARNING", "bootstrap version 32 is older than 33 of the pinned CDK CLI: FIX"),
        ),
        (
            [{"OutputKey": "BootstrapVersion", "OutputValue": "6"}],
            ("fail", "WARNING", "bootstrap version 6 is older than 33 of the pinned CDK CLI: FIX"),
        ),
        (
            [{"OutputKey": "BootstrapVersion", "OutputValue": "5"}],
            ("fail", "ERROR", "bootstrap version 5 < 6, which the templates require: FIX"),
        ),
        (
            [{"OutputKey": "BootstrapVersion", "OutputValue": "v33"}],
            ("fail", "ERROR", "bootstrap version v33 < 6, which the templates require: FIX"),
        ),
        (
            [{"OutputKey": "BootstrapVersion"}, {"OutputKey": "Other", "OutputValue": "40"}],
            ("fail", "ERROR", "bootstrap version unknown < 6, which the templates require: FIX"),
        ),
        (None, ("fail", "ERROR", "bootstrap version unknown < 6, which the templates require: FIX")),
    ],
)
def test_cdk_bootstrap_version_against_the_templates_and_the_cli(outputs: Any, expected: tuple[str, str, str]) -> None:
    stack: dict[str, Any] = {"StackName": "CDKToolkit"}
    if outputs is not None:
        stack["Outputs"] = outputs
    account = Account(describe_stacks={"Stacks": [stack]})
    status, level, message = expected
    fix = "run `npx cdk bootstrap aws://<account>/us-east-2`"
    assert preflight.check_bootstrap(context(account)) == [
        Result("cdk-bootstrap", status, level, "region", message.replace("FIX", fix))  # type: ignore[arg-type]
    ]
    assert account.calls == [("cloudformation", "describe_stacks", {"StackName": "CDKToolkit"})]


def test_cdk_bootstrap_missing_is_a_row_and_a_refusal_is_raised() -> None:
    fix = "run `npx cdk bootstrap aws://<account>/us-east-2`"
    for answer in (MISSING_STACK, {"Stacks": []}):
        assert preflight.check_bootstrap(context(Account(describe_stacks=answer))) == [
            Result("cdk-bootstrap", "fail", "ERROR", "region", f"no CDKToolkit stack in us-east-2: {fix}")
        ]
    with pytest.raises(ClientError):
        preflight.check_bootstrap(context(Account(describe_stacks=client_error("AccessDenied", "denied"))))


# --- running the checks, the exit code, the child's credentials ----------------------------------------------


def test_each_check_failure_is_a_row_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def passing(ctx: preflight.Context) -> list[Result]:
        """Checks that pass."""
        ran.append("passing")
        return [
            Result("vcpu-quota", "pass", "ERROR", "k", "fine"),
            Result("vcpu-quota", "fail", "WARNING", "k2", "look"),
        ]

    def refused(ctx: preflight.Context) -> list[Result]:
        """Asks EC2 for something.

        More text that is not the first line."""
        raise client_error("AccessDenied", "not authorized")

    def throttled(ctx: preflight.Context) -> list[Result]:
        raise client_error("ThrottlingException", "slow\ndown")

    def unexpected(ctx: preflight.Context) -> list[Result]:
        raise KeyError("Vpcs")

    def cli_error(ctx: preflight.Context) -> list[Result]:
        raise CliError("first line\nsecond line", EXIT_AWS)

    def skipped(ctx: preflight.Context) -> list[Result]:
        raise AssertionError("a skipped check ran")

    checks = {"a": passing, "b": refused, "c": throttled, "d": unexpected, "e": cli_error, "f": skipped}
    monkeypatch.setattr(preflight, "CHECKS", checks)
    results = preflight.run_checks(context(Account()), ["f"])
    assert results == [
        Result("vcpu-quota", "pass", "ERROR", "k", "fine"),
        Result("vcpu-quota", "fail", "WARNING", "k2", "look"),
        Result(
            "b",
            "error",
            "ERROR",
            "-",
            "Asks EC2 for something. failed: AccessDenied: not authorized   what to do: "
            "the credentials in use lack this permission; use a role that has it",
        ),
        Result(
            "c",
            "error",
            "ERROR",
            "-",
            "c failed: ThrottlingException: slow down   what to do: "
            "AWS throttled the calls past the retries; wait a minute and run the command again",
        ),
        Result(
            "d",
            "error",
            "ERROR",
            "-",
            "the check failed on an unexpected answer (KeyError: 'Vpcs'); run again with --skip d and check it by hand",
        ),
        Result("e", "error", "ERROR", "-", "first line second line"),
    ]
    assert ran == ["passing"]
    assert preflight.run_checks(context(Account()), ["a", "b", "c", "d", "e", "f"]) == []
    assert ran == ["passing"]


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([], EXIT_OK),
        ([("pass", "ERROR"), ("skipped", "WARNING"), ("fail", "WARNING"), ("pass", "WARNING")], EXIT_OK),
        ([("pass", "ERROR"), ("error", "ERROR")], EXIT_AWS),
        ([("fail", "WARNING"), ("error", "WARNING")], EXIT_AWS),
        ([("error", "ERROR"), ("fail", "ERROR")], EXIT_FAILED),
        ([("fail", "ERROR")], EXIT_FAILED),
    ],
)
def test_exit_code_failed_before_aws_error_before_ok(rows: list[tuple[str, str]], code: int) -> None:
    assert preflight.exit_code([Result("x", s, lv, "k", "m") for s, lv in rows]) == code  # type: ignore[arg-type]


def _target(
    access: str = "AKIDEXAMPLE", secret: str = "secret", token: str | None = "token", credentials: bool = True
) -> Any:
    frozen = SimpleNamespace(access_key=access, secret_key=secret, token=token)
    found = SimpleNamespace(get_frozen_credentials=lambda: frozen) if credentials else None
    return SimpleNamespace(region="eu-west-1", session=SimpleNamespace(get_credentials=lambda: found))


@pytest.fixture
def aws_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment with AWS variables a child must not inherit, and four it must keep."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in {
        "AWS_PROFILE": "admin",
        "AWS_SECRET_ACCESS_KEY": "stale",
        "AWS_REGION": "us-west-2",
        "AWS_CA_BUNDLE": "/ca.pem",
        "AWS_ENDPOINT_URL": "https://proxy",
        "AWS_MAX_ATTEMPTS": "9",
        "AWS_RETRY_MODE": "adaptive",
        "AWS_CONFIG_FILE": "/home/me/.aws/config",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("aws_environ")
def test_a_child_gets_the_operators_resolved_credentials_and_region_only() -> None:
    import os

    expected = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_REGION": "eu-west-1",
        "AWS_CA_BUNDLE": "/ca.pem",
        "AWS_ENDPOINT_URL": "https://proxy",
        "AWS_MAX_ATTEMPTS": "9",
        "AWS_RETRY_MODE": "adaptive",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "token",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    assert preflight.operator_environ(_target()) == expected
    del expected["AWS_SESSION_TOKEN"]
    assert preflight.operator_environ(_target(token=None)) == expected
    assert preflight.operator_environ(_target(token="")) == expected


@pytest.mark.usefixtures("aws_environ")
def test_credentials_without_a_key_are_an_aws_error() -> None:
    for target in (_target(access=""), _target(secret="")):
        with pytest.raises(CliError) as raised:
            preflight.operator_environ(target)
        assert (raised.value.message, raised.value.exit_code) == (
            "the AWS credentials have no access key: configure a profile or pass --profile",
            EXIT_AWS,
        )


# --- what the operator reads ----------------------------------------------------------------------------------

RENDERED = [
    Result(
        "vcpu-quota",
        "pass",
        "ERROR",
        "q[0]",
        "Running On-Demand P instances (L-417A185B) 672 >= 192 running + 480 needed",
    ),
    Result("vcpu-quota", "fail", "WARNING", "q[1]", "look"),
    Result("fsx-quota", "fail", "WARNING", "storage.lustre", "look again"),
    Result("names", "fail", "ERROR", "cluster.name", "taken"),
    Result("b", "error", "ERROR", "-", "refused"),
    Result("pcluster-validators", "skipped", "WARNING", "-", "later"),
    Result("x", "skipped", "WARNING", "-", "later"),
    Result("y", "skipped", "ERROR", "-", "later"),
]


def test_the_table_folds_long_cells_and_counts_each_kind_of_row(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    preflight.render(RENDERED, "train", "us-east-2")
    assert capsys.readouterr().out == (
        "                      preflight train (us-east-2)                       \n"
        "┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ check              ┃ result    ┃ key            ┃ message            ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ vcpu-quota         │ ok        │ q[0]           │ Running On-Demand  │\n"
        "│                    │           │                │ P instances        │\n"
        "│                    │           │                │ (L-417A185B) 672   │\n"
        "│                    │           │                │ >= 192 running +   │\n"
        "│                    │           │                │ 480 needed         │\n"
        "│ vcpu-quota         │ WARNING   │ q[1]           │ look               │\n"
        "│ fsx-quota          │ WARNING   │ storage.lustre │ look again         │\n"
        "│ names              │ ERROR     │ cluster.name   │ taken              │\n"
        "│ b                  │ AWS ERROR │ -              │ refused            │\n"
        "│ pcluster-validator │ skipped   │ -              │ later              │\n"
        "│ s                  │           │                │                    │\n"
        "│ x                  │ skipped   │ -              │ later              │\n"
        "│ y                  │ skipped   │ -              │ later              │\n"
        "└────────────────────┴───────────┴────────────────┴────────────────────┘\n"
        "1 errors, 2 warnings, 1 checks could not run, 3 skipped\n"
    )


def test_on_a_terminal_ok_is_green_a_failure_red_a_warning_or_skip_yellow_an_aws_error_magenta(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("COLORTERM", raising=False)
    preflight.render(RENDERED, "train", "us-east-2")
    cells = [line.split("│")[2].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("│ ")]
    assert [cell for cell in cells if cell] == [
        "\x1b[32mok\x1b[0m",
        "\x1b[33mWARNING\x1b[0m",
        "\x1b[33mWARNING\x1b[0m",
        "\x1b[31mERROR\x1b[0m",
        "\x1b[35mAWS ERROR\x1b[0m",
        "\x1b[33mskipped\x1b[0m",
        "\x1b[33mskipped\x1b[0m",
        "\x1b[33mskipped\x1b[0m",
    ]


# --- the command --------------------------------------------------------------------------------------------


class _Now(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> _Now:  # type: ignore[override]
        assert tz is UTC
        return cls.fromtimestamp(NOW.timestamp(), tz)


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The preflight command on a hand-built target, with two checks that record the context they get."""
    seen: dict[str, Any] = {"rows": {"vcpu-quota": [], "names": []}}
    env = environment()
    plan = context(Account()).plan
    target = SimpleNamespace(environment=env, region="eu-west-1", client=Account().client, session=None)

    def load(name: str, environments: Any, region: Any, profile: Any) -> Any:
        seen["load"] = (name, environments, region, profile)
        return target

    def check(check_id: str) -> Callable[[preflight.Context], list[Result]]:
        def run(ctx: preflight.Context) -> list[Result]:
            seen[check_id] = ctx
            return list(seen["rows"][check_id])

        return run

    monkeypatch.setattr(preflight, "Target", SimpleNamespace(load=load))
    monkeypatch.setattr(preflight, "plan_of", lambda e: plan if e is env else None)
    monkeypatch.setattr(preflight, "CHECKS", {"vcpu-quota": check("vcpu-quota"), "names": check("names")})
    monkeypatch.setattr(preflight, "datetime", _Now)
    monkeypatch.setattr(preflight, "operator_environ", lambda t: {"for": t})
    seen.update(env=env, plan=plan, target=target)
    return seen


def _run(*args: str, standalone: bool = False) -> Any:
    """``mlcluster preflight train ARGS`` through the command group (as the operator runs it); not standalone, a
    CliError is the result's exception."""
    from click.testing import CliRunner

    from mlcluster.cli.main import cli

    return CliRunner().invoke(cli, ["preflight", "train", *args], standalone_mode=standalone)


def test_the_command_builds_the_context_from_the_target_and_prints_the_json_document(command: dict[str, Any]) -> None:
    command["rows"]["vcpu-quota"] = [Result("vcpu-quota", "fail", "WARNING", "q[0]", "look")]
    command["rows"]["names"] = [Result("names", "pass", "ERROR", "cluster.name", "free")]
    result = _run("--json", "--region", "eu-west-1", "--profile", "ops")
    assert (result.exit_code, result.exception) == (0, None)
    assert json.loads(result.output) == {
        "environment": "train",
        "region": "eu-west-1",
        "results": [
            {"check": "vcpu-quota", "status": "fail", "level": "WARNING", "key": "q[0]", "message": "look"},
            {"check": "names", "status": "pass", "level": "ERROR", "key": "cluster.name", "message": "free"},
        ],
    }
    assert command["load"] == ("train", None, "eu-west-1", "ops")
    ctx: preflight.Context = command["vcpu-quota"]
    assert (ctx.env, ctx.plan, ctx.region, ctx.margin, ctx.now) == (
        command["env"],
        command["plan"],
        "eu-west-1",
        timedelta(days=7),
        NOW,
    )
    assert ctx.client == command["target"].client
    assert ctx.child_environ() == {"for": command["target"]}
    assert command["names"] is ctx


def test_the_command_skips_checks_and_takes_the_reservation_margin(command: dict[str, Any]) -> None:
    result = _run("--skip", "vcpu-quota", "--reservation-margin-days", "0", "--json")
    assert result.exit_code == 0
    assert "vcpu-quota" not in command
    assert command["names"].margin == timedelta(days=0)
    assert json.loads(result.output)["results"] == []
    result = _run("--reservation-margin-days", "-1", standalone=True)
    assert result.exit_code == 2
    result = _run("--skip", "no-such-check", standalone=True)
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("rows", "error", "summary"),
    [
        (
            [("fail", "ERROR"), ("error", "ERROR")],
            ("preflight failed: fix the ERROR rows above before `cdk deploy`", EXIT_FAILED),
            "1 errors, 0 warnings, 1 checks could not run, 0 skipped",
        ),
        (
            [("fail", "WARNING"), ("error", "ERROR")],
            ("preflight incomplete: some checks could not run (see the AWS ERROR rows)", EXIT_AWS),
            "0 errors, 1 warnings, 1 checks could not run, 0 skipped",
        ),
    ],
)
def test_the_command_fails_after_printing_the_table(
    command: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    rows: list[tuple[str, str]],
    error: tuple[str, int],
    summary: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    command["rows"]["names"] = [Result("names", s, lv, "k", "m") for s, lv in rows]  # type: ignore[arg-type]
    result = _run()
    assert isinstance(result.exception, CliError)
    assert (result.exception.message, result.exception.exit_code) == error
    assert result.output.splitlines()[0].strip() == "preflight train (eu-west-1)"
    assert result.output.splitlines()[-1] == summary


def test_parallelclusters_validators_get_the_context_and_its_child_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlcluster.cli import pcluster_live

    ctx = context(Account())
    row = Result("pcluster-validators", "skipped", "WARNING", "-", "later")
    monkeypatch.setattr(
        pcluster_live,
        "check_pcluster_validators",
        lambda c, environ: [row] if (c, environ) == (ctx, ctx.child_environ) else [],
    )
    assert preflight.check_pcluster_validators(ctx) == [row]


def test_a_child_of_a_context_built_by_hand_inherits_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLCLUSTER_SWEEP", "1")
    import os

    environ = context(Account()).child_environ()
    assert environ == dict(os.environ)
    assert environ is not os.environ


def test_a_stack_deleted_or_without_a_status_is_read_as_such() -> None:
    results, _ = names_rows({"train-Network": {"StackStatus": "DELETE_COMPLETE"}, "train-Storage": {"Tags": OURS}})
    assert results[:2] == [
        Result("names", "pass", "ERROR", "(file name)", "stack train-Network is free"),
        Result("names", "pass", "ERROR", "(file name)", "stack train-Storage is this environment's ()"),
    ]


def test_an_error_without_a_code_or_message_is_raised_never_read_as_absent() -> None:
    """An answer that says neither "does not exist" nor a not-found code is an error (a row), not a free name."""
    bare = ClientError({"Error": {}}, "Operation")
    with pytest.raises(ClientError):
        names_rows({"train-Network": bare})
    with pytest.raises(ClientError):
        preflight.check_bootstrap(context(Account(describe_stacks=bare)))
    with pytest.raises(ClientError):
        bucket_rows(bare)
    account = Account(describe_capacity_reservations=bare)
    with pytest.raises(ClientError):
        preflight.check_reservations(context(account, groups=(group("q[0]", "p5.48xlarge", 1, reservation_id=RID),)))
