"""llm-d's training API over real HTTP, its records kept in memory (the broker's round trip is in
test_round_trip_kafka.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from headroom.contract.model_update import decode_update
from headroom.contract.settings import from_env
from headroom.contract.telemetry import decode, encode
from headroom.contract.topics import KafkaSettings
from headroom.http_thread import HttpThread
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.training_api import TrainingApi
from headroom.router.telemetry_sink import MemoryTelemetry
from tests.keys import TRUST
from tests.llmd.http import call
from tests.predictor.models import message, train

NOW = 1_800_000_000.0
STAMP = datetime(2027, 1, 15, 8, 0, 0, 500_000, tzinfo=UTC).timestamp()
ENTRY = {"kv_cache_percentage": 0.4, "input_token_length": 900, "num_request_waiting": 3, "num_request_running": 5,
         "num_tokens_generated": 0, "prefix_cache_score": 0.6, "actual_ttft_ms": 150.0, "actual_tpot_ms": 0.0}


class DeadLetters:
    """The dead-letter topic's one-method edge, kept in a list."""

    def __init__(self) -> None:
        self.letters: list[tuple[bytes, bytes, str, str]] = []

    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None:
        self.letters.append((key, value, reason, source))


@pytest.fixture
def api():
    telemetry, letters = MemoryTelemetry(), DeadLetters()
    api = TrainingApi(telemetry, letters, ModelShelf(from_env(KafkaSettings, {}), TRUST), pool_key="llama", clock=lambda: NOW)
    server = HttpThread(api.app(), "127.0.0.1", 0)
    port = server.start()
    yield api, telemetry, letters, f"http://127.0.0.1:{port}"
    server.stop()


def test_samples_become_telemetry_records_and_the_rest_dead_letters(api):
    api, telemetry, letters, base = api
    entries = [ENTRY,
               dict(ENTRY, actual_ttft_ms=0.0, actual_tpot_ms=12.5, num_tokens_generated=40, pod_type="decode",
                    timestamp="2027-01-15T08:00:00.5Z", decode_tokens_in_flight=7000),
               dict(ENTRY, actual_ttft_ms=0.0),
               dict(ENTRY, encoder_input_size=1, encoder_matched_size=2)]
    status, body = call(base, "/add_training_data_bulk", {"entries": entries})
    assert (status, body) == (202, {"message": "Accepted 4 training samples.", "telemetry": 2, "dead_lettered": 2})
    ttft, tpot = telemetry.records
    assert decode(encode(ttft)) == ttft  # what goes to the topic is a valid record
    assert (ttft.pool_key, ttft.stream, ttft.ttft_ms, ttft.tpot_ms, ttft.output_tokens, ttft.completion_ts) == \
        ("llama", True, 150.0, None, 1, NOW)
    assert (ttft.kv_cache_usage, ttft.prompt_tokens, ttft.num_waiting, ttft.prefix_match) == (0.4, 900, 3, 0.6)
    assert (tpot.pool_key, tpot.ttft_ms, tpot.tpot_ms, tpot.output_tokens, tpot.e2e_ms) == \
        ("llama-decode", None, 12.5, 40, 12.5 * 39)
    assert tpot.completion_ts == STAMP and tpot.dispatch_ts == pytest.approx(STAMP - 12.5 * 39 / 1000)
    assert tpot.inflight_decode_tokens == 7000 and tpot.request_id != ttft.request_id
    reasons = [reason for _, _, reason, _ in letters.letters]
    assert reasons == ["the sample observes neither TTFT nor TPOT (actual_ttft_ms and actual_tpot_ms are 0)",
                       "encoder_matched_size 2 exceeds encoder_input_size 1"]
    key, value, _, source = letters.letters[0]
    assert key == b"llama" and json.loads(value)["actual_tpot_ms"] == 0.0 and source.startswith("llm-d/add_training")
    status, data = call(base, "/data/status")
    assert data["training_data"] == {"ttft_samples": 1, "tpot_samples": 1, "total_samples": 2}
    assert data["telemetry"] == {"records_sent": 2, "dead_lettered": 2, "bodies_rejected": 0}
    assert data["bucket_distribution"] == {"queue_2_cache_8_prefix_2": 1}


