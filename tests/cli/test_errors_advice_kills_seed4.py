"""What the operator is told to do after an AWS error, by error code (``errors._advice``; mutant 2 of the cli seed-4
sample: S3's "AccessDenied", unlike the other services' "AccessDeniedException", fell to the generic advice)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from mlcluster.cli.errors import CliError, aws_errors

PERMISSION = "the credentials in use lack this permission; use a role that has it"
THROTTLED = "AWS throttled the calls past the retries; wait a minute and run the command again"
EXPIRED = "the credentials are expired or invalid; refresh them (for example `aws sso login`)"
NOT_DEPLOYED = "check that the environment is deployed in this account and region (`cdk deploy`)"
OTHER = "see the message above; run again with the same arguments once it is fixed"


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        *((code, PERMISSION) for code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")),
        ("AuthorizationError", PERMISSION),
        *((code, THROTTLED) for code in ("Throttling", "ThrottlingException", "TooManyRequestsException")),
        ("RequestLimitExceeded", THROTTLED),
        *((code, EXPIRED) for code in ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId")),
        ("UnrecognizedClientException", EXPIRED),
        *((code, NOT_DEPLOYED) for code in ("ValidationError", "ResourceNotFound", "ResourceNotFoundException")),
        *((code, NOT_DEPLOYED) for code in ("NoSuchBucket", "NotFound")),
        ("ConflictException", OTHER),
        ("accessdenied", OTHER),  # codes are compared as AWS writes them
    ],
)
def test_each_error_code_gets_its_advice(code: str, advice: str) -> None:
    with pytest.raises(CliError) as caught, aws_errors("GetObject of s3://b/k"):
        raise ClientError({"Error": {"Code": code, "Message": "no"}}, "GetObject")
    assert caught.value.exit_code == 3
    assert caught.value.message.splitlines() == [f"GetObject of s3://b/k failed: {code}: no", f"  what to do: {advice}"]
