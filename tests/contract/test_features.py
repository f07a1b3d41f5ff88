import numpy as np
import pytest

from contract.features import FEATURE_NAMES, RAW_COLUMNS, feature_matrix, records_matrix, target_value
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


@pytest.mark.parametrize(("stream", "target", "expected"), [
    (True, "ttft", 120.0), (True, "tpot", 14.8), (True, "e2e", None),
    (False, "ttft", None), (False, "tpot", None), (False, "e2e", 1999.0),
], ids=["stream-ttft", "stream-tpot", "stream-e2e", "batch-ttft", "batch-tpot", "batch-e2e"])
def test_stream_flag_decides_which_models_a_record_trains(stream, target, expected):
    assert target_value(valid_record(stream=stream), target) == expected
