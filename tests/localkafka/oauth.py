"""An OAUTHBEARER token provider (``HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER=tests.localkafka.oauth:token``):
JWTs for :data:`SUBJECT` from the local issuer of the secure test broker set in :data:`BROKER`."""

from __future__ import annotations

from headroom.localkafka.security import mint_token
from headroom.localkafka.settings import BrokerSettings

BROKER: BrokerSettings | None = None
SUBJECT = "headroom-router"
issued = 0  # tokens handed out, to show the provider was asked


def token() -> tuple[str, float]:
    global issued
    assert BROKER is not None, "set tests.localkafka.oauth.BROKER first"
    issued += 1
    return mint_token(BROKER, SUBJECT)
