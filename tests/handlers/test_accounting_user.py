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
    "GRANT ALL PRIVILEGES ON `slurm\\_acct\\_db`.* TO 'slurmdbd'@'%'",
]


STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/acct-Storage/0a1b2c3d"
#: What the construct sets in the function's environment, keyed by the event's property.
DECLARED = {
    "ClusterArn": CLUSTER,
    "MasterSecretArn": MASTER,
    "UserSecretArn": USER_SECRET,
    "UserName": "slurmdbd",
}

#: The environment variable the construct sets for each property (the construct's template is checked in
#: tests/test_accounting_pcluster.py).
VARIABLES = {
    "ClusterArn": "CLUSTER_ARN",
    "MasterSecretArn": "MASTER_SECRET_ARN",
    "UserSecretArn": "USER_SECRET_ARN",
    "UserName": "USER_NAME",
}


def declare(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Set the function's environment as the construct would, with ``values`` instead of the defaults."""
    for key, variable in VARIABLES.items():
        monkeypatch.setenv(variable, values.get(key, DECLARED[key]))


@pytest.fixture(autouse=True)
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    declare(monkeypatch)


def event(request: str = "Create", **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": app.RESOURCE_TYPE,
        "StackId": STACK_ID,
        "LogicalResourceId": "AccountingUserResource1234",
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


def test_a_bumped_password_serial_realters_the_user_with_the_secrets_value(stubs: tuple[Stubber, Stubber]) -> None:
    """PasswordSerial is not a declared target: an Update carrying it runs the statements with the current value."""
    data, sm = stubs
    new = "Yq8NewValueAfterALeak0123456789"
    secret(sm, new)
    for sql in STATEMENTS:
        statement(data, sql.replace(HASH, app.native_password_hash(new)))
    app.on_event(event("Update", PasswordSerial="1"))


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
    ],
)
def test_bad_names_are_refused_before_any_call(
    stubs: tuple[Stubber, Stubber], monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    if key in VARIABLES:
        declare(monkeypatch, **{key: value})
    with pytest.raises(app.AccountingUserError, match=f"{key}: "):
        app.on_event(event(**{key: value}))


@pytest.mark.parametrize("variable", ["CLUSTER_ARN", "USER_NAME"])
def test_a_function_without_its_declared_targets_refuses(
    stubs: tuple[Stubber, Stubber], monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv(variable)
    with pytest.raises(app.AccountingUserError, match=f"environment lacks {variable}"):
        app.on_event(event())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # A direct invoke (lambda:InvokeFunction) naming the master user would set its password ...
        ("UserName", "slurm"),
        ("UserName", "root"),
        # ... or use another cluster, or read another secret.
        ("ClusterArn", "arn:aws:rds:us-west-2:123456789012:cluster:other-db"),
        ("MasterSecretArn", "arn:aws:secretsmanager:us-west-2:123456789012:secret:other-XyZabc"),
        ("UserSecretArn", MASTER),
        ("ClusterArn", None),
    ],
)
def test_an_event_naming_other_targets_than_the_stack_declared_is_refused(
    stubs: tuple[Stubber, Stubber], key: str, value: str | None
) -> None:
    """Fails on the code that took its targets from the event: it ran the statements (the stubs had none)."""
    ev = event()
    ev["ResourceProperties"][key] = value
    with pytest.raises(app.AccountingUserError, match=f"{key}: .* is not what the stack declared"):
        app.on_event(ev)


@pytest.mark.parametrize(
    "user", ["slurm", "root", "rdsadmin", "rdsrepladmin", "rdstopmgr", "mysql.sys", "mysql.session", "mariadb.sys"]
)
def test_the_master_user_and_reserved_accounts_are_refused_even_when_declared(
    stubs: tuple[Stubber, Stubber], monkeypatch: pytest.MonkeyPatch, user: str
) -> None:
    declare(monkeypatch, UserName=user)
    with pytest.raises(app.AccountingUserError, match="UserName: "):
        app.on_event(event(UserName=user))


def test_the_master_user_name_is_reserved() -> None:
    from mlcluster.constructs.accounting_database import MASTER_USER_NAME

    assert MASTER_USER_NAME in app.RESERVED_USER_NAMES


