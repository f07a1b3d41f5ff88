"""Which metrics a model server really exports, so an HPA never names one the pool does not have.

The series are named where they are declared (:data:`contract.server_metrics.SERIES`, through
:class:`~contract.scaling_signals.Signal`); this module says which release exports which.

- **vLLM**: its queue (``Signal.QUEUE_SIZE``), batch size (``BATCH_SIZE``) and the KV-cache usage, whose
  name depends on the release: the older name (``GPU_CACHE_USAGE``) until 0.9; 0.10 exports both it and
  the new one (``KV_CACHE_USAGE``; the old name deprecated); 0.11 hides the old name
  (``--show-hidden-metrics-for-version=0.10`` brings it back); 0.12 removed it. No accelerator memory:
  vLLM preallocates the KV cache, so memory bytes say nothing about load.
- **JetStream**: its prefill backlog (``PREFILL_BACKLOG``, the queue), decode slots in use
  (``SLOTS_USED``, 0–1) and the TPU's HBM in use (``HBM_USED_BYTES``, ``memory_used`` from the TPU device
  plugin; on GKE also the system metric ``kubernetes.io/container/accelerator/memory_used``).
- **headroom's router** adds its own per-pod signals (``headroom_predicted_ttft_slo_ratio``) for
  any pool it routes.

:meth:`ModelServer.scaling_signals` lists the signals a recommendation searches, in the guide's order:
queue, batch, memory, then headroom's predicted-TTFT signal.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.autoscale.errors import SpecError
from headroom.contract.scaling_signals import Signal
from headroom.contract.server_metrics import JETSTREAM, KINDS, VLLM

VLLM_RENAME = (0, 10)  # the release that added KV_CACHE_USAGE's name beside GPU_CACHE_USAGE's
VLLM_OLD_NAME_HIDDEN = (0, 11)
DEFAULT_VLLM_VERSION = "0.11"


@dataclass(frozen=True)
class ModelServer:
    """A model server kind and, for vLLM, its release (``major.minor``)."""

    kind: str = VLLM
    version: str = DEFAULT_VLLM_VERSION

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"model server {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.kind == VLLM:
            _release(self.version)

    @property
    def label(self) -> str:
        return f"vLLM {self.version}" if self.kind == VLLM else "JetStream"

    @property
    def kv_cache_signal(self) -> Signal:
        """The KV-cache usage series this vLLM release exports by default."""
        return Signal.KV_CACHE_USAGE if _release(self.version) >= VLLM_RENAME else Signal.GPU_CACHE_USAGE

    @property
    def exported(self) -> tuple[Signal, ...]:
        """The series the server's own ``/metrics`` (or its accelerator's exporter) serves."""
        if self.kind == JETSTREAM:
            return (Signal.PREFILL_BACKLOG, Signal.SLOTS_USED, Signal.HBM_USED_BYTES)
        release = _release(self.version)
        usage = {Signal.KV_CACHE_USAGE} if release >= VLLM_RENAME else set()
        if release < VLLM_OLD_NAME_HIDDEN:
            usage.add(Signal.GPU_CACHE_USAGE)
        return (Signal.QUEUE_SIZE, Signal.BATCH_SIZE, *sorted(usage, key=lambda s: s.value, reverse=True))

    def scaling_signals(self, router_signals: bool = True) -> tuple[Signal, ...]:
        """Queue, batch and memory signals of this server, then headroom's predicted-TTFT ratio."""
        own = (Signal.TTFT_SLO_RATIO,) if router_signals else ()
        if self.kind == JETSTREAM:
            return (Signal.PREFILL_BACKLOG, Signal.SLOTS_USED, Signal.HBM_USED_BYTES, *own)
        return (Signal.QUEUE_SIZE, Signal.BATCH_SIZE, self.kv_cache_signal, *own)

    def serves(self, signal: Signal) -> bool:
        """Whether an HPA on this pool can find ``signal`` (headroom's own signals come from the router)."""
        return signal in self.exported or signal.headroom_own


def _release(version: str) -> tuple[int, int]:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise SpecError(f"vLLM version {version!r}: expected major.minor, e.g. 0.11") from None
