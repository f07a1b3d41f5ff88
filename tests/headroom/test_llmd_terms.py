import pytest

from headroom.contract.server_state import NO_TOKEN_AGE_MS
from headroom.contract.telemetry import InvalidRecord, decode, encode
from headroom.llmd_terms import pool_key_of, raw_values, sample_record

SAMPLE = {"kv_cache_percentage": 0.5, "input_token_length": 800, "num_request_waiting": 2, "num_request_running": 4,
          "num_tokens_generated": 0, "prefix_cache_score": 0.25, "actual_ttft_ms": 0.0, "actual_tpot_ms": 0.0}


@pytest.mark.parametrize(("changes", "expected"), [
    ({"actual_ttft_ms": 120.0}, {"ttft_ms": 120.0, "tpot_ms": None, "output_tokens": 1, "e2e_ms": 120.0}),
    ({"actual_tpot_ms": 10.0, "num_tokens_generated": 51},
     {"ttft_ms": None, "tpot_ms": 10.0, "output_tokens": 51, "e2e_ms": 500.0}),
    ({"actual_tpot_ms": 10.0, "num_tokens_generated": 0}, {"ttft_ms": None, "output_tokens": 2, "e2e_ms": 10.0}),
    ({"actual_ttft_ms": 100.0, "actual_tpot_ms": 10.0, "num_tokens_generated": 11},
     {"ttft_ms": 100.0, "tpot_ms": 10.0, "output_tokens": 11, "e2e_ms": 200.0}),
], ids=["ttft-sample", "tpot-sample", "tpot-before-the-second-token", "both"])
def test_a_sample_trains_exactly_the_latencies_it_observed(changes, expected):
    record = sample_record({**SAMPLE, **changes}, pool_key="pool", request_id="llm-d-a-0", received_at=1e9)
    assert {name: getattr(record, name) for name in expected} == expected
    assert record.stream and record.server_id == "llm-d" and record.max_tokens == 0
    assert record.completion_ts == 1e9 and record.dispatch_ts == record.arrival_ts == pytest.approx(
        1e9 - record.e2e_ms / 1000)
    assert decode(encode(record)) == record


def test_fields_map_to_raw_columns_and_what_llm_d_does_not_measure_is_unknown():
    record = sample_record({**SAMPLE, "actual_ttft_ms": 50.0, "prefill_tokens_in_flight": 3000,
                            "decode_tokens_in_flight": 9000, "encoder_input_size": 3, "encoder_matched_size": 2},
                           pool_key="pool", request_id="r", received_at=1e9)
    assert (record.kv_cache_usage, record.prompt_tokens, record.num_waiting, record.num_running,
            record.prefix_match) == (0.5, 800, 2, 4, 0.25)
    assert (record.inflight_prefill_tokens, record.inflight_decode_tokens, record.encoder_input_size,
            record.encoder_matched_size) == (3000, 9000, 3, 2)
    assert (record.inflight_requests, record.inflight_prompt_tokens, record.last_token_age_ms,
            record.token_interval_ms) == (0, 0, NO_TOKEN_AGE_MS, 0.0)
    assert raw_values({"kv_cache_percentage": [0.1], "num_tokens_generated": [4]})["kv_cache_usage"] == [0.1]


@pytest.mark.parametrize(("timestamp", "completion"), [(1.7e9, 1.7e9), (None, 1e9), (-62135596800.0, 1e9), (0.0, 1e9)],
                         ids=["given", "none", "go-zero-time", "epoch"])
def test_a_sample_completes_at_its_timestamp_or_when_it_arrived(timestamp, completion):
    record = sample_record({**SAMPLE, "actual_ttft_ms": 5.0}, pool_key="p", request_id="r", received_at=1e9,
                           timestamp=timestamp)
    assert record.completion_ts == completion


@pytest.mark.parametrize(("changes", "reason"), [
    ({}, "the sample observes neither TTFT nor TPOT"),
    ({"actual_ttft_ms": 5.0, "encoder_input_size": 1, "encoder_matched_size": 2}, "encoder_matched_size 2 exceeds"),
], ids=["nothing-observed", "encoder-match"])
def test_samples_the_contract_refuses_say_why(changes, reason):
    with pytest.raises(InvalidRecord, match=reason):
        sample_record({**SAMPLE, **changes}, pool_key="p", request_id="r", received_at=1e9)


def test_a_role_is_a_pool_of_its_own():
    assert [pool_key_of("llama", role) for role in ("", "prefill", "decode")] == ["llama", "llama-prefill",
                                                                                   "llama-decode"]
    with pytest.raises(ValueError, match="a role is one of"):
        pool_key_of("llama", "monolithic")


@pytest.mark.parametrize(("pod_type", "pool"), [("decode", "p-decode"), ("monolithic", "p"), ("both", "p"),
                                                 (None, "p"), ("", "p")])
def test_a_samples_pod_type_names_its_role_and_any_other_value_a_monolithic_server(pod_type, pool):
    record = sample_record({**SAMPLE, "actual_ttft_ms": 5.0, "pod_type": pod_type}, pool_key="p", request_id="r",
                           received_at=1e9)
    assert record.pool_key == pool
