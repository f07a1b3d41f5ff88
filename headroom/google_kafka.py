"""An OAUTHBEARER token provider for Google Cloud's Managed Service for Apache Kafka::

    HEADROOM_KAFKA_SECURITY_PROTOCOL=SASL_SSL
    HEADROOM_KAFKA_SASL_MECHANISM=OAUTHBEARER
    HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER=headroom.google_kafka:token

The workload's own identity signs in — Application Default Credentials, on GKE the Google service account
that Workload Identity binds to the pod's Kubernetes service account — so no key or password is mounted.
Needs ``google-auth`` (``pip install 'headroom[gcp]'``). The brokers take Google's access token wrapped in a
JWT-shaped envelope (:func:`envelope`): a header naming the ``GOOG_OAUTH2_TOKEN`` algorithm, the claims
(expiry, issue time, issuer ``Google``, scope ``kafka``, the service account as subject), and the access
token itself where a signature would be. Kafka ACLs then name ``User:<service account email>``.

>>> token = envelope("ya29.secret", expiry=1_800_000_000.0, principal="router@p.iam.gserviceaccount.com",
...                  now=1_799_996_400.0)
>>> [json.loads(_unb64(part)) for part in token.split(".")[:2]]  # doctest: +NORMALIZE_WHITESPACE
[{'typ': 'JWT', 'alg': 'GOOG_OAUTH2_TOKEN'},
 {'exp': 1800000000, 'iat': 1799996400, 'iss': 'Google', 'scope': 'kafka', 'sub': 'router@p.iam.gserviceaccount.com'}]
>>> _unb64(token.split(".")[2])
b'ya29.secret'
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
from typing import Any

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_HEADER = {"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}
_lock = threading.Lock()
_credentials: list[Any] = []  # the process's Application Default Credentials, made on first use


def envelope(access_token: str, *, expiry: float, principal: str, now: float) -> str:
    """The token Google's brokers accept for ``access_token`` of ``principal``."""
    claims = {"exp": int(expiry), "iat": int(now), "iss": "Google", "scope": "kafka", "sub": principal}
    return ".".join((_b64(json.dumps(_HEADER).encode()), _b64(json.dumps(claims).encode()), _b64(access_token.encode())))


def token() -> tuple[str, float]:
    """``(token, expiry in unix seconds)`` for this workload's Google identity, refreshed when it has expired."""
    from google.auth import default
    from google.auth.transport.requests import Request

    with _lock:
        if not _credentials:
            _credentials.append(default(scopes=[SCOPE])[0])
        credentials = _credentials[0]
        if not credentials.valid:
            credentials.refresh(Request())
        # google-auth keeps the expiry as a naive datetime in UTC
        expiry = credentials.expiry.replace(tzinfo=datetime.UTC).timestamp() if credentials.expiry else time.time() + 300
        principal = str(getattr(credentials, "service_account_email", None) or getattr(credentials, "signer_email", ""))
        return envelope(credentials.token, expiry=expiry, principal=principal, now=time.time()), expiry


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
