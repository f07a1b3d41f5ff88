"""Errors of the local broker; each says what to do about it.

    BrokerError
     ├── PrerequisiteMissing   Java 17+, Maven or the broker files not found
     ├── PortTaken             the port belongs to another process
     └── BrokerFailed          the broker did not come up (carries the log tail)
"""

from headroom.errors import HeadroomError


class BrokerError(HeadroomError, RuntimeError):
    """The local Kafka broker could not be managed."""


class PrerequisiteMissing(BrokerError):
    """A tool the broker needs is not installed."""


class PortTaken(BrokerError):
    """A port the broker needs is used by another process."""


class BrokerFailed(BrokerError):
    """The broker process exited or never answered."""
