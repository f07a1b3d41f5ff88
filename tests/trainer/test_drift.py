import pytest

from headroom.contract.targets import predicted_value, target_value
from headroom.trainer.drift import ErrorDriftDetector, relative_error
from tests.trainer.synthetic import oracle, synthetic_records

SHIFT_AT = 3000
MAX_DELAY = 200  # samples after the shift within which the detector must fire


def relative_errors(target: str, seed: int) -> list[float]:
    """A stream whose server becomes 2× slower at SHIFT_AT, predicted by a model of the old speed."""
    before = synthetic_records(SHIFT_AT, seed=seed, stream_fraction=1.0, predictor=oracle(1.0))
    after = synthetic_records(2000, seed=seed + 1, slowdown=2.0, stream_fraction=1.0, predictor=oracle(1.0))
    return [relative_error(target_value(r, target), predicted_value(r, target)) for r in before + after]


@pytest.mark.parametrize("kind", ["adwin", "page-hinkley"])
@pytest.mark.parametrize("target", ["ttft", "tpot"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_detector_fires_soon_after_the_shift_and_not_before(kind, target, seed):
    detector = ErrorDriftDetector(kind)
    fired = [i for i, error in enumerate(relative_errors(target, seed)) if detector.update(error)]
    assert fired, "no drift detected"
    assert fired[0] >= SHIFT_AT, f"false alarm at sample {fired[0]}"
    assert fired[0] < SHIFT_AT + MAX_DELAY


def test_detector_counts_updates_and_detections():
    detector = ErrorDriftDetector("adwin")
    for i in range(3000):
        detector.update(0.05 if i < 1500 else 0.6)
    assert detector.updates == 3000
    assert detector.detections >= 1
    assert detector.recent_error == pytest.approx(0.6, abs=0.01)


@pytest.mark.parametrize(("actual", "predicted", "error"), [
    pytest.param(100.0, 90.0, 0.1, id="under"), pytest.param(100.0, 500.0, 1.0, id="clipped"),
    pytest.param(0.0, 0.5, 0.5, id="floored"),
])
def test_relative_error(actual, predicted, error):
    assert relative_error(actual, predicted) == pytest.approx(error)


def test_unknown_detector_is_rejected():
    with pytest.raises(ValueError, match="unknown drift detector 'kswin'"):
        ErrorDriftDetector("kswin")
