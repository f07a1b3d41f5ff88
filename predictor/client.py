"""The client the router uses to get predictions from one or more prediction servers.

Concurrent :meth:`PredictorClient.submit` calls that arrive within ``window_seconds`` of the first are
merged, per pool key, into one ``Predict`` RPC and the answer is sliced back to each caller. RPCs go
round-robin over the instances (:mod:`predictor.instances`: ``host:port`` targets, and ``dns:///name:port``
ones resolved to every address of the name); an instance that fails with anything but INVALID_ARGUMENT or
DEADLINE_EXCEEDED is set aside for ``backoff_seconds`` and the RPC is retried on the next one while the
callers' deadline allows.
Failures are per candidate: rows with non-finite features are never sent, and every row of a call that
could not be answered is reported with ``ok = False`` and the reason — the call itself does not raise.
Channels speak TLS when given credentials (:func:`headroom.tls.channel_credentials`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc
import numpy as np

from headroom.contract.features import FEATURE_NAMES
from headroom.predictor.instances import Instance, Instances
from headroom.predictor.proto import prediction_pb2
from headroom.predictor.service import FLOAT32_LE, GRPC_MESSAGE_OPTIONS


@dataclass(frozen=True)
class CandidatePredictions:
    """Predictions for one call's rows; ``values[(target, objective)]`` is NaN where ``ok`` is False."""

    ok: np.ndarray  # bool per row
    errors: tuple[str | None, ...]  # why each failed row failed
    values: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    versions: dict[tuple[str, str], int] = field(default_factory=dict)

    def get(self, target: str, objective: str = "mean") -> np.ndarray | None:
        return self.values.get((target, objective))

    @classmethod
    def failed(cls, rows: int, reason: str) -> CandidatePredictions:
        return cls(ok=np.zeros(rows, dtype=bool), errors=(reason,) * rows)


@dataclass
class _Call:
    pool_key: str
    rows: np.ndarray  # the finite rows that are sent
    sent: np.ndarray  # indices of those rows in the caller's batch
    n_rows: int
    errors: list[str | None]
    deadline: float
    future: Future[CandidatePredictions]


