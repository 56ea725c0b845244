"""The table of environment files that must fail, with the exact message each gives.

Each case is one or more files (name -> YAML text) and the exact lines
``mlcluster validate`` and ``cdk synth`` print for them, ``{d}`` standing for
the directory. ``schema`` says whether the JSON Schema can express the rule
(then it must reject the file too).
"""

from __future__ import annotations

from dataclasses import dataclass

PCLUSTER = """
network: {{availability_zone: us-east-1a}}
cluster:
  backend: pcluster
  pcluster:
    queues:
      - name: q
        compute_resources:
          - {{name: a, instance_type: {instance_type}{extra}}}
"""

HYPERPOD = """
network: {{availability_zone_id: use1-az4}}
cluster:
  backend: hyperpod
  name: {name}
  hyperpod:
    workers:
      - {{instance_group_name: w, instance_type: {instance_type}}}
"""
NET = "network: {availability_zone: us-east-1a}\n"


def pcluster(instance_type: str = "p5.48xlarge", extra: str = "", head: str = "", name: str = "") -> str:
    """A ParallelCluster environment with one compute resource (and optional head node / name lines)."""
    text = PCLUSTER.format(instance_type=instance_type, extra=extra)
    if name:
        text = text.replace("  backend: pcluster\n", f"  backend: pcluster\n  name: {name}\n")
    if head:
        text = text.replace("    queues:\n", f"    head_node: {head}\n    queues:\n")
    return text


def hyperpod(instance_type: str = "ml.p5.48xlarge", name: str = "hp") -> str:
    """A HyperPod environment with one worker group."""
    return HYPERPOD.format(instance_type=instance_type, name=name)


@dataclass(frozen=True)
class Case:
    """Files that must fail, the exact message lines, and whether JSON Schema can say so too."""

    id: str
    files: dict[str, str | bytes]
    lines: list[str]
    schema: bool = False


BILLION_LAUGHS = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    + [NET]
)

