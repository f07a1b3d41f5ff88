"""llm-d's sidecar containers, started the way the reference's Helm chart starts them, serving headroom.

The reference chart (``inferenceExtension.latencyPredictor``) runs each prediction sidecar as ``uvicorn
prediction_server:app --host H --port P`` and the training sidecar with its image's own command; the
environment says which is which (``SERVER_TYPE``: ``training`` or ``prediction-<n>``, ``PREDICT_PORT``) and
which objective the deployment predicts (``LATENCY_OBJECTIVE_TYPE``). headroom's sidecar image answers to
both: its ``uvicorn`` and its default command are ``headroom llmd sidecar`` (``infra/image/uvicorn``), which
starts

- a prediction server (:mod:`predictor.server`) with llm-d's API on the port it is given, its gRPC API on
  a free port and no metrics port (several sidecars share a pod), unless ``HEADROOM_PREDICTOR_*`` says
  otherwise; its models come from ``model-updates`` (``HEADROOM_KAFKA_BOOTSTRAP``) or from model files
  (``HEADROOM_PREDICTOR_MODELS``);
- or the training API (:mod:`llmd.training_server`) on the port it is given (default 8000), on loopback unless
  told otherwise (the endpoint picker calls it from its own Pod; ``HEADROOM_LLMD_TRAINING_HEALTH_PORT`` serves
  the probes on the Pod's address).

``HEADROOM_*`` settings win over what is derived from the reference's variables; other ``uvicorn`` options
(``--workers``, ``--reload``, ...) are accepted and ignored: one process serves a sidecar.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from headroom.contract.settings import describe, from_env, setting
from headroom.contract.topics import KafkaSettings
from headroom.llmd.settings import TrainingApiSettings
from headroom.predictor.settings import PredictorSettings

APPS = {"prediction_server:app": "prediction", "training_server:app": "training"}


@dataclass(frozen=True)
class SidecarSettings:
    """What the reference's chart tells its sidecars."""

    server_type: str = setting("", "SERVER_TYPE", "training, or prediction-<n> (when no app is named).")
    predict_port: int = setting(8001, "PREDICT_PORT", "A prediction sidecar's port (when --port is not given).")
    objective: str = setting("quantile", "LATENCY_OBJECTIVE_TYPE", "What the deployment predicts: quantile or mean.")


def plan(argv: list[str], environ: dict[str, str] | None = None) -> tuple[str, object]:
    """``("prediction", PredictorSettings)`` or ``("training", TrainingApiSettings)`` for a sidecar's
    command line and environment."""
    environ = dict(os.environ if environ is None else environ)
    parser = argparse.ArgumentParser(prog="headroom llmd sidecar", add_help=False)
    parser.add_argument("app", nargs="?", choices=sorted(APPS))
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args, _ignored = parser.parse_known_args(argv[1:] if argv[:1] == ["--"] else argv)
    sidecar = from_env(SidecarSettings, environ)
    role = APPS[args.app] if args.app else "training" if sidecar.server_type == "training" else "prediction"
    if role == "training":
        derived = {"port": args.port if args.port is not None else 8000, "objective": sidecar.objective,
                   "host": args.host}
        return role, from_env(TrainingApiSettings, environ, **_unset(derived, TrainingApiSettings, environ))
    derived = {"http_port": args.port if args.port is not None else sidecar.predict_port, "host": args.host,
               "port": 0, "metrics_port": -1, "http_objective": sidecar.objective}
    return role, from_env(PredictorSettings, environ, **_unset(derived, PredictorSettings, environ))


def run(argv: list[str]) -> int:
    """Serve the sidecar until SIGTERM or SIGINT."""
    role, settings = plan(argv)
    kafka = from_env(KafkaSettings)
    if role == "training":
        from headroom.llmd.training_server import serve as serve_training

        return serve_training(settings, kafka)  # type: ignore[arg-type]
    from headroom.predictor.server import serve as serve_predictions

    files_only = bool(settings.models) and not settings.tail_with_models  # type: ignore[attr-defined]
    return serve_predictions(settings, None if files_only else kafka)  # type: ignore[arg-type]


def _unset(derived: dict[str, object], cls: type, environ: dict[str, str]) -> dict[str, object]:
    """The derived values whose own ``HEADROOM_*`` variable is not set (and that were derived at all)."""
    variables = {name: env for name, env, _, _ in describe(cls)}
    return {name: value for name, value in derived.items() if value is not None and variables[name] not in environ}
