"""llm-d's training API over real HTTP, its records kept in memory (the broker's round trip is in
test_round_trip_kafka.py)."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from headroom.contract.model_update import decode_update
from headroom.contract.settings import from_env
from headroom.contract.telemetry import decode, encode
from headroom.contract.topics import KafkaSettings
from headroom.contract.window_forget import Forget
from headroom.http_thread import HttpThread
from headroom.llmd.intake import Intake
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.training_api import TrainingApi
from headroom.model_files import file_name
from headroom.router.control.telemetry_sink import MemoryTelemetry
from headroom.router.fronts.auth import BearerTokens
from headroom.streams.settings import RecordTimes
from tests.keys import TRUST
from tests.llmd.http import call
from tests.predictor.models import message, train

NOW = 1_800_000_000.0
STAMP = datetime(2027, 1, 15, 8, 0, 0, 500_000, tzinfo=UTC).timestamp()
NOTHING = "the sample observes neither TTFT nor TPOT (actual_ttft_ms and actual_tpot_ms are 0)"
ENCODER = "encoder_matched_size 2 exceeds encoder_input_size 1"
ENTRY = {"kv_cache_percentage": 0.4, "input_token_length": 900, "num_request_waiting": 3, "num_request_running": 5,
         "num_tokens_generated": 0, "prefix_cache_score": 0.6, "actual_ttft_ms": 150.0, "actual_tpot_ms": 0.0}


class DeadLetters:
    """The dead-letter topic's one-method edge, kept in a list."""

    def __init__(self) -> None:
        self.letters: list[tuple[bytes, bytes, str, str]] = []

    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None:
        self.letters.append((key, value, reason, source))


@pytest.fixture
def serve():
    """Starts a training API over in-memory sinks; returns ``(api, telemetry, dead letters, forgets, base URL)``."""
    servers = []

    def start(**options):
        telemetry, letters, forgets = MemoryTelemetry(), DeadLetters(), []

        def forget(requests: list[Forget]) -> int:
            forgets.extend(requests)
            return 0
        api = TrainingApi(telemetry, letters, ModelShelf(from_env(KafkaSettings, {}), TRUST), pool_key="llama",
                          forget=forget, **{"clock": lambda: NOW, **options})
        server = HttpThread(api.app(), "127.0.0.1", 0)
        servers.append(server)
        return api, telemetry, letters, forgets, f"http://127.0.0.1:{server.start()}"

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def api(serve):
    api, telemetry, letters, _, base = serve()
    return api, telemetry, letters, base


def test_samples_become_telemetry_records_and_the_rest_dead_letters(api):
    api, telemetry, letters, base = api
    entries = [ENTRY,
               dict(ENTRY, actual_ttft_ms=0.0, actual_tpot_ms=12.5, num_tokens_generated=40, pod_type="decode",
                    timestamp="2027-01-15T08:00:00.5Z", decode_tokens_in_flight=7000),
               dict(ENTRY, actual_ttft_ms=0.0),
               dict(ENTRY, encoder_input_size=1, encoder_matched_size=2)]
    status, body = call(base, "/add_training_data_bulk", {"entries": entries})
    assert (status, body) == (202, {"message": "Accepted 4 training samples.", "telemetry": 2, "dead_lettered": 2,
                                    "refused": [{"index": 2, "reason": NOTHING}, {"index": 3, "reason": ENCODER}]})
    ttft, tpot = telemetry.records
    assert decode(encode(ttft)) == ttft  # what goes to the topic is a valid record
    assert (ttft.pool_key, ttft.stream, ttft.ttft_ms, ttft.tpot_ms, ttft.output_tokens, ttft.completion_ts) == \
        ("llama", True, 150.0, None, 1, NOW)
    assert (ttft.kv_cache_usage, ttft.prompt_tokens, ttft.num_waiting, ttft.prefix_match) == (0.4, 900, 3, 0.6)
    assert (tpot.pool_key, tpot.ttft_ms, tpot.tpot_ms, tpot.output_tokens, tpot.e2e_ms) == \
        ("llama-decode", None, 12.5, 40, 12.5 * 39)
    assert tpot.completion_ts == STAMP and tpot.dispatch_ts == pytest.approx(STAMP - 12.5 * 39 / 1000)
    assert tpot.inflight_decode_tokens == 7000 and tpot.request_id != ttft.request_id
    assert [reason for _, _, reason, _ in letters.letters] == [NOTHING, ENCODER]
    key, value, _, source = letters.letters[0]
    assert key == b"llama" and json.loads(value)["actual_tpot_ms"] == 0.0 and source.startswith("llm-d/add_training")
    status, data = call(base, "/data/status")
    assert data["training_data"] == {"ttft_samples": 1, "tpot_samples": 1, "total_samples": 2}
    assert data["telemetry"] == {"records_sent": 2, "dead_lettered": 2, "refused": {"invalid": 2},
                                 "bodies_rejected": 0, "calls_refused_busy": 0, "calls_unauthenticated": 0}
    assert data["bucket_distribution"] == {"queue_2_cache_8_prefix_2": 1}
    assert (data["test_data"]["total_samples"], data["ensemble"]) == (0, {"ensemble_mode": False,
                                                                          "ensemble_active": False})


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


