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
#: Wrong command-line usage: click's own code for an unknown option or a missing argument. Nothing else uses it.
EXIT_USAGE: Final = 2
#: AWS refused or failed a call: access denied, throttled past retries, not found, unreachable endpoint.
EXIT_AWS: Final = 3
#: The machine is not set up: no AWS credentials, an unknown profile, no region, or a required local
#: tool (Session Manager plugin) missing.
EXIT_SETUP: Final = 4
#: A bounded wait ran out before the cluster reached the state asked for.
EXIT_TIMEOUT: Final = 5
#: ``diff`` found a data-bearing resource that the next deploy would replace or delete.
EXIT_REPLACEMENT: Final = 6
#: The operator pressed Ctrl-C (128 + SIGINT, the shell's convention).
EXIT_INTERRUPTED: Final = 130

#: Every exit code and its meaning, as ``mlcluster --help`` and the day-one docs page list them.
EXIT_CODES: Final = {
    EXIT_OK: "success: done, every check passed",
    EXIT_FAILED: "a check failed (smoke step, unhealthy status, invalid environment file)",
    EXIT_USAGE: "wrong usage (unknown option, missing argument)",
    EXIT_AWS: "an AWS call failed (denied, throttled, not found, endpoint unreachable)",
    EXIT_SETUP: "not set up: no credentials, unknown profile, no region, missing local tool",
    EXIT_TIMEOUT: "a bounded wait ran out",
    EXIT_REPLACEMENT: "diff: a data-bearing resource would be replaced or deleted",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


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


#: botocore's local failures, most specific first: (class name in ``botocore.exceptions``, exit code,
#: what to do). Any other ``BotoCoreError`` is an AWS failure (:data:`EXIT_AWS`). The names are checked
#: against botocore by ``tests/cli/test_errors.py``.
BOTOCORE_ERRORS: Final = (
    ("NoCredentialsError", EXIT_SETUP, "configure credentials (AWS_PROFILE, `aws configure sso`, or an instance role)"),
    ("PartialCredentialsError", EXIT_SETUP, "the credentials are incomplete; set both the key id and the secret"),
    ("ProfileNotFound", EXIT_SETUP, "name a profile from ~/.aws/config (`aws configure list-profiles`)"),
    ("SSOError", EXIT_SETUP, "the SSO session is missing or expired; run `aws sso login`"),
    ("TokenRetrievalError", EXIT_SETUP, "the SSO token could not be refreshed; run `aws sso login`"),
    ("LoginError", EXIT_SETUP, "the login session is missing or expired; log in again (`aws login`)"),
    ("CredentialRetrievalError", EXIT_SETUP, "the credential process or role failed; fix the profile's settings"),
    ("ConfigNotFound", EXIT_SETUP, "AWS_CONFIG_FILE names a missing file; fix the variable or create the file"),
    ("ConfigParseError", EXIT_SETUP, "fix the syntax of ~/.aws/config (or AWS_CONFIG_FILE)"),
    ("NoRegionError", EXIT_SETUP, "pass --region, set `region:` in the environment file, or set AWS_REGION"),
    ("InvalidRegionError", EXIT_SETUP, "pass a region name such as us-east-1 (--region or AWS_REGION)"),
    ("InvalidConfigError", EXIT_SETUP, "fix the AWS configuration the message names"),
    ("EndpointConnectionError", EXIT_AWS, "check the network, proxy settings and the region"),
    ("ConnectTimeoutError", EXIT_AWS, "check the network and proxy settings; then run the command again"),
    ("ReadTimeoutError", EXIT_AWS, "AWS did not answer in time; run the command again"),
    ("SSLError", EXIT_AWS, "the TLS connection failed; check the proxy and AWS_CA_BUNDLE"),
    ("HTTPClientError", EXIT_AWS, "the connection to AWS broke; run the command again"),
)

#: What to do when the answer is not AWS's (``botocore.parsers.ResponseParserError``, which derives from
#: ``Exception``, not ``BotoCoreError``): typically an HTML page from a proxy or a wrong endpoint.
NOT_AWS_ADVICE: Final = (
    "the endpoint or a proxy answered with something other than AWS; check HTTPS_PROXY / AWS_ENDPOINT_URL"
)
#: The most characters of an unreadable answer quoted in a message (a proxy's page can be long).
QUOTED_ANSWER_CHARS: Final = 200


def botocore_failure(error: BaseException) -> tuple[int, str] | None:
    """The exit code and advice for a botocore exception (``None`` when ``error`` is not botocore's)."""
    from botocore import exceptions
    from botocore.parsers import ResponseParserError

    if isinstance(error, ResponseParserError):
        return EXIT_AWS, NOT_AWS_ADVICE
    for name, code, advice in BOTOCORE_ERRORS:
        if isinstance(error, getattr(exceptions, name)):
            return code, advice
    if isinstance(error, exceptions.ClientError):
        info = error.response.get("Error", {})
        return EXIT_AWS, _advice(str(info.get("Code", "Unknown")))
    if isinstance(error, exceptions.BotoCoreError):
        return EXIT_AWS, "see the message; run again with the same arguments once it is fixed"
    return None


def one_line(text: str) -> str:
    """``text`` on one line, at most :data:`QUOTED_ANSWER_CHARS` characters of it when it is longer."""
    line = " ".join(text.split())
    return line if len(line) <= QUOTED_ANSWER_CHARS else line[:QUOTED_ANSWER_CHARS] + " ..."


@contextmanager
def aws_errors(doing: str) -> Iterator[None]:
    """Turn botocore failures inside the block into a :class:`CliError` naming ``doing``.

    ``doing`` says which call was made, for example ``"DescribeStacks for dev-Cluster"``.
    Every ``ClientError``, ``BotoCoreError`` and ``ResponseParserError`` becomes one line and the code of
    :data:`BOTOCORE_ERRORS` (a ``ClientError`` is :data:`EXIT_AWS`), followed by what to do.
    """
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    from botocore.parsers import ResponseParserError

    try:
        yield
    except (ClientError, BotoCoreError, ResponseParserError) as error:
        failure = botocore_failure(error)
        assert failure is not None  # every class caught is botocore's
        code, advice = failure
        if isinstance(error, ClientError):
            info = error.response.get("Error", {})
            what = f"{info.get('Code', 'Unknown')}: {info.get('Message', '')}"
        elif isinstance(error, NoCredentialsError):
            what = "no AWS credentials found"
        else:
            what = str(error)
        raise CliError(f"{doing} failed: {one_line(what)}\n  what to do: {advice}", code) from None
