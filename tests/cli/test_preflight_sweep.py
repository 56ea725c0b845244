"""``mlcluster preflight``: each check's whole list of rows and every AWS request it makes (issue 27, sweep).

The checks run here against a recorded account: each answer is given by hand, each call (service, operation,
every parameter) is kept in order and compared with ``==``, and each check's rows (id, status, level, key and
the full line the operator reads) are compared with ``==``, on inputs right at each rule's edge. The
environment and its plan are built by hand (no YAML, no synthesis), so each test is a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace as NS
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
                return NS(paginate=lambda **params: account.call(service, operation, params))

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
    pcluster = NS(os=os, custom_ami=custom_ami, head_node=NS(instance_type=head), version="3.16.1")
    return NS(
        name=ENV,
        cluster_name=CLUSTER,
        config=NS(
            network=network,
            cluster=NS(backend=backend, pcluster=pcluster if backend == "pcluster" else None),
            storage=NS(lustre=NS(data_repository_associations=associations), data_bucket=NS(name=bucket)),
            observability=NS(enabled=observability),
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
    zones = [NS(availability_zone=n, availability_zone_id=i, label=n or i or "") for n, i in extra]
    return NS(
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
        group("q[1]", "ml.c5.xlarge", 1, "use2-az2"),
        group("q[2]", "c5.xlarge", 1, "subnet-0123"),
    )
    fix = "choose another instance_type or zone (network.availability_zone)"
    assert preflight.check_offerings(context(account, groups=groups)) == [
        Result("instance-offered", "pass", "ERROR", "q[0]", "p5.48xlarge is offered in us-east-2a"),
        Result("instance-offered", "fail", "ERROR", "q[0]", f"p5.48xlarge is not offered in use2-az2: {fix}"),
        Result("instance-offered", "pass", "ERROR", "q[1]", "c5.xlarge is offered in use2-az2"),
        Result(
            "instance-offered", "fail", "WARNING", "q[2]", "zone unknown (network.existing); check the offering by hand"
        ),
    ]

    def call(kind: str, zone: str, itype: str) -> Call:
        filters = [{"Name": "location", "Values": [zone]}, {"Name": "instance-type", "Values": [itype]}]
        return ("ec2", "describe_instance_type_offerings", {"LocationType": kind, "Filters": filters})

    assert account.calls == [
        call("availability-zone", "us-east-2a", "p5.48xlarge"),
        call("availability-zone-id", "use2-az2", "p5.48xlarge"),
        call("availability-zone-id", "use2-az2", "c5.xlarge"),
    ]
