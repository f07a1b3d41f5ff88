"""A blocking JSON client for the tests of the llm-d HTTP APIs."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def call(base: str, path: str, body: Any = None, *, method: str | None = None, raw: bytes | None = None,
         timeout: float = 30.0, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    """``(status, decoded JSON body)`` of one request; ``body`` is sent as JSON (POST), ``raw`` as is."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method or ("GET" if data is None else "POST"),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, _decode(response.read())
    except urllib.error.HTTPError as err:
        return err.code, _decode(err.read())


def _decode(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode()
