"""What the router's OpenAI-compatible surface promises clients, declared once: the error body, the
upstream response headers relayed to the client, and ``/v1/models`` as the union of the servers' lists.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the type OpenAI uses
for the status (``invalid_request_error`` for 4xx, ``requests`` for 429, ``server_error`` for 5xx) and a
short string ``code`` saying which of the router's errors it is.

>>> error_body(429, "admission_rejected", "no server meets the SLO")["error"]["type"]
'requests'
>>> relayed_headers({"x-request-id": "r1", "x-ratelimit-remaining-requests": "9", "server": "uvicorn"})
{'x-request-id': 'r1', 'x-ratelimit-remaining-requests': '9'}
>>> merge_models([[{"id": "m", "object": "model"}], [{"id": "m", "object": "model"}, {"id": "n"}]])
{'object': 'list', 'data': [{'id': 'm', 'object': 'model'}, {'id': 'n'}]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Response headers of a model server that clients read (request ids for support and tracing, rate-limit
# state and back-off, OpenAI's processing metadata); everything else the router answers itself.
RELAYED = frozenset({"x-request-id", "retry-after", "retry-after-ms", "openai-processing-ms", "openai-version",
                     "openai-organization", "openai-model"})
RELAYED_PREFIXES = ("x-ratelimit-",)


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if status == 429:
        return "requests"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """The JSON body of an error the router answers itself."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def relayed_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """The upstream response headers (a mapping or pairs) that go back to the client, names lowercased."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out = {}
    for name, value in pairs:
        lowered = name.lower()
        if lowered in RELAYED or lowered.startswith(RELAYED_PREFIXES):
            out[lowered] = value
    return out


def merge_models(lists: Iterable[Iterable[Mapping[str, Any]]]) -> dict[str, Any]:
    """``/v1/models``: every model any server lists, once (the first server's entry), in order of appearance."""
    seen: dict[str, Mapping[str, Any]] = {}
    for models in lists:
        for model in models:
            seen.setdefault(str(model.get("id")), model)
    return {"object": "list", "data": [dict(model) for model in seen.values()]}
