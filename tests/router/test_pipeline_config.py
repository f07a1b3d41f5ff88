import copy

import pytest
import yaml

from headroom.router.errors import ConfigError
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from tests.router.routercases import req


def test_default_pipeline():
    pipeline = load_pipeline(None)
    assert pipeline.predicted.producer is not None and pipeline.predicted.admitter is not None
    assert [f.name for f in pipeline.predicted.filters] == ["affinity", "tiers", "concentrate", "protect"]
    assert [(s.name, w) for s, w in pipeline.heuristic.scorers] == [("kv-free", 1.0), ("queue", 1.0), ("prefix", 1.0)]
    assert pipeline.predict_all is True  # every request is predicted unless it opts out
    assert type(pipeline.predicted.picker).__name__ == "MaxScorePicker"  # the best score, measured
    assert pipeline.heuristic.picker.params.sharpness == 1.0  # the reference's proportional pick


def test_loads_from_yaml_with_params():
    text = """
predictAll: false
plugins:
  - {type: predicted-latency-producer, name: producer}
  - {type: latency-scorer, name: latency, params: {headroomSelectionStrategy: most}}
  - {type: queue-scorer, name: queue}
  - {type: weighted-random-picker, name: picker}
profiles:
  - name: predicted
    plugins: [{ref: producer}, {ref: latency, weight: 2}, {ref: picker}]
  - name: heuristic
    plugins: [{ref: queue}, {ref: picker}]
"""
    pipeline = load_pipeline(yaml.safe_load(text))
    assert pipeline.predict_all is False
    ((scorer, weight),) = pipeline.predicted.scorers
    assert scorer.params.headroom_selection_strategy == "most" and weight == 2.0


def test_default_slo_holds_requests_without_slo_headers():
    pipeline = load_pipeline({**DEFAULT_PIPELINE, "defaultSLO": {"ttftMs": 800, "tpotMs": 40}})
    assert (pipeline.default_slo_ttft_ms, pipeline.default_slo_tpot_ms) == (800.0, 40.0)
    held = pipeline.with_default_slo(req())
    assert (held.slo_ttft_ms, held.slo_tpot_ms) == (800.0, 40.0)
    own = req(slo_ttft_ms=300.0)
    assert pipeline.with_default_slo(own) is own  # a request with its own SLO keeps it (and only it)
    assert load_pipeline(None).with_default_slo(own) is own and load_pipeline(None).default_slo_ttft_ms is None
    only_ttft = load_pipeline({**DEFAULT_PIPELINE, "defaultSLO": {"ttftMs": 500}})
    assert only_ttft.with_default_slo(req()).slo_tpot_ms is None


def with_change(path, value):
    raw = copy.deepcopy(DEFAULT_PIPELINE)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return raw


ERRORS = [
    pytest.param(with_change(["plugins", 0, "type"], "nope"), "scheduling.plugins\\[0\\]: unknown plugin type 'nope'",
                 id="unknown-type"),
    pytest.param(with_change(["plugins", 1, "params"], {"affinityThreshold": 1.5}),
                 r"plugin 'affinity': parameter 'affinityThreshold' must be within \[0.0, 1.0\], got 1.5",
                 id="out-of-range-param"),
    pytest.param(with_change(["plugins", 1, "params"], {"affinityTreshold": 0.5}),
                 "plugin 'affinity': unknown parameter 'affinityTreshold'", id="unknown-param"),
    pytest.param(with_change(["plugins", 1, "params"], {"affinityThreshold": "high"}),
                 "plugin 'affinity': parameter 'affinityThreshold' must be a number, got 'high'", id="wrong-type"),
    pytest.param(with_change(["profiles", 0, "plugins", 0, "ref"], "ghost"),
                 "profile 'predicted' plugins\\[0\\]: ref 'ghost' names no plugin", id="dangling-ref"),
    pytest.param(with_change(["plugins", 1, "name"], "producer"), "duplicate plugin name 'producer'", id="duplicate-name"),
    pytest.param(with_change(["profiles", 1, "plugins", 0, "weight"], 0), "weight of 'kv-free' must be a positive number",
                 id="zero-weight"),
    pytest.param(with_change(["profiles", 0, "plugins", 1, "weight"], 2), "'affinity' is a filter; only scorers take a weight",
                 id="weight-on-filter"),
    pytest.param(with_change(["profiles", 1, "plugins"], [{"ref": "queue"}]), "profile 'heuristic': needs exactly one picker",
                 id="no-picker"),
    pytest.param(with_change(["predictedProfile"], "heuristic"), "profile 'heuristic' has no producer",
                 id="predicted-profile-without-producer"),
    pytest.param(with_change(["heuristicProfile"], "other"), "scheduling.heuristicProfile: 'other' names no profile",
                 id="missing-profile"),
    pytest.param(with_change(["extra"], 1), "scheduling: unknown key 'extra'", id="unknown-top-key"),
    pytest.param(with_change(["predictAll"], "yes"), "predictAll must be true or false, got 'yes'", id="bad-bool"),
    pytest.param(with_change(["plugins"], {"a": 1}), "scheduling.plugins must be a list", id="plugins-not-list"),
    pytest.param(with_change(["defaultSLO"], {"ttftMs": 0}), "defaultSLO.ttftMs must be a positive number of ms, got 0",
                 id="default-slo-zero"),
    pytest.param(with_change(["defaultSLO"], {"tpotMs": "fast"}), "defaultSLO.tpotMs must be a positive number",
                 id="default-slo-type"),
    pytest.param(with_change(["defaultSLO"], {"ttftMS": 100}), "scheduling.defaultSLO: unknown key 'ttftMS'",
                 id="default-slo-key"),
    pytest.param(with_change(["defaultSLO"], [100, 50]), "scheduling.defaultSLO must be a mapping", id="default-slo-list"),
]


@pytest.mark.parametrize("raw, message", ERRORS)
def test_config_errors(raw, message):
    with pytest.raises(ConfigError, match=message):
        load_pipeline(raw)
