"""A trained XGBoost model as flat arrays that the tree kernels evaluate.

A model arrives in XGBoost's own format (UBJ or JSON). XGBoost loads it (which also validates it) and
re-saves it as JSON; every tree is then laid out as a *complete* binary tree of the model's depth ``D``:
internal node ``i`` has children ``2i+1`` (taken when ``x < threshold``, compared in float32) and
``2i+2``; a leaf reached above depth ``D`` is copied into every leaf slot below it, so traversal is
always exactly ``D`` steps with no branches on the tree shape. A missing value (NaN) follows the node's
default direction. The prediction is ``base_score`` plus the leaf values, added tree by tree in float32,
as XGBoost does.

Only what these semantics cover is accepted: the ``gbtree`` booster with numerical splits, one output,
and an identity-link regression objective; anything else raises :class:`UnsupportedModel`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from headroom.errors import HeadroomError

IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:quantileerror", "reg:absoluteerror", "reg:pseudohubererror")
MAX_DEPTH = 12  # a complete tree of this depth has 4096 leaves


class UnsupportedModel(HeadroomError, ValueError):
    """A model this evaluator cannot reproduce faithfully; the message says which part."""


@dataclass(frozen=True)
class Forest:
    """One model's trees as complete binary trees of ``depth`` levels, stacked row-wise."""

    objective: str
    quantiles: tuple[float, ...]  # quantile_alpha of a quantile model, else empty
    n_features: int
    base_score: np.float32
    depth: int
    features: np.ndarray = field(repr=False)  # (n_trees, 2**depth - 1) uint32
    thresholds: np.ndarray = field(repr=False)  # (n_trees, 2**depth - 1) float32
    default_left: np.ndarray = field(repr=False)  # (n_trees, 2**depth - 1) bool
    leaves: np.ndarray = field(repr=False)  # (n_trees, 2**depth) float32

    @property
    def n_trees(self) -> int:
        return int(self.leaves.shape[0])


def forest_from_booster(booster) -> Forest:
    return forest_from_json(bytes(booster.save_raw("json")))


def forest_from_json(raw: bytes) -> Forest:
    """Parse XGBoost's JSON model into a :class:`Forest`."""
    learner = json.loads(raw)["learner"]
    params = learner["learner_model_param"]
    objective = learner["objective"]["name"]
    if objective not in IDENTITY_OBJECTIVES:
        raise UnsupportedModel(f"objective {objective!r} is not supported; expected one of {IDENTITY_OBJECTIVES}")
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) != 1:
        raise UnsupportedModel("only single-output models are supported "
                               f"(num_class={params.get('num_class')}, num_target={params.get('num_target')})")
    quantiles: tuple[float, ...] = ()
    if objective == "reg:quantileerror":
        quantiles = tuple(float(q) for q in _floats(learner["objective"]["quantile_loss_param"]["quantile_alpha"]))
        if len(quantiles) != 1:
            raise UnsupportedModel(f"a quantile model must have exactly one quantile, got {quantiles}")
    base = _floats(params["base_score"])
    if len(base) != 1:
        raise UnsupportedModel(f"expected one base_score, got {len(base)}")
    booster = learner["gradient_booster"]
    if booster["name"] != "gbtree":
        raise UnsupportedModel(f"booster {booster['name']!r} is not supported; expected 'gbtree'")
    trees = booster["model"]["trees"]
    # At least one level: the kernels walk from a root split; a tree that is a single leaf puts its value
    # in both leaf slots below a split that cannot matter.
    depth = max(1, max((_tree_depth(t) for t in trees), default=0))
    if depth > MAX_DEPTH:
        raise UnsupportedModel(f"tree depth {depth} exceeds the supported maximum {MAX_DEPTH}")
    n_internal, n_leaves = 2 ** depth - 1, 2 ** depth
    features = np.zeros((len(trees), n_internal), dtype=np.uint32)
    thresholds = np.full((len(trees), n_internal), np.inf, dtype=np.float32)
    default_left = np.ones((len(trees), n_internal), dtype=bool)
    leaves = np.zeros((len(trees), n_leaves), dtype=np.float32)
    for index, tree in enumerate(trees):
        if any(tree.get("split_type", ())):
            raise UnsupportedModel(f"tree {index} has categorical splits, which are not supported")
        _lay_out(tree, depth, features[index], thresholds[index], default_left[index], leaves[index])
    return Forest(objective=objective, quantiles=quantiles, n_features=int(params["num_feature"]),
                  base_score=np.float32(base[0]), depth=depth, features=features, thresholds=thresholds,
                  default_left=default_left, leaves=leaves)


def _floats(text: str) -> np.ndarray:
    """XGBoost 3 writes scalars as ``"[1.23E2]"``; older versions as ``"1.23E2"``."""
    body = str(text).strip().strip("[]")
    return np.array([np.float32(part) for part in body.split(",") if part.strip()], dtype=np.float32)


def _tree_depth(tree: dict) -> int:
    left, right = tree["left_children"], tree["right_children"]
    deepest, stack = 0, [(0, 0)]
    while stack:
        node, level = stack.pop()
        if left[node] == -1:
            deepest = max(deepest, level)
        else:
            stack.append((left[node], level + 1))
            stack.append((right[node], level + 1))
    return deepest


def _lay_out(tree: dict, depth: int, features: np.ndarray, thresholds: np.ndarray,
             default_left: np.ndarray, leaves: np.ndarray) -> None:
    left, right = tree["left_children"], tree["right_children"]
    split_index, split_value, node_default = tree["split_indices"], tree["split_conditions"], tree["default_left"]
    first_leaf = 2 ** depth - 1
    stack = [(0, 0, 0)]  # (node in the XGBoost tree, slot in the complete tree, level)
    while stack:
        node, slot, level = stack.pop()
        if left[node] == -1:
            span = 2 ** (depth - level)
            start = slot * span + span - 1 - first_leaf  # leftmost slot below, at the last level
            leaves[start:start + span] = np.float32(split_value[node])
            continue
        features[slot] = split_index[node]
        thresholds[slot] = np.float32(split_value[node])
        default_left[slot] = bool(node_default[node])
        stack.append((left[node], 2 * slot + 1, level + 1))
        stack.append((right[node], 2 * slot + 2, level + 1))
