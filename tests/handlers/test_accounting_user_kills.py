"""The accounting database user: behaviour `make mutation MODULE=handlers` (sample 200, seed 1) showed no test asserted.

- The function's log is the operator's record of a run: which request for which resource, each statement that
  finished (named without the hash it carries), and the user and database it ended with (app.py ``on_event``
  mutant 24, ``_execute`` mutant 100, ``_create_or_update`` mutant 43).
- The manual Update of the day-two guide (``aws lambda invoke`` with a hand-written event, no ``StackId``) is
  accepted, and when it fails its reason leaves placeholders to fill in, never "None" as a stack name
  (``_rollback_way_out`` mutants 9, 13).
- The refusal of a password slurmdbd.conf cannot hold ends by pointing at the guide's section on that
  password, which exists (``_password`` mutant 43).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from mlcluster.handlers.accounting_user import app
from tests.handlers.test_accounting_user import (  # the fixtures and stubs of the accounting user's tests
    DECLARED,
    HASH,
    PASSWORD,
    STATEMENTS,
    clock,
    declared,
    event,
    failing,
    secret,
    sent,
    statement,
    stubs,
)

__all__ = ["clock", "declared", "sent", "stubs"]  # fixtures, used by name

DAY_TWO = Path(__file__).resolve().parents[2] / "docs" / "use-cases" / "day-two.md"


def handler_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The function's own log lines, in order."""
    return [record.getMessage() for record in caplog.records if record.name == app.__name__]


def test_the_log_records_the_request_each_finished_statement_and_the_result(
    stubs: tuple[Stubber, Stubber], caplog: pytest.LogCaptureFixture
) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS:
        statement(data, sql)
    caplog.set_level(logging.INFO, logger=app.__name__)
    app.on_event(event())
    assert handler_messages(caplog) == [
        f"Create {app.RESOURCE_TYPE} AccountingUserResource1234",
        "CREATE USER IF NOT EXISTS 'slurmdbd'@'%': done",
        "ALTER USER 'slurmdbd'@'%': done",
        "CREATE DATABASE IF NOT EXISTS `slurm_acct_db`: done",
        "GRANT ALL PRIVILEGES ON `slurm\\_acct\\_db`.* TO 'slurmdbd'@'%': done",
        "User slurmdbd may use database slurm_acct_db",
    ]
    assert HASH not in caplog.text and PASSWORD not in caplog.text


def test_after_a_failure_the_log_shows_which_statements_finished(
    stubs: tuple[Stubber, Stubber], caplog: pytest.LogCaptureFixture
) -> None:
    """The user exists and is altered, the database was not made: "done" only for the two that ran."""
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS[:2]:
        statement(data, sql)
    failing(data, "DatabaseErrorException", "Can't create database 'slurm_acct_db'; disk full")
    caplog.set_level(logging.INFO, logger=app.__name__)
    with pytest.raises(app.AccountingUserError, match="CREATE DATABASE"):
        app.on_event(event())
    assert handler_messages(caplog)[1:] == [
        "CREATE USER IF NOT EXISTS 'slurmdbd'@'%': done",
        "ALTER USER 'slurmdbd'@'%': done",
    ]


def manual_update() -> dict[str, Any]:
    """The day-two guide's ``aws lambda invoke`` payload, its ``...`` filled with what the stack declared."""
    found = re.search(r"--payload '(\{.*?\})'", DAY_TWO.read_text(encoding="utf-8"))
    assert found is not None, f"{DAY_TWO} no longer shows the manual Update's payload"
    payload: dict[str, Any] = json.loads(found.group(1))
    values = {**DECLARED, "DatabaseName": "slurm_acct_db"}
    assert set(payload["ResourceProperties"]) == set(values)
    payload["ResourceProperties"] = values
    return payload


def test_the_guides_manual_update_runs_the_statements(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    for sql in STATEMENTS:
        statement(data, sql)
    payload = manual_update()
    assert "StackId" not in payload
    assert app.on_event(payload)["PhysicalResourceId"] == f"{DECLARED['ClusterArn']}/slurmdbd"


@pytest.mark.parametrize(
    ("drop", "way_out"),
    [
        ((), "--stack-name <stack> --resources-to-skip manual"),
        (("LogicalResourceId",), "--stack-name <stack> --resources-to-skip <logical id>"),
    ],
)
def test_a_failed_manual_update_leaves_placeholders_in_the_way_out(
    stubs: tuple[Stubber, Stubber], drop: tuple[str, ...], way_out: str
) -> None:
    """The event names no stack: the command shows where the operator fills it in, never "--stack-name None"."""
    data, sm = stubs
    secret(sm)
    failing(data, "ServiceUnavailableError", "try later", 503)
    payload = {k: v for k, v in manual_update().items() if k not in drop}
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(payload)
    reason = str(caught.value)
    assert reason.endswith(f"aws cloudformation continue-update-rollback {way_out}")
    assert "None" not in reason


def test_the_refusal_of_a_bad_password_ends_pointing_at_the_guides_section_on_it(
    stubs: tuple[Stubber, Stubber],
) -> None:
    _, sm = stubs
    secret(sm, "short")
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event())
    pointer = re.search(r"\(see the day-two guide, (accounting database) user's password\)$", str(caught.value))
    assert pointer is not None, str(caught.value)
    sections = DAY_TWO.read_text(encoding="utf-8").split("\n## ")
    (section,) = [s for s in sections if pointer.group(1) in s.splitlines()[0]]
    assert "**Its password is not changed by hand.**" in section
