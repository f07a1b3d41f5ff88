"""Every registered plugin builds from empty params, is documented, is pure on its inputs, and scores in range."""

import copy
import importlib

import pytest

from headroom.router.errors import ConfigError
from headroom.router.framework.params import camel
from headroom.router.framework.registry import REGISTRY
from headroom.router.framework.roles import Scored, role_of
from tests.router.routercases import TablePredictor, cand, ctx, req

CANDIDATES = (cand("a", 120, slo_ttft=500.0, prefix_match=0.9, kv_cache_usage=0.3, num_waiting=2),
              cand("b", 900, slo_ttft=500.0, kv_cache_usage=0.9, num_waiting=7),
              cand("c", None, kv_cache_usage=0.0, num_running=0))
REQUESTS = (req(), req(slo_ttft_ms=500.0, stream=True, slo_tpot_ms=30.0, priority=-1))


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_builds_from_empty_params_and_is_documented(kind):
    plugin = REGISTRY[kind]("instance", None)
    assert plugin.name == "instance"
    module = importlib.import_module(type(plugin).__module__)
    assert module.TYPE == kind
    assert module.__doc__ and module.__doc__.startswith(f"{kind}:")
    for field in plugin.params.__dataclass_fields__:
        assert camel(field) in module.__doc__, f"{kind}: parameter {camel(field)} is not documented"
    role_of(plugin)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_rejects_unknown_params(kind):
    with pytest.raises(ConfigError, match="plugin 'x': unknown parameter 'bogus'"):
        REGISTRY[kind]("x", {"bogus": 1})


@pytest.mark.parametrize("kind", sorted(REGISTRY))
@pytest.mark.parametrize("request_", REQUESTS, ids=["plain", "slo"])
def test_pure_and_in_range(kind, request_):
    plugin = REGISTRY[kind]("p", None)
    inputs = list(CANDIDATES)
    before = copy.deepcopy(inputs)
    role = role_of(plugin)
    if role == "producer":
        out = plugin.produce(request_, inputs, ctx(predictor=TablePredictor()))
        assert len(out) == len(inputs)
    elif role == "filter":
        out = plugin.filter(request_, inputs, ctx())
        assert out and set(out) <= set(inputs)
    elif role == "scorer":
        scores = plugin.score(request_, inputs)
        assert len(scores) == len(inputs) and all(0.0 <= s <= 1.0 for s in scores)
    elif role == "admitter":
        out = plugin.admit(request_, inputs)
        assert out is None or isinstance(out, str)
    else:
        options = [Scored(c, 0.5) for c in inputs]
        assert plugin.pick(options, ctx()) in options
    assert inputs == before
