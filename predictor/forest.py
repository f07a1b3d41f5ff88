"""A trained XGBoost model as flat arrays that the tree kernels evaluate.

A model arrives in XGBoost's own format, UBJ (read by :mod:`predictor.ubj`) or JSON, and is read without XGBoost;
every tree is then laid out as a *complete* binary tree of the model's depth ``D``:
internal node ``i`` has children ``2i+1`` (taken when ``x < threshold``, compared in float32) and
``2i+2``; a leaf reached above depth ``D`` is copied into every leaf slot below it, so traversal is
always exactly ``D`` steps with no branches on the tree shape. A missing value (NaN) follows the node's
default direction. The prediction is ``base_score`` plus the leaf values, added tree by tree in float32,
as XGBoost does.

Only what these semantics cover is accepted: the ``gbtree`` booster with numerical splits, one output,
and an identity-link regression objective; anything else, or trees whose links or split features do not
hold together, raises :class:`UnsupportedModel`. A model beyond a reader's
:class:`~contract.model_update.ModelBounds` — more trees, deeper trees — or with a leaf, split or base score
that is not a finite number raises :class:`ModelOutOfBounds` with its reason (``trees``, ``depth``, ``leaf``).
The model's attributes (strings its trainer stored, such as the output transform) come with its forest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from headroom.contract.model_update import ModelBounds
from headroom.errors import HeadroomError
from headroom.predictor import ubj

if TYPE_CHECKING:
    import xgboost as xgb

IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:quantileerror", "reg:absoluteerror", "reg:pseudohubererror")


class UnsupportedModel(HeadroomError, ValueError):
    """A model this evaluator cannot reproduce faithfully; the message says which part."""


class ModelOutOfBounds(UnsupportedModel):
    """A model beyond what a reader takes; ``reason`` is ``trees``, ``depth`` or ``leaf``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


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
    attributes: Mapping[str, str] = field(default_factory=dict)  # the model's own, e.g. its output transform

    @property
    def n_trees(self) -> int:
        return int(self.leaves.shape[0])


def forest_from_booster(booster: xgb.Booster, bounds: ModelBounds = ModelBounds()) -> Forest:
    _check_trees(booster.num_boosted_rounds(), bounds)
    return forest_from_model(bytes(booster.save_raw("ubj")), bounds)


def forest_from_model(raw: bytes, bounds: ModelBounds = ModelBounds()) -> Forest:
    """Read a model in XGBoost's JSON or UBJ format (told apart by their first bytes, as XGBoost does) into a
    :class:`Forest`, within ``bounds``."""
    params, objective_params, trees, attributes = _read_json(raw) if raw.lstrip()[:2] == b'{"' else _read_ubj(raw)
    objective = objective_params["name"]
    if objective not in IDENTITY_OBJECTIVES:
        raise UnsupportedModel(f"objective {objective!r} is not supported; expected one of {IDENTITY_OBJECTIVES}")
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) != 1:
        raise UnsupportedModel("only single-output models are supported "
                               f"(num_class={params.get('num_class')}, num_target={params.get('num_target')})")
    quantiles: tuple[float, ...] = ()
    if objective == "reg:quantileerror":
        quantiles = tuple(float(q) for q in _floats(objective_params["quantile_loss_param"]["quantile_alpha"]))
        if len(quantiles) != 1:
            raise UnsupportedModel(f"a quantile model must have exactly one quantile, got {quantiles}")
    base = _floats(params["base_score"])
    if len(base) != 1:
        raise UnsupportedModel(f"expected one base_score, got {len(base)}")
    _check_trees(len(trees), bounds)
    for index, tree in enumerate(trees):
        if any(tree.split_type):
            raise UnsupportedModel(f"tree {index} has categorical splits, which are not supported")
    levels = _levels(trees, bounds.max_depth)
    # At least one level: the kernels walk from a root split; a tree that is a single leaf puts its value
    # in both leaf slots below a split that cannot matter.
    depth = max(1, len(levels) - 1)
    _check_numbers(levels)
    n_features = int(params["num_feature"])
    _check_features(levels, n_features)
    if not np.isfinite(base).all():
        raise ModelOutOfBounds("leaf", f"base_score is {base[0]}, not a finite number")
    features, thresholds, default_left, leaves = _lay_out(levels, len(trees), depth)
    return Forest(objective=objective, quantiles=quantiles, n_features=n_features,
                  base_score=np.float32(base[0]), depth=depth, features=features, thresholds=thresholds,
                  default_left=default_left, leaves=leaves, attributes=attributes)


class _Learner(msgspec.Struct):
    learner_model_param: dict[str, Any]
    objective: dict[str, Any]
    gradient_booster: msgspec.Raw  # read in parts: its name, then tree by tree
    attributes: dict[str, str] = {}


class _Document(msgspec.Struct):
    learner: _Learner


class _Named(msgspec.Struct):
    name: str


class _Trees(msgspec.Struct):
    trees: list[msgspec.Raw]


class _GbTree(msgspec.Struct):
    model: _Trees


