"""Exit codes and the one way the command reports a failure.

Every verb raises :class:`CliError` (or lets :func:`aws_errors` turn a
botocore failure into one); :func:`mlcluster.cli.main.main` prints the
message without a traceback and exits with its code, so scripts can tell
outcomes apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

#: The command did what was asked and every check passed.
EXIT_OK: Final = 0
#: A check the command ran failed (a smoke step, a validation, an unhealthy node),
#: or an environment file is invalid (the same code as ``cdk synth``).
EXIT_FAILED: Final = 1
#: Wrong command-line usage (click's own code), or, for ``diff``, a replacement
#: of a data-bearing resource was found.
EXIT_USAGE: Final = 2
#: AWS refused or failed a call: access denied, throttled past retries, not found.
EXIT_AWS: Final = 3
#: No AWS credentials, or a required local tool (Session Manager plugin) is missing.
EXIT_SETUP: Final = 4
#: A bounded wait ran out before the cluster reached the state asked for.
EXIT_TIMEOUT: Final = 5


class CliError(Exception):
    """A failure to report to the operator: what was done, what failed, what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def _advice(code: str) -> str:
    if code in {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}:
        return "the credentials in use lack this permission; use a role that has it"
    if code in {"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"}:
        return "AWS throttled the calls past the retries; wait a minute and run the command again"
    if code in {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException"}:
        return "the credentials are expired or invalid; refresh them (for example `aws sso login`)"
    if code in {"ValidationError", "ResourceNotFound", "ResourceNotFoundException", "NoSuchBucket", "NotFound"}:
        return "check that the environment is deployed in this account and region (`cdk deploy`)"
    return "see the message above; run again with the same arguments once it is fixed"


@contextmanager
def aws_errors(doing: str) -> Iterator[None]:
    """Turn botocore failures inside the block into a :class:`CliError` naming ``doing``.

    ``doing`` says which call was made, for example ``"DescribeStacks for dev-Cluster"``.
    """
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ReadTimeoutError,
    )

    try:
        yield
    except ClientError as error:
        info = error.response.get("Error", {})
        code = str(info.get("Code", "Unknown"))
        message = str(info.get("Message", ""))
        raise CliError(f"{doing} failed: {code}: {message}\n  what to do: {_advice(code)}", EXIT_AWS) from None
    except NoCredentialsError:
        raise CliError(
            f"{doing} failed: no AWS credentials found\n"
            "  what to do: configure credentials (AWS_PROFILE, `aws configure sso`, or an instance role)",
            EXIT_SETUP,
        ) from None
    except NoRegionError:
        raise CliError(
            f"{doing} failed: no region\n  what to do: set `region:` in the environment file or AWS_REGION",
            EXIT_SETUP,
        ) from None
    except (EndpointConnectionError, ReadTimeoutError) as error:
        raise CliError(f"{doing} failed: {error}\n  what to do: check the network and the region", EXIT_AWS) from None
    except BotoCoreError as error:
        raise CliError(f"{doing} failed: {error}", EXIT_AWS) from None
