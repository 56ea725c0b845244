"""Entry point ``on_event`` (CDK Provider framework) of ``Custom::AccountingDatabaseUser``.

ParallelCluster's head node writes the whole ``SecretString`` of
``SlurmSettings.Database.PasswordSecretArn`` into slurmdbd.conf's ``StoragePass``,
so slurmdbd needs a user whose secret holds a bare password; the Aurora master
secret is JSON. This function makes that user through the RDS Data API, as the
master user (the Data API reads the master secret itself), so it needs no
MySQL driver and no network path to the database.

Create and Update: read the user's password from ``UserSecretArn``, refuse it
unless every character is in :data:`SAFE_PASSWORD` (slurmdbd.conf holds it
unquoted), compute its ``mysql_native_password`` hash (:func:`native_password_hash`)
and run, in order, the statements of :func:`statements`::

    CREATE USER IF NOT EXISTS '<user>'@'%' IDENTIFIED WITH mysql_native_password AS '<hash>' REQUIRE SSL
    ALTER USER '<user>'@'%' IDENTIFIED WITH mysql_native_password AS '<hash>' REQUIRE SSL
    CREATE DATABASE IF NOT EXISTS `<database>`
    GRANT ALL PRIVILEGES ON `<database>`.* TO '<user>'@'%'

Each statement is idempotent, so a retried Create, an Update and a replaced
resource converge on the same user. Delete: nothing is dropped. The user
and its grants belong to the accounting database, which is data: a
replacement of this resource (new properties) sends Delete for the old one
after the new one exists, and dropping the user then would lock slurmdbd
out; with ``retention.on_delete: destroy`` the database goes with its stack.

Why the hash, never the password. The Data API's ``sql`` member (botocore's
``rds-data`` model, shape ``SqlStatement``) is not marked sensitive, and
CloudTrail records Data API calls: the Aurora User Guide's "Logging RDS Data
API calls with AWS CloudTrail" calls them management events (event history,
readable with ``cloudtrail:LookupEvents``), its "Comparing Amazon RDS Data API
behaviors" says that for Serverless v2 they are data events, which a trail
records only when asked to. Either way the statement text may be kept.
The statements therefore carry only the account's stored form, ``'*'`` and the
40 upper-case hex digits of SHA1(SHA1(password)) (what MySQL's and MariaDB's
``PASSWORD()`` return), given with ``IDENTIFIED WITH mysql_native_password AS``
(MySQL Reference Manual, CREATE USER / ALTER USER: ``IDENTIFIED WITH
auth_plugin AS 'auth_string'``, the string taken as the plugin's already hashed
form; MariaDB's CREATE USER: ``IDENTIFIED {VIA|WITH} plugin {USING|AS}
'authentication_string'``; the real MariaDB 10.11 stores exactly this hash). Knowing it does not log anyone in:
in the native handshake the server sends a random 20-byte nonce and the client
answers SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password))); the server,
holding SHA1(SHA1(password)), checks that SHA1 of the XOR's result is its
stored value. Building the answer needs SHA1(password), which the stored
value does not give (a SHA-1 preimage; the password is 32 random letters and
digits, too many to guess). Only someone who also sees a handshake's nonce and
answer can recover SHA1(password), and the user is ``REQUIRE SSL``, so the
handshake travels inside TLS.

The plugin is named, not left to the server's default: Aurora MySQL 3 (MySQL
8.0 compatible; the construct pins 3.10) sets the default with its
``default_authentication_plugin`` parameter (Aurora User Guide, "Comparing Aurora
MySQL version 3 and Aurora MySQL version 8.4"), and ``mysql_native_password`` is
built into MySQL 8.0 (deprecated since 8.0.34, disabled by default only from 8.4,
removed in 9.0: MySQL 8.4 Reference Manual, "Native Pluggable Authentication"),
so 3.10 has it. Aurora MySQL 8.4 would need it enabled: the construct does not
use 8.4. slurmdbd's client library (MariaDB Connector/C, which Slurm's
accounting_storage/mysql plugin links on Debian) logs in with it: proven against
the real MariaDB and slurmdbd in ``tests/system/test_accounting_user_sql.py``.

The password is read inside the function and never leaves it: it is not
logged, not sent in any request, not returned in ``Data`` nor put in a property.

Service states (botocore's ``rds-data`` model, ExecuteStatement errors):

====================================  ============================================================
``DatabaseResumingException``         the Serverless v2 writer was paused (0 ACUs); the call wakes
                                      it: retried every :data:`RESUME_POLL_SECONDS` for at most
                                      :data:`RESUME_WAIT_SECONDS` (one bound for all four
                                      statements), then the resource fails
``DatabaseUnavailableException``      "the writer instance isn't available" (a failover, a
                                      restart): retried like a resuming writer, same bound
``DatabaseErrorException`` holding    the master login was refused: the master secret's first
``Access denied for user``            rotation runs at once, and single-user rotation sets the new
                                      password in the database before AWSCURRENT moves; retried
                                      :data:`LOGIN_TRIES` times, :data:`LOGIN_POLL_SECONDS` apart,
                                      within the same bound, then the resource fails
throttling (``ThrottlingException``)  botocore's standard retry mode (2 attempts), then fails
every other error                     fails the resource at once with the code and the message
                                      (``AccessDeniedException``, ``ForbiddenException``,
                                      ``BadRequestException``, any other ``DatabaseErrorException``,
                                      ``StatementTimeoutException``, ``ServiceUnavailableError``,
                                      ``DatabaseNotFoundException``, ``HttpEndpointNotEnabledException``,
                                      ``SecretsErrorException``, ``InvalidSecretException``,
                                      ``InvalidResourceStateException``, ``InternalServerErrorException``,
                                      timeouts)
====================================  ============================================================

A failure of CREATE USER or ALTER USER (the statements carrying the hash) gives the code only: MySQL
quotes up to 80 characters of the statement from the error on (``near '%-.80s'``), a part of the hash
no replacement of the whole value would catch. A failed Update names the way out of a failed rollback
(a rollback is an Update with the old properties and re-runs the statements): ``aws cloudformation
continue-update-rollback --stack-name <StackId> --resources-to-skip <LogicalResourceId>``, safe because
the old user and grant exist.

Who can make it run. The cluster, the secrets and the user (``CLUSTER_ARN``, ``MASTER_SECRET_ARN``,
``USER_SECRET_ARN``, ``USER_NAME``, :data:`DECLARED`) are the function's environment, which the stack
sets; the event's ``ClusterArn``, ``MasterSecretArn``, ``UserSecretArn`` and ``UserName`` must equal
them or the request is refused. They change only with a replacement (refused by the lock guard), so a
rollback's Update carries the same values. ``DatabaseName`` is the one target an edit of the environment
file changes in place (``storage.accounting.database_name``), and a rollback's Update carries the old
name while the function may still hold the new one, so it is taken from the event, checked: the
pattern, never one of MySQL's system schemas (:data:`SYSTEM_SCHEMAS`), and the grant names it with
``_`` escaped, so MySQL does not read it as a wildcard (MySQL 8.0 manual, GRANT: "``_`` and ``%``
wildcards are permitted when specifying database names"). So whoever may only invoke the function
(``lambda:InvokeFunction``: AWSLambdaRole, PowerUserAccess) can re-run the declared user's statements,
at most granting it another ordinary database; not set the master user's password nor grant a system
schema. The master user and MySQL's and RDS's reserved accounts (:data:`RESERVED_USER_NAMES`) are
refused here and in the construct. Whoever may change the function's code or environment can run
anything as this role: that is the trust map's business (docs/reference/security.md).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

RESOURCE_TYPE = "Custom::AccountingDatabaseUser"
#: The characters a password may hold: none needs quoting in slurmdbd.conf (no space, ``#``, ``"``) and the length
#: keeps it out of guessing range. The secret is generated alphanumeric (32 characters).
SAFE_PASSWORD = re.compile(r"[A-Za-z0-9]{20,128}")
#: A MySQL user name and a database name as the construct writes them.
USER_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
DATABASE_NAME = re.compile(r"[0-9a-z_]{1,64}")
#: A paused Serverless v2 writer resumes in seconds (Aurora User Guide, "Scaling to Zero ACUs"); wait this long.
RESUME_WAIT_SECONDS = 240
#: Seconds between tries while the database resumes.
RESUME_POLL_SECONDS = 10
#: Codes that mean the writer is not serving yet (rds-data model: DatabaseResumingException, "the writer is
#: resuming"; DatabaseUnavailableException, "the writer instance isn't available"): retried within the bound.
RETRIED = frozenset({"DatabaseResumingException", "DatabaseUnavailableException"})
#: The part of MySQL's error 1045 the Data API passes on when the master secret's password is not yet the
#: database's: single-user rotation sets the new password in the database before AWSCURRENT moves.
MASTER_LOGIN_REFUSED = "Access denied for user"
#: What only a refused login (MySQL error 1045) says; 1044, a statement refused for lack of privilege, says
#: "Access denied for user ... to database" and is no login to retry.
LOGIN_ONLY = "(using password:"
#: The codes a refused master login may come under: the SQL error, or the deprecated but still modelled bad request.
LOGIN_REFUSED_CODES = frozenset({"DatabaseErrorException", "BadRequestException"})
#: Tries of a statement whose master login is refused (rotation's window is seconds), and seconds between them.
LOGIN_TRIES = 6
LOGIN_POLL_SECONDS = 10
#: The names the function refuses to make or change: the database's master user (``MASTER_USER_NAME`` of
#: ``mlcluster/constructs/accounting_database.py``; a test keeps them equal) and MySQL's and RDS's own accounts.
RESERVED_USER_NAMES = frozenset(
    {
        "slurm",
        "root",
        "mysql.sys",
        "mysql.session",
        "mysql.infoschema",
        "mariadb.sys",
        "rdsadmin",
        "rdsrepladmin",
        "rdstopmgr",
    }
)
#: Each property of the event and the environment variable of the function that must hold the same value.
DECLARED = {
    "ClusterArn": "CLUSTER_ARN",
    "MasterSecretArn": "MASTER_SECRET_ARN",
    "UserSecretArn": "USER_SECRET_ARN",
    "UserName": "USER_NAME",
}
#: MySQL's system schemas: a grant on one of them (``mysql``: the grant tables) would make the user an administrator.
SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})
#: Both clients': standard retries (throttling included, jittered back-off), two attempts, bounded connect and
#: read times, so one call (at most 2 x (10 + 60) s) begun before the shared bound (:data:`RESUME_WAIT_SECONDS`)
#: ends within the function's timeout, and the reason CloudFormation shows is ours, not "Task timed out".
CLIENT_CONFIG = Config(
    # total_max_attempts counts the first call (botocore's max_attempts counts retries only: 2 would be 3 calls).
    retries={"mode": "standard", "total_max_attempts": 2},
    connect_timeout=10,
    read_timeout=60,
    parameter_validation=True,
)

#: Replaced by tests: the wait between tries and the clock the bound is measured on.
sleep: Callable[[float], None] = time.sleep
clock: Callable[[], float] = time.monotonic


class AccountingUserError(RuntimeError):
    """A step failed; the message (never holding the password) is the reason CloudFormation shows."""


@functools.cache
def rds_data() -> Any:
    """The RDS Data API client, made on first use."""
    return boto3.session.Session().client("rds-data", config=CLIENT_CONFIG)


@functools.cache
def secrets() -> Any:
    """The Secrets Manager client, made on first use."""
    return boto3.session.Session().client("secretsmanager", config=CLIENT_CONFIG)


def on_event(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """Create/Update: make or update the user and its grant; Delete: keep them (the database is data).

    The targets come from the function's environment (:data:`DECLARED`), which only the stack sets; an event
    whose properties name anything else is refused, so a direct invoke can only re-run what the stack declared.
    """
    request = event.get("RequestType")
    kind = event.get("ResourceType")
    logger.info("%s %s %s", request, kind, event.get("LogicalResourceId"))
    if kind != RESOURCE_TYPE:
        raise AccountingUserError(f"ResourceType {kind!r} is not {RESOURCE_TYPE}")
    props = event.get("ResourceProperties") or {}
    if request == "Delete":
        logger.info("Delete: the user and its grants stay with the accounting database")
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if request not in ("Create", "Update"):
        raise AccountingUserError(f"RequestType {request!r} is not one of Create, Update, Delete")
    try:
        return _create_or_update(props)
    except AccountingUserError as err:
        if request != "Update":
            raise
        raise AccountingUserError(f"{err}. {_rollback_way_out(event)}") from None


def _create_or_update(props: Mapping[str, Any]) -> dict[str, Any]:
    """Check the properties against the declared targets, then run :func:`statements` as the master user."""
    declared = _declared()
    for key, variable in DECLARED.items():
        if props.get(key) != declared[variable]:
            raise AccountingUserError(
                f"{key}: {props.get(key)!r} is not what the stack declared for this function ({variable} "
                f"{declared[variable]!r}); refused: this function only runs the statements the stack declares"
            )
    cluster_arn = declared["CLUSTER_ARN"]
    master_secret = declared["MASTER_SECRET_ARN"]
    user = declared["USER_NAME"]
    database = _database_name(props.get("DatabaseName"))
    # One bound for the secret's read and all the statements: with each call's own attempts, the timeout holds.
    deadline = clock() + RESUME_WAIT_SECONDS
    password_hash = native_password_hash(_password(declared["USER_SECRET_ARN"]))
    for sql in statements(user, database, password_hash):
        _execute(cluster_arn, master_secret, sql, deadline)
    logger.info("User %s may use database %s", user, database)
    return {"PhysicalResourceId": f"{cluster_arn}/{user}", "Data": {"UserName": user, "DatabaseName": database}}


def _rollback_way_out(event: Mapping[str, Any]) -> str:
    """What to run when a failed Update was a rollback's: skipping this resource is safe, the old user exists."""
    return (
        "If this Update was a rollback and the stack is now UPDATE_ROLLBACK_FAILED, the previous user and grant "
        "still exist: aws cloudformation continue-update-rollback "
        f"--stack-name {event.get('StackId', '<stack>')} "
        f"--resources-to-skip {event.get('LogicalResourceId', '<logical id>')}"
    )