class _Tree(msgspec.Struct):
    """The fields of one tree the layout reads."""

    left_children: list[int]
    right_children: list[int]
    split_indices: list[int]
    split_conditions: list[float]
    default_left: list[int]
    split_type: list[int] = []


@dataclass(frozen=True)
class _TreeArrays:
    """The same fields as :class:`_Tree`, as the numpy arrays a UBJ model holds."""

    left_children: np.ndarray
    right_children: np.ndarray
    split_indices: np.ndarray
    split_conditions: np.ndarray
    default_left: np.ndarray
    split_type: np.ndarray


_Read = tuple[dict[str, Any], dict[str, Any], Sequence[_Tree | _TreeArrays], dict[str, str]]


def _read_json(raw: bytes) -> _Read:
    """The learner's parameters, its objective and its trees, read a tree at a time and only the fields the layout
    needs: a router reads models on a thread beside its event loop, and a model's megabyte of JSON read at once
    into Python objects would hold the interpreter (and every decision with it) for tens of milliseconds, and
    leave the garbage collector hundreds of thousands of objects to walk."""
    try:
        learner = msgspec.json.decode(raw, type=_Document).learner
        _supported(msgspec.json.decode(learner.gradient_booster, type=_Named).name)
        trees = [msgspec.json.decode(tree, type=_Tree)  # one at a time: other threads run in between
                 for tree in msgspec.json.decode(learner.gradient_booster, type=_GbTree).model.trees]
        return learner.learner_model_param, learner.objective, trees, learner.attributes
    except msgspec.ValidationError as err:
        raise UnsupportedModel(f"not an XGBoost tree model: {err}") from err
    except msgspec.DecodeError:  # NaN or Infinity, which XGBoost writes for such a value and JSON has no word for
        pass
    document = json.loads(raw)["learner"]
    booster = document["gradient_booster"]
    _supported(booster["name"])
    try:
        trees = [msgspec.convert(tree, _Tree) for tree in booster["model"]["trees"]]
        attributes = msgspec.convert(document.get("attributes", {}), dict[str, str])
    except msgspec.ValidationError as err:
        raise UnsupportedModel(f"not an XGBoost tree model: {err}") from err
    return document["learner_model_param"], document["objective"], trees, attributes


def _read_ubj(raw: bytes) -> _Read:
    """As :func:`_read_json`, from UBJ: the trees' fields arrive as numpy arrays, one call per field."""
    try:
        learner = _field(ubj.decode(raw), "learner", dict)
        booster = _field(learner, "gradient_booster", dict)
        _supported(_field(booster, "name", str))
        trees = [_tree_arrays(tree, index)
                 for index, tree in enumerate(_field(_field(booster, "model", dict), "trees", list))]
        return (_field(learner, "learner_model_param", dict), _field(learner, "objective", dict), trees,
                msgspec.convert(learner.get("attributes", {}), dict[str, str]))
    except (ubj.UbjError, msgspec.ValidationError) as err:
        raise UnsupportedModel(f"not an XGBoost tree model: {err}") from err


