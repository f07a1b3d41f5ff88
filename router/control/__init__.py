"""One request's way through the router, whatever front it came by: what it asks (headers, body, limits), the decision, what was measured, and the metrics and telemetry it leaves."""
