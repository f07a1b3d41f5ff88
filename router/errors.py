"""The router's errors, one small hierarchy::

    RouterError
    ├── ConfigError            the router or plugin configuration is invalid (names the key and value)
    ├── RequestError           a request carries a malformed header or body (answered with HTTP 400)
    │   ├── InvalidJson        its body is not JSON (HTTP 400, code ``invalid_json``)
    │   └── RequestTooLarge    its body is over the size limit (HTTP 413)
    ├── AdmissionRejected      a sheddable request was shed; ``reason`` is shown to the client (HTTP 429)
    ├── RequestHeld            the pipeline holds a request at the router, for ``for_s`` at most (never leaves it)
    ├── NoCandidates           no server is available to take the request (HTTP 503)
    └── PredictionUnavailable  the predictor could not answer; ``reason`` is the fallback reason counted
"""

from __future__ import annotations

from headroom.errors import HeadroomError


class RouterError(HeadroomError):
    """Base of every error the router raises on purpose."""


class ConfigError(RouterError):
    """The configuration is invalid; the message names the plugin or key and the offending value."""


class RequestError(RouterError):
    """A request header or body is malformed."""


class InvalidJson(RequestError):
    """A request body is not valid JSON."""


class RequestTooLarge(RequestError):
    """A request body is over the size limit (router.control.limits)."""


class AdmissionRejected(RouterError):
    """A sheddable request was rejected because no server is predicted to meet its SLO."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RequestHeld(RouterError):
    """The pipeline holds a request at the router for now (:meth:`~router.control.service.RouterService.place`
    waits and asks again): why, and for at most how many seconds."""

    def __init__(self, reason: str, for_s: float):
        super().__init__(reason)
        self.reason, self.for_s = reason, for_s


class NoCandidates(RouterError):
    """There is no server to route to."""


class PredictionUnavailable(RouterError):
    """The predictor gave no answer for a pool; ``reason`` is a short label such as ``warm-up``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
