"""Client authentication by bearer token on the router's HTTP proxy and Pick API.

Tokens are read from a file (a mounted Secret), one per line; blank lines and ``#`` comments are skipped.
A request is let through when its ``authorization`` header is ``Bearer <token>`` for one of them. Every
token is compared, through its SHA-256, in constant time, so neither a token's content nor its length
shows in the time an answer takes. Refusals are counted by listener
(``headroom_router_unauthenticated_total``) and answered 401 (in OpenAI's error shape, code
``invalid_api_key``) / UNAUTHENTICATED, without saying more.

>>> tokens = BearerTokens([b"s3cret"])
>>> tokens.allows("Bearer s3cret"), tokens.allows("Bearer guess"), tokens.allows(None)
(True, False, False)
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import msgspec

from headroom.router.errors import ConfigError
from headroom.router.http_messages import Reply, Request
from headroom.router.openai_api import error_body

HEADER = "authorization"


class BearerTokens:
    """The tokens that authenticate clients."""

    def __init__(self, tokens: Iterable[bytes]) -> None:
        self._digests = [hashlib.sha256(token).digest() for token in tokens]
        if not self._digests:
            raise ConfigError("no bearer tokens: the token file holds none")

    @classmethod
    def load(cls, path: Path) -> BearerTokens:
        """The tokens of ``path`` (HEADROOM_ROUTER_AUTH_TOKENS_FILE)."""
        try:
            lines = path.read_bytes().splitlines()
        except OSError as err:
            raise ConfigError(f"HEADROOM_ROUTER_AUTH_TOKENS_FILE={path}: cannot read it ({err.strerror})") from err
        tokens = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith(b"#")]
        if not tokens:
            raise ConfigError(f"HEADROOM_ROUTER_AUTH_TOKENS_FILE={path}: the file holds no token")
        return cls(tokens)

    def allows(self, authorization: str | None) -> bool:
        """True when ``authorization`` is ``Bearer <one of the tokens>``."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        digest = hashlib.sha256(token.strip().encode()).digest()
        matched = False
        for known in self._digests:  # no early exit: every token costs the same comparison
            matched |= hmac.compare_digest(digest, known)
        return matched and scheme.lower() == "bearer"


def http_guard(tokens: BearerTokens, refused: Callable[[], None]) -> Callable[[Request, Reply], bool]:
    """A guard for the router's HTTP server: answers 401 to a request without a valid token (``refused``
    counts them) and returns whether the request may go on."""
    body = msgspec.json.encode(error_body(401, "invalid_api_key", "missing or invalid bearer token"))

    def authenticate(request: Request, reply: Reply) -> bool:
        if tokens.allows(request.header(HEADER)):
            return True
        refused()
        reply.send(401, {"content-type": "application/json", "www-authenticate": "Bearer"}, body)
        return False

    return authenticate


class GrpcBearerAuth(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # an untyped base
    """A gRPC server interceptor ending unary calls without a valid token with UNAUTHENTICATED."""

    def __init__(self, tokens: BearerTokens, refused: Callable[[], None]) -> None:
        self.tokens = tokens
        self.refused = refused

        async def deny(_request: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        metadata = dict(details.invocation_metadata or ())
        if self.tokens.allows(metadata.get(HEADER)):
            return await continuation(details)
        self.refused()
        return self._deny
