"""The learning pipeline worker's settings, built once by ``headroom worker start``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.contract.settings import nested, setting
from headroom.streams.window_rules import WindowLimits
from headroom.trainer.params import TrainParams
from headroom.trainer.policy import RetrainRule

if TYPE_CHECKING:  # the trainer's rounds load XGBoost: only the worker that trains needs them
    from headroom.trainer.rounds import RoundSpec


@dataclass(frozen=True)
class RecordTimes:
    """How old, or how far ahead of the worker's clock, a record may complete; llm-d's training API refuses
    what the worker would (:mod:`llmd.intake`)."""

    max_age_s: float = setting(600.0, "HEADROOM_WINDOW_MAX_AGE", "Seconds (event time) a row stays; "
                               "records older than this by the worker's clock are dead-lettered.")
    max_future_s: float = setting(300.0, "HEADROOM_TELEMETRY_MAX_FUTURE_S",
                                  "Records completed further ahead of the worker's clock are dead-lettered.")


@dataclass(frozen=True)
class PipelineSettings:
    """What the worker keeps, when it retrains, and how it judges new models."""

    app_id: str = setting("headroom-pipeline", "HEADROOM_PIPELINE_APP_ID",
                          "Faust app id: consumer group and prefix of the window changelog topic.")
    window_max_rows: int = setting(500, "HEADROOM_WINDOW_MAX_ROWS", "Rows kept per stratum and target.")
    times: RecordTimes = nested(RecordTimes, "How old, or how far ahead, a record may complete.")
    retrain_interval_s: float = setting(10.0, "HEADROOM_RETRAIN_INTERVAL", "Seconds between periodic retrains.")
    min_samples: int = setting(100, "HEADROOM_RETRAIN_MIN_SAMPLES", "Window rows needed before training.")
    drift_cooldown_s: float = setting(2.0, "HEADROOM_DRIFT_COOLDOWN",
                                      "Minimum seconds between a training and a drift-triggered one.")
    drift_detector: str = setting("adwin", "HEADROOM_DRIFT_DETECTOR", "adwin or page-hinkley.")
    adwin_delta: float = setting(0.002, "HEADROOM_ADWIN_DELTA", "ADWIN confidence (smaller: fewer alarms).")
    ph_threshold: float = setting(5.0, "HEADROOM_PH_THRESHOLD", "Page-Hinkley threshold, in relative error.")
    drift_memory_s: float = setting(5.0, "HEADROOM_DRIFT_MEMORY",
                                    "On drift, forget window rows older than this many seconds (< 0: keep all).")
    batch_records: int = setting(2000, "HEADROOM_TELEMETRY_BATCH_RECORDS",
                                 "Most telemetry records read and processed in one batch.")
    flush_records: int = setting(5000, "HEADROOM_WINDOW_FLUSH_RECORDS",
                                 "Records per partition between writes of window changes to the changelog.")
    flush_interval_s: float = setting(1.0, "HEADROOM_WINDOW_FLUSH_INTERVAL",
                                      "Seconds after which window changes are written even with fewer records.")
    holdout_fraction: float = setting(0.2, "HEADROOM_HOLDOUT_FRACTION", "Newest share of each stratum held out.")
    gate_tolerance: float = setting(0.02, "HEADROOM_GATE_TOLERANCE",
                                    "Relative slack a candidate's holdout error may exceed the live one's by.")
    calibration_fraction: float = setting(0.25, "HEADROOM_CALIBRATION_FRACTION",
                                          "Newest share of training rows that calibrates quantile models (0: off).")
    refit_promoted: bool = setting(True, "HEADROOM_REFIT_PROMOTED",
                                   "Refit a promoted model on its training and holdout rows before publishing.")
    target_transform: str = setting("log", "HEADROOM_TARGET_TRANSFORM",
                                    "log (fit log latency: relative errors) or identity (fit milliseconds).")
    central_loss: str = setting("squared", "HEADROOM_CENTRAL_LOSS",
                                "Loss of the mean models: squared (a mean) or absolute (a median: lower MAPE).")
    quantile: float = setting(0.9, "HEADROOM_QUANTILE", "Quantile of the upper-bound models.")
    trees: int = setting(200, "HEADROOM_TRAIN_TREES", "Boosting rounds per model.")
    train_threads: int = setting(1, "HEADROOM_TRAIN_THREADS", "XGBoost threads per training.")
    metrics_port: int = setting(0, "HEADROOM_PIPELINE_METRICS_PORT", "Prometheus port (0: off).")
    metrics_host: str = setting("127.0.0.1", "HEADROOM_PIPELINE_METRICS_HOST",
                                "Address the Prometheus endpoint binds (0.0.0.0 in a pod).")
    session_timeout_s: float = setting(10.0, "HEADROOM_PIPELINE_SESSION_TIMEOUT",
                                       "Seconds without a heartbeat before the group hands a worker's partitions "
                                       "to the others (and a restarted worker without an instance id waits).")
    instance_id: str = setting("", "HEADROOM_PIPELINE_INSTANCE_ID",
                               "Static group membership: a name unique to this worker and stable across its "
                               "restarts (the pod name); a restarted worker takes its partitions back at once.")
    data_dir: Path = setting(Path(".headroom/pipeline"), "HEADROOM_PIPELINE_DATA_DIR", "Faust's local folder.")
    log_level: str = setting("info", "HEADROOM_PIPELINE_LOG_LEVEL", "crit, error, warn, info or debug.")

    def __post_init__(self) -> None:
        self.train_params  # noqa: B018 - builds (so checks) the training parameters when the settings are made
        if self.session_timeout_s < 6.0:
            raise ValueError(f"session timeout must be at least 6 s (the broker's minimum), got {self.session_timeout_s}")
        if not 0.0 <= self.calibration_fraction < 1.0:
            raise ValueError(f"calibration fraction must be within [0, 1), got {self.calibration_fraction}")

    @property
    def limits(self) -> WindowLimits:
        return WindowLimits(max_rows=self.window_max_rows, max_age_s=self.times.max_age_s,
                            max_future_s=self.times.max_future_s)

    @property
    def rule(self) -> RetrainRule:
        return RetrainRule(interval_s=self.retrain_interval_s, min_samples=self.min_samples,
                           drift_cooldown_s=self.drift_cooldown_s)

    @property
    def round_spec(self) -> RoundSpec:
        from headroom.trainer.rounds import RoundSpec

        return RoundSpec(holdout_fraction=self.holdout_fraction, tolerance=self.gate_tolerance,
                         calibration_fraction=self.calibration_fraction, refit_promoted=self.refit_promoted)

    @property
    def train_params(self) -> list[TrainParams]:
        """One set of hyperparameters per objective: the mean model, then the quantile one."""
        return [TrainParams(objective=objective, quantile=self.quantile, n_trees=self.trees,
                            threads=self.train_threads, target_transform=self.target_transform,
                            central_loss=self.central_loss)
                for objective in ("mean", "quantile")]
