"""headroom: predicted-latency routing for LLM inference pools, latency models learned online from Kafka
telemetry, and autoscaling guidance.

Each top-level folder of the source tree (``router/``, ``streams/``, ``contract/``, ...) installs as a
subpackage of this one (``headroom.router``, ``headroom.streams``, ...), so no generic module name lands
in site-packages.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("headroom")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