@pytest.mark.parametrize(("key", "value"), [("UserName", "a" * 32), ("DatabaseName", "a" * 64)])
def test_names_at_the_edges_are_accepted(
    stubs: tuple[Stubber, Stubber], monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    data, sm = stubs
    secret(sm)
    if key in VARIABLES:
        declare(monkeypatch, **{key: value})
    user = value if key == "UserName" else "slurmdbd"
    database = value if key == "DatabaseName" else "slurm_acct_db"
    for sql in STATEMENTS:
        granted = database.replace("_", "\\_")
        statement(
            data, sql.replace("slurmdbd", user).replace("slurm\\_acct\\_db", granted).replace("slurm_acct_db", database)
        )
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
    with pytest.raises(
        app.AccountingUserError, match="DatabaseResumingException: still unavailable after 240 s of waits in all"
    ):
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
    failing(data, "DatabaseErrorException", "Illegal GRANT/REVOKE command")
    with pytest.raises(
        app.AccountingUserError,
        match=r"GRANT ALL PRIVILEGES ON `slurm\\_acct\\_db`.* failed: DatabaseErrorException: Illegal GRANT",
    ):
        app.on_event(event())


@pytest.mark.parametrize("statement_index", [0, 1])
def test_an_error_on_a_statement_carrying_the_hash_shows_its_code_only(
    stubs: tuple[Stubber, Stubber], statement_index: int
) -> None:
    """MySQL's syntax error quotes up to 80 characters from the error on (``near '%-.80s'``): here a truncated
    part of the hash, which the old redaction (replacing the whole value) let through."""
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:statement_index]:
        statement(data, sql)
    fragment = HASH[5:30]
    failing(data, "DatabaseErrorException", f"You have an error in your SQL syntax; near '{fragment}' at line 1")
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event())
    reason = str(caught.value)
    assert fragment not in reason and HASH[5:15] not in reason and PASSWORD not in reason
    assert "failed: DatabaseErrorException: the database's message is not shown" in reason
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_error_on_a_statement_without_the_hash_keeps_the_database_message(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:2]:
        statement(data, sql)
    failing(data, "DatabaseErrorException", "Can't create database 'slurm_acct_db'; disk full")
    with pytest.raises(app.AccountingUserError, match="DatabaseErrorException: Can't create database"):
        app.on_event(event())


