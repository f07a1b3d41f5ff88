"""The report's plots: every legend entry names something drawn."""

import numpy as np
import polars as pl

from headroom.backtest import plots


def errors(rows):
    return pl.DataFrame(rows, schema={"event_ts": pl.Float64, "pool_key": pl.String, "target": pl.String,
                                      "objective": pl.String, "actual_ms": pl.Float64, "predicted_ms": pl.Float64},
                        orient="row")


def test_every_legend_entry_of_the_error_plot_has_visible_data(tmp_path, monkeypatch):
    many = [(float(t), "h100", "ttft", "mean", 100.0, 90.0 + t % 7) for t in range(50)]
    one = [(10.0, "a100", "tpot", "mean", 20.0, 25.0)]  # a series with a single point
    drifts = pl.DataFrame({"event_ts": [20.0]})
    rounds = pl.DataFrame({"event_ts": [5.0, 30.0], "promoted": [True, True], "objective": ["mean", "mean"]})
    figures = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or real_save(fig, path))
    path = plots.error_over_time(errors(many + one), drifts, rounds, tmp_path / "error.png")
    assert path.stat().st_size > 0
    ax = figures[0].axes[0]
    handles, labels = ax.get_legend_handles_labels()
    assert set(labels) == {"h100/ttft", "a100/tpot", "drift", "promotion"}
    for handle, label in zip(handles, labels):
        x, y = handle.get_data()
        finite = np.isfinite(np.asarray(y, dtype=float))
        marked = handle.get_marker() not in (None, "None", "")
        assert finite.sum() >= 2 or (finite.any() and marked), f"{label} draws no visible line or marker"
        if label == "a100/tpot":
            assert marked  # one point: drawn as a marker
        if label == "promotion":
            assert all(0.0 < v <= 1.0 for v in np.asarray(y, dtype=float))  # inside the axes, at the top
