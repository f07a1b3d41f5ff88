"""What a first model needs is ready before it arrives: a router warms the runtime up at start-up."""

import subprocess
import sys


def test_warm_up_loads_the_model_reader_before_any_model():
    code = ("import sys\n"
            "from headroom.predictor import runtime\n"
            "before = 'xgboost' in sys.modules\n"
            "runtime.warm_up()\n"
            "print(before, 'xgboost' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]  # not loaded by the runtime's import, loaded by its warm-up
