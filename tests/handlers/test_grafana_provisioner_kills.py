"""The Grafana provisioner: behaviour `make mutation MODULE=handlers` showed no test asserted.

- The function's log is the operator's record of what it did to the workspace: which request, which service
  account, token, data source and dashboard (app.py's ``logger.info`` mutants in ``on_event``,
  ``_service_account``, ``_with_token``, ``_delete_token``, ``_provision``).
- Each Grafana request carries exactly the headers Grafana's HTTP API reads, no body on a GET, and an update
  of an existing data source sends the data source (``GrafanaApi.call`` mutants 3, 20-29; ``_provision``
  mutants 40, 43); a dashboard is written with its version message (``_provision`` mutants 71-74); a data
  source uid is one path segment, a "/" in it escaped (``_provision`` mutant 5).
- Only the data source look-up may read a 404 as "missing" (``GrafanaApi.call`` mutant 1); an empty answer
  is a success (mutant 50); an error body that is not UTF-8 is still quoted (mutants 42, 45, 46).
- An AWS error without a code or a message still names the operation and the error (``_aws`` mutants 4, 6,
  12-28).
- An admin id must be a non-empty string (``_admins`` mutant 19); a page of service accounts without the
  list counts as empty (``_find_service_account`` mutants 19, 21).
"""

from __future__ import annotations

import io
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from mlcluster.handlers.grafana_provisioner import app
from tests.handlers.test_grafana_provisioner import (  # the fixtures and stubs of the provisioner's tests
    ACCOUNT,
    ACCOUNT_ID,
    ADD_GROUP,
    DASHBOARDS,
    DATA_SOURCES,
    ENDPOINT,
    SECRET,
    TOKEN_ID,
    WORKSPACE,
    FakeGrafana,
    add_admins,
    delete_token,
    event,
    existing_account,
    http,
    list_accounts,
    make_token,
    stub,
)

__all__ = ["http", "stub"]  # fixtures, used by name


class Recorder:
    """Grafana's HTTP API answering every request with ``answer`` (or a failure); each request kept whole."""

    def __init__(self, answer: bytes = b'{"status":"success"}', failure: BaseException | None = None) -> None:
        self.answer = answer
        self.failure = failure
        self.requests: list[urllib.request.Request] = []

    def __call__(self, request: urllib.request.Request, timeout: float) -> io.BytesIO:
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        return io.BytesIO(self.answer)


def http_error(code: int, body: bytes) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(f"https://{ENDPOINT}/api", code, "error", {}, io.BytesIO(body))  # type: ignore[arg-type]


def handler_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == app.logger.name]


def test_the_log_names_every_step_and_what_it_touched(
    stub: Stubber, http: FakeGrafana, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=app.logger.name)
    http.existing = {"mlcluster-cloudwatch"}
    list_accounts(stub)
    stub.add_response(
        "create_workspace_service_account",
        {"id": ACCOUNT_ID, "name": ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "name": ACCOUNT, "grafanaRole": "ADMIN"},
    )
    make_token(stub)
    delete_token(stub)
    add_admins(stub, ADD_GROUP)
    app.on_event(event())
    assert handler_log(caplog) == [
        "Create Custom::GrafanaProvisioning GrafanaProvisioning",
        f"created service account {ACCOUNT} ({ACCOUNT_ID})",
        f"made token {TOKEN_ID} of service account {ACCOUNT_ID}, living {app.TOKEN_SECONDS} s",
        "created data source mlcluster-prometheus",
        "updated data source mlcluster-cloudwatch",
        *[f"wrote dashboard {d['uid']}" for d in DASHBOARDS],
        f"deleted token {TOKEN_ID}",
    ]


