"""Measurements for the developers of headroom: each drives the tests' own helpers (``tests.*``: synthetic
records, worker processes, signing keys), so it runs from a checkout, as
``.venv/bin/python -m headroom.benchmarks.dev.<name>``, and the wheel leaves this package out.
"""
