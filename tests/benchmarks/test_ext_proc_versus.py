"""``headroom bench ext-proc --versus-epp`` for real: GIE's endpoint picker on a real API server and headroom's router
over the same simulated servers, driven by the same client, each decision routed to one of those servers."""

import asyncio

import pytest

from headroom.benchmarks.epp import epp_pool, sim_fleet, start_epp
from headroom.benchmarks.ext_proc import routed_to, wait_routed
from headroom.benchmarks.ext_proc_versus import bench_versus_epp, ratios

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]  # the first use builds the API server and the EPP


def test_the_epp_routes_to_the_pools_servers_by_their_loopback_addresses(tmp_path):
    with sim_fleet(2) as addresses, epp_pool(addresses) as kube:
        epp, port = start_epp(kube, "matched", tmp_path)
        try:
            first = wait_routed(port)
            picks = {asyncio.run(routed_to(port)) for _ in range(6)}
        finally:
            epp.stop()
    assert addresses == [f"127.0.0.{11 + i}:{addresses[0].rpartition(':')[2]}" for i in range(2)]
    assert first in addresses and picks <= set(addresses)


def test_both_arms_are_measured_in_each_round_and_paired():
    runs = bench_versus_epp(servers=2, streams=2, seconds=1.0, rounds=2, arms=("headroom-heuristic", "epp-matched"))
    assert [(r.arm, r.round) for r in runs] == [("headroom-heuristic", 0), ("epp-matched", 0),
                                                ("epp-matched", 1), ("headroom-heuristic", 1)]  # the order alternates
    assert all(r.decisions > 0 and r.refused == 0 and r.cpu_s > 0 and r.rss_mib > 0 for r in runs)
    rows = ratios(runs)
    assert [row["round"] for row in rows] == [0, 1] and all(row["per_cpu_s"] > 0 for row in rows)