def check_user_name(user: str) -> str | None:
    """Why ``user`` may not be the accounting user (None when it may): a bad form or a reserved account.

    The construct calls it too, so a stack cannot declare what the handler would refuse.
    """
    if USER_NAME.fullmatch(user) is None:
        return f"{user!r}; allowed: a lowercase letter, then up to 31 lowercase letters, digits or '_'"
    if user in RESERVED_USER_NAMES:
        return f"{user!r} is the database's master user or a reserved MySQL/RDS account; not allowed: " + ", ".join(
            sorted(RESERVED_USER_NAMES)
        )
    return None


def native_password_hash(password: str) -> str:
    """The ``mysql_native_password`` stored form of ``password``: ``*`` and upper-case hex SHA1(SHA1(password)).

    SHA-1 is the plugin's own format, not a choice made here (see the module's notes on why this is safe to send).
    """
    stage1 = hashlib.sha1(password.encode()).digest()
    return "*" + hashlib.sha1(stage1).hexdigest().upper()


def statements(user: str, database: str, password_hash: str) -> tuple[str, ...]:
    """The idempotent statements that make ``user`` (TLS only) with ``password_hash`` and grant it ``database``.

    ``user`` and ``database`` must already match :data:`USER_NAME` and :data:`DATABASE_NAME`, and
    ``password_hash`` be :func:`native_password_hash`'s answer: none of them can then end a literal or a name.
    """
    account = f"'{user}'@'%'"
    # In a grant's database name ``_`` is a wildcard unless escaped (``my_ql`` would cover ``mysql``).
    granted = database.replace("_", "\\_")
    identified = f"IDENTIFIED WITH mysql_native_password AS '{password_hash}'"
    return (
        f"CREATE USER IF NOT EXISTS {account} {identified} REQUIRE SSL",
        f"ALTER USER {account} {identified} REQUIRE SSL",
        f"CREATE DATABASE IF NOT EXISTS `{database}`",
        f"GRANT ALL PRIVILEGES ON `{granted}`.* TO {account}",
    )


