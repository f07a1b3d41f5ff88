"""Leader election among router replicas: one routes, the others stand by (active/passive).

Router replicas that each saw only their own in-flight requests route worse than one router (measured
in ``docs/benchmarks.md``: the SLO attainment and p99 TTFT of 2 and 4 replicas sharing a pool). So, as the
Gateway API Inference Extension's endpoint picker does with ``--ha-enable-leader-election``, replicas
elect a leader through a ``coordination.k8s.io/v1`` Lease, and only the leader is ready (``/readyz``):
the Gateway sends its traffic to that one pod, and a standby — scraping, tailing models, warm — takes
over when the leader stops renewing.

The protocol is client-go's: every ``retry_s`` a replica reads the Lease; it holds it while it renews
it (an update conditioned on the Lease's resourceVersion, so two replicas never both win); it takes it
when the holder's record has not changed for ``lease_s`` by its own clock (so clocks need not agree);
it is the leader only while its last renewal is younger than ``renew_deadline_s`` (< ``lease_s``), so two
replicas never both believe they lead. A replica that
stops releases the Lease, so a standby takes over within ``retry_s`` instead of ``lease_s``.

The Kubernetes API is reached through one small interface (:class:`LeaseApi`); :func:`lease_api` gives
the real one.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


class LeaseApi(Protocol):
    def read(self) -> Any | None: ...  # the Lease, or None when there is none

    def write(self, lease: Any, create: bool) -> bool: ...  # False: someone else wrote it first


@dataclass(frozen=True)
class ElectionTiming:
    lease_s: float = 15.0  # a holder that has not renewed for this long may be replaced
    renew_deadline_s: float = 10.0  # a leader that could not renew for this long steps down
    retry_s: float = 2.0  # how often a replica reads (and the leader renews) the Lease

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_s:
            raise ValueError(f"leader election needs 0 < retry ({self.retry_s} s) < renew deadline "
                             f"({self.renew_deadline_s} s) < lease ({self.lease_s} s)")


class LeaderElector:
    def __init__(self, api: LeaseApi, identity: str, timing: ElectionTiming = ElectionTiming(),
                 clock: Callable[[], float] = time.time):
        self.api = api
        self.identity = identity
        self.timing = timing
        self._clock = clock
        self._renewed = float("-inf")  # when this replica last held the Lease (its clock)
        self._observed: tuple[Any, ...] = ()  # the holder record last read, and when it was first seen
        self._observed_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions = 0  # times this replica became the leader

    @property
    def leading(self) -> bool:
        return self._clock() - self._renewed < self.timing.renew_deadline_s

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop trying and give the Lease up if held, so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.leading:
            self._try(release=True)
        self._renewed = float("-inf")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._try()
            self._stop.wait(self.timing.retry_s)

    def _try(self, release: bool = False) -> None:
        """One round: acquire, renew or release the Lease, or see that another holds it."""
        was_leading = self.leading
        try:
            held = self._attempt(release)
        except Exception as err:  # the API is away: keep the last renewal, step down at its deadline
            log.warning("leader election (%s): %s", self.identity, err)
            held = None
        if held:
            self._renewed = self._clock()
            if not was_leading:
                self.transitions += 1
                log.info("router %s leads (lease held)", self.identity)
        elif held is False and was_leading:
            self._renewed = float("-inf")
            log.info("router %s stands by: the lease is another's", self.identity)

    def _attempt(self, release: bool) -> bool:
        now = self._clock()
        lease = self.api.read()
        stamp = _time_of(now)
        if lease is None:
            return not release and self.api.write(_lease_body(self.identity, stamp, stamp, 0, self.timing), True)
        spec = lease.spec
        holder = spec.holder_identity
        if (holder, spec.renew_time) != self._observed:
            self._observed, self._observed_at = (holder, spec.renew_time), now
        expired = now - self._observed_at >= (spec.lease_duration_seconds or self.timing.lease_s)
        if holder != self.identity and holder and not expired:
            return False
        if release:
            spec.holder_identity, spec.renew_time = None, None
            self.api.write(lease, False)
            return False
        if holder != self.identity:
            spec.holder_identity, spec.acquire_time = self.identity, stamp
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.renew_time = stamp
        spec.lease_duration_seconds = int(self.timing.lease_s)
        return self.api.write(lease, False)


def _time_of(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


def _lease_body(identity: str, acquired: datetime.datetime, renewed: datetime.datetime, transitions: int,
                timing: ElectionTiming) -> dict[str, Any]:
    return {"holderIdentity": identity, "acquireTime": acquired, "renewTime": renewed,
            "leaseDurationSeconds": int(timing.lease_s), "leaseTransitions": transitions}


class KubernetesLeases:
    """The Lease ``name`` in ``namespace``, through the official client (``api``: a ``CoordinationV1Api``)."""

    def __init__(self, api: Any, namespace: str, name: str):
        self.api, self.namespace, self.name = api, namespace, name

    def read(self) -> Any | None:
        from kubernetes.client.exceptions import ApiException
        try:
            return self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def write(self, lease: Any, create: bool) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        try:
            if create:
                body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                      spec=client.V1LeaseSpec(**{_SPEC_FIELDS[k]: v for k, v in lease.items()}))
                self.api.create_namespaced_lease(self.namespace, body)
            else:  # conditioned on the resourceVersion it was read at
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            if err.status in (409, 422):  # written by another replica since it was read
                return False
            raise
        return True


_SPEC_FIELDS = {"holderIdentity": "holder_identity", "acquireTime": "acquire_time", "renewTime": "renew_time",
                "leaseDurationSeconds": "lease_duration_seconds", "leaseTransitions": "lease_transitions"}


def lease_api(namespace: str, name: str, api_client: Any = None) -> KubernetesLeases:
    """The Lease through the in-cluster (or kubeconfig) configuration, unless ``api_client`` is given."""
    from kubernetes import client

    from headroom.router.state.pods import configure_kubernetes
    if api_client is None:
        configure_kubernetes("leader election")
    return KubernetesLeases(client.CoordinationV1Api(api_client), namespace, name)