def test_an_invalid_entry_refuses_the_whole_body_with_fastapis_422(api):
    api, telemetry, letters, base = api
    status, body = call(base, "/add_training_data_bulk", {"entries": [ENTRY, dict(ENTRY, actual_ttft_ms=-1)]})
    assert status == 422 and body["detail"] == [
        {"type": "greater_than_equal", "loc": ["body", "entries", 1, "actual_ttft_ms"],
         "msg": "Input should be greater than or equal to 0", "input": -1, "ctx": {"ge": 0.0}}]
    assert telemetry.records == [] and letters.letters == []
    assert call(base, "/add_training_data_bulk", {"entries": [dict(ENTRY, timestamp="yesterday")]})[1]["detail"][0][
        "type"] == "datetime_type"
    status, body = call(base, "/add_training_data_bulk", {"entries": [dict(ENTRY, actual_tpot_ms=3_600_000.5)]})
    assert status == 422 and body["detail"] == [  # the contract's bound for a latency: an hour
        {"type": "less_than_equal", "loc": ["body", "entries", 0, "actual_tpot_ms"],
         "msg": "Input should be less than or equal to 3600000", "input": 3_600_000.5, "ctx": {"le": 3_600_000.0}}]
    status, body = call(base, "/add_training_data_bulk", {"entries": [dict(ENTRY, actual_ttft_ms=-10**400)]})
    assert status == 422 and body["detail"] == [  # an integer past any float is compared as it is
        {"type": "greater_than_equal", "loc": ["body", "entries", 0, "actual_ttft_ms"],
         "msg": "Input should be greater than or equal to 0", "input": -10**400, "ctx": {"ge": 0.0}}]
    assert telemetry.records == [] and call(base, "/data/status")[1]["telemetry"]["bodies_rejected"] == 4


def test_a_sample_timestamp_is_its_completion_time(api):
    api, telemetry, _, base = api
    entries = [dict(ENTRY, timestamp="2027-01-15T08:00:00.5Z"), dict(ENTRY, timestamp=1_799_000_000),
               dict(ENTRY, timestamp="0001-01-01T00:00:00Z"), dict(ENTRY, timestamp=None)]
    assert call(base, "/add_training_data_bulk", {"entries": entries})[0] == 202
    assert [r.completion_ts for r in telemetry.records] == [STAMP, 1_799_000_000.0, NOW, NOW]


def test_models_are_listed_and_dumped_from_model_updates(api):
    api, _, _, base = api
    assert call(base, "/readyz")[0] == 503
    assert call(base, "/model/ttft/info") == (404, {"detail": "Model ttft not found"})
    assert call(base, "/model/gated/info") == (404, {"detail": "Unknown model: gated"})
    booster = train("ttft", objective="quantile", trees=3)
    raw = message(booster, 2, pool_key="llama", target="ttft", objective="quantile")
    assert api.shelf.put(decode_update(raw, TRUST))
    api.shelf.caught_up.set()
    assert call(base, "/readyz") == (200, {"status": "ready"})
    status, info = call(base, "/model/ttft/info")
    assert status == 200 and (info["path"], info["version"], info["quantile"], info["exists"]) == \
        ("llama/ttft/quantile", 2, 0.9, True)
    assert info["size_bytes"] == len(decode_update(raw, TRUST).model)
    status, trees = call(base, "/model/ttft/xgb/json")
    assert status == 200 and len(trees) == 3 and "split" in trees[0]
    assert call(base, "/model/tpot/xgb/json")[0] == 404
    listing = call(base, "/models/list")[1]
    assert listing["models"]["ttft"]["exists"] and not listing["models"]["tpot"]["exists"]
    status, body = call(base, "/model/ttft/download")
    assert status == 404 and "never writes, serves or loads" in body["detail"]
    assert call(base, "/data/status")[1]["models_trained"] == {"versions": 1, "by_model": {"llama/ttft/quantile": 1},
                                                               "rejected": {}}
    status, text = call(base, "/metrics")
    assert status == 200 and 'headroom_llmd_model_version{model_key="llama/ttft/quantile"} 2.0' in text
    assert call(base, "/healthz") == (200, {"status": "ok"})


def test_a_version_far_ahead_of_the_shelved_one_is_not_listed(api):
    api, _, _, base = api
    booster = train("ttft", objective="quantile", trees=3)
    jump = api.shelf.kafka.max_version_jump

    def update(version):
        return decode_update(message(booster, version, pool_key="llama", target="ttft", objective="quantile"), TRUST)
    assert api.shelf.put(update(2))
    assert not api.shelf.put(update(2 + jump + 1))  # what read_latest and the predictor refuse too
    assert api.shelf.put(update(2 + jump))
    assert api.shelf.get("llama", "ttft", "quantile").update.version == 2 + jump
    assert api.shelf.rejected == {"version": 1}
