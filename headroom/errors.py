"""headroom's errors, one small hierarchy under :class:`HeadroomError`; each package keeps the errors of
its own domain beside its code, rooted here::

    HeadroomError                  every error headroom raises on purpose
    ├── CommandError               a command failed in a way the user can act on (printed, no traceback)
    ├── SettingsError              an environment variable a setting cannot take (contract.settings)
    ├── InvalidRecord              telemetry that must not be trained on; ``reason`` (contract.telemetry)
    ├── InvalidUpdate              a model-update message that must not be applied (contract.model_update)
    │   └── RejectedUpdate         a well-formed update whose model must not be used; ``reason``
    ├── PublishError               a model update was not written to Kafka (trainer.publish)
    ├── BrokerError                the local broker cannot be managed (localkafka.errors: and its kinds)
    ├── PredictorError             a prediction cannot be made (predictor.errors: and its kinds)
    ├── UnsupportedModel           a model the tree evaluator cannot reproduce (predictor.forest)
    ├── RouterError                configuration, request, admission, routing (router.errors: and its kinds)
    ├── MetricsFormatError         a server's metrics text cannot be read (router.state.server_metrics)
    ├── SimulationError            a simulator run asked for the impossible (sim.pool)
    ├── TraceError                 a trace file is missing or malformed (sim.traces)
    ├── BadRequest                 a simulated server answers HTTP 400 (sim.live)
    ├── AutoscaleError             autoscaling specs and metrics (autoscale.errors: and its kinds)
    └── ComponentFailed            a demo component exited or never became ready (demo.processes)

Errors that callers may reasonably catch as a built-in kind keep it as a second base (``SettingsError`` is
also a ``ValueError``), so ``except ValueError`` around parsing keeps working.
"""

from __future__ import annotations


class HeadroomError(Exception):
    """Base of every error headroom raises on purpose."""


class CommandError(HeadroomError):
    """A command failed in a way the user can act on; printed without a traceback."""
