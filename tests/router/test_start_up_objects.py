"""A serving router keeps the objects of its start-up out of the garbage collector's walks."""

import asyncio
import gc
import os
import signal

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from tests.router.routercases import router_config, wait_for


def test_serving_freezes_what_start_up_made():
    async def scenario() -> tuple[int, int]:
        router = RouterServer(router_config([]), from_env(KafkaSettings, {}))
        before = gc.get_freeze_count()
        serving = asyncio.create_task(router.serve(grace_s=0))
        assert await wait_for(lambda: gc.get_freeze_count() > before)
        frozen = gc.get_freeze_count()
        os.kill(os.getpid(), signal.SIGTERM)  # the router's own signal handler stops it
        await asyncio.wait_for(serving, 10)
        return before, frozen

    gc.unfreeze()
    try:
        before, frozen = asyncio.run(scenario())
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
    assert before == 0
    assert frozen > 10_000  # the modules, the router and its listeners; a full collection walks none of them
    assert gc.isenabled()
