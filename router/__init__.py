"""The router: scores candidate model servers by predicted latency and picks one per request (SPEC §4).

Its rooms, each a folder: framework, state, http, control, fronts, app (docs/architecture.md).
"""
