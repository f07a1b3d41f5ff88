"""The offline player of a :class:`~sim.scenarios.Scenario`: its pool, its change as :class:`~sim.pool.PoolControl`
actions, and a run of :func:`sim.pool.run` (the arrivals carry the prompt shift and the burst themselves).

Every server runs its type's profile at the scenario's time scale (:func:`sim.scenarios.profile_of`); a server
that joins is routable at once (it was started ahead, as the live player's spare server is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from headroom.sim.pool import Action, PoolControl, SimServerSpec, run, slow_down
from headroom.sim.records import Outcome
from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult
from headroom.sim.scenarios import KvShrink, Replace, Scenario, Slowdown, profile_of
from headroom.sim.view import PickFunction


def pool(scenario: Scenario) -> list[SimServerSpec]:
    """The servers the scenario starts with."""
    return [SimServerSpec(sid, profile_of(sid, scenario.time_scale)) for sid in scenario.pool]


def actions(scenario: Scenario) -> list[Action]:
    """The scenario's change as actions at its time (none for a change carried by the arrivals)."""
    change, at, scale = scenario.change, scenario.change_at_s, scenario.time_scale
    if isinstance(change, Slowdown):
        return [(at, slow_down(sid, change.factor)) for sid in change.servers]
    if isinstance(change, KvShrink):
        blocks = change.blocks(profile_of(change.server, scale))
        return [(at, lambda control: control.set_kv_capacity(change.server, blocks))]
    if isinstance(change, Replace):
        def replace_server(control: PoolControl) -> None:
            control.add_server(profile_of(change.add, scale).with_(load_delay_s=0.0), change.add)
            control.remove_server(change.remove)
        return [(at, replace_server)]
    return []


def play(scenario: Scenario, requests: Sequence[SimRequest], pick: PickFunction, seed: int = 0,
         **options: Any) -> RunResult:
    """``requests`` (from :meth:`Scenario.requests`) through the scenario's pool and change, routed by ``pick``."""
    return run(requests, pool(scenario), pick, seed=seed, actions=actions(scenario), **options)


def served(result: RunResult, slo: tuple[float, float]) -> list[tuple[float, float | None, bool]]:
    """Each request of a run that carries an SLO (in a scenario's own arrivals, every one; in the demo's mix, those
    its client sent one with) as ``(arrival s, TTFT ms or None if not served, SLO met)``."""
    def met(o: Outcome) -> bool:
        return o.ttft_ms <= slo[0] and (o.tpot_ms is None or o.tpot_ms <= slo[1])
    rows: list[tuple[float, float | None, bool]] = [(o.request.arrival_s, o.ttft_ms, met(o)) for o in result.outcomes
                                                    if o.request.slo_ttft_ms is not None]
    rows += [(d.request.arrival_s, None, False) for d in result.dropped if d.request.slo_ttft_ms is not None]
    return sorted(rows, key=lambda row: row[0])