def test_requests_carry_grafanas_headers_and_the_bodies_it_needs(
    stub: Stubber, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(answer=b'{"uid": "x", "id": 7}')  # every data source exists: updated with PUT
    monkeypatch.setattr(app, "open_url", recorder)
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    add_admins(stub, ADD_GROUP)
    app.on_event(event())
    sent = [(r.get_method(), r.full_url.removeprefix(f"https://{ENDPOINT}")) for r in recorder.requests]
    assert sent == [
        ("GET", "/api/datasources/uid/mlcluster-prometheus"),
        ("PUT", "/api/datasources/uid/mlcluster-prometheus"),
        ("GET", "/api/datasources/uid/mlcluster-cloudwatch"),
        ("PUT", "/api/datasources/uid/mlcluster-cloudwatch"),
        *[("POST", "/api/dashboards/db")] * len(DASHBOARDS),
    ]
    for request in recorder.requests:
        # urllib keeps header names as str.capitalize() makes them.
        assert dict(request.header_items()) == {
            "Authorization": f"Bearer {SECRET}",
            "Content-type": "application/json",
            "Accept": "application/json",
        }
    gets = [r for r in recorder.requests if r.get_method() == "GET"]
    assert all(r.data is None for r in gets)
    puts = [json.loads(r.data) for r in recorder.requests if r.get_method() == "PUT"]  # type: ignore[arg-type]
    assert puts == DATA_SOURCES
    boards = [json.loads(r.data) for r in recorder.requests if r.get_method() == "POST"]  # type: ignore[arg-type]
    assert boards == [
        {"dashboard": {**d, "id": None}, "overwrite": True, "message": "provisioned by mlcluster"} for d in DASHBOARDS
    ]


def test_a_data_source_uid_is_one_path_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(failure=http_error(404, b'{"message":"not found"}'))
    monkeypatch.setattr(app, "open_url", recorder)
    with pytest.raises(app.ProvisioningError, match="POST /api/datasources answered HTTP 404"):
        app._provision(app.GrafanaApi(ENDPOINT, SECRET), [{"uid": "team/prom?x"}], [])
    assert recorder.requests[0].full_url == f"https://{ENDPOINT}/api/datasources/uid/team%2Fprom%3Fx"


@pytest.mark.parametrize("method", ["POST", "PUT", "GET"])
def test_a_404_is_missing_only_where_the_caller_says_so(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    monkeypatch.setattr(app, "open_url", Recorder(failure=http_error(404, b'{"message":"Not found"}')))
    api = app.GrafanaApi(ENDPOINT, SECRET)
    with pytest.raises(
        app.ProvisioningError, match=f'Grafana {method} /api/x answered HTTP 404: {{"message":"Not found"}}'
    ):
        api.call(method, "/api/x", {"a": 1})
    assert api.call(method, "/api/x", {"a": 1}, missing_ok=True) is None


def test_an_empty_answer_is_a_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "open_url", Recorder(answer=b""))
    assert app.GrafanaApi(ENDPOINT, SECRET).call("PUT", "/api/datasources/uid/a", {"uid": "a"}) is None


def test_an_error_body_that_is_not_utf8_is_still_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "open_url", Recorder(failure=http_error(502, b"bad \xff\xfe gateway")))
    with pytest.raises(app.ProvisioningError) as raised:
        app.GrafanaApi(ENDPOINT, SECRET).call("GET", "/api/health")
    assert str(raised.value) == "Grafana GET /api/health answered HTTP 502: bad \ufffd\ufffd gateway"


class Refusing:
    """A Grafana client whose listing raises ``error``."""

    def __init__(self, error: ClientError) -> None:
        self.error = error

    def list_workspace_service_accounts(self, **kwargs: Any) -> Any:
        raise self.error


def test_an_aws_error_names_its_code_and_message(monkeypatch: pytest.MonkeyPatch) -> None:
    error = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not yours"}}, "ListX")
    monkeypatch.setattr(app, "grafana", lambda: Refusing(error))
    with pytest.raises(app.ProvisioningError) as raised:
        app.on_event(event())
    assert str(raised.value) == (
        f"ListWorkspaceServiceAccounts for workspace {WORKSPACE} failed: AccessDeniedException: not yours"
    )


@pytest.mark.parametrize("response", [{}, {"Error": {}}])
def test_an_aws_error_without_code_or_message_still_names_the_error(
    monkeypatch: pytest.MonkeyPatch, response: dict[str, Any]
) -> None:
    error = ClientError(response, "ListWorkspaceServiceAccounts")  # type: ignore[arg-type]
    monkeypatch.setattr(app, "grafana", lambda: Refusing(error))
    with pytest.raises(app.ProvisioningError) as raised:
        app.on_event(event())
    assert str(raised.value) == f"ListWorkspaceServiceAccounts for workspace {WORKSPACE} failed: Error: {error}"
    assert "ListWorkspaceServiceAccounts operation" in str(error)


@pytest.mark.parametrize(("key", "ids"), [("AdminUserIds", [""]), ("AdminGroupIds", [7]), ("AdminUserIds", ["u", 0])])
def test_an_admin_id_must_be_a_non_empty_string(stub: Stubber, key: str, ids: list[Any]) -> None:
    with pytest.raises(app.ProvisioningError) as raised:
        app.on_event(event(**{key: ids}))
    assert str(raised.value) == f"{key}: {ids!r} is not valid; expected a list of IAM Identity Center ids"


def test_an_admin_id_at_the_edge_is_accepted() -> None:
    assert app._admins({"AdminUserIds": ["u"], "AdminGroupIds": ["g"]}) == {("SSO_USER", "u"), ("SSO_GROUP", "g")}


class Pages:
    """A Grafana client whose listing answers these pages in turn."""

    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages
        self.calls: list[dict[str, Any]] = []

    def list_workspace_service_accounts(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.pages.pop(0)


def test_a_page_without_service_accounts_counts_as_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    client = Pages([{"nextToken": "t2"}, {"serviceAccounts": [{"id": "sa-9", "name": ACCOUNT}]}])
    monkeypatch.setattr(app, "grafana", lambda: client)
    assert app._find_service_account(WORKSPACE, ACCOUNT) == "sa-9"
    assert client.calls == [{"workspaceId": WORKSPACE}, {"workspaceId": WORKSPACE, "nextToken": "t2"}]
