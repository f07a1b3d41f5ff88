"""The router: scores candidate model servers by predicted latency and picks one per request (SPEC §4)."""