# -- properties ---------------------------------------------------------------


def _declared() -> dict[str, str]:
    """The targets the stack set in the function's environment, each checked as the construct wrote it."""
    values: dict[str, str] = {}
    for variable in DECLARED.values():
        value = os.environ.get(variable, "")
        if not value:
            raise AccountingUserError(f"the function's environment lacks {variable}; redeploy the stack")
        values[variable] = value
    problem = check_user_name(values["USER_NAME"])
    if problem is not None:
        raise AccountingUserError(f"UserName: {problem}")
    return values


def _database_name(value: object) -> str:
    """The event's ``DatabaseName``: the pattern, and never a system schema (see the module's notes)."""
    if not isinstance(value, str) or DATABASE_NAME.fullmatch(value) is None:
        raise AccountingUserError(
            f"DatabaseName: {value!r} is not valid; allowed: 1-64 lowercase letters, digits or '_'"
        )
    if value in SYSTEM_SCHEMAS:
        raise AccountingUserError(
            f"DatabaseName: {value!r} is one of MySQL's system schemas; not allowed: "
            + ", ".join(sorted(SYSTEM_SCHEMAS))
        )
    return value


def _password(secret_arn: str) -> str:
    """The bare password the user's secret holds, refused (without its value) unless :data:`SAFE_PASSWORD` allows it."""
    try:
        answer = secrets().get_secret_value(SecretId=secret_arn)
    except ClientError as err:
        error = err.response.get("Error", {})
        raise AccountingUserError(
            f"GetSecretValue of {secret_arn} failed: {error.get('Code', 'Error')}: {error.get('Message', '')}"
        ) from None
    except BotoCoreError as err:
        raise AccountingUserError(f"GetSecretValue of {secret_arn} failed: {err}") from None
    value = answer.get("SecretString")
    if not isinstance(value, str) or SAFE_PASSWORD.fullmatch(value) is None:
        raise AccountingUserError(
            f"The secret {secret_arn} does not hold a password slurmdbd.conf may hold (value not shown); "
            "allowed: 20 to 128 letters and digits, nothing else; do not change this secret by hand (see the "
            "day-two guide, accounting database user's password)"
        )
    return value