def test_a_sample_timestamp_is_its_completion_time(serve):
    api, telemetry, _, _, base = serve(clock=lambda: STAMP + 30)
    entries = [dict(ENTRY, timestamp="2027-01-15T08:00:00.5Z"), dict(ENTRY, timestamp=STAMP - 500),
               dict(ENTRY, timestamp="0001-01-01T00:00:00Z"), dict(ENTRY, timestamp=None)]
    assert call(base, "/add_training_data_bulk", {"entries": entries})[0] == 202
    assert [r.completion_ts for r in telemetry.records] == [STAMP, STAMP - 500, STAMP + 30, STAMP + 30]


@pytest.mark.parametrize(("stamp", "kind", "reason"), [
    (NOW - 541, "too-old", "is 541 s old: the worker keeps rows 600 s (HEADROOM_WINDOW_MAX_AGE), and a sample must "
                           "reach it with 60 s to spare"),
    (NOW + 301, "too-far-ahead", "is 301 s ahead of this server's clock (at most 300 s: "
                                 "HEADROOM_TELEMETRY_MAX_FUTURE_S)"),
], ids=["old", "ahead"])
def test_a_sample_the_worker_would_refuse_for_its_time_is_refused_at_once(api, stamp, kind, reason):
    api, telemetry, letters, base = api
    status, body = call(base, "/add_training_data_bulk", {"entries": [dict(ENTRY, timestamp=NOW - 539),
                                                                      dict(ENTRY, timestamp=stamp)]})
    assert status == 202 and (body["telemetry"], body["dead_lettered"]) == (1, 1)
    [refused] = body["refused"]
    assert refused["index"] == 1 and refused["reason"].endswith(reason)
    assert [r.completion_ts for r in telemetry.records] == [NOW - 539] and letters.letters[0][2] == refused["reason"]
    assert call(base, "/data/status")[1]["telemetry"]["refused"] == {kind: 1}
    assert f'headroom_llmd_refused_samples_total{{reason="{kind}"}} 1.0' in call(base, "/metrics")[1]


def test_a_short_window_makes_the_age_bound_shorter(serve):
    _, telemetry, _, _, base = serve(times=RecordTimes(max_age_s=120.0), transit_s=20.0)
    entries = [dict(ENTRY, timestamp=NOW - 99), dict(ENTRY, timestamp=NOW - 101)]
    assert call(base, "/add_training_data_bulk", {"entries": entries})[1]["telemetry"] == 1


def test_calls_beyond_the_intake_bounds_are_refused_whole_with_retry_after(serve):
    buffered = [0]
    api, telemetry, _, _, base = serve(intake=Intake(10_000, 10_003, lambda: buffered[0]))
    assert call(base, "/add_training_data_bulk", {"entries": [ENTRY] * 3})[0] == 202
    buffered[0] = 10_001  # the broker is behind: one more sample fits, two do not
    status, body = call(base, "/add_training_data_bulk", {"entries": [ENTRY] * 3})
    assert status == 429 and "retry after 1 s" in body["detail"]
    request = urllib.request.Request(base + "/add_training_data_bulk", data=json.dumps({"entries": [ENTRY]}).encode())
    assert urllib.request.urlopen(request).status == 202
    buffered[0] = 10_003
    try:
        urllib.request.urlopen(request)
        raise AssertionError("not refused")
    except urllib.error.HTTPError as refused:
        assert (refused.code, refused.headers["Retry-After"]) == (429, "1")
    assert len(telemetry.records) == 4 and api.intake.pending == 0
    status, data = call(base, "/data/status")
    assert data["telemetry"]["calls_refused_busy"] == 2 and data["intake"]["max_pending_samples"] == 10_000
    assert 'headroom_llmd_refused_calls_total{status="429"} 2.0' in call(base, "/metrics")[1]


