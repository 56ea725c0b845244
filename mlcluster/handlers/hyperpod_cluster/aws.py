"""AWS clients and error helpers shared by the handler entry points.

Every client retries throttling and transient faults itself (botocore's
``standard`` retry mode: jittered exponential back-off, throttling codes
included) and keeps client-side parameter validation on, so a malformed
request fails before it reaches the service with a message naming the
parameter.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient

#: Ten attempts with standard back-off ride out a burst of throttling (the
#: SageMaker control plane throttles Describe/List calls per account) while
#: staying well inside a Lambda invocation.
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 10},
    connect_timeout=10,
    read_timeout=60,
    parameter_validation=True,
)

#: Error codes that mean "no such cluster". The SageMaker API documents
#: ``ResourceNotFound``; some endpoints (and moto) answer a ValidationException
#: whose message says the cluster could not be found.
_NOT_FOUND_CODES = frozenset({"ResourceNotFound", "ResourceNotFoundException"})
_NOT_FOUND_WORDS = ("could not find", "not found", "does not exist")


class Clients:
    """The clients the handlers use, each created on first use.

    One instance lives as long as the Lambda container; the node check never
    builds the EC2 and S3 clients it does not need (the EC2 model is large).
    """

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        """``session`` defaults to a fresh one; tests pass a shared session so models are parsed once."""
        self._session = session or boto3.session.Session()

    @functools.cached_property
    def sagemaker(self) -> SageMakerClient:
        return self._session.client("sagemaker", config=CLIENT_CONFIG)

    @functools.cached_property
    def s3(self) -> S3Client:
        return self._session.client("s3", config=CLIENT_CONFIG)

    @functools.cached_property
    def cloudformation(self) -> Any:
        """Typed ``Any``: the project's boto3-stubs extras (a hash-locked dependency) do not include CloudFormation."""
        return self._session.client("cloudformation", config=CLIENT_CONFIG)

    @functools.cached_property
    def ec2(self) -> EC2Client:
        return self._session.client("ec2", config=CLIENT_CONFIG)


def error_code(err: ClientError) -> str:
    """The service's error code of a ``ClientError`` ('' when absent)."""
    return str(err.response.get("Error", {}).get("Code", ""))


def error_text(err: ClientError) -> str:
    """``Code: message`` of a ``ClientError``, for messages people read."""
    error = err.response.get("Error", {})
    return f"{error.get('Code', 'Error')}: {error.get('Message', str(err))}"


def is_cluster_not_found(err: ClientError) -> bool:
    """Whether a SageMaker error says the cluster does not exist."""
    code = error_code(err)
    if code in _NOT_FOUND_CODES:
        return True
    message = str(err.response.get("Error", {}).get("Message", "")).lower()
    return code == "ValidationException" and any(words in message for words in _NOT_FOUND_WORDS)


def describe_cluster(sagemaker: SageMakerClient, name: str) -> dict[str, Any] | None:
    """DescribeCluster, or ``None`` when no cluster of that name exists."""
    try:
        return dict(sagemaker.describe_cluster(ClusterName=name))
    except ClientError as err:
        if is_cluster_not_found(err):
            return None
        raise RuntimeError(f"DescribeCluster for HyperPod cluster {name!r} failed: {error_text(err)}") from err
