"""Entry point ``on_event`` (CDK Provider framework) of ``Custom::GrafanaProvisioning``.

Create and Update: find or create the workspace's service account
``ServiceAccountName`` (Grafana role Admin, which data sources need), make a
token for it that lives ``TOKEN_SECONDS`` (no longer than this function may
run), write every data source (by its fixed uid: update when it exists,
create otherwise) and every dashboard (``overwrite``) through Grafana's HTTP
API, then delete the token, also when a step failed. Then the IAM Identity
Center users and groups of ``AdminUserIds``/``AdminGroupIds`` are made
Grafana Admins (grafana:UpdatePermissions) and those dropped since the last
deployment lose the role. Delete: remove the service account (its tokens go
with it); a workspace already gone counts as done.

The token is held in a local variable and sent only in the Authorization
header of requests to the workspace: it is never logged, returned in
``Data`` or put in the function's environment. Any failure (an AWS error
after botocore's retries, a timeout, an HTTP error from Grafana) raises, and
the Provider framework answers FAILED with the message as the reason.

Properties: ``WorkspaceId``, ``WorkspaceEndpoint`` (host name),
``ServiceAccountName``, ``DataSources`` and ``Dashboards`` (JSON lists of
Grafana's models), ``AdminUserIds`` and ``AdminGroupIds`` (lists).
"""

from __future__ import annotations

import functools
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_grafana import ManagedGrafanaClient

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

RESOURCE_TYPE = "Custom::GrafanaProvisioning"
#: The token's lifetime: the function's timeout, so a token whose deletion failed dies with the invocation.
TOKEN_SECONDS = 180
#: Seconds to wait for one Grafana HTTP request (nine requests and the AWS calls fit in TOKEN_SECONDS).
HTTP_TIMEOUT = 10
#: Most characters of an error body quoted in a failure reason.
ERROR_BODY_CHARS = 300
#: Standard retries (throttling included, jittered back-off) and bounded connect/read times.
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10, read_timeout=20, parameter_validation=True
)

#: Replaced by tests with a fake HTTP layer: ``open_url(request, timeout=...)`` like ``urllib.request.urlopen``.
open_url: Callable[..., Any] = urllib.request.urlopen


class ProvisioningError(RuntimeError):
    """A step failed; the message is the reason CloudFormation shows."""


@functools.cache
def grafana() -> ManagedGrafanaClient:
    """The Amazon Managed Grafana control-plane client, made on first use."""
    return boto3.session.Session().client("grafana", config=CLIENT_CONFIG)


def on_event(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """Create/Update: provision the workspace; Delete: remove the service account."""
    request = event.get("RequestType")
    kind = event.get("ResourceType")
    logger.info("%s %s %s", request, kind, event.get("LogicalResourceId"))
    if kind != RESOURCE_TYPE:
        raise ProvisioningError(f"ResourceType {kind!r} is not {RESOURCE_TYPE}")
    props = event.get("ResourceProperties") or {}
    workspace = _text(props, "WorkspaceId")
    account_name = _text(props, "ServiceAccountName")
    if request == "Delete":
        _delete_service_account(workspace, account_name)
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if request not in ("Create", "Update"):
        raise ProvisioningError(f"RequestType {request!r} is not one of Create, Update, Delete")
    endpoint = _text(props, "WorkspaceEndpoint")
    data_sources = _json_list(props, "DataSources")
    dashboards = _json_list(props, "Dashboards")
    admins = _admins(props)
    old_props = event.get("OldResourceProperties") or {}
    # Admins dropped from the file lose the role; a replaced workspace starts without any to revoke.
    same_workspace = request == "Update" and old_props.get("WorkspaceId") == workspace
    old_admins = _admins(old_props) if same_workspace else set()

    account_id = _service_account(workspace, account_name)
    _with_token(workspace, endpoint, account_id, lambda api: _provision(api, data_sources, dashboards))
    _update_admins(workspace, admins, old_admins)
    return {
        "PhysicalResourceId": f"{workspace}-provisioning",
        "Data": {
            "DataSourceUids": ",".join(str(d.get("uid")) for d in data_sources),
            "DashboardUids": ",".join(str(d.get("uid")) for d in dashboards),
        },
    }


# -- properties ---------------------------------------------------------------


def _text(props: Mapping[str, Any], key: str) -> str:
    value = props.get(key)
    if not isinstance(value, str) or not value:
        raise ProvisioningError(f"{key}: {value!r} is not valid; expected a non-empty string")
    return value


def _json_list(props: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(_text(props, key))
    except json.JSONDecodeError as err:
        raise ProvisioningError(f"{key}: not valid JSON ({err})") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) and v.get("uid") for v in value):
        raise ProvisioningError(f"{key}: expected a JSON list of objects, each with a uid")
    return value