def test_with_tokens_every_route_but_the_probes_needs_one(serve, tmp_path):
    (tmp_path / "tokens").write_text("# the endpoint picker's\ns3cret\n")
    _, telemetry, _, _, base = serve(tokens=BearerTokens.load(tmp_path / "tokens"))
    assert call(base, "/healthz")[0] == 200 and call(base, "/readyz")[0] == 503  # open: the shelf has not read yet
    for path, body in (("/add_training_data_bulk", {"entries": [ENTRY]}), ("/data/status", None), ("/metrics", None),
                       ("/models/list", None), ("/flush", {})):
        assert call(base, path, body) == (401, {"detail": "missing or invalid bearer token"}), path
    request = urllib.request.Request(base + "/add_training_data_bulk", data=json.dumps({"entries": [ENTRY]}).encode(),
                                      headers={"Authorization": "Bearer s3cret"})
    assert urllib.request.urlopen(request).status == 202 and len(telemetry.records) == 1
    request = urllib.request.Request(base + "/data/status", headers={"Authorization": "Bearer s3cret"})
    assert json.loads(urllib.request.urlopen(request).read())["telemetry"]["calls_unauthenticated"] == 5


def test_models_are_listed_and_dumped_from_model_updates(api):
    api, _, _, base = api
    assert call(base, "/readyz")[0] == 503
    assert call(base, "/model/ttft/info") == (404, {"detail": "Model ttft not found"})
    assert call(base, "/model/ttft_gated/info") == (404, {"detail": "Model ttft_gated not found"})
    assert call(base, "/model/gated/info") == (404, {"detail": "Unknown model: gated"})
    assert call(base, "/model/export")[0] == 503
    assert call(base, "/model/ttft/xgb/json") == (200, [])  # the prior: no trees
    booster = train("ttft", objective="quantile", trees=3)
    raw = message(booster, 2, pool_key="llama", target="ttft", objective="quantile")
    assert api.shelf.put(decode_update(raw, TRUST), raw)
    api.shelf.caught_up.set()
    assert call(base, "/readyz") == (200, {"status": "ready"})
    status, info = call(base, "/model/ttft/info")
    assert status == 200 and (info["path"], info["version"], info["quantile"], info["exists"]) == \
        ("llama/ttft/quantile", 2, 0.9, True)
    assert info["size_bytes"] == len(decode_update(raw, TRUST).model)
    status, trees = call(base, "/model/ttft/xgb/json")
    assert status == 200 and len(trees) == 3 and "split" in trees[0]
    with urllib.request.urlopen(base + "/model/tpot/xgb/json") as answer:
        assert (json.loads(answer.read()), answer.headers["X-Headroom-Model"]) == ([], "prior")
    listing = call(base, "/models/list")[1]
    assert {name: entry["exists"] for name, entry in listing["models"].items()} == {
        "ttft": True, "tpot": False, "ttft_gated": False, "tpot_gated": False}
    assert (listing["model_type"], listing["quantile"]) == ("xgboost", 0.9) and "server_time" in listing
    info = call(base, "/model/download/info")[1]
    assert (info["model_type"], info["objective_type"], info["quantile"]) == ("xgboost", "quantile", 0.9)
    assert info["model_status"] == {"ttft_model_ready": True, "tpot_model_ready": False}
    assert info["available_endpoints"]["trees"] == {"ttft_trees": "/model/ttft/xgb/json",
                                                    "tpot_trees": "/model/tpot/xgb/json"}
    status, body = call(base, "/model/ttft/download")
    assert status == 404 and "never writes, serves or loads" in body["detail"]
    assert call(base, "/data/status")[1]["models_trained"] == {"versions": 1, "by_model": {"llama/ttft/quantile": 1},
                                                               "rejected": {}}
    status, text = call(base, "/metrics")
    assert status == 200 and 'headroom_llmd_model_version{model_key="llama/ttft/quantile"} 2.0' in text
    assert call(base, "/healthz") == (200, {"status": "ok"})
    with urllib.request.urlopen(base + "/model/export") as answer:
        assert answer.headers["Content-Type"] == "application/gzip"
        with tarfile.open(fileobj=io.BytesIO(answer.read()), mode="r:gz") as archive:
            assert archive.getnames() == [file_name("llama/ttft/quantile"), "metadata.json"]
            assert archive.extractfile(file_name("llama/ttft/quantile")).read() == raw  # signed, as published
            metadata = json.loads(archive.extractfile("metadata.json").read())
    assert metadata["models"][0]["version"] == 2 and metadata["model_type"] == "xgboost"


