"""Signals to an ``AWS::CloudFormation::WaitCondition`` handle.

The handle's URL is a presigned S3 URL: the signal is a JSON document PUT to
it with an empty Content-Type (the header is part of the signature). The
document is kept within 4096 bytes, the limit CloudFormation sets for a
custom resource response and the one this code assumes for signals too: the
failure reason is cut to fit, dropping node details first and shortening
the service's failure message last, so what CloudFormation shows stays
readable.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Literal

MAX_SIGNAL_BYTES = 4096
_ATTEMPTS = 3
_ELLIPSIS = "..."

logger = logging.getLogger(__name__)


class SignalError(RuntimeError):
    """The signal could not be delivered to the wait handle."""


def redact(url: str) -> str:
    """The URL without its query string (the signature), for logs and messages."""
    return url.split("?", 1)[0]


def signal_body(
    status: Literal["SUCCESS", "FAILURE"],
    unique_id: str,
    data: str,
    head: str,
    message: str = "",
    tail: str = "",
    items: Sequence[str] = (),
) -> bytes:
    """The signal JSON, its ``Reason`` made of ``head``, ``message``, ``tail`` and ``items``.

    When the document would exceed ``MAX_SIGNAL_BYTES``, trailing ``items``
    are dropped (and counted), then ``message`` is shortened; ``head`` and
    ``tail`` (e.g. where the logs are) always stay.
    """

    def encode(reason: str) -> bytes:
        return json.dumps({"Status": status, "UniqueId": unique_id, "Reason": reason, "Data": data}).encode()

    def reason(msg: str, kept: int) -> str:
        listed = "; ".join(items[:kept])
        if kept < len(items):
            listed += f"{'; ' if kept else ''}(+{len(items) - kept} more)"
        return " ".join(part for part in (head, msg, tail, listed) if part)

    kept = len(items)
    while kept > 0 and len(encode(reason(message, kept))) > MAX_SIGNAL_BYTES:
        kept -= 1
    body = encode(reason(message, kept))
    if len(body) > MAX_SIGNAL_BYTES and message:
        # The longest prefix of the message that fits, found by bisection
        # (JSON escaping makes the byte cost of a character vary).
        low, high = 0, len(message)
        while low < high:
            middle = (low + high + 1) // 2
            if len(encode(reason(message[:middle] + _ELLIPSIS, kept))) <= MAX_SIGNAL_BYTES:
                low = middle
            else:
                high = middle - 1
        body = encode(reason(message[:low] + _ELLIPSIS if low else "", kept))
    return body


def send_signal(url: str, body: bytes) -> None:
    """PUT ``body`` to the presigned handle URL, retrying transient failures.

    A 4xx answer (e.g. an expired URL) is final; 5xx answers and network
    errors are retried twice with a short back-off. Raises ``SignalError``
    when the signal is not delivered: a lost signal would leave the stack
    waiting until the WaitCondition times out.
    """
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})
    last = ""
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                logger.info("signalled %s: HTTP %s", redact(url), response.status)
                return
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code} {err.reason}"
            if err.code < 500:
                break
        except (urllib.error.URLError, TimeoutError) as err:
            last = str(err)
        if attempt < _ATTEMPTS:
            time.sleep(2**attempt)
    raise SignalError(f"could not signal the wait condition handle {redact(url)}: {last}")