class PredictorClient:
    def __init__(self, addresses: list[str], *, window_seconds: float = 0.0003, timeout_seconds: float = 0.05,
                 backoff_seconds: float = 1.0, max_batch_rows: int = 8192, resolve_interval_s: float = 5.0,
                 credentials: grpc.ChannelCredentials | None = None, instances: Instances | None = None) -> None:
        """``addresses``: targets, see the module docstring (``instances`` replaces them, e.g. with another
        name lookup)."""
        self.instances = instances or Instances(addresses, channel_options=GRPC_MESSAGE_OPTIONS,
                                                resolve_interval_s=resolve_interval_s, credentials=credentials)
        self.window_seconds = window_seconds
        self.timeout_seconds = timeout_seconds
        self.backoff_seconds = backoff_seconds
        self.max_batch_rows = max_batch_rows
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._closed = False
        self._counting = threading.Lock()
        self.rpcs = 0  # RPCs sent, for observing coalescing
        self.calls = 0
        self._dispatcher = threading.Thread(target=self._dispatch, name="predictor-client", daemon=True)
        self._dispatcher.start()

    # --- callers -------------------------------------------------------------------------------------
    def submit(self, pool_key: str, features: np.ndarray, timeout: float | None = None) -> Future[CandidatePredictions]:
        """A future of :class:`CandidatePredictions` for the ``(n, len(FEATURE_NAMES))`` rows."""
        rows = np.asarray(features, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"expected rows of {len(FEATURE_NAMES)} features, got shape {rows.shape}")
        future: Future[CandidatePredictions] = Future()
        finite = np.asarray(np.isfinite(rows).all(axis=1))  # one flag per row
        errors: list[str | None] = [None if good else "non-finite feature value" for good in finite]
        deadline = time.monotonic() + (self.timeout_seconds if timeout is None else timeout)
        with self._counting:
            self.calls += 1
        if self._closed:
            future.set_result(CandidatePredictions.failed(len(rows), "client is closed"))
        elif not finite.any():
            future.set_result(CandidatePredictions(ok=np.zeros(len(rows), bool), errors=tuple(errors)))
        else:
            self._queue.put(_Call(pool_key, rows[finite], np.flatnonzero(finite), len(rows), errors, deadline,
                                  future))
        return future

    def predict(self, pool_key: str, features: np.ndarray, timeout: float | None = None) -> CandidatePredictions:
        """Blocking :meth:`submit`; never raises for a failed RPC (rows come back with ``ok`` False)."""
        timeout = self.timeout_seconds if timeout is None else timeout
        future = self.submit(pool_key, features, timeout)
        try:
            return future.result(timeout + 0.05)
        except TimeoutError:
            return CandidatePredictions.failed(len(features), f"no answer within the {timeout:.3f} s deadline")

    async def predict_async(self, pool_key: str, features: np.ndarray,
                            timeout: float | None = None) -> CandidatePredictions:
        return await asyncio.wrap_future(self.submit(pool_key, features, timeout))

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)
        self._dispatcher.join(5)
        self.instances.close()

    def __enter__(self) -> PredictorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- coalescing ----------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, rows = [first], len(first.rows)
            closing = False
            window_end = time.monotonic() + self.window_seconds
            while rows < self.max_batch_rows:
                remaining = window_end - time.monotonic()
                try:
                    call = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    closing = True
                    break
                batch.append(call)
                rows += len(call.rows)
            by_pool: dict[str, list[_Call]] = {}
            for call in batch:
                by_pool.setdefault(call.pool_key, []).append(call)
            for pool_key, calls in by_pool.items():
                self._send(pool_key, calls, attempt=0)
            if closing:
                return

    def _send(self, pool_key: str, calls: list[_Call], attempt: int) -> None:
        remaining = min(c.deadline for c in calls) - time.monotonic()
        if remaining <= 0:
            self._fail(calls, "deadline exceeded before an instance answered")
            return
        instance = self.instances.pick()
        if instance is None:
            self._fail(calls, "no prediction server: no target resolved to an address")
            return
        rows = np.concatenate([c.rows for c in calls]) if len(calls) > 1 else calls[0].rows
        request = prediction_pb2.PredictRequest(pool_key=pool_key, n_features=rows.shape[1],
                                                features_f32le=rows.astype(FLOAT32_LE).tobytes())
        with self._counting:
            self.rpcs += 1
            instance.calls += 1
        rpc = instance.stub.Predict.future(request, timeout=remaining)
        rpc.add_done_callback(lambda done: self._answered(done, instance, pool_key, calls, attempt))

    def _answered(self, rpc: grpc.Future, instance: Instance, pool_key: str, calls: list[_Call], attempt: int) -> None:
        try:
            response = rpc.result()
        except grpc.RpcError as err:
            code = err.code()
            if code == grpc.StatusCode.INVALID_ARGUMENT or attempt >= len(self.instances.current):
                self._fail(calls, f"{code.name}: {err.details()}")
                return
            if code != grpc.StatusCode.DEADLINE_EXCEEDED:
                self.instances.set_aside(instance, self.backoff_seconds)
            self._send(pool_key, calls, attempt + 1)
            return
        columns = {(p.target, p.objective): (p.version, np.frombuffer(p.values_f32le, dtype=FLOAT32_LE))
                   for p in response.predictions}
        start = 0
        for call in calls:
            end = start + len(call.rows)
            values = {}
            for key, (_, column) in columns.items():
                full = np.full(call.n_rows, np.nan, dtype=np.float32)
                full[call.sent] = column[start:end]
                values[key] = full
            ok = np.zeros(call.n_rows, dtype=bool)
            ok[call.sent] = True
            call.future.set_result(CandidatePredictions(
                ok=ok, errors=tuple(call.errors), values=values,
                versions={key: version for key, (version, _) in columns.items()}))
            start = end

    def _fail(self, calls: list[_Call], reason: str) -> None:
        for call in calls:
            errors = tuple(reason if error is None else error for error in call.errors)
            if not call.future.done():
                call.future.set_result(CandidatePredictions(ok=np.zeros(call.n_rows, bool), errors=errors))
