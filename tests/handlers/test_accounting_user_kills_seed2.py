"""The accounting database user: behaviour `make mutation MODULE=handlers` (sample 200, seed 2) showed no test asserted.

- A failed Update's reason names the stack status in which the way out applies as CloudFormation spells it, so
  the operator can match it against the stack's status (app.py ``_rollback_way_out`` mutant 2).
"""

from __future__ import annotations

import re

import botocore.session
import pytest
from botocore.stub import Stubber

from mlcluster.handlers.accounting_user import app
from tests.handlers.test_accounting_user import clock, declared, event, failing, secret, sent, stubs

__all__ = ["clock", "declared", "sent", "stubs"]  # fixtures, used by name

STACK_STATUSES = botocore.session.get_session().get_service_model("cloudformation").shape_for("StackStatus").enum


def test_a_failed_update_names_the_stack_status_as_cloudformation_spells_it(stubs: tuple[Stubber, Stubber]) -> None:
    data, sm = stubs
    secret(sm)
    failing(data, "ServiceUnavailableError", "try later", 503)
    with pytest.raises(app.AccountingUserError) as caught:
        app.on_event(event("Update"))
    condition = re.search(r"If this Update was a rollback and the stack is now (\S+), ", str(caught.value))
    assert condition is not None
    assert condition.group(1) == "UPDATE_ROLLBACK_FAILED"
    assert condition.group(1) in STACK_STATUSES