def test_the_bound_is_shared_by_all_the_statements(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    """The function's timeout (bound plus room) holds only if waits of later statements count with earlier ones."""
    data, sm = stubs
    secret(sm)
    first = 20
    for _ in range(first):
        failing(data, "DatabaseResumingException", "Database is resuming")
    statement(data, STATEMENTS[0])
    for _ in range(app.RESUME_WAIT_SECONDS // app.RESUME_POLL_SECONDS - first + 1):
        failing(data, "DatabaseUnavailableException", "The writer instance isn't available", 504)
    with pytest.raises(app.AccountingUserError, match=r"ALTER USER .* still unavailable after 240 s"):
        app.on_event(event())
    assert sum(clock.sleeps) == app.RESUME_WAIT_SECONDS


def test_an_unavailable_writer_is_waited_for_within_the_bound(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    """Failed at once before (DatabaseUnavailableException, "the writer instance isn't available")."""
    data, sm = stubs
    secret(sm)
    failing(data, "DatabaseUnavailableException", "The writer instance isn't available", 504)
    failing(data, "DatabaseResumingException", "Database is resuming")
    for sql in STATEMENTS:
        statement(data, sql)
    app.on_event(event())
    assert clock.sleeps == [app.RESUME_POLL_SECONDS] * 2


def test_a_writer_unavailable_past_the_bound_fails(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    secret(sm)
    for _ in range(app.RESUME_WAIT_SECONDS // app.RESUME_POLL_SECONDS + 1):
        failing(data, "DatabaseUnavailableException", "The writer instance isn't available", 504)
    with pytest.raises(app.AccountingUserError, match="DatabaseUnavailableException: still unavailable after 240 s"):
        app.on_event(event())
    assert sum(clock.sleeps) == app.RESUME_WAIT_SECONDS


LOGIN_REFUSED = "Access denied for user 'slurm'@'10.0.1.23' (using password: YES)"


@pytest.mark.parametrize("code", ["DatabaseErrorException", "BadRequestException"])
def test_a_master_login_refused_during_the_first_rotation_is_retried(
    stubs: tuple[Stubber, Stubber], clock: Clock, code: str
) -> None:
    """Single-user rotation sets the new password before AWSCURRENT moves; failed at once before. No AWS page names
    the code of a refused login, so the message decides under either SQL-carrying code (AWS review)."""
    data, sm = stubs
    secret(sm)
    for _ in range(app.LOGIN_TRIES - 1):
        failing(data, code, LOGIN_REFUSED)
    for sql in STATEMENTS:
        statement(data, sql)
    app.on_event(event())
    assert clock.sleeps == [app.LOGIN_POLL_SECONDS] * (app.LOGIN_TRIES - 1)


def test_a_master_login_refused_past_its_tries_fails(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:2]:
        statement(data, sql)
    for _ in range(app.LOGIN_TRIES):
        failing(data, "DatabaseErrorException", LOGIN_REFUSED)
    with pytest.raises(
        app.AccountingUserError, match=f"DatabaseErrorException: the master user's login was refused {app.LOGIN_TRIES}"
    ) as caught:
        app.on_event(event())
    assert "CREATE DATABASE" in str(caught.value) and LOGIN_REFUSED in str(caught.value)
    assert len(clock.sleeps) == app.LOGIN_TRIES - 1


def test_another_database_error_fails_at_once(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, "DatabaseErrorException", "Unknown error")
    with pytest.raises(app.AccountingUserError, match="DatabaseErrorException"):
        app.on_event(event())
    assert clock.sleeps == []


def test_a_failed_update_names_the_way_out_of_a_failed_rollback(stubs: tuple[Stubber, Stubber]) -> None:
    """A rollback is an Update with the old properties; failed without the command before."""
    data, sm = stubs
    secret(sm)
    failing(data, "ServiceUnavailableError", "try later", 503)
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event("Update"))
    assert (
        "aws cloudformation continue-update-rollback "
        f"--stack-name {STACK_ID} --resources-to-skip AccountingUserResource1234"
    ) in str(caught.value)


def test_a_failed_create_names_no_rollback(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, "ServiceUnavailableError", "try later", 503)
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event())
    assert "continue-update-rollback" not in str(caught.value)


def test_the_refusal_of_an_unsafe_password_does_not_suggest_changing_it_by_hand(
    stubs: tuple[Stubber, Stubber],
) -> None:
    _, sm = stubs
    secret(sm, "short")
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event())
    assert "put-secret-value" not in str(caught.value)


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


@pytest.mark.parametrize("schema", ["mysql", "sys", "performance_schema", "information_schema"])
def test_a_system_schema_is_refused_as_the_database_before_any_call(
    stubs: tuple[Stubber, Stubber], schema: str
) -> None:
    """A direct invoke naming ``mysql`` would grant the grant tables (ALTER USER of any account)."""
    with pytest.raises(app.AccountingUserError, match=f"DatabaseName: '{schema}' is one of MySQL's system schemas"):
        app.on_event(event(DatabaseName=schema))


def test_the_grant_escapes_the_wildcard_so_a_lookalike_name_covers_no_system_schema(
    stubs: tuple[Stubber, Stubber],
) -> None:
    """``my_ql`` passes the pattern and is no system schema; unescaped, MySQL would read its ``_`` as any character
    and the grant would cover ``mysql``."""
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS:
        statement(data, sql.replace("slurm\\_acct\\_db", "my\\_ql").replace("slurm_acct_db", "my_ql"))
    app.on_event(event(DatabaseName="my_ql"))


def test_a_rollback_of_a_database_name_edit_runs_with_the_old_name(stubs: tuple[Stubber, Stubber]) -> None:
    """``storage.accounting.database_name`` changes in place; a rollback's Update carries the old name while the
    function (its environment) may already be back or not: the name comes from the event, so the rollback runs."""
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS:
        statement(data, sql.replace("slurm\\_acct\\_db", "old\\_history").replace("slurm_acct_db", "old_history"))
    ev = event("Update", DatabaseName="old_history")
    ev["OldResourceProperties"] = {**ev["ResourceProperties"], "DatabaseName": "slurm_acct_db"}
    assert app.on_event(ev)["Data"] == {"UserName": "slurmdbd", "DatabaseName": "old_history"}


def test_the_data_api_client_ends_a_call_begun_before_the_bound_within_the_function_timeout() -> None:
    """AWS review: the shared bound is checked between calls; a call begun just before it may take every attempt of
    botocore's retries, each up to the connect and read timeouts, and must still end before the function's timeout
    (the secret's read counts in the same bound),
    so CloudFormation shows the handler's reason, not "Task timed out"."""
    from mlcluster.constructs.accounting_database_user import FUNCTION_TIMEOUT

    config = app.CLIENT_CONFIG
    attempts = config.retries["total_max_attempts"]  # the first call included
    worst_call = attempts * (config.connect_timeout + config.read_timeout)
    assert app.RESUME_WAIT_SECONDS + worst_call < FUNCTION_TIMEOUT.to_seconds()


def test_a_statement_refused_for_lack_of_privilege_is_no_login_to_retry(
    stubs: tuple[Stubber, Stubber], clock: Clock
) -> None:
    """AWS review: MySQL's 1044 ("Access denied for user ... to database") is a privilege refusal, not a refused
    login (1045, "... (using password: YES)"): it fails at once with its message, no rotation wait."""
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:3]:
        statement(data, sql)
    refused = "Error 1044 (42000): Access denied for user 'slurm'@'%' to database 'slurm_acct_db'"
    failing(data, "DatabaseErrorException", refused)
    with pytest.raises(app.AccountingUserError, match="DatabaseErrorException: Error 1044"):
        app.on_event(event())
    assert clock.sleeps == []


def test_the_secrets_read_counts_in_the_bound(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    """AWS review: the bound starts before the secret's read, so a slow read leaves less time for the statements."""
    _, sm = stubs
    real = app.secrets().get_secret_value

    def slow(**kwargs: Any) -> Any:
        clock.now += app.RESUME_WAIT_SECONDS + 1
        return real(**kwargs)

    secret(sm)
    app.secrets().get_secret_value = slow  # type: ignore[method-assign]
    # No statement is begun past the bound (the stub holds no ExecuteStatement answer: a call would fail the test).
    with pytest.raises(
        app.AccountingUserError, match=r"ExecuteStatement \(CREATE USER IF NOT EXISTS .*\) not started: the 240 s"
    ):
        app.on_event(event())
    assert clock.sleeps == []


class SlowCalls:
    """Every ExecuteStatement takes ``seconds`` on the handler's clock; the start times are kept."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.starts: list[float] = []

    def __call__(self, model: Any, **_: Any) -> None:
        # (registered for every call: botocore's alias for rds-data's events does not match the name written out)
        if model.name == "ExecuteStatement":
            self.starts.append(self.clock.now)
            self.clock.now += self.seconds


def test_no_call_and_no_wait_begins_past_the_bound(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    """A call ending at 237 s may not wait 10 s and call again at 247 s: after the bound, no call begins, so one
    begun within it (at most 2 x (10 + 60) s) still ends within the function's timeout (FUNCTION_TIMEOUT)."""
    data, sm = stubs
    calls = SlowCalls(clock, 3)
    app.rds_data().meta.events.register_first("before-call.*.*", calls)
    secret(sm)
    for _ in range(19):  # calls end at 3, 16, ..., 237 s (13 s a round)
        failing(data, "DatabaseResumingException", "resuming")
    with pytest.raises(app.AccountingUserError, match="still unavailable after 240 s"):
        app.on_event(event())
    assert max(calls.starts) <= app.RESUME_WAIT_SECONDS
    assert clock.now == 237 and len(clock.sleeps) == 18


def test_a_slow_statement_past_the_bound_stops_the_ones_after_it(stubs: tuple[Stubber, Stubber], clock: Clock) -> None:
    data, sm = stubs
    calls = SlowCalls(clock, app.RESUME_WAIT_SECONDS + 1)
    app.rds_data().meta.events.register_first("before-call.*.*", calls)
    secret(sm)
    statement(data, STATEMENTS[0])
    with pytest.raises(app.AccountingUserError, match=r"\(ALTER USER .*\) not started"):
        app.on_event(event())
    assert calls.starts == [0]
