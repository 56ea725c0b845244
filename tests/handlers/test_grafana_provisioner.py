"""The Grafana provisioning custom resource: AWS calls stubbed (botocore Stubber), Grafana's HTTP API faked.

Every AWS call and every Grafana request is checked for what it sends; each
one's failures (AccessDenied, throttling after retries, not found, conflict,
timeout, HTTP 4xx/5xx) must raise, which the Provider framework answers as
FAILED with the message as the reason, and the token must be deleted on
every path once it exists. The token's key never reaches the answer or the logs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError
from botocore.stub import Stubber

from mlcluster.grafana_dashboards import dashboards_json, data_sources_json
from mlcluster.handlers.grafana_provisioner import app

WORKSPACE = "g-0123456789"
ENDPOINT = f"{WORKSPACE}.grafana-workspace.us-east-1.amazonaws.com"
ACCOUNT = "mlcluster-provisioner"
ACCOUNT_ID = "sa-1"
TOKEN_ID = "tok-1"
SECRET = "glsa_SECRET_do_not_log_0123456789abcdef"
USER = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
GROUP = "906718cc3a-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f902"
DATA_SOURCES = data_sources_json("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/", "us-east-1")
DASHBOARDS = dashboards_json("test")
SESSION = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")


def props(**extra: Any) -> dict[str, Any]:
    return {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
        "WorkspaceId": WORKSPACE,
        "WorkspaceEndpoint": ENDPOINT,
        "ServiceAccountName": ACCOUNT,
        "DataSources": json.dumps(DATA_SOURCES),
        "Dashboards": json.dumps(DASHBOARDS),
        "AdminUserIds": [],
        "AdminGroupIds": [GROUP],
        **extra,
    }


def event(request: str = "Create", old: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": app.RESOURCE_TYPE,
        "LogicalResourceId": "GrafanaProvisioning",
        "ResourceProperties": props(**extra),
    }
    if request != "Create":
        ev["PhysicalResourceId"] = f"{WORKSPACE}-provisioning"
    if old is not None:
        ev["OldResourceProperties"] = old
    return ev


# -- fakes ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Sent:
    method: str
    path: str
    body: Any
    authorization: str


@dataclasses.dataclass
class FakeGrafana:
    """Grafana's HTTP API: existing data source uids, and failures to answer by (method, path prefix)."""

    existing: set[str] = dataclasses.field(default_factory=set)
    failures: dict[tuple[str, str], BaseException | int] = dataclasses.field(default_factory=dict)
    sent: list[Sent] = dataclasses.field(default_factory=list)

    def __call__(self, request: urllib.request.Request, timeout: float) -> io.BytesIO:
        assert timeout == app.HTTP_TIMEOUT
        url = request.full_url
        prefix = f"https://{ENDPOINT}"
        assert url.startswith(prefix), url
        path = url.removeprefix(prefix)
        method = request.get_method()
        body = json.loads(request.data) if request.data else None  # type: ignore[arg-type]
        self.sent.append(Sent(method, path, body, str(request.get_header("Authorization"))))
        for (m, p), failure in self.failures.items():
            if m == method and path.startswith(p):
                if isinstance(failure, int):
                    raise urllib.error.HTTPError(url, failure, "error", {}, io.BytesIO(b'{"message":"nope"}'))  # type: ignore[arg-type]
                raise failure
        if method == "GET" and path.startswith("/api/datasources/uid/"):
            uid = path.rsplit("/", 1)[1]
            if uid not in self.existing:
                raise urllib.error.HTTPError(url, 404, "Not Found", {}, io.BytesIO(b'{"message":"not found"}'))  # type: ignore[arg-type]
            return io.BytesIO(json.dumps({"uid": uid, "id": 7}).encode())
        return io.BytesIO(b'{"status":"success"}')


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> FakeGrafana:
    fake = FakeGrafana()
    monkeypatch.setattr(app, "open_url", fake)
    return fake


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    client = SESSION.client("grafana", config=app.CLIENT_CONFIG)
    monkeypatch.setattr(app, "grafana", lambda: client)
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def list_accounts(stub: Stubber, accounts: list[dict[str, str]] | None = None) -> None:
    stub.add_response(
        "list_workspace_service_accounts",
        {"serviceAccounts": accounts or [], "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE},
    )


def existing_account(stub: Stubber) -> None:
    list_accounts(stub, [{"id": ACCOUNT_ID, "name": ACCOUNT, "grafanaRole": "ADMIN", "isDisabled": "false"}])


def make_token(stub: Stubber) -> None:
    stub.add_response(
        "create_workspace_service_account_token",
        {
            "serviceAccountToken": {"id": TOKEN_ID, "name": "mlcluster-provisioning", "key": SECRET},
            "serviceAccountId": ACCOUNT_ID,
            "workspaceId": WORKSPACE,
        },
        {
            "workspaceId": WORKSPACE,
            "serviceAccountId": ACCOUNT_ID,
            "name": "mlcluster-provisioning",
            "secondsToLive": app.TOKEN_SECONDS,
        },
    )


def delete_token(stub: Stubber) -> None:
    stub.add_response(
        "delete_workspace_service_account_token",
        {"tokenId": TOKEN_ID, "serviceAccountId": ACCOUNT_ID, "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "serviceAccountId": ACCOUNT_ID, "tokenId": TOKEN_ID},
    )


def add_admins(stub: Stubber, instructions: list[dict[str, Any]], errors: list[dict[str, Any]] | None = None) -> None:
    stub.add_response(
        "update_permissions",
        {"errors": errors or []},
        {"workspaceId": WORKSPACE, "updateInstructionBatch": instructions},
    )


ADD_GROUP = [{"action": "ADD", "role": "ADMIN", "users": [{"type": "SSO_GROUP", "id": GROUP}]}]


def error(stub: Stubber, operation: str, code: str, status: int = 400) -> None:
    stub.add_client_error(
        operation, service_error_code=code, service_message=f"{code} said no", http_status_code=status
    )


# -- success ------------------------------------------------------------------------------------------------------


def test_create_makes_account_token_data_sources_dashboards_admins_then_deletes_token(
    stub: Stubber, http: FakeGrafana, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    list_accounts(stub)
    stub.add_response(
        "create_workspace_service_account",
        {"id": ACCOUNT_ID, "name": ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "name": ACCOUNT, "grafanaRole": "ADMIN"},
    )
    make_token(stub)
    delete_token(stub)
    add_admins(stub, ADD_GROUP)
    answer = app.on_event(event())
    assert answer == {
        "PhysicalResourceId": f"{WORKSPACE}-provisioning",
        "Data": {
            "DataSourceUids": "mlcluster-prometheus,mlcluster-cloudwatch",
            "DashboardUids": ",".join(d["uid"] for d in DASHBOARDS),
        },
    }
    calls = [(s.method, s.path) for s in http.sent]
    assert calls == [
        ("GET", "/api/datasources/uid/mlcluster-prometheus"),
        ("POST", "/api/datasources"),
        ("GET", "/api/datasources/uid/mlcluster-cloudwatch"),
        ("POST", "/api/datasources"),
        *[("POST", "/api/dashboards/db")] * len(DASHBOARDS),
    ]
    assert all(s.authorization == f"Bearer {SECRET}" for s in http.sent)
    assert http.sent[1].body == DATA_SOURCES[0]
    assert http.sent[1].body["jsonData"] == {
        "httpMethod": "POST",
        "sigV4Auth": True,
        "sigV4AuthType": "ec2_iam_role",
        "sigV4Region": "us-east-1",
    }
    boards = [s.body for s in http.sent if s.path == "/api/dashboards/db"]
    assert all(b["overwrite"] is True and b["dashboard"]["id"] is None for b in boards)
    assert [b["dashboard"]["uid"] for b in boards] == [d["uid"] for d in DASHBOARDS]
    # The token's key is sent to Grafana only: not in the answer, not in any log line.
    assert SECRET not in json.dumps(answer)
    assert SECRET not in caplog.text
    assert TOKEN_ID in caplog.text


def test_update_reuses_account_updates_existing_data_sources_and_revokes_dropped_admins(
    stub: Stubber, http: FakeGrafana
) -> None:
    http.existing = {"mlcluster-prometheus", "mlcluster-cloudwatch"}
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    add_admins(
        stub,
        [
            {"action": "ADD", "role": "ADMIN", "users": [{"type": "SSO_USER", "id": USER}]},
            {"action": "REVOKE", "role": "ADMIN", "users": [{"type": "SSO_GROUP", "id": GROUP}]},
        ],
    )
    old = props()
    answer = app.on_event(event("Update", old=old, AdminUserIds=[USER], AdminGroupIds=[]))
    assert answer["PhysicalResourceId"] == f"{WORKSPACE}-provisioning"
    puts = [s for s in http.sent if s.method == "PUT"]
    assert [s.path for s in puts] == [
        "/api/datasources/uid/mlcluster-prometheus",
        "/api/datasources/uid/mlcluster-cloudwatch",
    ]
    assert not [s for s in http.sent if s.path == "/api/datasources"]


def test_replaced_workspace_gets_no_revocations(stub: Stubber, http: FakeGrafana) -> None:
    """A new workspace id (the workspace was replaced): the old one's admins are not revoked on the new one."""
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    add_admins(stub, [{"action": "ADD", "role": "ADMIN", "users": [{"type": "SSO_USER", "id": USER}]}])
    old = props(WorkspaceId="g-9999999999")
    app.on_event(event("Update", old=old, AdminUserIds=[USER], AdminGroupIds=[]))


def test_no_admins_means_no_update_permissions_call(stub: Stubber, http: FakeGrafana) -> None:
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    app.on_event(event(AdminGroupIds=[]))  # the stubber fails on any unexpected call


def test_delete_removes_the_service_account(stub: Stubber, http: FakeGrafana) -> None:
    existing_account(stub)
    stub.add_response(
        "delete_workspace_service_account",
        {"serviceAccountId": ACCOUNT_ID, "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "serviceAccountId": ACCOUNT_ID},
    )
    assert app.on_event(event("Delete")) == {"PhysicalResourceId": f"{WORKSPACE}-provisioning"}
    assert not http.sent


def test_delete_when_workspace_or_account_is_gone_is_done(stub: Stubber) -> None:
    list_accounts(stub)  # no such account
    app.on_event(event("Delete"))
    error(stub, "list_workspace_service_accounts", "ResourceNotFoundException", 404)
    app.on_event(event("Delete"))


def test_service_accounts_are_found_across_pages(stub: Stubber) -> None:
    stub.add_response(
        "list_workspace_service_accounts",
        {"serviceAccounts": [], "workspaceId": WORKSPACE, "nextToken": "n1"},
        {"workspaceId": WORKSPACE},
    )
    stub.add_response(
        "list_workspace_service_accounts",
        {
            "serviceAccounts": [{"id": ACCOUNT_ID, "name": ACCOUNT, "grafanaRole": "ADMIN", "isDisabled": "false"}],
            "workspaceId": WORKSPACE,
        },
        {"workspaceId": WORKSPACE, "nextToken": "n1"},
    )
    stub.add_response(
        "delete_workspace_service_account",
        {"serviceAccountId": ACCOUNT_ID, "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "serviceAccountId": ACCOUNT_ID},
    )
    app.on_event(event("Delete"))


# -- failures -----------------------------------------------------------------------------------------------------

AWS_ERRORS = [
    ("AccessDeniedException", 403),
    ("ThrottlingException", 429),
    ("ResourceNotFoundException", 404),
    ("ConflictException", 409),
    ("InternalServerException", 500),
]


def fail_n(stub: Stubber, operation: str, code: str, status: int) -> None:
    """Answer ``operation`` with ``code``: the Stubber answers before botocore's retries, so this is the final answer."""
    error(stub, operation, code, status)


@pytest.mark.parametrize(("code", "status"), AWS_ERRORS)
def test_listing_service_accounts_fails(stub: Stubber, http: FakeGrafana, code: str, status: int) -> None:
    fail_n(stub, "list_workspace_service_accounts", code, status)
    with pytest.raises(
        app.ProvisioningError, match=f"ListWorkspaceServiceAccounts for workspace {WORKSPACE} failed: {code}"
    ):
        app.on_event(event())
    assert not http.sent


@pytest.mark.parametrize(("code", "status"), AWS_ERRORS)
def test_creating_the_service_account_fails(stub: Stubber, http: FakeGrafana, code: str, status: int) -> None:
    list_accounts(stub)
    fail_n(stub, "create_workspace_service_account", code, status)
    with pytest.raises(app.ProvisioningError, match=f"CreateWorkspaceServiceAccount {ACCOUNT} .* failed: {code}"):
        app.on_event(event())


@pytest.mark.parametrize(("code", "status"), AWS_ERRORS)
def test_making_the_token_fails(stub: Stubber, http: FakeGrafana, code: str, status: int) -> None:
    existing_account(stub)
    fail_n(stub, "create_workspace_service_account_token", code, status)
    with pytest.raises(app.ProvisioningError, match=f"CreateWorkspaceServiceAccountToken .* failed: {code}"):
        app.on_event(event())
    assert not http.sent


@pytest.mark.parametrize(("code", "status"), AWS_ERRORS)
def test_deleting_the_token_fails_after_success(stub: Stubber, http: FakeGrafana, code: str, status: int) -> None:
    existing_account(stub)
    make_token(stub)
    fail_n(stub, "delete_workspace_service_account_token", code, status)
    with pytest.raises(app.ProvisioningError, match=f"DeleteWorkspaceServiceAccountToken {TOKEN_ID} .* failed: {code}"):
        app.on_event(event())


@pytest.mark.parametrize(("code", "status"), [("AccessDeniedException", 403), ("ResourceNotFoundException", 404)])
def test_update_permissions_fails(stub: Stubber, http: FakeGrafana, code: str, status: int) -> None:
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    fail_n(stub, "update_permissions", code, status)
    with pytest.raises(app.ProvisioningError, match=f"UpdatePermissions of workspace {WORKSPACE} failed: {code}"):
        app.on_event(event())


def test_update_permissions_partial_errors_fail(stub: Stubber, http: FakeGrafana) -> None:
    existing_account(stub)
    make_token(stub)
    delete_token(stub)
    add_admins(
        stub,
        ADD_GROUP,
        errors=[{"code": 404, "message": "group not found", "causedBy": ADD_GROUP[0]}],
    )
    with pytest.raises(app.ProvisioningError, match=f"refused some changes: ADD \\['{GROUP}'\\]: 404 group not found"):
        app.on_event(event())


@pytest.mark.parametrize(
    "timeout", [ConnectTimeoutError(endpoint_url="https://grafana"), ReadTimeoutError(endpoint_url="https://grafana")]
)
def test_aws_timeouts_fail(monkeypatch: pytest.MonkeyPatch, timeout: Exception) -> None:
    class TimingOut:
        def list_workspace_service_accounts(self, **kwargs: Any) -> Any:
            raise timeout

    monkeypatch.setattr(app, "grafana", TimingOut)
    with pytest.raises(app.ProvisioningError, match=r"ListWorkspaceServiceAccounts .* failed: .*timeout"):
        app.on_event(event())
    with pytest.raises(app.ProvisioningError, match="timeout"):
        app.on_event(event("Delete"))


HTTP_FAILURES: list[tuple[tuple[str, str], BaseException | int, str]] = [
    (("GET", "/api/datasources/uid/"), 401, "GET /api/datasources/uid/mlcluster-prometheus answered HTTP 401"),
    (("GET", "/api/datasources/uid/"), 500, "answered HTTP 500"),
    (("POST", "/api/datasources"), 409, 'POST /api/datasources answered HTTP 409: {"message":"nope"}'),
    (("POST", "/api/datasources"), 403, "answered HTTP 403"),
    (("POST", "/api/dashboards/db"), 400, "POST /api/dashboards/db answered HTTP 400"),
    (("POST", "/api/dashboards/db"), 502, "POST /api/dashboards/db answered HTTP 502"),
    (("POST", "/api/dashboards/db"), TimeoutError("timed out"), "POST /api/dashboards/db failed: timed out"),
    (("GET", "/api/"), urllib.error.URLError("Name or service not known"), "failed: <urlopen error Name or service"),
]


@pytest.mark.parametrize(("where", "failure", "reason"), HTTP_FAILURES)
def test_grafana_http_failures_fail_and_still_delete_the_token(
    stub: Stubber,
    http: FakeGrafana,
    caplog: pytest.LogCaptureFixture,
    where: tuple[str, str],
    failure: BaseException | int,
    reason: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    http.failures[where] = failure
    existing_account(stub)
    make_token(stub)
    delete_token(stub)  # the stubber's assert_no_pending_responses proves the delete happened
    with pytest.raises(app.ProvisioningError) as err:
        app.on_event(event())
    assert reason in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in caplog.text


def test_grafana_failure_and_token_deletion_failure_both_named(stub: Stubber, http: FakeGrafana) -> None:
    http.failures[("POST", "/api/dashboards/db")] = 500
    existing_account(stub)
    make_token(stub)
    error(stub, "delete_workspace_service_account_token", "AccessDeniedException", 403)
    with pytest.raises(app.ProvisioningError) as err:
        app.on_event(event())
    text = str(err.value)
    assert "POST /api/dashboards/db answered HTTP 500" in text
    assert f"the token {TOKEN_ID} could not be deleted either" in text and "AccessDeniedException" in text
    assert f"expires within {app.TOKEN_SECONDS} s" in text


# -- bad properties ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"WorkspaceEndpoint": ""}, "WorkspaceEndpoint: '' is not valid"),
        ({"Dashboards": "{not json"}, "Dashboards: not valid JSON"),
        ({"DataSources": json.dumps([{"name": "no uid"}])}, "DataSources: expected a JSON list of objects"),
        ({"AdminUserIds": "someone"}, "AdminUserIds: 'someone' is not valid"),
    ],
)
def test_bad_properties_fail_before_any_call(
    stub: Stubber, http: FakeGrafana, extra: dict[str, Any], reason: str
) -> None:
    with pytest.raises(app.ProvisioningError, match=reason):
        app.on_event(event(**extra))
    assert not http.sent


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"ResourceType": "Custom::Other"}, "ResourceType 'Custom::Other' is not Custom::GrafanaProvisioning"),
        ({"RequestType": "Replace"}, "RequestType 'Replace' is not one of"),
    ],
)
def test_unknown_request_fails(stub: Stubber, change: dict[str, str], reason: str) -> None:
    with pytest.raises(app.ProvisioningError, match=reason):
        app.on_event({**event(), **change})


def test_token_lives_no_longer_than_the_function_may_run() -> None:
    from mlcluster.constructs.grafana_workspace import PROVISIONER_TIMEOUT

    assert PROVISIONER_TIMEOUT.to_seconds() == app.TOKEN_SECONDS
    # Nine requests at their timeout still end before the token does.
    assert (2 * len(DATA_SOURCES) + len(DASHBOARDS)) * app.HTTP_TIMEOUT < app.TOKEN_SECONDS