CASES = [
    # 1. YAML that means what it says
    Case(
        "duplicate key",
        {"dev.yaml": "network:\n  availability_zone: us-east-1a\n  cidr: 10.0.0.0/16\n  cidr: 10.1.0.0/16\n"},
        ["{d}/dev.yaml: network.cidr: 'cidr' is not valid; written twice in one mapping (line 3 and line 4); keep one"],
    ),
    Case(
        "duplicate top-level key",
        {"dev.yaml": "description: a\n" + NET + "description: b\n"},
        [
            "{d}/dev.yaml: description: 'description' is not valid; written twice in one mapping (line 1 and line 3); "
            "keep one"
        ],
    ),
    Case(
        "not utf-8",
        {"dev.yaml": NET.encode() + b"description: caf\xe9\n"},
        ["{d}/dev.yaml: line 2: the file is not UTF-8 text (byte 0xe9 at offset 57); save it as UTF-8"],
    ),
    Case(
        "deep nesting",
        {"dev.yaml": NET + "tags: " + "[" * 5000 + "]" * 5000 + "\n"},
        ["{d}/dev.yaml: line 2: nesting deeper than 32 levels"],
    ),
    Case(
        "billion laughs",
        {"dev.yaml": BILLION_LAUGHS},
        [
            "{d}/dev.yaml: line 5: expands to more than 100000 values (anchors and aliases repeat whole structures); "
            "write the settings out or use fewer aliases"
        ],
    ),
    Case(
        "alias to itself",
        {"dev.yaml": NET + "tags: &a [*a]\n"},
        ["{d}/dev.yaml: line 2: an alias refers to the structure that contains it"],
    ),
    Case(
        "python object tag",
        {"dev.yaml": "network: !!python/object/apply:os.system ['touch /tmp/pwned']\n"},
        [
            "{d}/dev.yaml: line 1: the tag tag:yaml.org,2002:python/object/apply:os.system is not allowed; "
            "environment files hold plain strings, numbers, booleans, lists and mappings"
        ],
    ),
    Case(
        "cloudformation tag",
        {"dev.yaml": NET + "description: !Ref Name\n"},
        [
            "{d}/dev.yaml: line 2: the tag !Ref is not allowed; "
            "environment files hold plain strings, numbers, booleans, lists and mappings"
        ],
    ),
    Case(
        "too large",
        {"dev.yaml": NET + "description: " + "x" * 300_000 + "\n"},
        [
            "{d}/dev.yaml: (file): the file has 300055 bytes; an environment file has at most 256 KiB "
            "(settings, not data)",
        ],
    ),
    Case(
        "two documents",
        {"dev.yaml": NET + "---\n" + NET},
        ["{d}/dev.yaml: line 2, column 1: 'YAML' is not valid; cannot be parsed: but found another document"],
    ),
    Case(
        "control character",
        {"dev.yaml": NET + 'description: "a\x01b"\n'},
        ["{d}/dev.yaml: line 2: cannot be parsed: control characters are not allowed (character #x0001)"],
    ),
    Case(
        "binary tag",
        {"dev.yaml": NET + "description: !!binary aGVsbG8=\n"},
        [
            "{d}/dev.yaml: line 2: the tag tag:yaml.org,2002:binary is not allowed; "
            "environment files hold plain strings, numbers, booleans, lists and mappings"
        ],
    ),
    Case(
        "complex key",
        {"dev.yaml": NET + "? [a]\n: b\n"},
        ["{d}/dev.yaml: line 2: a mapping key must be a plain value, not a list or mapping"],
    ),
    Case(
        "empty file",
        {"dev.yaml": "# nothing yet\n"},
        ["{d}/dev.yaml: (top level): no value (empty or missing); expected a mapping of settings"],
        schema=True,
    ),
    Case(
        "a list, not a mapping",
        {"dev.yaml": "- network\n"},
        ["{d}/dev.yaml: (top level): ['network'] is not valid; expected a mapping of settings"],
        schema=True,
    ),
    Case(
        "date where a string is expected",
        {"dev.yaml": NET + "description: 2024-01-01\n"},
        [
            "{d}/dev.yaml: description: datetime.date(2024, 1, 1) is not valid; expected a string; YAML read the "
            'unquoted 2024-01-01 as a date (2024-01-01); quote it: "2024-01-01"'
        ],
        # Editors read YAML 1.2, where 2024-01-01 is a string: only the loader can see this one.
    ),
    Case(
        "octal account",
        {"dev.yaml": "account: 012345670123\n" + NET},
        [
            "{d}/dev.yaml: account: 1402433619 is not valid; expected a string; allowed: a 12-digit AWS account ID, "
            "quoted; YAML read the unquoted 012345670123 as the octal number 1402433619; quote it: "
            '"012345670123"'
        ],
        schema=True,
    ),
    Case(
        "boolean where a string is expected",
        {"dev.yaml": "description: no\n" + NET},
        [
            "{d}/dev.yaml: description: False is not valid; expected a string; YAML read the unquoted no as the "
            'boolean false; quote it: "no"'
        ],
        schema=True,
    ),
    Case(
        "on as a tag value",
        {"dev.yaml": "tags: {Backup: on}\n" + NET},
        [
            "{d}/dev.yaml: tags.Backup: True is not valid; expected a string; YAML read the unquoted on as the "
            'boolean true; quote it: "on"'
        ],
        schema=True,
    ),
    Case(
        "version read as a float",
        {"dev.yaml": pcluster().replace("    queues:\n", "    version: 3.10\n    queues:\n")},
        [
            "{d}/dev.yaml: cluster.pcluster.version: 3.1 is not valid; expected a string; allowed: a ParallelCluster "
            "3 version such as '3.16.1'; YAML read the unquoted 3.10 as the number 3.1; quote it: "
            '"3.10"'
        ],
        schema=True,
    ),
    Case(
        "enum value read as a float",
        {"dev.yaml": NET + "storage: {lustre: {lustre_version: 2.10}}\n"},
        [
            "{d}/dev.yaml: storage.lustre.lustre_version: 2.1 is not valid; allowed: '2.15', '2.12'; YAML read the "
            'unquoted 2.10 as the number 2.1; quote it: "2.10"'
        ],
        schema=True,
    ),
    Case(
        "time read as base 60",
        {"dev.yaml": NET + "storage: {lustre: {weekly_maintenance_start_time: 7:06:00}}\n"},
        [
            "{d}/dev.yaml: storage.lustre.weekly_maintenance_start_time: 25560 is not valid; expected a string; "
            "allowed: D:HH:MM (1 = Monday), such as '7:06:00'; YAML read the unquoted 7:06:00 as the base-60 "
            'number 25560; quote it: "7:06:00"'
        ],
        schema=True,
    ),
    Case(
        "yaml and yml of one name",
        {"dev.yaml": NET, "dev.yml": NET},
        [
            "{d}/dev.yml: (file name): CloudFormation stack name 'dev-Network' is also taken by {d}/dev.yaml "
            "((file name)); it must be unique in the same account and region: rename one, or set different "
            "account or region in the two files",
        ],
    ),
    # 2. AWS's own lists, offline
    Case(
        "ec2 instance type typo",
        {"dev.yaml": pcluster("p5.48xlarg")},
        [
            "{d}/dev.yaml: cluster.pcluster.queues[0].compute_resources[0].instance_type: 'p5.48xlarg' is not valid; "
            "allowed: an EC2 instance type (the EC2 API's InstanceType list, botocore {botocore}); closest: "
            "'p5.48xlarge', 'p5e.48xlarge', 'p5.4xlarge'"
        ],
        schema=True,
    ),
    Case(
        "head node instance type typo",
        {"dev.yaml": pcluster(head="{instance_type: m5.8xlarg}")},
        [
            "{d}/dev.yaml: cluster.pcluster.head_node.instance_type: 'm5.8xlarg' is not valid; "
            "allowed: an EC2 instance type (the EC2 API's InstanceType list, botocore {botocore}); closest: "
            "'m5.8xlarge', 'm5n.8xlarge', 'm5d.8xlarge'"
        ],
        schema=True,
    ),
    Case(
        "hyperpod instance type typo",
        {"dev.yaml": hyperpod("ml.p5.48xlarg")},
        [
            "{d}/dev.yaml: cluster.hyperpod.workers[0].instance_type: 'ml.p5.48xlarg' is not valid; allowed: a "
            "SageMaker HyperPod instance type (the SageMaker API's ClusterInstanceType list, botocore {botocore}); "
            "closest: 'ml.p5.48xlarge', 'ml.p5e.48xlarge', 'ml.p5.4xlarge'"
        ],
        schema=True,
    ),
    Case(
        "ec2 type where hyperpod wants ml.",
        {"dev.yaml": hyperpod("p5.48xlarge")},
        [
            "{d}/dev.yaml: cluster.hyperpod.workers[0].instance_type: 'p5.48xlarge' is not valid; allowed: a "
            "SageMaker HyperPod instance type (the SageMaker API's ClusterInstanceType list, botocore {botocore}); "
            "closest: 'ml.p5.48xlarge', 'ml.p5e.48xlarge', 'ml.p5.4xlarge'"
        ],
        schema=True,
    ),
    Case(
        "region typo",
        {"dev.yaml": "region: us-est-1\n" + NET},
        [
            "{d}/dev.yaml: region: 'us-est-1' is not valid; allowed: an AWS region (the partitions' region list, "
            "botocore {botocore}); closest: 'us-west-1', 'us-east-1', 'us-west-2'"
        ],
        schema=True,
    ),
    Case(
        "zone outside region",
        {"dev.yaml": "region: us-west-2\n" + NET},
        [
            "{d}/dev.yaml: network.availability_zone: 'us-east-1a' is not valid; the zone is in region us-east-1, "
            "not in region us-west-2; allowed: a zone of us-west-2 such as 'us-west-2a'"
        ],
    ),
    Case(
        "zone of no region",
        {"dev.yaml": "network: {availability_zone: us-esat-1a}\n"},
        [
            "{d}/dev.yaml: network.availability_zone: 'us-esat-1a' is not valid; us-esat-1 is not an AWS region "
            "(the partitions' region list, botocore {botocore}); allowed: a region name and a letter such as "
            "'us-east-1a'; closest: 'us-west-1', 'us-east-1', 'us-west-2'"
        ],
    ),
    Case(
        "zone id of another region",
        {"dev.yaml": "region: us-east-1\nnetwork: {availability_zone_id: usw2-az4}\n"},
        [
            "{d}/dev.yaml: network.availability_zone_id: 'usw2-az4' is not valid; not a zone ID of region us-east-1 "
            "(the zone ID of us-west-2); allowed: use1-az<n> such as 'use1-az1'"
        ],
    ),
    Case(
        "zone id of no region",
        {"dev.yaml": "network: {availability_zone_id: usx2-az4}\n"},
        [
            "{d}/dev.yaml: network.availability_zone_id: 'usx2-az4' is not valid; usx2 is not the zone ID code of an "
            "AWS region; allowed: '<code>-az<n>' with a code such as 'use1' (us-east-1) or 'usw2' (us-west-2); "
            "closest: 'usw2', 'use2', 'eus2'"
        ],
    ),
    Case(
        "zones of two regions",
        {"dev.yaml": "network:\n  availability_zone_id: usw2-az4\n  extra_zones: [{availability_zone_id: use1-az1}]\n"},
        [
            "{d}/dev.yaml: network.extra_zones[0].availability_zone_id: 'use1-az1' is not valid; the zone is in "
            "us-east-1 but usw2-az4 is in us-west-2; allowed: zones of one region"
        ],
    ),
    Case(
        "efa on an instance type without it",
        {"dev.yaml": pcluster("m5.8xlarge", ", efa: true")},
        [
            "{d}/dev.yaml: cluster.pcluster.queues[0].compute_resources[0].efa: m5.8xlarge does not support EFA; "
            "set efa: false"
        ],
    ),
    # 3. Names unique across files
    Case(
        "data bucket name in two files",
        {
            "a.yaml": "region: us-east-1\n" + NET + "storage: {data_bucket: {name: my-data}}\n",
            "b.yaml": "region: eu-west-1\nnetwork: {availability_zone: eu-west-1a}\n"
            "storage: {data_bucket: {name: my-data}}\n",
        },
        [
            "{d}/b.yaml: storage.data_bucket.name: S3 bucket name 'my-data' is also taken by {d}/a.yaml "
            "(storage.data_bucket.name); it must be unique in every account and region: rename one"
        ],
    ),
    Case(
        "cluster name in two files",
        {"a.yaml": pcluster(name="train"), "b.yaml": pcluster(name="train")},
        [
            "{d}/b.yaml: cluster.name: ParallelCluster cluster name 'train' is also taken by {d}/a.yaml "
            "(cluster.name); it must be unique in the same account and region: rename one, or set different "
            "account or region in the two files"
        ],
    ),
    Case(
        "cluster name equal to another environment's stack",
        {"a.yaml": NET, "b.yaml": pcluster(name="a-Network")},
        [
            "{d}/b.yaml: cluster.name: CloudFormation stack name 'a-Network' is also taken by {d}/a.yaml "
            "((file name)); it must be unique in the same account and region: rename one, or set different "
            "account or region in the two files"
        ],
    ),
    Case(
        "hyperpod name in two files, one without region",
        {"a.yaml": "region: us-east-1\n" + hyperpod(name="hp"), "b.yaml": hyperpod(name="hp")},
        [
            "{d}/b.yaml: cluster.name: HyperPod cluster name 'hp' is also taken by {d}/a.yaml (cluster.name); it "
            "must be unique in the same account and region: rename one, or set different account or region in "
            "the two files"
        ],
    ),
    # Per-key rules the schema also expresses
    Case(
        "unknown key",
        {"dev.yaml": NET + "clusterr: {}\n"},
        [
            "{d}/dev.yaml: clusterr: 'clusterr' is not valid; unknown key; did you mean 'cluster'? allowed keys here: account, cluster, "
            "compliance, description, network, observability, region, retention, storage, tags"
        ],
        schema=True,
    ),
    Case(
        "account too short",
        {"dev.yaml": 'account: "1234"\n' + NET},
        ["{d}/dev.yaml: account: '1234' is not valid; allowed: a 12-digit AWS account ID, quoted"],
        schema=True,
    ),
    Case(
        "log retention not offered",
        {"dev.yaml": NET + "retention: {log_retention_days: 10}\n"},
        [
            "{d}/dev.yaml: retention.log_retention_days: 10 is not valid; allowed: 1, 3, 5, 7, 14, 30, 60, 90, 120, "
            "150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653"
        ],
        schema=True,
    ),
    Case(
        "enum typo",
        {"dev.yaml": NET + "retention: {on_delete: keep}\n"},
        ["{d}/dev.yaml: retention.on_delete: 'keep' is not valid; allowed: 'retain', 'destroy'"],
        schema=True,
    ),
    Case(
        "range",
        {"dev.yaml": NET + "storage: {lustre: {automatic_backup_retention_days: 91}}\n"},
        [
            "{d}/dev.yaml: storage.lustre.automatic_backup_retention_days: 91 is not valid; allowed: a number from "
            "0 to 90"
        ],
        schema=True,
    ),
    Case(
        "missing network",
        {"dev.yaml": "description: x\n"},
        ["{d}/dev.yaml: network: missing; this key is required (a mapping)"],
        schema=True,
    ),
    Case(
        "both zone forms",
        {"dev.yaml": "network: {availability_zone: us-east-1a, availability_zone_id: use1-az4}\n"},
        [
            "{d}/dev.yaml: network.availability_zone: availability_zone 'us-east-1a' and availability_zone_id "
            "'use1-az4' are both given; give exactly one of availability_zone (a name like 'us-east-1a') or "
            "availability_zone_id (an ID like 'use1-az4')"
        ],
        schema=True,
    ),
    Case(
        "no zone",
        {"dev.yaml": "network: {cidr: 10.0.0.0/16}\n"},
        [
            "{d}/dev.yaml: network.availability_zone: no value (empty or missing); give exactly one of "
            "availability_zone (a name like 'us-east-1a') or availability_zone_id (an ID like 'use1-az4')"
        ],
        schema=True,
    ),
    Case(
        "backend without its section",
        {"dev.yaml": NET + "cluster: {backend: hyperpod}\n"},
        ["{d}/dev.yaml: cluster.hyperpod: no value (empty or missing); required with backend: hyperpod"],
        schema=True,
    ),
    Case(
        "pattern",
        {"dev.yaml": "network: {availability_zone: east}\n"},
        ["{d}/dev.yaml: network.availability_zone: 'east' is not valid; allowed: an AZ name such as 'us-east-1a'"],
        schema=True,
    ),
]

