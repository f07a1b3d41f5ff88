"""An aiohttp application served from a thread of its own, on an event loop of its own: for servers whose
main work runs elsewhere (a predictor's gRPC threads), over TLS when given an SSL context
(:func:`headroom.tls.ssl_server_context`). :meth:`HttpThread.start` binds and returns the port;
:meth:`HttpThread.stop` lets requests in flight finish within ``grace`` seconds, then closes everything.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from concurrent.futures import Future

from aiohttp import web


class HttpThread:
    def __init__(self, app: web.Application, host: str, port: int, name: str = "http", grace: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app, self.host, self.port, self.name = app, host, port, name
        self.ssl_context = ssl_context
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=grace)
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Serve on a thread; returns the bound port. Raises :class:`OSError` when the address cannot be bound."""
        started: Future[int] = Future()
        self._thread = threading.Thread(target=self._serve, args=(started,), name=self.name, daemon=True)
        self._thread.start()
        self.port = started.result(timeout=30)
        return self.port

    def stop(self) -> None:
        if self._thread is None or not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self, started: Future[int]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
            self._loop.run_until_complete(site.start())
        except BaseException as err:
            started.set_exception(err)
            return
        started.set_result(self._runner.addresses[0][1])
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()