def _field(document: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(name) if isinstance(document, dict) else None
    if not isinstance(value, kind):
        raise UnsupportedModel(f"not an XGBoost tree model: {name!r} is missing or not what XGBoost writes there")
    return value


def _tree_arrays(tree: Any, index: int) -> _TreeArrays:
    columns = {}
    for name in _Tree.__struct_fields__:
        value = _field(tree, name, (np.ndarray, list)) if name != "split_type" or name in tree else []
        column = np.asarray(value)
        if column.ndim != 1 or (len(column) and column.dtype.kind not in "iuf"):
            raise UnsupportedModel(f"tree {index}'s {name!r} is not an array of numbers")
        columns[name] = column
    return _TreeArrays(**columns)


def _supported(booster: str) -> None:
    if booster != "gbtree":
        raise UnsupportedModel(f"booster {booster!r} is not supported; expected 'gbtree'")


@dataclass(frozen=True)
class _Level:
    """The nodes of every tree at one depth: which tree, which slot of its complete tree, and the node's fields."""

    tree: np.ndarray
    slot: np.ndarray
    leaf: np.ndarray  # bool
    split_index: np.ndarray
    split_value: np.ndarray  # the leaf value, for a leaf
    default_left: np.ndarray


def _check_trees(count: int, bounds: ModelBounds) -> None:
    if count > bounds.max_trees:
        raise ModelOutOfBounds("trees", f"{count} trees are over the {bounds.max_trees} a reader serves "
                                        "(HEADROOM_MODEL_MAX_TREES)")


def _check_links(left: np.ndarray, right: np.ndarray, sizes: np.ndarray, owner: np.ndarray,
                 node: np.ndarray) -> None:
    """Each node a leaf (both children -1) or a split into two nodes of its own tree."""
    leaf, size = left == -1, sizes[owner]
    bad = (leaf != (right == -1)) | (~leaf & ((left < 0) | (left >= size) | (right < 0) | (right >= size)))
    if bad.any():
        first = int(np.argmax(bad))
        raise UnsupportedModel(f"tree {int(owner[first])} links its node {int(node[first])} to "
                               f"{int(left[first])} and {int(right[first])}, not both nodes of that tree: not a tree")


def _check_features(levels: list[_Level], n_features: int) -> None:
    """Every split on one of the model's ``n_features`` features."""
    for nodes in levels:
        split = nodes.split_index[~nodes.leaf]
        outside = split[(split < 0) | (split >= n_features)]
        if len(outside):
            raise UnsupportedModel(f"a tree splits on feature {int(outside[0])}, outside the model's {n_features}")


def _check_numbers(levels: list[_Level]) -> None:
    """Every leaf value and split threshold the trees reach a finite float32."""
    for depth, nodes in enumerate(levels):
        bad = ~np.isfinite(nodes.split_value.astype(np.float32))
        if bad.any():
            first = int(np.argmax(bad))
            raise ModelOutOfBounds("leaf", f"tree {int(nodes.tree[first])} holds a value that is not a finite number "
                                           f"(the {'leaf' if nodes.leaf[first] else 'split'} at depth {depth}: "
                                           f"{nodes.split_value[first]}); {int(bad.sum())} at that depth")


def _levels(trees: Sequence[_Tree | _TreeArrays], max_depth: int) -> list[_Level]:
    """Every tree walked level by level at once (numpy over all the trees' nodes, no loop per node), no deeper
    than ``max_depth``."""
    sizes = np.fromiter((len(t.left_children) for t in trees), dtype=np.int64, count=len(trees))

    def column(name: str, dtype: type) -> np.ndarray:
        parts: list[np.ndarray] = [np.asarray(getattr(t, name), dtype=dtype) for t in trees]
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        if (lengths != sizes).any():
            index = int(np.argmax(lengths != sizes))
            raise UnsupportedModel(f"tree {index} has {lengths[index]} {name!r} for {sizes[index]} nodes")
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    owner = np.repeat(np.arange(len(trees)), sizes)
    left, right = column("left_children", np.int64), column("right_children", np.int64)
    _check_links(left, right, sizes, owner, np.arange(len(owner)) - offsets[owner])
    left_global, right_global = left + offsets[owner], right + offsets[owner]
    split_index, split_value = column("split_indices", np.int64), column("split_conditions", np.float64)
    default_left = column("default_left", np.int64).astype(bool)
    levels: list[_Level] = []
    nodes, slots = offsets, np.zeros(len(trees), dtype=np.int64)  # the roots
    seen = 0
    while len(nodes):
        if seen > len(owner):  # a node reached twice: not a tree at all
            raise UnsupportedModel("the trees' child links loop: not a tree")
        if len(levels) > max(1, max_depth):
            raise ModelOutOfBounds("depth", f"trees deeper than the {max_depth} a reader serves "
                                            "(HEADROOM_MODEL_MAX_DEPTH)")
        seen += len(nodes)
        leaf = left[nodes] == -1
        levels.append(_Level(owner[nodes], slots, leaf, split_index[nodes], split_value[nodes], default_left[nodes]))
        inner = ~leaf
        nodes = np.concatenate((left_global[nodes[inner]], right_global[nodes[inner]]))
        slots = np.concatenate((2 * slots[inner] + 1, 2 * slots[inner] + 2))
    return levels


def _lay_out(levels: list[_Level], n_trees: int, depth: int) -> tuple[np.ndarray, ...]:
    """The complete trees of ``depth`` levels: split features, thresholds and default directions per internal
    slot, and leaf values per leaf slot (a leaf above the last level fills every slot below it)."""
    n_internal, n_leaves = 2 ** depth - 1, 2 ** depth
    features = np.zeros((n_trees, n_internal), dtype=np.uint32)
    thresholds = np.full((n_trees, n_internal), np.inf, dtype=np.float32)
    default_left = np.ones((n_trees, n_internal), dtype=bool)
    leaves = np.zeros((n_trees, n_leaves), dtype=np.float32)
    for level, nodes in enumerate(levels):
        inner = ~nodes.leaf
        tree, slot = nodes.tree[inner], nodes.slot[inner]
        features[tree, slot] = nodes.split_index[inner]
        thresholds[tree, slot] = nodes.split_value[inner].astype(np.float32)
        default_left[tree, slot] = nodes.default_left[inner]
        span = 2 ** (depth - level)  # the leaf slots below one slot of this level
        first = nodes.slot[nodes.leaf] * span + span - 1 - n_internal  # leftmost of them
        below = first[:, None] + np.arange(span)
        leaves[nodes.tree[nodes.leaf][:, None], below] = nodes.split_value[nodes.leaf].astype(np.float32)[:, None]
    return features, thresholds, default_left, leaves


def _floats(text: str) -> np.ndarray:
    """XGBoost 3 writes scalars as ``"[1.23E2]"``; older versions as ``"1.23E2"``."""
    body = str(text).strip().strip("[]")
    return np.array([np.float32(part) for part in body.split(",") if part.strip()], dtype=np.float32)
