"""The accounting database user custom resource: Secrets Manager and the RDS Data API stubbed (botocore Stubber).

Every call is checked for what it sends (the Stubber validates requests against botocore's models); each
service state of ExecuteStatement (the rds-data model's errors) must fail the resource except a resuming
database, which is waited for within a bound; the password never reaches a request, an answer, an error or a
log: the statements carry its ``mysql_native_password`` hash, checked here against vectors MariaDB's own
``PASSWORD()`` returned (tests/system/test_accounting_user_sql.py checks the same function against it live).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from botocore.stub import Stubber

from mlcluster.handlers.accounting_user import app

CLUSTER = "arn:aws:rds:us-west-2:123456789012:cluster:acct-db"
MASTER = "arn:aws:secretsmanager:us-west-2:123456789012:secret:master-AbCdEf"
USER_SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurmdbd-GhIjKl"
PASSWORD = "Zq7PasswordDoNotLog0123456789ab"
#: ``SELECT PASSWORD('Zq7PasswordDoNotLog0123456789ab')`` on MariaDB 10.11.19 (Debian 12), run by hand here.
HASH = "*DB536F470835C0289B2B04696B906349C2C8BCFD"
SESSION = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2")
STATEMENTS = [
    f"CREATE USER IF NOT EXISTS 'slurmdbd'@'%' IDENTIFIED WITH mysql_native_password AS '{HASH}' REQUIRE SSL",
    f"ALTER USER 'slurmdbd'@'%' IDENTIFIED WITH mysql_native_password AS '{HASH}' REQUIRE SSL",
    "CREATE DATABASE IF NOT EXISTS `slurm_acct_db`",
    "GRANT ALL PRIVILEGES ON `slurm_acct_db`.* TO 'slurmdbd'@'%'",
]


def event(request: str = "Create", **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": app.RESOURCE_TYPE,
        "LogicalResourceId": "User",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:provider",
            "ClusterArn": CLUSTER,
            "MasterSecretArn": MASTER,
            "UserSecretArn": USER_SECRET,
            "UserName": "slurmdbd",
            "DatabaseName": "slurm_acct_db",
            **extra,
        },
    }
    if request != "Create":
        ev["PhysicalResourceId"] = f"{CLUSTER}/slurmdbd"
    return ev


class Clock:
    """The handler's clock and sleep: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(app, "sleep", fake.sleep)
    monkeypatch.setattr(app, "clock", lambda: fake.now)
    return fake


