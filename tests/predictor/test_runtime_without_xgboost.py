"""A model its trainer stamped (:func:`contract.probe.stamp`) is read, checked and served without importing XGBoost;
one without the stamp still is, checked against XGBoost imported for it."""

import subprocess
import sys

import pytest

from tests.predictor.models import message, train

APPLY = """
import sys
from pathlib import Path
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import TRUST
result = ModelRuntime(trust=TRUST).apply(Path(sys.argv[1]).read_bytes())
print(result.outcome.value, result.reason, 'xgboost' in sys.modules)
"""


@pytest.mark.parametrize(("stamped", "imports_xgboost"), [(True, "False"), (False, "True")])
def test_a_stamped_model_needs_no_xgboost(tmp_path, stamped, imports_xgboost):
    path = tmp_path / "update.bin"
    path.write_bytes(message(train(seed=6), 1, stamped=stamped))
    done = subprocess.run([sys.executable, "-c", APPLY, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["applied", "None", imports_xgboost]
