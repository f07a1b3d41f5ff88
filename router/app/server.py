"""The running router: HTTP proxy, Pick API and ext_proc listeners over one :class:`RouterService`,
plus the background work (metrics scraping, server-file or pod watching, telemetry delivery, model tailing).

Lifecycle: :meth:`RouterServer.start` binds every listener and starts the background tasks;
:meth:`RouterServer.stop` stops accepting, lets requests in progress finish for ``grace_s``, then flushes
telemetry; :meth:`RouterServer.serve` does both around SIGTERM / SIGINT, and :func:`serve` runs that on
uvloop's event loop (libuv's I/O costs the proxy about half the CPU per request of asyncio's own loop).

Security (:class:`~contract.tls.ServerTls`, ``docs/security.md``): given a certificate, the HTTP, Pick and
ext_proc listeners speak TLS, and with a client CA they require client certificates. ext_proc speaks TLS by
default even without one, with a self-signed certificate (:attr:`RouterServer.ext_proc_certificate`), as the
gateway's endpoint picker does. Given a token file, the HTTP proxy and the Pick API require a bearer token.
Telemetry comes only from callers proven to be who they say (:class:`~router.fronts.auth.TelemetryTrust`): ext_proc's
from the gateway (its token or certificate identity), Pick's ``Report`` from authenticated clients; the router
says at start, as a warning, which of them it refuses. ``/metrics``, ``/healthz`` and ``/readyz`` may move to a
plain-HTTP port of their own, for probes and scrapers that hold no token or client certificate. The embedded
predictor serves models signed by a trusted key only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import random
import signal
import socket
import time
from typing import TYPE_CHECKING

import grpc
import uvloop
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.certificates import KeyPair
from headroom.contract.topics import KafkaSettings
from headroom.router.app.autoscale_signals import RouterSignals
from headroom.router.app.config import RouterConfig
from headroom.router.app.leader import LeaderElector, lease_api
from headroom.router.control.limits import RequestLimits
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.service import RouterService
from headroom.router.control.telemetry_sampler import TelemetrySampler
from headroom.router.control.telemetry_sink import KafkaTelemetry, MemoryTelemetry
from headroom.router.errors import ConfigError
from headroom.router.framework.engine import Engine
from headroom.router.framework.roles import LatencyPredictor
from headroom.router.fronts.auth import BearerTokens, GatewayCheck, GrpcBearerAuth, TelemetryTrust, http_guard
from headroom.router.fronts.ext_proc import ExtProcServicer
from headroom.router.fronts.ext_proc_front import NativeExtProc
from headroom.router.fronts.pick_api import PickServicer
from headroom.router.fronts.proxy import Proxy
from headroom.router.fronts.upstreams import UpstreamTimeouts
from headroom.router.http.messages import Routes
from headroom.router.http.server import HttpServer
from headroom.router.proto import router_pb2_grpc
from headroom.router.state.inflight import Inflight
from headroom.router.state.outliers import OutlierPolicy
from headroom.router.state.pods import PodWatcher
from headroom.router.state.pool import PoolState
from headroom.router.state.prefix_index import PrefixIndex
from headroom.router.state.scraper import MetricsScraper
from headroom.router.state.servers import ServerFile
from headroom.tls import channel_credentials, grpc_server_credentials, self_signed_pair, server_pair, ssl_server_context

if TYPE_CHECKING:
    from headroom.predictor.client import PredictorClient
    from headroom.predictor.tailer import ModelUpdateTailer

log = logging.getLogger(__name__)


class RouterServer:
    def __init__(self, config: RouterConfig, kafka: KafkaSettings, *, predictor: LatencyPredictor | None = None):
        """``predictor`` overrides the one the settings describe (``embedded`` tails models from Kafka)."""
        self.config = config
        self.kafka = kafka
        s = config.settings
        self.server_file = ServerFile(config.servers_file) if config.servers_file else None
        self.pods = PodWatcher(config.pods) if config.pods else None
        servers = self.server_file.servers if self.server_file else config.servers
        self.pool = PoolState(servers, inflight=Inflight(s.inflight_ttl_s), prefix=PrefixIndex(s.prefix_max_blocks),
                              unhealthy_after_s=s.unhealthy_after_s, outliers=OutlierPolicy(
                                  s.outlier_failures, s.outlier_ejection_s, s.outlier_max_ejection_s,
                                  s.outlier_max_ejected_fraction, relative_factor=s.outlier_relative_factor))
        self.telemetry = KafkaTelemetry(kafka, s.telemetry_buffer) if s.telemetry else MemoryTelemetry()
        self._tailer: ModelUpdateTailer | None = None
        self._client: PredictorClient | None = None
        self.tokens = BearerTokens.load(s.auth_tokens_file) if s.auth_tokens_file else None
        self.trust = TelemetryTrust(
            GatewayCheck(BearerTokens.load(s.gateway_tokens_file, "HEADROOM_ROUTER_GATEWAY_TOKENS_FILE")
                         if s.gateway_tokens_file else None,
                         frozenset(name.strip() for name in s.gateway_identities.split(",") if name.strip()),
                         s.gateway_by_network),
            authenticated_reports=self.tokens is not None or s.tls.client_ca_file is not None,
            unauthenticated=s.unauthenticated_telemetry)
        self.metrics = RouterMetrics()
        if predictor is None and s.predictor == "embedded":
            predictor = self._embedded_predictor()
        elif predictor is None and s.predictor == "remote":
            predictor = self._remote_predictor()
        if isinstance(self.telemetry, KafkaTelemetry):
            self.metrics.report_telemetry(self.telemetry.counts)
        self.metrics.report_corrections(lambda: self.pool.latency_corrections(time.monotonic()))
        limits = RequestLimits(s.max_body_bytes, s.max_json_depth, s.max_hashed_tokens, s.max_block_hashes,
                               s.max_candidates)
        self.service = RouterService(Engine(config.pipeline), self.pool, self.telemetry, self.metrics,
                                     predictor=predictor, rng=random.Random(None if s.seed < 0 else s.seed),
                                     limits=limits,
                                     sampler=TelemetrySampler(s.telemetry_stratum_quota, s.telemetry_sample_floor)
                                     if s.telemetry_stratum_quota > 0 else None)
        self.scraper = MetricsScraper(self.pool, s.scrape_interval_s, s.scrape_timeout_s, self.service.held.wake)
        self.signals = RouterSignals(self.metrics.registry, predictor,
                                     ttft_slo_ms=s.autoscale_ttft_slo_ms or None,
                                     reference_prompt_tokens=s.autoscale_reference_prompt_tokens,
                                     memory_capacity_gib=s.accelerator_memory_gib)
        self.elector = self._leader_elector() if s.leader_election else None
        self.proxy = Proxy(self.service, timeouts=UpstreamTimeouts(
            s.upstream_connect_timeout_s, s.upstream_first_byte_timeout_s, s.upstream_idle_timeout_s,
            s.upstream_timeout_s, s.upstream_pool_idle_s, s.upstream_first_byte_factor, s.upstream_first_byte_min_s,
            s.upstream_first_byte_max_s), retries=s.upstream_retries,
            metrics_routes=s.metrics_port < 0,
            strip_authorization=self.tokens is not None, ready=self._ready)
        self.http_port = self.pick_port = self.ext_proc_port = self.metrics_port = 0
        self.ext_proc_certificate: bytes | None = None  # PEM of the certificate ext_proc serves, when it speaks TLS
        self._http: list[HttpServer] = []
        self._grpc: list[grpc.aio.Server] = []
        self._native: NativeExtProc | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    def _embedded_predictor(self) -> LatencyPredictor:
        from headroom.predictor.runtime import ModelRuntime
        from headroom.predictor.tailer import ModelUpdateTailer
        from headroom.router.control.metrics import ModelUpdateCollector
        from headroom.router.framework.predictors import EmbeddedPredictor
        runtime = ModelRuntime(trust=self.config.settings.signing.trust(), max_version_jump=self.kafka.max_version_jump)
        self.metrics.registry.register(ModelUpdateCollector(runtime))
        self._tailer = ModelUpdateTailer(runtime, self.kafka)
        return EmbeddedPredictor(runtime)

    def _ready(self) -> bool:
        """Whether this router should get traffic: always, or with leader election while it leads."""
        return self.elector is None or self.elector.leading

    def _leader_elector(self) -> LeaderElector:
        s = self.config.settings
        namespace = s.leader_namespace or (self.config.pods.namespace if self.config.pods else "default")
        return LeaderElector(lease_api(namespace, s.leader_lease), s.identity or f"{socket.gethostname()}-{os.getpid()}")

    def _remote_predictor(self) -> LatencyPredictor:
        from headroom.predictor.client import PredictorClient
        from headroom.router.framework.predictors import RemotePredictor
        s = self.config.settings
        addresses = [a.strip() for a in s.predictor_addresses.split(",") if a.strip()]
        self._client = PredictorClient(addresses, timeout_seconds=s.predictor_timeout_s,
                                       credentials=channel_credentials(s.predictor_tls))
        return RemotePredictor(self._client)

    async def start(self) -> None:
        s = self.config.settings
        if self._tailer is not None:
            self._tailer.start()
        if self.elector is not None:
            self.elector.start()
        if self.pods is not None:
            await asyncio.to_thread(self.pods.start)
        try:
            pair = await self._listen()
        except ConfigError:  # a port taken: nothing half started is left behind
            await self.stop(grace_s=0, flush_s=0)
            raise
        self._tasks = [asyncio.create_task(self.scraper.run(self._stop), name="scraper"),
                       asyncio.create_task(self._background(), name="router-background"),
                       asyncio.create_task(self._autoscale_signals(), name="autoscale-signals")]
        log.info("router listening: http %d%s, pick %d, ext_proc %d (%s, %s); metrics %s; client tokens %s",
                 self.http_port, " (TLS)" if pair else "", self.pick_port, self.ext_proc_port,
                 "TLS" if self.ext_proc_certificate else "plaintext", s.ext_proc_front,
                 self.metrics_port or "on the HTTP port", "required" if self.tokens else "off")
        for warning in self.trust.warnings(s.pick_port >= 0, s.ext_proc_port >= 0):
            log.warning("%s", warning)

    async def _listen(self) -> KeyPair | None:
        """Bind and start every listener; returns the listeners' certificate. A port that cannot be bound is a
        :class:`ConfigError` naming its setting."""
        s = self.config.settings
        guard = http_guard(self.tokens, self.metrics.unauthenticated.labels("http").inc) if self.tokens else None
        self.http_port = await self._serve_http(self.proxy.routes(guard), s.http_port, "HEADROOM_ROUTER_HTTP_PORT",
                                                tls=True, listener="http")
        if s.metrics_port >= 0:
            self.metrics_port = await self._serve_http(self.proxy.metrics_only(), s.metrics_port,
                                                       "HEADROOM_ROUTER_METRICS_PORT", tls=False, listener="metrics")
        pair = server_pair(s.tls)
        # a message holds at most a body within the limit and its scheduling inputs (router.control.limits); a connection
        # beyond the limit is closed as it opens, one without a call for keepAliveS closed (GOAWAY); a port another
        # process holds is refused, not shared (gRPC would otherwise bind it with SO_REUSEPORT)
        grpc_options = [("grpc.max_receive_message_length", s.max_body_bytes + 1024 * 1024),
                        ("grpc.max_allowed_incoming_connections", s.max_connections),
                        ("grpc.max_connection_idle_ms", int(s.keep_alive_s * 1000)), ("grpc.so_reuseport", 0)]
        if s.pick_port >= 0:
            interceptors = [GrpcBearerAuth(self.tokens, self.metrics.unauthenticated.labels("pick").inc)] \
                if self.tokens is not None else []
            server = grpc.aio.server(interceptors=interceptors, options=grpc_options)
            router_pb2_grpc.add_RouterServicer_to_server(PickServicer(self.service, reports=self.trust.reports),
                                                         server)
            self.pick_port = self._bind(server, s.pick_port, "HEADROOM_ROUTER_PICK_PORT", pair)
            await server.start()
            self._grpc.append(server)
        if s.ext_proc_port >= 0:
            ext_proc_pair = (pair or self_signed_pair(s.host)) if s.ext_proc_secure else None
            self.ext_proc_certificate = ext_proc_pair.certificate_pem if ext_proc_pair else None
            if s.ext_proc_front == "native":
                self.ext_proc_port = self._serve_native(ext_proc_pair)
            else:
                server = grpc.aio.server(options=grpc_options)
                ep_grpc.add_ExternalProcessorServicer_to_server(
                    ExtProcServicer(self.service, s.ext_proc_body_mode, self.trust), server)
                self.ext_proc_port = self._bind(server, s.ext_proc_port, "HEADROOM_ROUTER_EXT_PROC_PORT",
                                                ext_proc_pair)
                await server.start()
                self._grpc.append(server)
        return pair

    def _serve_native(self, pair: KeyPair | None) -> int:
        """Serve ext_proc with the compiled front (:mod:`router.fronts.ext_proc_front`), under the grpcio listener's limits
        and ``self.trust``."""
        s = self.config.settings
        setting = "HEADROOM_ROUTER_EXT_PROC_PORT"
        self._check_free(s.ext_proc_port, setting)
        self._native = NativeExtProc(self.service, s.ext_proc_body_mode, self.trust)
        try:
            return self._native.start(
                s.host, s.ext_proc_port, pair=pair, max_connections=s.max_connections,
                client_ca=s.tls.client_ca_file.read_bytes() if pair and s.tls.client_ca_file else None,
                max_message_bytes=s.max_body_bytes + 1024 * 1024, idle_s=s.keep_alive_s)
        except OSError as err:
            raise ConfigError(f"cannot listen on {s.host}:{s.ext_proc_port} ({setting}): {err.strerror or err}") \
                from err

    async def _serve_http(self, routes: Routes, port: int, setting: str, *, tls: bool, listener: str) -> int:
        """Serve ``routes`` on ``port`` (TLS with the listener certificate when ``tls`` and there is one)."""
        s = self.config.settings
        server = HttpServer(routes, s.max_body_bytes, s.keep_alive_s, max_head_bytes=s.max_head_bytes,
                            max_headers=s.max_headers, request_s=s.request_arrival_s, max_connections=s.max_connections,
                            on_refused=self.metrics.connections_refused.labels(listener).inc)
        try:
            bound = await server.start(s.host, port, ssl_server_context(s.tls) if tls else None)
        except OSError as err:
            raise ConfigError(f"cannot listen on {s.host}:{port} ({setting}): {err.strerror or err}") from err
        self._http.append(server)
        return bound

    def _bind(self, server: grpc.aio.Server, port: int, setting: str, pair: KeyPair | None) -> int:
        address = f"{self.config.settings.host}:{port}"
        self._check_free(port, setting)
        try:
            if pair is None:
                bound: int = server.add_insecure_port(address)
            else:
                bound = server.add_secure_port(address, grpc_server_credentials(pair, self.config.settings.tls))
        except RuntimeError as err:  # grpc says no more than that it failed
            raise ConfigError(f"cannot listen on {address} ({setting}): the port is taken, or the address is not "
                              "this machine's") from err
        return bound

    def _check_free(self, port: int, setting: str) -> None:
        """A taken port said plainly (a :class:`ConfigError` naming ``setting``), before a gRPC server tries it (and
        writes its own lines to stderr)."""
        host = self.config.settings.host
        if port:
            try:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                socket.create_server((host.strip("[]"), port), family=family).close()
            except OSError as err:
                raise ConfigError(f"cannot listen on {host}:{port} ({setting}): {err.strerror or err}") from err

    async def _autoscale_signals(self) -> None:
        every = self.config.settings.autoscale_refresh_s
        while not self._stop.is_set():
            await asyncio.to_thread(self.signals.publish, *self.signals.read(self.pool, time.monotonic()))
            try:
                await asyncio.wait_for(self._stop.wait(), every)
            except TimeoutError:
                pass

    async def _background(self) -> None:
        poll_s = self.config.settings.server_file_poll_s
        next_file_check = 0.0
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            if isinstance(self.telemetry, KafkaTelemetry):
                self.telemetry.poll()
                self.metrics.telemetry_buffered.set(self.telemetry.buffered)
            if self.server_file is not None and loop.time() >= next_file_check:
                next_file_check = loop.time() + poll_s
                if self.server_file.refresh():
                    self.pool.set_servers(self.server_file.servers)
                    log.info("server list changed: %d servers", len(self.server_file.servers))
            if self.pods is not None and self.pods.refresh():
                self.pool.set_servers(self.pods.servers)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=0.05)

    async def stop(self, grace_s: float = 5.0, flush_s: float = 5.0) -> None:
        if self.elector is not None:  # give the lease up first: a standby takes the traffic while this drains
            await asyncio.to_thread(self.elector.stop)
        await asyncio.gather(*(server.stop(grace_s) for server in self._grpc),
                             *([self._native.stop(grace_s)] if self._native else []))
        await asyncio.gather(*(server.close(grace_s) for server in self._http))
        self.proxy.close()
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._tailer is not None:
            await asyncio.to_thread(self._tailer.stop)
        if self.pods is not None:
            await asyncio.to_thread(self.pods.stop)
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
        if isinstance(self.telemetry, KafkaTelemetry):
            left = await asyncio.to_thread(self.telemetry.flush, flush_s)
            if left:
                log.warning("%d telemetry records were not delivered before shutdown", left)

    async def serve(self, grace_s: float = 5.0) -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await self.start()
        gc.freeze()  # what start-up made lives as long as the process: a full collection no longer walks it
        await stopping.wait()
        log.info("router stopping: %d requests in flight get up to %g s to finish", len(self.pool.inflight), grace_s)
        await self.stop(grace_s)
        log.info("router stopped")


def serve(server: RouterServer) -> None:
    """Run ``server`` until SIGTERM or SIGINT on uvloop's event loop."""
    uvloop.run(server.serve())
