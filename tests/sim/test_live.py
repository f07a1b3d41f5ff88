"""Live mode: real HTTP on loopback against simulated servers."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from headroom.sim.live import serve_pool
from headroom.sim.profile import H100

TIMEOUT = aiohttp.ClientTimeout(total=30)


async def _with_pool(n: int, body, time_scale: float = 1.0):
    servers = await serve_pool([H100] * n, time_scale=time_scale)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            return await body(servers, http)
    finally:
        for server in servers:
            await server.stop()


async def _stream(http: aiohttp.ClientSession, url: str, payload: dict) -> tuple[list[float], list[dict], float]:
    started = time.monotonic()
    arrivals, chunks = [], []
    async with http.post(url, json=payload) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                chunks.append({"done": True})
                break
            chunk = json.loads(line[6:])
            chunks.append(chunk)
            if chunk["choices"]:
                arrivals.append(time.monotonic())
    return arrivals, chunks, started


def test_streamed_ttft_and_tpot_match_the_simulated_values() -> None:
    async def body(servers, http):
        url = servers[0].url + "/v1/completions"
        return await _stream(http, url, {"model": "m", "prompt": "word " * 4800, "max_tokens": 40, "stream": True})

    arrivals, chunks, started = asyncio.run(_with_pool(1, body))
    assert chunks[-1] == {"done": True}
    final = chunks[-2]
    assert final["usage"] == {"prompt_tokens": 6000, "completion_tokens": 40, "total_tokens": 6040}
    simulated = final["headroom"]
    assert len(arrivals) == 40
    measured_ttft = (arrivals[0] - started) * 1000.0
    measured_tpot = (arrivals[-1] - arrivals[0]) * 1000.0 / 39
    assert abs(measured_ttft - simulated["ttft_ms"]) < max(30.0, 0.25 * simulated["ttft_ms"])
    assert abs(measured_tpot - simulated["tpot_ms"]) < 0.3 * simulated["tpot_ms"]
    assert 150.0 < simulated["ttft_ms"] < 200.0  # 6,000 prompt tokens in three chunks


def test_time_scale_runs_the_clock_faster() -> None:
    async def body(servers, http):
        url = servers[0].url + "/v1/completions"
        started = time.monotonic()
        async with http.post(url, json={"prompt": "x", "max_tokens": 200}) as response:
            payload = await response.json()
        return time.monotonic() - started, payload

    wall, payload = asyncio.run(_with_pool(1, body, time_scale=10.0))
    assert payload["headroom"]["e2e_ms"] > 1000.0  # 200 tokens at ~6.5 ms
    assert wall < payload["headroom"]["e2e_ms"] / 1000.0 / 3


def test_chat_json_extension_fields_and_prefix_cache_metrics() -> None:
    hashes = list(range(500, 564))

    async def body(servers, http):
        url = servers[1].url + "/v1/chat/completions"
        payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                   "headroom": {"prompt_tokens": 1100, "hash_ids": hashes, "output_tokens": 3}}
        first = await (await http.post(url, json=payload)).json()
        second = await (await http.post(url, json=payload)).json()
        metrics = await (await http.get(servers[1].url + "/metrics")).text()
        health = [(await http.get(s.url + "/health")).status for s in servers]
        models = await (await http.get(servers[0].url + "/v1/models")).json()
        return first, second, metrics, (health, models), {s.port for s in servers}

    first, second, metrics, (health, models), ports = asyncio.run(_with_pool(2, body))
    assert [m["id"] for m in models["data"]] == [first["model"]] and models["object"] == "list"
    assert first["object"] == "chat.completion"
    assert first["choices"][0]["message"]["role"] == "assistant"
    assert first["usage"] == {"prompt_tokens": 1100, "completion_tokens": 3, "total_tokens": 1103}
    assert second["headroom"]["cached_tokens"] == 1024
    assert second["headroom"]["ttft_ms"] < first["headroom"]["ttft_ms"]
    values = {sample.name: sample.value for family in text_string_to_metric_families(metrics)
              for sample in family.samples}
    assert values["vllm:prefix_cache_queries_total"] == 2200
    assert values["vllm:prefix_cache_hits_total"] == 1024
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                 "jetstream_prefill_backlog_size", "jetstream_slots_used_percentage", "accelerator_memory_used_bytes"):
        assert name in values
    assert 0.0 < values["vllm:kv_cache_usage_perc"] or values["vllm:num_requests_running"] == 0
    assert health == [200, 200] and len(ports) == 2


def test_text_prompts_share_prefix_blocks() -> None:
    system = "You are a careful assistant. " * 60

    async def body(servers, http):
        url = servers[0].url + "/v1/completions"
        first = await (await http.post(url, json={"prompt": system + "Question one?", "max_tokens": 2})).json()
        second = await (await http.post(url, json={"prompt": system + "Another question?", "max_tokens": 2})).json()
        return first, second

    first, second = asyncio.run(_with_pool(1, body))
    assert first["headroom"]["cached_tokens"] == 0
    assert second["headroom"]["cached_tokens"] == len(system.encode()) // 64 * 16


def test_bad_requests_are_rejected_with_a_reason() -> None:
    async def body(servers, http):
        url = servers[0].url
        answers = []
        for path, payload in [("/v1/completions", {"prompt": "x", "max_tokens": 0}),
                              ("/v1/chat/completions", {"messages": []}),
                              ("/v1/completions", {"prompt": "x", "headroom": {"hash_ids": ["a"]}}),
                              ("/v1/completions", {"prompt": "x", "headroom": {"prompt_tokens": 10 ** 7}})]:
            response = await http.post(url + path, json=payload)
            answers.append((response.status, (await response.json())["error"]["message"]))
        return answers

    answers = asyncio.run(_with_pool(1, body))
    assert [status for status, _ in answers] == [400, 400, 400, 400]
    assert "max_tokens" in answers[0][1] and "messages" in answers[1][1]
    assert "hash_ids" in answers[2][1] and "KV blocks" in answers[3][1]


def test_concurrent_streams_and_json_requests_all_complete() -> None:
    async def one(http: aiohttp.ClientSession, url: str, i: int) -> int:
        payload = {"prompt": "abc " * (200 * (i % 5 + 1)), "max_tokens": 10 + i, "stream": i % 2 == 0}
        async with http.post(url, json=payload) as response:
            if not payload["stream"]:
                return (await response.json())["usage"]["completion_tokens"]
            tokens = 0
            async for line in response.content:
                if line.startswith(b"data: {"):
                    tokens += len(json.loads(line[6:])["choices"])
            return tokens

    async def body(servers, http):
        return await asyncio.gather(*[one(http, servers[0].url + "/v1/completions", i) for i in range(24)])

    assert asyncio.run(_with_pool(1, body, time_scale=10.0)) == [10 + i for i in range(24)]


def test_slowdown_makes_decoding_slower_and_rejects_bad_factors() -> None:
    async def body(servers, http):
        url = servers[0].url
        payload = {"model": "m", "prompt": "word " * 800, "max_tokens": 30,
                   "headroom": {"prompt_tokens": 1000, "output_tokens": 30}}
        async with http.post(url + "/v1/completions", json=payload) as response:
            before = (await response.json())["headroom"]["tpot_ms"]
        async with http.post(url + "/admin/slowdown", json={"factor": "fast"}) as response:
            assert response.status == 400
            assert "'factor' must be a number" in (await response.json())["error"]["message"]
        async with http.post(url + "/admin/slowdown", json={"factor": 3.0}) as response:
            assert response.status == 200
        async with http.post(url + "/v1/completions", json=payload) as response:
            after = (await response.json())["headroom"]["tpot_ms"]
        return before, after

    before, after = asyncio.run(_with_pool(1, body, time_scale=5.0))
    assert after > 2.5 * before


def test_kv_capacity_changes_live_and_bad_requests_say_what_is_wrong() -> None:
    async def body(servers, http):
        url = servers[0].url
        answers = []
        for bad in ({"blocks": "many"}, {"blocks": 0}, {"blocks": True}, {"size": 10}, [1]):
            async with http.post(url + "/admin/kv", json=bad) as response:
                answers.append((response.status, (await response.json())["error"]["message"]))
        async with http.post(url + "/admin/kv", data=b"{not json") as response:
            answers.append((response.status, (await response.json())["error"]["message"]))
        async with http.post(url + "/admin/kv", json={"blocks": 100}) as response:
            assert response.status == 200 and await response.json() == {"server_id": "server-0", "kv_blocks": 100}
        payload = {"model": "m", "prompt": "x", "max_tokens": 4,
                   "headroom": {"prompt_tokens": 1000, "output_tokens": 4}}  # 63 blocks: fits
        async with http.post(url + "/v1/completions", json=payload) as response:
            assert response.status == 200
        payload["headroom"]["prompt_tokens"] = 2000  # 126 blocks: no longer fits
        async with http.post(url + "/v1/completions", json=payload) as response:
            answers.append((response.status, (await response.json())["error"]["message"]))
        return answers

    answers = asyncio.run(_with_pool(1, body, time_scale=5.0))
    assert all(status == 400 for status, _ in answers)
    assert answers[0][1] == "bad KV capacity request: 'blocks' must be a positive integer, got 'many'"
    assert answers[1][1].endswith("got 0") and answers[2][1].endswith("got True")
    assert answers[3][1] == "bad KV capacity request: the body must be a JSON object with 'blocks'"
    assert answers[4][1] == answers[3][1] and answers[5][1].startswith("bad KV capacity request: ")
    assert answers[6][1] == "needs 126 KV blocks, server has 100"


def test_a_request_the_shrunk_kv_cache_drops_is_answered_not_left_hanging() -> None:
    async def body(servers, http):
        url = servers[0].url
        async with http.post(url + "/admin/kv", json={"blocks": 400}) as response:
            assert response.status == 200
        payload = {"model": "m", "prompt": "x", "max_tokens": 1000,
                   "headroom": {"prompt_tokens": 3000, "output_tokens": 1000}}  # 250 blocks

        async def shrink():
            await asyncio.sleep(0.3)
            async with http.post(url + "/admin/kv", json={"blocks": 150}) as response:
                assert response.status == 200

        async def ask():
            async with http.post(url + "/v1/completions", json=payload) as response:
                return response.status, (await response.json())["error"]["message"]

        return (await asyncio.gather(ask(), shrink()))[0]

    status, message = asyncio.run(_with_pool(1, body, time_scale=1.0))
    assert status == 503 and message == "the server dropped the request: needs 250 KV blocks, server has 150"
