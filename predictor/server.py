"""One prediction server instance: the runtime, where its models come from (the model-update tailer, model
files, or both), the gRPC server (PredictionService, health checking, and reflection only when asked for),
llm-d's prediction API over HTTP (:mod:`predictor.llmd_api`, when ``http_port`` is set) and the Prometheus
endpoint. Explicit :meth:`start`, :meth:`wait` and a graceful :meth:`stop`; :func:`serve` runs one until
SIGTERM or SIGINT.

The gRPC server and llm-d's HTTP API speak TLS when given a certificate, and require client certificates
when given a client CA (:class:`~contract.tls.ServerTls`); the runtime serves only models signed by a
trusted key, from either source.

It binds ``settings.host`` (loopback unless told otherwise) and says so; a call holds at most
``max_rows`` rows and at most ``max_concurrent_calls`` calls are served or queued at once.

Health: ``NOT_SERVING`` until every model source has caught up (the tailer with the topic, the files with
a first look) and a model is live, then ``SERVING``; ``NOT_SERVING`` again while stopping, so load
balancers drain the instance first. The metrics port, plain HTTP whatever the listeners' TLS, says the same
at ``/readyz`` (200 or 503) and whether the process is up at ``/healthz``, for probes that speak no TLS and
hold no client certificate; every other path serves the metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent import futures
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from headroom.contract.model_update import MAX_VERSION_JUMP
from headroom.contract.topics import KafkaSettings
from headroom.http_thread import HttpThread
from headroom.predictor.file_source import ModelFileSource
from headroom.predictor.llmd_api import PredictionApi
from headroom.predictor.metrics import PredictorMetrics
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from headroom.predictor.service import PredictionServicer, server_message_options
from headroom.predictor.settings import PredictorSettings
from headroom.predictor.tailer import ModelUpdateTailer
from headroom.threads import serve_until_signal
from headroom.tls import grpc_server_credentials, server_pair, ssl_server_context

log = logging.getLogger(__name__)

SERVICE_NAME = prediction_pb2.DESCRIPTOR.services_by_name["PredictionService"].full_name


class PredictorServer:
    def __init__(self, settings: PredictorSettings, kafka: KafkaSettings | None,
                 runtime: ModelRuntime | None = None) -> None:
        self.settings = settings
        self.runtime = runtime or ModelRuntime(trust=settings.signing.trust(), engine=settings.engine or None,
                                               threads=settings.threads,
                                               max_version_jump=kafka.max_version_jump if kafka else MAX_VERSION_JUMP)
        self.metrics = PredictorMetrics(self.runtime)
        tail = kafka is not None and (not settings.models or settings.tail_with_models)
        self.tailer = ModelUpdateTailer(self.runtime, kafka, fetch_wait_ms=settings.fetch_wait_ms,
                                        on_result=self.metrics.update_applied,
                                        on_replay=self.metrics.replayed) if tail and kafka is not None else None
        self.files = ModelFileSource(self.runtime, Path(settings.models), poll_s=settings.models_poll_s) \
            if settings.models else None
        self.llmd = PredictionApi(self.runtime, pool_key=settings.http_pool_key, objective=settings.http_objective,
                                  prior_ms=settings.http_prior_ms, caught_up=self._caught_up,
                                  reload=self._reload_files, metrics=self.metrics)
        self.health = health.HealthServicer()
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.http_port: int | None = None
        self._http: HttpThread | None = None
        self._grpc: grpc.Server | None = None
        self._metrics_http: ThreadingWSGIServer | None = None
        self._stopped = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def address(self) -> str:
        host = "127.0.0.1" if self.settings.host in ("0.0.0.0", "::", "[::]") else self.settings.host
        return f"{host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.runtime.ready and self._caught_up()

    def _caught_up(self) -> bool:
        """Every model source has been read once: the tailer to the topic's end, the files."""
        tailing = self.tailer is None or (self.tailer.ready and self.tailer.error is None)
        reading = self.files is None or (self.files.ready and self.files.error is None)
        return tailing and reading

    def start(self) -> PredictorServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.settings.workers,
                                                        thread_name_prefix="predict"),
                             options=[("grpc.so_reuseport", 0), *server_message_options(self.settings.max_rows)],
                             maximum_concurrent_rpcs=self.settings.max_concurrent_calls)
        prediction_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionServicer(self.runtime, self.metrics, self.settings.max_rows), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.settings.reflection:
            reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        address = f"{self.settings.host}:{self.settings.port}"
        pair = server_pair(self.settings.tls)
        try:
            self.port = server.add_insecure_port(address) if pair is None else \
                server.add_secure_port(address, grpc_server_credentials(pair, self.settings.tls))
        except RuntimeError as err:
            raise OSError(f"cannot bind the gRPC address {address} (HEADROOM_PREDICTOR_PORT): {err}") from err
        if self.port == 0:
            raise OSError(f"cannot bind the gRPC address {address} (HEADROOM_PREDICTOR_PORT)")
        self._set_health(False)
        if self.tailer is not None:
            self.tailer.start()
        if self.files is not None:
            self.files.start()
        server.start()
        self._grpc = server
        if self.settings.http_port >= 0:
            self._http = HttpThread(self.llmd.app(), self.settings.host, self.settings.http_port, "predictor-http",
                                    grace=self.settings.grace_seconds, ssl_context=ssl_server_context(self.settings.tls))
            try:
                self.http_port = self._http.start()
            except OSError as err:
                self.stop(grace=0)
                raise OSError(f"cannot bind llm-d's prediction API on {self.settings.host}:{self.settings.http_port} "
                              f"(HEADROOM_PREDICTOR_HTTP_PORT): {err}") from err
        if self.settings.metrics_port >= 0:
            metrics_http = make_server(self.settings.host, self.settings.metrics_port, self._health_and_metrics(),
                                       ThreadingWSGIServer, handler_class=_QuietHandler)
            self._metrics_http = metrics_http
            self.metrics_port = metrics_http.server_port
            threading.Thread(target=metrics_http.serve_forever, name="predictor-metrics", daemon=True).start()
        self._watcher = threading.Thread(target=self._watch_readiness, name="predictor-health", daemon=True)
        self._watcher.start()
        log.info("predictor serving gRPC on %s:%d (%s; llm-d HTTP API port %s, metrics on %s:%s)", self.settings.host,
                 self.port, "plaintext" if pair is None else "mTLS" if self.settings.tls.client_ca_file else "TLS",
                 self.http_port, self.settings.host, self.metrics_port)
        return self

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def stop(self, grace: float | None = None) -> None:
        """Stop taking calls, let in-flight ones finish within ``grace`` seconds, then release everything."""
        if self._stopped.is_set():
            return
        self.health.enter_graceful_shutdown()
        if self._http is not None:
            self._http.stop()
        if self._grpc is not None:
            self._grpc.stop(self.settings.grace_seconds if grace is None else grace).wait()
        if self.tailer is not None:
            self.tailer.stop()
        if self.files is not None:
            self.files.stop()
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
            self._metrics_http.server_close()
        self._stopped.set()
        log.info("predictor on port %s stopped", self.port)

    def _health_and_metrics(self) -> WSGIApplication:
        """The metrics port's WSGI app: ``/readyz`` and ``/healthz``, the metrics on every other path."""
        metrics = make_wsgi_app(self.metrics.registry)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path not in ("/readyz", "/healthz"):
                exposition: Iterable[bytes] = metrics(environ, start_response)
                return exposition
            ok = self.ready if path == "/readyz" else not self._stopped.is_set()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"not ready\n"]
        return app

    def _reload_files(self) -> bool:
        """Look at the model files now (llm-d's ``POST /reload``); True when a version went live."""
        return self.files is not None and any(r.outcome is ApplyOutcome.APPLIED for r in self.files.scan())

    def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def _watch_readiness(self) -> None:
        serving = False
        while not self._stopped.wait(0.05):
            if self.ready != serving and not self._stopped.is_set():
                serving = self.ready
                self._set_health(serving)


def serve(settings: PredictorSettings, kafka: KafkaSettings | None) -> int:
    """Run one instance until SIGTERM or SIGINT, then stop gracefully."""
    return serve_until_signal(PredictorServer(settings, kafka).start(), "predictor")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: not worth a line
        pass
