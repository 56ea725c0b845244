"""The Grafana provisioner's Delete: what the operator reads in the function's log, and a failed delete named.

Written for survivors of `make mutation MODULE=handlers` (mlcluster/handlers/grafana_provisioner/app.py,
``_delete_service_account``): the log lines that say why nothing was deleted, and the error of a refused delete.
"""

from __future__ import annotations

import logging

import pytest
from botocore.stub import Stubber

from mlcluster.handlers.grafana_provisioner import app
from tests.handlers.test_grafana_provisioner import (  # the fixtures and stubs of the provisioner's tests
    ACCOUNT,
    WORKSPACE,
    FakeGrafana,
    error,
    event,
    existing_account,
    http,
    list_accounts,
    stub,
)

__all__ = ["http", "stub"]  # fixtures, used by name
LOGGER = "mlcluster.handlers.grafana_provisioner.app"


def test_delete_without_the_account_logs_which_account_and_workspace(
    stub: Stubber, caplog: pytest.LogCaptureFixture
) -> None:
    """(x__delete_service_account__mutmut_8, 9, 13: the account, the workspace or the words lost.)"""
    caplog.set_level(logging.INFO, logger=LOGGER)
    list_accounts(stub)
    app.on_event(event("Delete"))
    assert f"no service account {ACCOUNT} in workspace {WORKSPACE}: nothing to delete" in caplog.messages


def test_delete_of_a_gone_workspace_logs_the_workspace_and_the_service_error(
    stub: Stubber, caplog: pytest.LogCaptureFixture
) -> None:
    """(mutmut_26, 27, 31: the workspace, the error or the words lost.)"""
    caplog.set_level(logging.INFO, logger=LOGGER)
    error(stub, "list_workspace_service_accounts", "ResourceNotFoundException", 404)
    app.on_event(event("Delete"))
    assert caplog.messages[-1] == (
        f"workspace {WORKSPACE} or its service account is gone: nothing to delete "
        f"(ListWorkspaceServiceAccounts for workspace {WORKSPACE} failed: ResourceNotFoundException: "
        "ResourceNotFoundException said no)"
    )


def test_a_refused_delete_fails_naming_the_account_and_workspace(stub: Stubber, http: FakeGrafana) -> None:
    """(mutmut_15: the operation's name lost from the error CloudFormation shows.)"""
    existing_account(stub)
    error(stub, "delete_workspace_service_account", "AccessDeniedException", 403)
    with pytest.raises(app.ProvisioningError) as raised:
        app.on_event(event("Delete"))
    assert str(raised.value) == (
        f"DeleteWorkspaceServiceAccount {ACCOUNT} in workspace {WORKSPACE} failed: AccessDeniedException: "
        "AccessDeniedException said no"
    )
    assert not http.sent