class Sent:
    """Every request the two clients serialized (URL, headers and body), as the service and CloudTrail get them."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    def record(self, params: dict[str, Any], **_: Any) -> None:
        body = params.get("body", b"")
        text = body.decode() if isinstance(body, bytes) else str(body)
        self.requests.append(f"{params.get('url_path')} {params.get('headers')} {params.get('query_string')} {text}")


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, clock: Clock, sent: Sent) -> Iterator[tuple[Stubber, Stubber]]:
    data = SESSION.client("rds-data", config=app.CLIENT_CONFIG)
    sm = SESSION.client("secretsmanager", config=app.CLIENT_CONFIG)
    monkeypatch.setattr(app, "rds_data", lambda: data)
    monkeypatch.setattr(app, "secrets", lambda: sm)
    # Registered first: the Stubber answers at before-call too, after the request is serialized.
    for client in (data, sm):
        client.meta.events.register_first("before-call.*.*", sent.record)
    with Stubber(data) as data_stub, Stubber(sm) as sm_stub:
        yield data_stub, sm_stub
        data_stub.assert_no_pending_responses()
        sm_stub.assert_no_pending_responses()


def secret(stub: Stubber, value: str = PASSWORD) -> None:
    stub.add_response(
        "get_secret_value",
        {"ARN": USER_SECRET, "Name": "slurmdbd", "SecretString": value},
        {"SecretId": USER_SECRET},
    )


def statement(stub: Stubber, sql: str) -> None:
    stub.add_response(
        "execute_statement", {"numberOfRecordsUpdated": 0}, {"resourceArn": CLUSTER, "secretArn": MASTER, "sql": sql}
    )


def failing(stub: Stubber, code: str, message: str = "no", status: int = 400) -> None:
    stub.add_client_error(
        "execute_statement", service_error_code=code, service_message=message, http_status_code=status
    )


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_create_and_update_run_the_idempotent_statements_as_master(
    stubs: tuple[Stubber, Stubber], request_type: str, caplog: pytest.LogCaptureFixture, sent: Sent
) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS:
        statement(data, sql)
    with caplog.at_level(logging.DEBUG):
        answer = app.on_event(event(request_type))
    assert answer == {
        "PhysicalResourceId": f"{CLUSTER}/slurmdbd",
        "Data": {"UserName": "slurmdbd", "DatabaseName": "slurm_acct_db"},
    }
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(answer)
    # What leaves the function (and what CloudTrail can record): one GetSecretValue, four ExecuteStatement
    # bodies; the password in none of them, its hash in the two that set it.
    assert len(sent.requests) == 5
    assert not [request for request in sent.requests if PASSWORD in request]
    assert sum(HASH in request for request in sent.requests) == 2


@pytest.mark.parametrize(
    ("password", "stored"),
    [
        # MariaDB's own documentation example (mysql_native_password plugin page) and MySQL's, each checked
        # with SELECT PASSWORD('...') on MariaDB 10.11; then the test password.
        ("mariadb", "*54958E764CE10E50764C2EECBB71D01F08549980"),
        ("mypass", "*6C8989366EAF75BB670AD8EA7A7FC1176A95CEF4"),
        (PASSWORD, HASH),
    ],
)
def test_the_hash_is_mysql_native_password_stored_form(password: str, stored: str) -> None:
    assert app.native_password_hash(password) == stored


def test_the_statements_name_the_plugin_and_carry_only_the_hash() -> None:
    built = app.statements("slurmdbd", "slurm_acct_db", HASH)
    assert list(built) == STATEMENTS
    assert not [sql for sql in built if PASSWORD in sql]


def test_delete_keeps_the_user_and_calls_nothing(stubs: tuple[Stubber, Stubber]) -> None:
    assert app.on_event(event("Delete")) == {"PhysicalResourceId": f"{CLUSTER}/slurmdbd"}


@pytest.mark.parametrize(
    "value",
    [
        "abc'def0123456789012345",  # a quote ends the SQL literal
        "abc\\def0123456789012345",  # a backslash escapes the closing quote
        "x'; DROP DATABASE slurm_acct_db; --",
        "abc`def0123456789012345",
        "abc def0123456789012345",  # a space ends StoragePass in slurmdbd.conf
        "abc#def0123456789012345",  # '#' starts a comment in slurmdbd.conf
        "abc\ndef0123456789012345",
        '{"username": "slurmdbd", "password": "abc"}',  # JSON, not a bare password
        "short0123456789",  # 15 characters
        "a" * 129,
    ],
)
def test_an_unsafe_password_is_refused_without_its_value(stubs: tuple[Stubber, Stubber], value: str) -> None:
    _, sm = stubs
    secret(sm, value)
    with pytest.raises(app.AccountingUserError, match="does not hold a password") as caught:
        app.on_event(event())
    assert value not in str(caught.value)
    assert "value not shown" in str(caught.value)


@pytest.mark.parametrize("value", ["a" * 20, "Z9" * 64])
def test_passwords_at_the_edges_are_accepted(stubs: tuple[Stubber, Stubber], value: str) -> None:
    data, sm = stubs
    secret(sm, value)
    for sql in STATEMENTS:
        statement(data, sql.replace(HASH, app.native_password_hash(value)))
    app.on_event(event())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("UserName", "slurm'db"),
        ("UserName", "Slurmdbd"),
        ("UserName", "a" * 33),
        ("DatabaseName", "slurm`acct"),
        ("DatabaseName", "a" * 65),
        ("DatabaseName", ""),
        ("ClusterArn", ""),
    ],
)
def test_bad_names_are_refused_before_any_call(stubs: tuple[Stubber, Stubber], key: str, value: str) -> None:
    with pytest.raises(app.AccountingUserError, match=f"{key}: "):
        app.on_event(event(**{key: value}))


@pytest.mark.parametrize(("key", "value"), [("UserName", "a" * 32), ("DatabaseName", "a" * 64)])
def test_names_at_the_edges_are_accepted(stubs: tuple[Stubber, Stubber], key: str, value: str) -> None:
    data, sm = stubs
    secret(sm)
    user = value if key == "UserName" else "slurmdbd"
    database = value if key == "DatabaseName" else "slurm_acct_db"
    for sql in STATEMENTS:
        statement(data, sql.replace("slurmdbd", user).replace("slurm_acct_db", database))
    app.on_event(event(**{key: value}))


@pytest.mark.parametrize("code", ["AccessDeniedException", "ResourceNotFoundException", "DecryptionFailure"])
def test_a_secret_that_cannot_be_read_fails(stubs: tuple[Stubber, Stubber], code: str) -> None:
    _, sm = stubs
    sm.add_client_error("get_secret_value", service_error_code=code, service_message="nope")
    with pytest.raises(app.AccountingUserError, match=f"GetSecretValue of .*{code}"):
        app.on_event(event())


def test_a_resuming_database_is_waited_for(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, "DatabaseResumingException", "Database is resuming")
    failing(data, "DatabaseResumingException", "Database is resuming")
    for sql in STATEMENTS:
        statement(data, sql)
    app.on_event(event())
    assert clock.sleeps == [app.RESUME_POLL_SECONDS] * 2


def test_a_database_still_resuming_after_the_bound_fails(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    secret(sm)
    tries = app.RESUME_WAIT_SECONDS // app.RESUME_POLL_SECONDS + 1
    for _ in range(tries):
        failing(data, "DatabaseResumingException", "Database is resuming")
    with pytest.raises(app.AccountingUserError, match="DatabaseResumingException: still resuming after 240 s"):
        app.on_event(event())
    assert sum(clock.sleeps) == app.RESUME_WAIT_SECONDS


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDeniedException", 403),
        ("ForbiddenException", 403),
        ("BadRequestException", 400),
        ("DatabaseErrorException", 400),
        ("StatementTimeoutException", 400),
        ("ServiceUnavailableError", 503),
        ("DatabaseUnavailableException", 504),
        ("DatabaseNotFoundException", 404),
        ("HttpEndpointNotEnabledException", 400),
        ("SecretsErrorException", 400),
        ("InvalidSecretException", 400),
        ("InvalidResourceStateException", 400),
        ("InternalServerErrorException", 500),
        ("ThrottlingException", 400),
    ],
)
def test_every_other_service_state_fails_the_resource(
    stubs: tuple[Stubber, Stubber], clock: Clock, code: str, status: int
) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, code, "the service said no", status)
    with pytest.raises(app.AccountingUserError, match=f"ExecuteStatement \\(CREATE USER .*\\) failed: {code}"):
        app.on_event(event())
    assert clock.sleeps == []


def test_a_failure_after_the_user_exists_names_its_statement(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:3]:
        statement(data, sql)
    failing(data, "DatabaseErrorException", "Access denied for user 'slurm'")
    with pytest.raises(app.AccountingUserError, match="GRANT ALL PRIVILEGES ON `slurm_acct_db`"):
        app.on_event(event())


def test_an_error_quoting_the_statement_shows_the_hash_never_the_password(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, "DatabaseErrorException", f"You have an error in your SQL syntax near '{HASH}' REQUIRE SSL'")
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event())
    assert PASSWORD not in str(caught.value)
    assert f"near '{HASH}' REQUIRE SSL" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_timeout_fails_the_resource(stubs: tuple[Stubber, Stubber], monkeypatch: pytest.MonkeyPatch) -> None:
    _, sm = stubs
    secret(sm)

    class TimingOut:
        def execute_statement(self, **_: Any) -> None:
            raise ReadTimeoutError(endpoint_url="https://rds-data.us-west-2.amazonaws.com/Execute")

    monkeypatch.setattr(app, "rds_data", TimingOut)
    with pytest.raises(app.AccountingUserError, match="Read timeout"):
        app.on_event(event())


@pytest.mark.parametrize(
    ("request_type", "kind", "match"),
    [("Create", "Custom::Other", "ResourceType"), ("Rollback", app.RESOURCE_TYPE, "RequestType")],
)
def test_unknown_requests_are_refused(stubs: tuple[Stubber, Stubber], request_type: str, kind: str, match: str) -> None:
    ev = event(request_type)
    ev["ResourceType"] = kind
    with pytest.raises(app.AccountingUserError, match=match):
        app.on_event(ev)