def test_metrics_carry_the_reference_names(api):
    api, _, _, base = api
    call(base, "/add_training_data_bulk", {"entries": [ENTRY, dict(ENTRY, actual_ttft_ms=0.0, actual_tpot_ms=9.0,
                                                                   num_tokens_generated=5)]})
    text = call(base, "/metrics")[1]
    for line in ('model_type{type="xgboost"} 1', 'objective_type{type="quantile"} 1', "model_quantile{} 0.9",
                 "ensemble_active{} 0", "ensemble_mode{} 0", "ttft_intercept{} 0.0",
                 'ttft_importance{feature="prefix_cache_score"} 0.000000',
                 'training_samples_count{model="ttft",queue_bucket="2",cache_bucket="8",prefix_bucket="2"} 1',
                 'training_samples_queue_total{model="tpot",queue_bucket="2"} 1',
                 'training_samples_prefix_total{model="ttft",prefix_bucket="2",range="0.50-0.75"} 1',
                 "target_coverage_percent{} 90.0"):
        assert line in text.splitlines(), line
    booster = train("ttft", objective="quantile", trees=5)
    raw = message(booster, 3, pool_key="llama", target="ttft", objective="quantile",
                  holdout_metrics={"pinball": 3.5, "coverage": 0.88, "mae": 9.0})
    api.shelf.put(decode_update(raw, TRUST), raw)
    text = call(base, "/metrics")[1]
    gains = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("ttft_importance{")]
    assert sum(gains) == pytest.approx(1.0, abs=1e-5) and max(gains) > 0
    for line in ('ttft_quantile_loss{idx="0"} 3.500000', 'ttft_coverage_percent{idx="0"} 88.000000',
                 'ttft_violation_rate_percent{idx="0"} 12.000000'):
        assert line in text.splitlines(), line


def test_flush_forgets_the_windows_of_the_pool_and_its_roles(serve):
    api, _, _, forgets, base = serve()
    call(base, "/add_training_data_bulk", {"entries": [ENTRY, ENTRY, dict(ENTRY, actual_ttft_ms=0.0, actual_tpot_ms=4.0,
                                                                          pod_type="decode")]})
    booster = train("ttft", objective="quantile", trees=2)
    raw = message(booster, 4, pool_key="llama", target="ttft", objective="quantile",
                  holdout_metrics={"pinball": 3.5, "coverage": 0.88, "mae": 9.0})
    api.shelf.put(decode_update(raw, TRUST), raw)
    status, body = call(base, "/flush", {"flush_training_data": True, "flush_test_data": False,
                                         "flush_metrics": False, "reason": "new deployment"})
    assert status == 200 and body["success"] is True and body["reason"] == "new deployment"
    assert (body["ttft_training_samples_flushed"], body["tpot_training_samples_flushed"],
            body["metrics_cleared"]) == (2, 1, False)
    assert forgets == [Forget(pool, NOW, "new deployment") for pool in ("llama", "llama-prefill", "llama-decode")]
    status, data = call(base, "/data/status")
    assert data["training_data"]["total_samples"] == 0 and data["bucket_distribution"] == {}
    assert data["telemetry"]["records_sent"] == 3  # what was sent stays counted
    assert any(line.startswith("ttft_quantile_loss") for line in call(base, "/metrics")[1].splitlines())
    status, body = call(base, "/flush", method="POST")  # no body: everything
    assert status == 200 and body["metrics_cleared"] is True and "Successfully flushed" in body["message"]
    assert not any(line.startswith("ttft_quantile_loss") for line in call(base, "/metrics")[1].splitlines())
    status, body = call(base, "/flush", raw=b'{"flush_training_data": "not_a_boolean"}')
    assert status == 422 and len(forgets) == 6


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
