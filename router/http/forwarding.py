"""Headers across the proxy: what goes on to the model server, and what comes back to the client.

Hop-by-hop headers describe one connection, not the request (RFC 9110 §7.6.1): ``Connection`` and every
header it names, ``Keep-Alive``, ``Proxy-Authorization``, ``Proxy-Authenticate``, ``Proxy-Connection``,
``TE``, ``Trailer``, ``Transfer-Encoding`` and ``Upgrade``. They are never forwarded, either way, and
neither are ``Host``, ``Content-Length`` and ``Expect`` (each connection has its own; the router sends the
body at once). ``Accept-Encoding`` is not forwarded either: the router meters the response as it passes, so
it asks for it uncompressed. The
client's address is appended to ``X-Forwarded-For`` (after any addresses the client brought). Which of the
model server's response headers reach the client is :func:`router.fronts.openai_api.relayed_headers`' question.

>>> sent = [("Connection", "keep-alive, x-secret"), ("X-Secret", "1"), ("TE", "trailers"),
...         ("X-Forwarded-For", "10.0.0.9"), ("Authorization", "Bearer k"), ("X-Request-Id", "r1")]
>>> upstream_request_headers(sent, "192.0.2.7")
[('Authorization', 'Bearer k'), ('X-Request-Id', 'r1'), ('X-Forwarded-For', '10.0.0.9, 192.0.2.7')]
"""

from __future__ import annotations

from collections.abc import Sequence

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade"})
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "x-forwarded-for", "expect"}
FORWARDED_FOR = "X-Forwarded-For"


def upstream_request_headers(headers: Sequence[tuple[str, str]], peer: str | None,
                             not_forwarded: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """The client's request headers (name, value pairs) as the model server gets them, from the client at
    address ``peer``, without the (lowercase) names in ``not_forwarded`` either."""
    dropped = _NOT_FORWARDED | not_forwarded
    chain = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == "connection":  # the headers it names are hop-by-hop too
            dropped = dropped | {token.strip().lower() for token in value.split(",") if token.strip()}
        elif lowered == "x-forwarded-for" and value.strip():
            chain.append(value)
    forwarded = [(name, value) for name, value in headers if name.lower() not in dropped]
    if peer:
        chain.append(peer)
    if chain:
        forwarded.append((FORWARDED_FOR, ", ".join(chain)))
    return forwarded
