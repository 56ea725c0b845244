"""UpdatePermissions refusing several changes: each is named, one after another (a survivor of
`make mutation MODULE=handlers`: grafana_provisioner/app.py ``_update_admins`` mutant 39, the separator)."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from mlcluster.handlers.grafana_provisioner import app
from tests.handlers.test_grafana_provisioner import (  # the fixtures and stubs of the provisioner's tests
    ADD_GROUP,
    GROUP,
    FakeGrafana,
    add_admins,
    delete_token,
    event,
    existing_account,
    http,
    make_token,
    stub,
)

__all__ = ["http", "stub"]  # fixtures, used by name


def test_every_refused_change_is_named(stub: Stubber, http: FakeGrafana) -> None:
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    refused = [
        {"code": 404, "message": "group not found", "causedBy": ADD_GROUP[0]},
        {"code": 500, "message": "try again", "causedBy": ADD_GROUP[0]},
    ]
    add_admins(stub, ADD_GROUP, errors=refused)
    with pytest.raises(app.ProvisioningError) as raised:
        app.on_event(event())
    assert str(raised.value).endswith(
        f"refused some changes: ADD ['{GROUP}']: 404 group not found; ADD ['{GROUP}']: 500 try again"
    )
