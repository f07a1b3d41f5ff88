"""A calibrated simulator of a pool of vLLM-like model servers, driven by real traces.

One engine, two faces: an offline discrete-event run on a virtual clock (fast, seeded, repeatable) and
live servers behind real OpenAI-compatible HTTP on loopback.

Values
    :class:`~sim.request.SimRequest` — a frozen request (arrival, prompt/output tokens, ``max_tokens``,
    chained 16-token prefix-block hashes, ``stream``, optional SLOs, priority, pool key).
    :class:`~sim.profile.ServerProfile` — a server type: the calibrated step-time model and limits;
    built-ins ``PROFILES["h100"]`` and ``PROFILES["a100"]``; ``profile.with_(noise=0.1)`` for variants.
    :class:`~sim.records.Outcome`, :class:`~sim.records.MetricsSnapshot`, :class:`~sim.records.Dropped`.

One server
    :class:`~sim.engine.ServerEngine` — ``submit(request, now)``, ``advance_to(t)``, ``next_wake(now)``,
    ``snapshot(now)``, ``prefix_match(request)``, ``set_slowdown(factor, now)``, ``fork()``; finished
    requests land in ``engine.finished``.

A pool, offline
    :func:`~sim.pool.run` ``(requests, pool, pick, *, scrape_interval_s=0.05, seed=0, controller=None,
    control_interval_s=10.0, actions=(), ...) -> RunResult`` with ``outcomes``, ``records``
    (:class:`contract.telemetry.TelemetryRecord`, one per completed request, features as seen at
    dispatch), ``dropped`` and ``metrics`` (every scrape of every server).
    ``pool`` is a list of :class:`~sim.pool.SimServerSpec`; :func:`~sim.pool.uniform_pool` makes one.
    ``pick(request, view) -> server_id | Pick | Shed`` sees a :class:`~sim.view.PoolView`: scraped
    ``snapshots``, the router's fresh ``inflight_requests`` / ``inflight_prompt_tokens``,
    ``running_tpot_slos``, ``prefix_match(i)`` and ``server_state(i)``; returning a :class:`~sim.view.Pick`
    attaches predictions to the telemetry, a :class:`~sim.view.Shed` rejects the request (it lands in
    ``dropped``), a :class:`~sim.view.Hold` keeps it at the router to be asked about again.
    ``controller(control)`` / ``actions=[(t, fn)]`` get a :class:`~sim.pool.PoolControl` to add servers
    (after their load delay), remove them (drained) and slow them down (:func:`~sim.pool.slow_down`).

Oracle
    :func:`~sim.oracle.true_ttft_ms` ``(engine, request, now)``, :func:`~sim.oracle.oracle_ttfts`
    ``(view, request)`` and :func:`~sim.oracle.oracle_pick`: the TTFT a request would really get on
    each server, by forking the server and simulating forward, assuming no later arrivals.

Load
    :func:`~sim.traces.load_trace` (any file by format, a shared trace or a named synthetic load),
    :func:`~sim.traces.load_azure`, :func:`~sim.traces.load_mooncake` (time-scaled to a ``rate``),
    :class:`~sim.prefixes.SharedPrefixes` (the stated synthetic system-prompt model for Azure), and
    :mod:`sim.synthetic`: Poisson / bursty arrivals, heavy-tailed :class:`~sim.synthetic.Lengths`,
    named loads such as the bursty code-completion one (:func:`~sim.synthetic.synthetic_load`),
    regime changes (rate steps, :func:`~sim.synthetic.shift_prompts`, :func:`~sim.synthetic.scale_rate`;
    a slowing server is :func:`~sim.pool.slow_down`).

Baselines
    :mod:`sim.policies` — ``policy(name)`` for ``round-robin``, ``random``, ``least-queue``,
    ``prefix-least-queue``, ``least-kv``, ``composite``.

Live
    :class:`~sim.live.LiveServer` and :func:`~sim.live.serve_pool` — ``/v1/completions``,
    ``/v1/chat/completions`` (JSON and SSE with ``usage``), ``/metrics`` (vLLM and JetStream names),
    ``/health``; ``time_scale`` speeds the clock up.

Command line: ``headroom sim run | serve`` (:mod:`sim.cli`); its benchmark is ``headroom bench sim``.

>>> from sim import SimRequest, run, uniform_pool, policy
>>> requests = [SimRequest(f"r{i}", 0.1 * i, 1000, 50) for i in range(20)]
>>> result = run(requests, uniform_pool(2), policy("least-queue"))
>>> len(result.records), round(result.outcomes[0].ttft_ms, 1)
(20, 27.1)
"""

from headroom.sim.engine import ServerEngine
from headroom.sim.oracle import oracle_pick, oracle_ttfts, true_ttft_ms
from headroom.sim.policies import POLICIES, policy
from headroom.sim.pool import PoolControl, SimServerSpec, SimulationError, run, slow_down, uniform_pool
from headroom.sim.prefixes import SharedPrefixes
from headroom.sim.profile import PROFILES, ServerProfile, profile
from headroom.sim.records import Dropped, MetricsSnapshot, Outcome
from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult
from headroom.sim.view import Hold, Pick, PoolView, Shed

__all__ = [
    "Dropped", "Hold", "MetricsSnapshot", "Outcome", "Pick", "POLICIES", "PoolControl", "PoolView", "PROFILES",
    "RunResult", "ServerEngine", "ServerProfile", "SharedPrefixes", "Shed", "SimRequest", "SimServerSpec",
    "SimulationError", "oracle_pick", "oracle_ttfts", "policy", "profile", "run", "slow_down", "true_ttft_ms",
    "uniform_pool",
]
