"""What the demo plays: the first H100 servers its settings name slow down, and no other number is accepted."""

import os
import subprocess
import sys

import pytest

from headroom.demo.run import scenario
from headroom.demo.settings import DemoSettings
from headroom.sim.scenarios import Slowdown


def test_the_first_slowed_servers_slow_down_and_the_load_after_is_stated():
    played = scenario(DemoSettings())
    assert played.pool == ("h100-0", "h100-1", "h100-2", "a100-0")
    assert played.change == Slowdown(("h100-0", "h100-1"), 2.0)
    assert "h100-0, h100-1 slow down 2× (then at 70% of the capacity left)" in played.describe()
    every = scenario(DemoSettings(slowed_servers=3))
    assert every.change == Slowdown(("h100-0", "h100-1", "h100-2"), 2.0)
    assert every.capacity(after=True) < played.capacity(after=True) < played.capacity()


@pytest.mark.parametrize("slowed", [0, 4])
def test_a_count_outside_the_h100_servers_is_refused_by_name(slowed):
    with pytest.raises(ValueError, match=f"HEADROOM_DEMO_SLOWED_SERVERS is {slowed}: it must be between 1 and the 3"):
        scenario(DemoSettings(slowed_servers=slowed))


def test_the_command_says_so_in_one_line_before_starting_anything(tmp_path):
    done = subprocess.run([sys.executable, "-m", "headroom.cli.main", "demo", "--report-dir", str(tmp_path / "r")],
                          env={**os.environ, "HEADROOM_DEMO_SLOWED_SERVERS": "5",
                               "HEADROOM_DEMO_STATE_DIR": str(tmp_path / "s")}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cannot start the demo: HEADROOM_DEMO_SLOWED_SERVERS is 5" in done.stderr
    assert not (tmp_path / "s").exists()