def _admins(props: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The (type, id) pairs UpdatePermissions names: SSO_USER and SSO_GROUP."""
    pairs: set[tuple[str, str]] = set()
    for key, kind in (("AdminUserIds", "SSO_USER"), ("AdminGroupIds", "SSO_GROUP")):
        ids = props.get(key) or []
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ProvisioningError(f"{key}: {ids!r} is not valid; expected a list of IAM Identity Center ids")
        pairs.update((kind, i) for i in ids)
    return pairs


# -- AWS calls ----------------------------------------------------------------


def _aws(operation: str, call: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """``call(**kwargs)``; any AWS error or timeout becomes a ProvisioningError naming ``operation``."""
    try:
        return dict(call(**kwargs))
    except ClientError as err:
        error = err.response.get("Error", {})
        raise ProvisioningError(
            f"{operation} failed: {error.get('Code', 'Error')}: {error.get('Message', str(err))}"
        ) from err
    except BotoCoreError as err:  # timeouts, unreachable endpoint
        raise ProvisioningError(f"{operation} failed: {err}") from err


def _is_not_found(err: ProvisioningError) -> bool:
    cause = err.__cause__
    return isinstance(cause, ClientError) and cause.response.get("Error", {}).get("Code") == (
        "ResourceNotFoundException"
    )


def _find_service_account(workspace: str, name: str) -> str | None:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"workspaceId": workspace}
        if token:
            kwargs["nextToken"] = token
        operation = f"ListWorkspaceServiceAccounts for workspace {workspace}"
        page = _aws(operation, grafana().list_workspace_service_accounts, **kwargs)
        for account in page.get("serviceAccounts", []):
            if account.get("name") == name:
                return str(account["id"])
        token = page.get("nextToken")
        if not token:
            return None


def _service_account(workspace: str, name: str) -> str:
    """The id of service account ``name`` (role Admin), created when missing."""
    existing = _find_service_account(workspace, name)
    if existing is not None:
        return existing
    created = _aws(
        f"CreateWorkspaceServiceAccount {name} in workspace {workspace}",
        grafana().create_workspace_service_account,
        workspaceId=workspace,
        name=name,
        grafanaRole="ADMIN",
    )
    logger.info("created service account %s (%s)", name, created["id"])
    return str(created["id"])


def _delete_service_account(workspace: str, name: str) -> None:
    try:
        account = _find_service_account(workspace, name)
        if account is None:
            logger.info("no service account %s in workspace %s: nothing to delete", name, workspace)
            return
        _aws(
            f"DeleteWorkspaceServiceAccount {name} in workspace {workspace}",
            grafana().delete_workspace_service_account,
            workspaceId=workspace,
            serviceAccountId=account,
        )
    except ProvisioningError as err:
        if not _is_not_found(err):
            raise
        logger.info("workspace %s or its service account is gone: nothing to delete (%s)", workspace, err)


def _with_token(workspace: str, endpoint: str, account: str, work: Callable[[GrafanaApi], None]) -> None:
    """Run ``work`` with a short-lived token of ``account``; delete the token afterwards, whatever happened."""
    created = _aws(
        f"CreateWorkspaceServiceAccountToken in workspace {workspace}",
        grafana().create_workspace_service_account_token,
        workspaceId=workspace,
        serviceAccountId=account,
        name="mlcluster-provisioning",
        secondsToLive=TOKEN_SECONDS,
    )
    token = created["serviceAccountToken"]
    token_id = str(token["id"])
    logger.info("made token %s of service account %s, living %s s", token_id, account, TOKEN_SECONDS)
    try:
        work(GrafanaApi(endpoint, str(token["key"])))
    except Exception as err:
        try:
            _delete_token(workspace, account, token_id)
        except ProvisioningError as cleanup:
            raise ProvisioningError(
                f"{err}; the token {token_id} could not be deleted either ({cleanup}); it expires within "
                f"{TOKEN_SECONDS} s"
            ) from err
        raise
    _delete_token(workspace, account, token_id)


def _delete_token(workspace: str, account: str, token_id: str) -> None:
    _aws(
        f"DeleteWorkspaceServiceAccountToken {token_id} in workspace {workspace}",
        grafana().delete_workspace_service_account_token,
        workspaceId=workspace,
        serviceAccountId=account,
        tokenId=token_id,
    )
    logger.info("deleted token %s", token_id)


def _update_admins(workspace: str, admins: set[tuple[str, str]], old: set[tuple[str, str]]) -> None:
    """Make ``admins`` Grafana Admins and revoke the role from those only in ``old``."""
    instructions = []
    for action, pairs in (("ADD", admins), ("REVOKE", old - admins)):
        if pairs:
            users = [{"type": kind, "id": ident} for kind, ident in sorted(pairs)]
            instructions.append({"action": action, "role": "ADMIN", "users": users})
    if not instructions:
        return
    answer = _aws(
        f"UpdatePermissions of workspace {workspace}",
        grafana().update_permissions,
        workspaceId=workspace,
        updateInstructionBatch=instructions,
    )
    errors = answer.get("errors") or []
    if errors:
        details = "; ".join(
            f"{e.get('causedBy', {}).get('action')} {[u.get('id') for u in e.get('causedBy', {}).get('users', [])]}: "
            f"{e.get('code')} {e.get('message')}"
            for e in errors
        )
        raise ProvisioningError(f"UpdatePermissions of workspace {workspace} refused some changes: {details}")


# -- Grafana's HTTP API ---------------------------------------------------------


class GrafanaApi:
    """Grafana's HTTP API of one workspace, called with a bearer token."""

    def __init__(self, endpoint: str, token: str) -> None:
        """``endpoint`` is the workspace's host name; ``token`` a service-account token (kept private)."""
        self._base = f"https://{endpoint}"
        self._token = token

    def call(self, method: str, path: str, body: object = None, *, missing_ok: bool = False) -> Any:
        """One request; the decoded JSON answer, or None for a 404 when ``missing_ok``."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._base + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with open_url(request, timeout=HTTP_TIMEOUT) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            if missing_ok and err.code == 404:
                return None
            detail = err.read()[:ERROR_BODY_CHARS].decode("utf-8", "replace")
            raise ProvisioningError(f"Grafana {method} {path} answered HTTP {err.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            raise ProvisioningError(f"Grafana {method} {path} failed: {err}") from None
        return json.loads(raw) if raw else None


def _provision(api: GrafanaApi, data_sources: Iterable[dict[str, Any]], dashboards: Iterable[dict[str, Any]]) -> None:
    for source in data_sources:
        path = f"/api/datasources/uid/{urllib.parse.quote(str(source['uid']), safe='')}"
        if api.call("GET", path, missing_ok=True) is None:
            api.call("POST", "/api/datasources", source)
            logger.info("created data source %s", source["uid"])
        else:
            api.call("PUT", path, source)
            logger.info("updated data source %s", source["uid"])
    for dashboard in dashboards:
        api.call(
            "POST",
            "/api/dashboards/db",
            {"dashboard": {**dashboard, "id": None}, "overwrite": True, "message": "provisioned by mlcluster"},
        )
        logger.info("wrote dashboard %s", dashboard["uid"])
