import dataclasses
import math

import numpy as np
import pytest

from headroom.router.framework.server_table import ServerTable
from tests.router.routercases import server

SNAPS = (server("a", kv_cache_usage=0.5, num_waiting=2, num_running=3, prefix_match=0.25, inflight_requests=1,
                inflight_prompt_tokens=64, running_tpot_slos_ms=(40.0, 25.0), metrics_age_s=0.5),
         server("b", pool_key="h100", kv_cache_usage=0.01, num_running=0),
         server("c", metrics_age_s=math.inf))


def test_columns_of_snapshots():
    table = ServerTable.of(SNAPS)
    assert table.server_id == ("a", "b", "c") and table.pool_key == ("default", "h100", "default")
    assert table.state["num_waiting"].tolist() == [2.0, 0.0, 0.0]
    assert table.state["prefix_match"].tolist() == [0.25, 0.0, 0.0]
    assert table.tightest_tpot_slo_ms[0] == 25.0 and np.isnan(table.tightest_tpot_slo_ms[1:]).all()
    assert table.is_idle.tolist() == [s.is_idle for s in SNAPS] == [False, True, False]
    assert table.is_cold.tolist() == [s.is_cold for s in SNAPS] == [False, True, True]


def test_indexing_returns_the_original_snapshots():
    table = ServerTable.of(SNAPS)
    assert all(table[i] is SNAPS[i] for i in range(3)) and list(table) == list(SNAPS)
    assert table.take(np.array([2, 0])).server_id == ("c", "a") and table.take(np.array([2, 0]))[1] is SNAPS[0]
    assert ServerTable.of(table) is table


def test_snapshots_built_from_columns_equal_the_originals():
    table = ServerTable.of(SNAPS)
    columns_only = dataclasses.replace(table, originals=None)
    rebuilt = list(columns_only)
    assert rebuilt == list(SNAPS) and all(type(s.num_waiting) is int for s in rebuilt)
    assert rebuilt[0] is not SNAPS[0] and columns_only[-1] == SNAPS[-1] and columns_only[0:2] == list(SNAPS[:2])


def test_index_out_of_range():
    with pytest.raises(IndexError):
        ServerTable.of([server("a")]).take(np.arange(1))[3]