# -- the Data API ---------------------------------------------------------------


def _execute(cluster_arn: str, master_secret: str, sql: str, deadline: float) -> None:
    """Run ``sql`` as the master user; retries per :data:`RETRIED` until ``deadline``, every other failure raises.

    A statement carrying the password's hash gets the error code only in its reason: MySQL echoes a truncated
    part of the statement (``near '%-.80s'``), which no replacement of the whole value would catch.
    """
    what = sql.split(" IDENTIFIED WITH ", 1)[0]
    carries_hash = what != sql
    denied = 0
    while True:
        if clock() > deadline:
            # A slow call (up to 2 x (10 + 60) s) ended past the bound: one more would outlive the function's timeout.
            raise AccountingUserError(
                f"ExecuteStatement ({what}) not started: the {RESUME_WAIT_SECONDS} s the secret's read "
                "and the statements share were spent (slow or retried calls); the resource fails before the function's "
                "timeout"
            )
        try:
            rds_data().execute_statement(resourceArn=cluster_arn, secretArn=master_secret, sql=sql)
        except ClientError as err:
            error = err.response.get("Error", {})
            code = str(error.get("Code", "Error"))
            message = str(error.get("Message", ""))
            # No AWS page names the code of a refused master login: the message decides, under either SQL code.
            login_refused = code in LOGIN_REFUSED_CODES and MASTER_LOGIN_REFUSED in message and LOGIN_ONLY in message
            if login_refused:
                denied += 1
            # A wait is begun only if it ends within the bound, so the next call starts within it too.
            if code in RETRIED and clock() + RESUME_POLL_SECONDS <= deadline:
                logger.info("%s: %s; trying again in %s s", what, code, RESUME_POLL_SECONDS)
                sleep(RESUME_POLL_SECONDS)
                continue
            if login_refused and denied < LOGIN_TRIES and clock() + LOGIN_POLL_SECONDS <= deadline:
                logger.info(
                    "%s: the master login was refused (rotation?); trying again in %s s", what, LOGIN_POLL_SECONDS
                )
                sleep(LOGIN_POLL_SECONDS)
                continue
            if carries_hash:  # the database's message may echo part of the statement
                message = "the database's message is not shown: this statement carries the password's hash"
            if code in RETRIED:
                message = f"still unavailable after {RESUME_WAIT_SECONDS} s of waits in all: {message}"
            elif login_refused:
                message = (
                    f"the master user's login was refused {denied} times, {LOGIN_POLL_SECONDS} s apart (longer "
                    f"than a rotation of the master secret takes): {message}"
                )
            raise AccountingUserError(f"ExecuteStatement ({what}) failed: {code}: {message}") from None
        except BotoCoreError as err:  # timeouts, unreachable endpoint
            raise AccountingUserError(f"ExecuteStatement ({what}) failed: {err}") from None
        logger.info("%s: done", what)
        return
