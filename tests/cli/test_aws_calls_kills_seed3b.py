"""What the operator command sends to AWS and makes of AWS's refusals (issue 27, cli sample seed 3, survivors).

- An error answer that is not AWS's error document (a proxy or a middlebox answering 403 with its own XML):
  botocore raises a ``ClientError`` whose response has no ``Error`` key; the operator still gets one line
  naming the call, exit code 3 and what to do, never a traceback.
- Run Command's delivery timeout (``TimeoutSeconds``): a command no agent picked up within the step's time
  must not run later on the node, after mlcluster gave up on it; SendCommand allows 30..2592000 s
  (botocore's SSM model), so a shorter step asks for the 30 s floor.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

from mlcluster.cli import runcommand
from mlcluster.cli.errors import EXIT_AWS, CliError, aws_errors
from mlcluster.cli.main import as_cli_error
from mlcluster.cli.nodes import Node

PROXY_PAGE = b"<Rejected><Reason>blocked by the egress proxy</Reason></Rejected>"


class _Body:
    """The raw body of an HTTP answer, as botocore streams it."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def _proxied_cloudformation() -> Any:
    """A real CloudFormation client whose every request is answered 403 with a page that is not AWS's."""
    session = botocore.session.Session()
    session.set_credentials("AKIDEXAMPLE", "secret")
    client = session.create_client("cloudformation", region_name="us-east-1")

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 403, {}, _Body(PROXY_PAGE))

    client.meta.events.register("before-send", answer)
    return client


def test_an_error_answer_without_awss_error_document_names_the_call_and_exits_3() -> None:
    client = _proxied_cloudformation()
    with pytest.raises(CliError) as wrapped, aws_errors("DescribeStacks for dev-Cluster"):
        client.describe_stacks(StackName="dev-Cluster")
    assert wrapped.value.exit_code == EXIT_AWS
    assert wrapped.value.message == (
        "DescribeStacks for dev-Cluster failed: Unknown:\n"
        "  what to do: see the message above; run again with the same arguments once it is fixed"
    )
    # The same answer reaching the command group unwrapped (a call no verb wrapped) is turned alike.
    with pytest.raises(Exception) as raw:
        client.describe_stacks(StackName="dev-Cluster")
    assert "Error" not in raw.value.response  # type: ignore[attr-defined]  # the case under test
    converted = as_cli_error(raw.value)  # type: ignore[arg-type]
    assert isinstance(converted, CliError) and converted.exit_code == EXIT_AWS
    assert converted.message.startswith(
        "AWS call failed: An error occurred (Unknown) when calling the DescribeStacks operation: Unknown\n"
    )


NODE = Node("controller", "i-0123456789abcdef0", "ml.m5.xlarge", "Running", "", "sagemaker-cluster:x_controller-i-1")


class _Sent:
    """A target whose SSM client records SendCommand's parameters, then stops the run."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def client(self, name: str) -> Any:
        assert name == "ssm"
        return SimpleNamespace(send_command=self.send)

    def send(self, **params: Any) -> Any:
        self.sent.append(params)
        raise RuntimeError("sent")


def _delivery_timeout(timeout_seconds: int) -> int:
    target = _Sent()
    with pytest.raises(RuntimeError, match="sent"):
        runcommand.run_command(
            target,  # type: ignore[arg-type]
            NODE,
            "true",
            comment="sinfo",
            timeout_seconds=timeout_seconds,
            user=None,
            console=None,  # type: ignore[arg-type]
        )
    return int(target.sent[0]["TimeoutSeconds"])


def test_a_command_not_delivered_within_the_steps_time_is_not_run_later() -> None:
    model = botocore.session.get_session().get_service_model("ssm")
    limits = model.operation_model("SendCommand").input_shape.members["TimeoutSeconds"].metadata
    assert (limits["min"], limits["max"]) == (30, 2592000)
    assert _delivery_timeout(600) == 600
    assert _delivery_timeout(30) == 30  # the edge: SSM's floor itself
    assert _delivery_timeout(10) == 30  # a shorter step asks for the floor, not a value SSM refuses
    assert _delivery_timeout(172800) == 172800  # the longest run mlcluster sends (executionTimeout's limit)
