import numpy as np
import pytest

from headroom.contract.features import FEATURE_NAMES, RAW_COLUMNS, feature_matrix, records_matrix
from headroom.contract.targets import predicted_value, target_value
from tests.contract.records import valid_record


def test_matrix_has_the_declared_columns_and_derived_values():
    record = valid_record(prompt_tokens=1000, prefix_match=0.25, num_waiting=0)
    row = records_matrix([record])[0]
    assert row.shape == (len(FEATURE_NAMES),)
    named = dict(zip(FEATURE_NAMES, row))
    assert named["effective_prompt_tokens"] == pytest.approx(750.0)
    assert named["is_queued"] == 0.0
    assert named["kv_cache_usage"] == pytest.approx(0.42)


def test_training_and_prediction_paths_agree():
    records = [valid_record(num_waiting=w, prefix_match=p) for w, p in [(0, 0.0), (3, 0.9), (12, 1.0)]]
    columns = {name: np.array([getattr(r, name) for r in records]) for name in RAW_COLUMNS}
    assert np.array_equal(feature_matrix(columns), records_matrix(records))


def test_a_column_given_as_one_number_is_that_number_in_every_row():
    records = [valid_record(num_waiting=w, prefix_match=p) for w, p in [(0, 0.0), (3, 0.9), (12, 1.0)]]
    columns = {name: np.array([getattr(r, name) for r in records]) for name in RAW_COLUMNS}
    shared = {**columns, "prompt_tokens": records[0].prompt_tokens, "max_tokens": records[0].max_tokens}
    assert np.array_equal(feature_matrix(shared, rows=3), records_matrix(records))


@pytest.mark.parametrize("rows", [None, 3])
def test_columns_of_different_lengths_are_refused_naming_the_column(rows):
    for short in (np.zeros(2), np.zeros(1)):
        columns = {name: np.zeros(3) for name in RAW_COLUMNS} | {"num_waiting": short}
        with pytest.raises(ValueError, match="num_waiting"):
            feature_matrix(columns, rows=rows)


@pytest.mark.parametrize(("stream", "target", "expected"), [
    (True, "ttft", 120.0), (True, "tpot", 14.8), (True, "e2e", None),
    (False, "ttft", None), (False, "tpot", None), (False, "e2e", 1999.0),
], ids=["stream-ttft", "stream-tpot", "stream-e2e", "batch-ttft", "batch-tpot", "batch-e2e"])
def test_stream_flag_decides_which_models_a_record_trains(stream, target, expected):
    assert target_value(valid_record(stream=stream), target) == expected


@pytest.mark.parametrize(("changes", "target", "error"), [
    pytest.param({}, "ttft", 10.0, id="streaming-ttft"),
    pytest.param({}, "tpot", -0.2, id="streaming-tpot"),
    pytest.param({}, "e2e", None, id="streaming-trains-no-e2e"),
    pytest.param({"predicted_ttft_ms": None}, "ttft", None, id="no-prediction"),
    pytest.param({"stream": False, "ttft_ms": None, "tpot_ms": None, "predicted_e2e_ms": 2100.0}, "e2e", -101.0,
                 id="non-streaming-e2e"),
    pytest.param({"stream": False, "ttft_ms": None, "tpot_ms": None}, "ttft", None, id="non-streaming-no-ttft"),
])
def test_the_live_error_pairs_the_observed_target_with_the_prediction_used(changes, target, error):
    record = valid_record(**changes)
    actual, predicted = target_value(record, target), predicted_value(record, target)
    assert (None if actual is None or predicted is None else pytest.approx(actual - predicted)) == error