#: Files at the edge of each rule that must load.
GOOD: dict[str, dict[str, str]] = {
    "merge keys and aliases within the limits": {
        "dev.yaml": pcluster().replace(
            "          - {name: a, instance_type: p5.48xlarge}\n",
            "          - &cr {name: a, instance_type: p5.48xlarge}\n          - {<<: *cr, name: b}\n",
        )
    },
    "quoted account with a leading zero": {"dev.yaml": 'account: "012345670123"\n' + NET},
    "quoted booleans and versions": {
        "dev.yaml": 'description: "no"\ntags: {Backup: "on"}\n' + NET + 'storage: {lustre: {lustre_version: "2.15"}}\n'
    },
    "yml is an environment too": {"dev.yml": NET},
    "a .YAML suffix is an environment too": {"dev.YAML": NET},
    "utf-8 with a byte order mark and non-ascii text": {"dev.yaml": "\ufeffdescription: café ☕\n" + NET},
    "zone ID matching its region": {"dev.yaml": "region: us-west-2\nnetwork: {availability_zone_id: usw2-az4}\n"},
    "zone name matching its region": {"dev.yaml": "region: us-east-1\n" + NET},
    "gov cloud zone ID": {"dev.yaml": "region: us-gov-west-1\nnetwork: {availability_zone_id: usgw1-az1}\n"},
    "newest instance types from botocore": {"dev.yaml": pcluster("p6-b200.48xlarge")},
    "hyperpod instance type": {"dev.yaml": hyperpod("ml.g5.8xlarge")},
    "same cluster name in different regions": {
        "a.yaml": "region: us-east-1\n" + pcluster(name="train"),
        "b.yaml": "region: us-west-2\n" + pcluster(name="train").replace("us-east-1a", "us-west-2a"),
    },
    "same cluster name in different accounts": {
        "a.yaml": 'account: "111111111111"\n' + pcluster(name="train"),
        "b.yaml": 'account: "222222222222"\n' + pcluster(name="train"),
    },
    "efa on an instance type with it": {"dev.yaml": pcluster("p5.48xlarge", ", efa: true")},
}
