"""The proxy as an OpenAI client meets it: /v1/models, relayed response headers, error bodies.
Real aiohttp model servers, the real router, a real HTTP client."""

import aiohttp
import pytest

from headroom.router.fronts.openai_api import error_type
from tests.router.routercases import TablePredictor
from tests.router.test_proxy_e2e import run, started
from tests.router.upstream import Upstream, upstreams


def test_models_lists_every_model_of_the_servers_that_answer_once():
    async def scenario():
        async with upstreams(Upstream("a", models=("llama", "qwen")), Upstream("b", models=("qwen", "mistral")),
                             Upstream("c")) as servers:
            router = await started(servers)
            await servers[2].stop()  # one server is gone: the others still answer
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{router.http_port}/v1/models") as response:
                    listed = response.status, await response.json()
                for s in servers[:2]:
                    await s.stop()
                async with http.get(f"http://127.0.0.1:{router.http_port}/v1/models") as response:
                    none = response.status, await response.json()
            await router.stop()
            return listed, none
    (status, body), (none_status, none_body) = run(scenario)
    assert status == 200 and body["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in body["data"]] == [("llama", "a"), ("qwen", "a"), ("mistral", "b")]
    assert none_status == 503 and none_body["error"]["code"] == "no_servers"
    assert "none of the 3 servers" in none_body["error"]["message"]


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="stream")])
def test_the_servers_response_headers_clients_rely_on_are_relayed(stream):
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 2, "stream": stream}) as response:
                    await response.read()
                    headers = response.headers
            await router.stop()
            return headers
    headers = run(scenario)
    assert headers["x-request-id"] == "a-1" and headers["x-ratelimit-remaining-requests"] == "99"
    assert headers["x-headroom-server"] == "s0"
    assert "x-internal-trace" not in headers and headers.get("server") != "upstream-test"


def openai_error(body):
    """The body is OpenAI's error shape: exactly these four keys, message and type strings."""
    error = body["error"]
    assert set(body) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"] and isinstance(error["code"], str)
    return error


def test_every_error_the_router_answers_has_openais_shape():
    async def scenario():
        busy = [Upstream("a", waiting=9, running=4, kv=0.7)]
        async with upstreams(*busy) as servers:
            router = await started(servers, predictor=TablePredictor(base=100.0, per_waiting=100.0))
            base = f"http://127.0.0.1:{router.http_port}"
            answers = {}
            async with aiohttp.ClientSession() as http:
                for name, method, path, kwargs in [
                    ("bad-json", "POST", "/v1/completions", {"data": b"{nope"}),
                    ("bad-header", "POST", "/v1/completions", {"json": {"prompt": "x"},
                                                               "headers": {"x-slo-ttft-ms": "soon"}}),
                    ("bad-body", "POST", "/v1/chat/completions", {"json": {"messages": "hi"}}),
                    ("shed", "POST", "/v1/completions", {"json": {"prompt": "x"}, "headers": {
                        "x-slo-ttft-ms": "100", "x-request-priority": "-1"}}),
                    ("unknown-path", "POST", "/v1/embeddings", {"json": {}}),
                    ("wrong-method", "GET", "/v1/completions", {}),
                ]:
                    async with http.request(method, base + path, **kwargs) as response:
                        answers[name] = response.status, openai_error(await response.json())
                await servers[0].stop()
                async with http.post(base + "/v1/completions", json={"prompt": "x"}) as response:
                    answers["server-gone"] = response.status, openai_error(await response.json())
            await router.stop()
            return answers
    answers = run(scenario)
    codes = {name: (status, error["type"], error["code"]) for name, (status, error) in answers.items()}
    assert codes == {
        "bad-json": (400, "invalid_request_error", "invalid_json"),
        "bad-header": (400, "invalid_request_error", "invalid_request"),
        "bad-body": (400, "invalid_request_error", "invalid_request"),
        "shed": (429, "requests", "admission_rejected"),
        "unknown-path": (404, "invalid_request_error", "not_found"),
        "wrong-method": (405, "invalid_request_error", "method_not_allowed"),
        "server-gone": (502, "server_error", "upstream_unreachable"),
    }
    assert "POST /v1/embeddings" in answers["unknown-path"][1]["message"]
    assert "'x-slo-ttft-ms'" in answers["bad-header"][1]["message"]


@pytest.mark.parametrize("status, kind", [(400, "invalid_request_error"), (404, "invalid_request_error"),
                                          (429, "requests"), (502, "server_error"), (503, "server_error")])
def test_error_type_by_status(status, kind):
    assert error_type(status) == kind
