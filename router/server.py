"""The running router: HTTP proxy, Pick API and ext_proc listeners over one :class:`RouterService`,
plus the background work (metrics scraping, server-file or pod watching, telemetry delivery, model tailing).

Lifecycle: :meth:`RouterServer.start` binds every listener and starts the background tasks;
:meth:`RouterServer.stop` stops accepting, lets requests in progress finish for ``grace_s``, then flushes
telemetry; :meth:`RouterServer.serve` does both around SIGTERM / SIGINT, and :func:`serve` runs that on
uvloop's event loop (libuv's I/O costs the proxy about half the CPU per request of asyncio's own loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
from typing import TYPE_CHECKING

import grpc
import uvloop
from aiohttp import web
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.topics import KafkaSettings
from headroom.router.autoscale_signals import RouterSignals
from headroom.router.config import RouterConfig
from headroom.router.engine import Engine
from headroom.router.ext_proc import ExtProcServicer
from headroom.router.metrics import RouterMetrics
from headroom.router.pick_api import PickServicer
from headroom.router.proto import router_pb2_grpc
from headroom.router.proxy import Proxy
from headroom.router.roles import LatencyPredictor
from headroom.router.service import RouterService
from headroom.router.state.inflight import Inflight
from headroom.router.state.pods import PodWatcher
from headroom.router.state.pool import PoolState
from headroom.router.state.prefix_index import PrefixIndex
from headroom.router.state.scraper import MetricsScraper
from headroom.router.state.servers import ServerFile
from headroom.router.telemetry_sink import KafkaTelemetry, MemoryTelemetry

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
                              unhealthy_after_s=s.unhealthy_after_s)
        self.telemetry = KafkaTelemetry(kafka, s.telemetry_buffer) if s.telemetry else MemoryTelemetry()
        self._tailer: ModelUpdateTailer | None = None
        self._client: PredictorClient | None = None
        if predictor is None and s.predictor == "embedded":
            predictor = self._embedded_predictor()
        elif predictor is None and s.predictor == "remote":
            predictor = self._remote_predictor()
        self.metrics = RouterMetrics()
        if isinstance(self.telemetry, KafkaTelemetry):
            self.metrics.report_telemetry(self.telemetry.counts)
        self.service = RouterService(Engine(config.pipeline), self.pool, self.telemetry, self.metrics,
                                     predictor=predictor, rng=random.Random(None if s.seed < 0 else s.seed))
        self.scraper = MetricsScraper(self.pool, s.scrape_interval_s, s.scrape_timeout_s)
        self.signals = RouterSignals(self.metrics.registry, predictor,
                                     ttft_slo_ms=s.autoscale_ttft_slo_ms or None,
                                     reference_prompt_tokens=s.autoscale_reference_prompt_tokens,
                                     memory_capacity_gib=s.accelerator_memory_gib)
        self.proxy = Proxy(self.service, s.upstream_timeout_s)
        self.http_port = self.pick_port = self.ext_proc_port = 0
        self._runner: web.AppRunner | None = None
        self._grpc: list[grpc.aio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    def _embedded_predictor(self) -> LatencyPredictor:
        from headroom.predictor.runtime import ModelRuntime
        from headroom.predictor.tailer import ModelUpdateTailer
        from headroom.router.predictors import EmbeddedPredictor
        runtime = ModelRuntime()
        self._tailer = ModelUpdateTailer(runtime, self.kafka)
        return EmbeddedPredictor(runtime)

    def _remote_predictor(self) -> LatencyPredictor:
        from headroom.predictor.client import PredictorClient
        from headroom.router.predictors import RemotePredictor
        addresses = [a.strip() for a in self.config.settings.predictor_addresses.split(",") if a.strip()]
        self._client = PredictorClient(addresses, timeout_seconds=self.config.settings.predictor_timeout_s)
        return RemotePredictor(self._client)

    async def start(self) -> None:
        s = self.config.settings
        from headroom.router.predictors import EmbeddedPredictor
        if isinstance(self.service.predictor, EmbeddedPredictor):
            from headroom.predictor import kernels
            await asyncio.to_thread(kernels.warm_up)  # compiled (or loaded from the disk cache) before traffic
        if self._tailer is not None:
            self._tailer.start()
        if self.pods is not None:
            await asyncio.to_thread(self.pods.start)
        self._runner = web.AppRunner(self.proxy.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, s.host, s.http_port)
        await site.start()
        self.http_port = self._runner.addresses[0][1]
        if s.pick_port >= 0:
            server = grpc.aio.server()
            router_pb2_grpc.add_RouterServicer_to_server(PickServicer(self.service), server)
            self.pick_port = server.add_insecure_port(f"{s.host}:{s.pick_port}")
            await server.start()
            self._grpc.append(server)
        if s.ext_proc_port >= 0:
            server = grpc.aio.server()
            ep_grpc.add_ExternalProcessorServicer_to_server(ExtProcServicer(self.service), server)
            self.ext_proc_port = server.add_insecure_port(f"{s.host}:{s.ext_proc_port}")
            await server.start()
            self._grpc.append(server)
        self._tasks = [asyncio.create_task(self.scraper.run(self._stop), name="scraper"),
                       asyncio.create_task(self._background(), name="router-background"),
                       asyncio.create_task(self._autoscale_signals(), name="autoscale-signals")]
        log.info("router listening: http %d, pick %d, ext_proc %d", self.http_port, self.pick_port, self.ext_proc_port)

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
        await asyncio.gather(*(server.stop(grace_s) for server in self._grpc))
        if self._runner is not None:
            await self._runner.cleanup()
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
        await stopping.wait()
        log.info("router stopping: %d requests in flight get up to %g s to finish", len(self.pool.inflight), grace_s)
        await self.stop(grace_s)
        log.info("router stopped")


def serve(server: RouterServer) -> None:
    """Run ``server`` until SIGTERM or SIGINT on uvloop's event loop."""
    uvloop.run(server.serve())
