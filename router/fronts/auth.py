"""Who may use the router's listeners, and whose word becomes telemetry.

Clients of the HTTP proxy and the Pick API authenticate by bearer token. Tokens are read from a file (a
mounted Secret), one per line; blank lines and ``#`` comments are skipped. A request is let through when its
``authorization`` header is ``Bearer <token>`` for one of them. Every token is compared, through its
SHA-256, in constant time, so neither a token's content nor its length shows in the time an answer takes.
Refusals are counted by listener (``headroom_router_unauthenticated_total``) and answered 401 (in OpenAI's
error shape, code ``invalid_api_key``) / UNAUTHENTICATED, without saying more.

Telemetry is what the models learn from, so only a caller proven to be who it says may produce it where the
caller, not the router, measures the latencies (:class:`TelemetryTrust`): an ext_proc exchange only from the
gateway — a caller sending one of the gateway's own tokens, presenting over mTLS a certificate that names one
of the gateway's identities, or any caller where the network admits the gateway alone (:class:`GatewayCheck`) —
and a Pick ``Report`` only from an authenticated
client (a token, or a client certificate the listener required). The proxy measures what it relays itself.
``HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY`` lifts both rules, for a local experiment.

>>> tokens = BearerTokens([b"s3cret"])
>>> tokens.allows("Bearer s3cret"), tokens.allows("Bearer guess"), tokens.allows(None)
(True, False, False)
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import msgspec

from headroom.router.errors import ConfigError
from headroom.router.fronts.openai_api import error_body
from headroom.router.http.messages import HttpRequest, Reply

HEADER = "authorization"


class BearerTokens:
    """The tokens that authenticate clients."""

    def __init__(self, tokens: Iterable[bytes]) -> None:
        self._digests = [hashlib.sha256(token).digest() for token in tokens]
        if not self._digests:
            raise ConfigError("no bearer tokens: the token file holds none")

    @classmethod
    def load(cls, path: Path, setting: str = "HEADROOM_ROUTER_AUTH_TOKENS_FILE") -> BearerTokens:
        """The tokens of ``path`` (named by ``setting`` in errors)."""
        try:
            lines = path.read_bytes().splitlines()
        except OSError as err:
            raise ConfigError(f"{setting}={path}: cannot read it ({err.strerror})") from err
        tokens = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith(b"#")]
        if not tokens:
            raise ConfigError(f"{setting}={path}: the file holds no token")
        return cls(tokens)

    @property
    def digests(self) -> tuple[bytes, ...]:
        """The tokens' SHA-256 digests (what the compiled ext_proc front compares against)."""
        return tuple(self._digests)

    def allows(self, authorization: str | None) -> bool:
        """True when ``authorization`` is ``Bearer <one of the tokens>``."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        digest = hashlib.sha256(token.strip().encode()).digest()
        matched = False
        for known in self._digests:  # no early exit: every token costs the same comparison
            matched |= hmac.compare_digest(digest, known)
        return matched and scheme.lower() == "bearer"


def http_guard(tokens: BearerTokens, refused: Callable[[], None]) -> Callable[[HttpRequest, Reply], bool]:
    """A guard for the router's HTTP server: answers 401 to a request without a valid token (``refused``
    counts them) and returns whether the request may go on."""
    body = msgspec.json.encode(error_body(401, "invalid_api_key", "missing or invalid bearer token"))

    def authenticate(request: HttpRequest, reply: Reply) -> bool:
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


@dataclass(frozen=True)
class GatewayCheck:
    """Whether an ext_proc caller is the gateway: it sends ``authorization: Bearer <one of tokens>`` in its call
    metadata (Envoy: ``grpc_service.initial_metadata``), or its client certificate — required and verified by
    the listener's client CA — names one of ``identities`` (a DNS or URI subject alternative name, or the
    common name); or, with ``network``, any caller is, as the network admits the gateway alone."""

    tokens: BearerTokens | None = None
    identities: frozenset[str] = frozenset()
    network: bool = False

    @property
    def configured(self) -> bool:
        return self.tokens is not None or bool(self.identities) or self.network

    def proven(self, context: grpc.aio.ServicerContext) -> bool:
        if self.network:
            return True
        if self.tokens is not None and self.tokens.allows(dict(context.invocation_metadata() or ()).get(HEADER)):
            return True
        if not self.identities:
            return False
        names = context.auth_context()
        presented = {name.decode("utf-8", "replace") for key in ("x509_subject_alternative_name", "x509_common_name")
                     for name in names.get(key, ())}
        return not presented.isdisjoint(self.identities)


@dataclass(frozen=True)
class TelemetryTrust:
    """Whose exchanges become telemetry (see the module docstring): ``gateway`` checks ext_proc callers (an
    unconfigured check proves no one), ``authenticated_reports`` says whether Pick's callers are authenticated
    (by token or client certificate), and ``unauthenticated`` lifts both rules."""

    gateway: GatewayCheck = GatewayCheck()
    authenticated_reports: bool = False
    unauthenticated: bool = False

    @property
    def reports(self) -> bool:
        """Whether Pick's ``Report`` is open."""
        return self.authenticated_reports or self.unauthenticated

    def ext_proc(self, context: grpc.aio.ServicerContext) -> bool | None:
        """For an ext_proc stream: True when its exchanges become telemetry, False when they are routed without
        (no gateway credential is configured, so none was proven), None when the caller must be refused (a
        credential is configured and the caller did not prove it)."""
        if self.gateway.proven(context):
            return True
        if self.gateway.configured:
            return None
        return self.unauthenticated

    def warnings(self, pick: bool = True, ext_proc: bool = True) -> list[str]:
        """What a router started with this trust, and these listeners, should say loudly."""
        if self.unauthenticated and (pick or ext_proc):
            return ["HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY is on: any caller of ext_proc and of Pick's Report "
                    "can write the telemetry the models learn from; for a local experiment only"]
        said = []
        if ext_proc and self.gateway.network:
            said.append("ext_proc takes every caller for the gateway (HEADROOM_ROUTER_GATEWAY_BY_NETWORK): only the "
                        "network keeps others from writing telemetry through it")
        if ext_proc and not self.gateway.configured:
            said.append("ext_proc has no gateway credential (HEADROOM_ROUTER_GATEWAY_TOKENS_FILE, "
                        "HEADROOM_ROUTER_GATEWAY_IDENTITIES or HEADROOM_ROUTER_GATEWAY_BY_NETWORK): it routes, but "
                        "its exchanges produce no telemetry")
        if pick and not self.authenticated_reports:
            said.append("Pick's Report is closed: its callers are not authenticated (set "
                        "HEADROOM_ROUTER_AUTH_TOKENS_FILE or HEADROOM_TLS_CLIENT_CA_FILE)")
        return said
