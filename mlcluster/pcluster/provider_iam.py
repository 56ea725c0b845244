"""Which IAM policies ParallelCluster's provider may attach to the node roles it creates.

ParallelCluster creates the head, login and compute node roles itself (under
the IAM path ``/parallelcluster/``) and attaches each group's
``Iam.AdditionalIamPolicies`` to them. Its provider role may call
``iam:AttachRolePolicy`` only with the policy ARNs below; anything else
fails the cluster creation an hour in, so mlcluster names its own node
policies to match (``/parallelcluster/`` path) and refuses user-listed ARNs
outside this list before deploying.

Source, facts only: aws/aws-parallelcluster
``cloudformation/policies/parallelcluster-policies.yaml``, statement Sid
``IamPolicy`` of ``DefaultParallelClusterIamAdminPolicy`` (the policy the
provider stack's own Lambda role gets), condition ``ArnLike iam:PolicyARN``;
read at commit 003dc38fbc3e77513df2bd3a935f8a64c82922e1 (checked 2026-11-23;
the list is the one the ParallelCluster 3.16 documentation describes).
"""

from __future__ import annotations

import re

#: The IAM path mlcluster gives every managed policy a ParallelCluster node role attaches.
NODE_POLICY_PATH = "/parallelcluster/"

#: Customer-managed policy ARNs (of the deploying account) the provider may attach, as ``ArnLike`` patterns
#: after ``arn:<partition>:iam::<account>:``.
ATTACHABLE_ACCOUNT_POLICIES: tuple[str, ...] = ("policy/parallelcluster*", "policy/parallelcluster/*")

#: AWS managed policies the provider may attach (after ``arn:<partition>:iam::aws:``).
ATTACHABLE_AWS_POLICIES: tuple[str, ...] = (
    "policy/CloudWatchAgentServerPolicy",
    "policy/AmazonSSMManagedInstanceCore",
    "policy/AWSBatchFullAccess",
    "policy/AmazonS3ReadOnlyAccess",
    "policy/service-role/AWSBatchServiceRole",
    "policy/service-role/AmazonEC2ContainerServiceforEC2Role",
    "policy/service-role/AmazonECSTaskExecutionRolePolicy",
    "policy/service-role/AmazonEC2SpotFleetTaggingRole",
    "policy/EC2InstanceProfileForImageBuilder",
    "policy/service-role/AWSLambdaBasicExecutionRole",
)

_POLICY_ARN = re.compile(r"arn:(?P<partition>aws[a-z-]*):iam::(?P<owner>aws|\d{12}):(?P<resource>policy/.+)")


def _arn_like(pattern: str, value: str) -> bool:
    """IAM ``ArnLike`` matching within one ARN segment: ``*`` is any run of characters, ``?`` one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value) is not None


def attachable(arn: str) -> bool:
    """True when ParallelCluster's provider may attach the managed policy ``arn`` to a node role."""
    match = _POLICY_ARN.fullmatch(arn)
    if match is None:
        return False
    patterns = ATTACHABLE_AWS_POLICIES if match["owner"] == "aws" else ATTACHABLE_ACCOUNT_POLICIES
    return any(_arn_like(p, match["resource"]) for p in patterns)


def allowed_text() -> str:
    """The allow-list in words, for error messages."""
    aws = ", ".join(p.rsplit("/", 1)[-1] for p in ATTACHABLE_AWS_POLICIES)
    return (
        "policies of your account named 'parallelcluster*' or under the IAM path '/parallelcluster/' "
        f"(arn:aws:iam::<account>:policy/parallelcluster...), or these AWS managed policies: {aws}"
    )
