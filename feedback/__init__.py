"""What the router learns from the outcomes of its own decisions, between model versions: state that the router and
the simulator's view of a router keep alike (:mod:`feedback.latency_corrections`)."""
