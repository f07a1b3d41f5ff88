import pytest

from headroom.contract.server_metrics import ServerMetrics
from headroom.router.state.server_metrics import MetricsFormatError, parse_metrics

VLLM = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 3.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="llama"} 0.42
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="llama"} 12345.0
"""
TWO_MODELS = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 1
vllm:num_requests_waiting{model_name="b"} 2
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.1
vllm:gpu_cache_usage_perc{model_name="b"} 0.3
"""
JETSTREAM = """# TYPE jetstream_prefill_backlog_size gauge
jetstream_prefill_backlog_size{id="x"} 5
# TYPE jetstream_slots_used_percentage gauge
jetstream_slots_used_percentage{id="x"} 0.75
"""
BOTH = VLLM + JETSTREAM + """# TYPE accelerator_memory_used_bytes gauge
accelerator_memory_used_bytes 1024
"""


@pytest.mark.parametrize("text, expected", [
    pytest.param(VLLM, ServerMetrics(0.42, 3, 7), id="vllm"),
    pytest.param(TWO_MODELS, ServerMetrics(0.3, 3, 0), id="label-sets-summed-usage-max"),
    pytest.param(JETSTREAM, ServerMetrics(0.75, 5, 0, slots_used=0.75, prefill_backlog=5), id="jetstream"),
    pytest.param(BOTH, ServerMetrics(0.42, 3, 7, slots_used=0.75, prefill_backlog=5, memory_used_bytes=1024),
                 id="both-families-read-by-vllm-names"),
    pytest.param("# HELP x an unrelated metric\nx_total{broken 1\n" + VLLM, ServerMetrics(0.42, 3, 7),
                 id="unread-lines-are-not-parsed"),
    pytest.param('vllm:num_requests_waiting{model="a b}c",x="{"} 4 1700000000000\nvllm:num_requests_running 2\n'
                 'vllm:kv_cache_usage_perc{m="a"} 5e-1\n', ServerMetrics(0.5, 4, 2), id="quoted-braces-timestamps"),
])
def test_parse(text, expected):
    assert parse_metrics(text) == expected


@pytest.mark.parametrize("text, message", [
    pytest.param("# TYPE other gauge\nother 1\n", "none of the metrics", id="unknown-metrics"),
    pytest.param("vllm:num_requests_waiting{ 1\n", "not Prometheus text", id="garbage"),
    pytest.param("vllm:num_requests_waiting\n", "not Prometheus text", id="no-value"),
    pytest.param("vllm:num_requests_running many\n", "not Prometheus text", id="not-a-number"),
    pytest.param("vllm:num_requests_running 1 2 3\n", "not Prometheus text", id="too-many-fields"),
])
def test_rejects(text, message):
    with pytest.raises(MetricsFormatError, match=message):
        parse_metrics(text)
