"""Training, evaluating and publishing headroom's latency models.

- :mod:`trainer.samples` — a training set: raw feature columns, observed values, times, strata.
- :mod:`trainer.params` — XGBoost hyperparameters, objectives (mean, quantile) and the target transform.
- :mod:`trainer.fit` — the one pure fitting function: samples + params → booster (log target by default).
- :mod:`trainer.calibration` — conformal calibration of quantile models on the newest training rows.
- :mod:`trainer.holdout` — the stratified, time-ordered holdout split.
- :mod:`trainer.evaluation` — holdout metrics: MAE, MAPE, pinball loss, quantile coverage.
- :mod:`trainer.gate` — the promotion gate: a candidate versus the live version on the same holdout.
- :mod:`trainer.drift` — River drift detectors on prediction error.
- :mod:`trainer.policy` — when a model is due for retraining (periodically and on drift).
- :mod:`trainer.live` — the live version of each model, loaded from model-update messages.
- :mod:`trainer.rounds` — one training round: split, fit, evaluate, gate, make the update.
- :mod:`trainer.publish` — writing model versions to ``model-updates`` (:mod:`headroom.model_topic` reads them).
"""
