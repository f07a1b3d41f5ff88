"""Evaluate several :class:`~predictor.forest.Forest` models on the same rows in one pass.

Two engines compute the same numbers (tests hold them to XGBoost's own predictions):

- ``numba``: the models' trees flattened into one set of arrays and walked by a compiled loop that
  interleaves eight rows, so their independent node lookups overlap in the CPU. It needs no C compiler;
  the first call compiles it (about a second), :func:`warm_up` does that ahead of traffic.
- ``numpy``: a pure fallback that walks all rows × trees of one model level by level.

Rows without missing values take a path that skips the default-direction check (padded with zero rows to
whole blocks of eight); a batch with any NaN takes the careful path for every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.forest import Forest

try:
    import numba
except ImportError:  # the pure engine still works
    numba = None

ENGINES = ("numba", "numpy")


def default_engine() -> str:
    return "numba" if numba is not None else "numpy"


@dataclass(frozen=True)
class ForestStack:
    """Several forests over the same features, evaluated together; row ``m`` of a result is ``forests[m]``."""

    forests: tuple[Forest, ...]
    features: np.ndarray = field(repr=False)  # all internal nodes, uint32
    thresholds: np.ndarray = field(repr=False)  # float32
    default_left: np.ndarray = field(repr=False)  # uint8
    leaves: np.ndarray = field(repr=False)  # float32
    node_offset: np.ndarray = field(repr=False)  # per tree, uint64
    leaf_offset: np.ndarray = field(repr=False)  # per tree, uint64
    tree_start: np.ndarray = field(repr=False)  # per forest + 1, int64
    depth: np.ndarray = field(repr=False)  # per forest, int64
    base_score: np.ndarray = field(repr=False)  # per forest, float32

    @classmethod
    def of(cls, forests: Sequence[Forest]) -> ForestStack:
        forests = tuple(forests)
        node_counts = [np.full(f.n_trees, f.features.shape[1], dtype=np.uint64) for f in forests]
        leaf_counts = [np.full(f.n_trees, f.leaves.shape[1], dtype=np.uint64) for f in forests]
        return cls(
            forests=forests,
            features=_concat([f.features.ravel() for f in forests], np.uint32),
            thresholds=_concat([f.thresholds.ravel() for f in forests], np.float32),
            default_left=_concat([f.default_left.ravel() for f in forests], np.uint8),
            leaves=_concat([f.leaves.ravel() for f in forests], np.float32),
            node_offset=_offsets(node_counts), leaf_offset=_offsets(leaf_counts),
            tree_start=np.concatenate([[0], np.cumsum([f.n_trees for f in forests])]).astype(np.int64),
            depth=np.array([f.depth for f in forests], dtype=np.int64),
            base_score=np.array([f.base_score for f in forests], dtype=np.float32))

    @property
    def n_features(self) -> int:
        return max((f.n_features for f in self.forests), default=0)


def evaluate(stack: ForestStack, x: np.ndarray, engine: str | None = None) -> np.ndarray:
    """``(len(stack.forests), len(x))`` float32 predictions for the float32 rows ``x``."""
    x = np.require(x, np.float32, ("C", "A"))  # contiguous and aligned: the compiled signatures
    if x.ndim != 2 or x.shape[1] < stack.n_features:
        raise ValueError(f"expected rows of at least {stack.n_features} features, got shape {x.shape}")
    engine = engine or default_engine()
    if engine == "numpy":
        return np.stack([_evaluate_numpy(f, x) for f in stack.forests]) if stack.forests \
            else np.empty((0, len(x)), dtype=np.float32)
    if engine != "numba" or numba is None:
        raise ValueError(f"unknown or unavailable engine {engine!r}; available: {available_engines()}")
    n = len(x)
    if np.isnan(x).any():
        kernel, rows = _walk_with_missing, x
    else:  # whole blocks of eight rows: the interleaved loop, no slower one-row tail
        kernel, rows = _walk_finite, x
        if n % 8:
            rows = np.zeros((n + 8 - n % 8, x.shape[1]), dtype=np.float32)
            rows[:n] = x
    out = np.empty((len(stack.forests), len(rows)), dtype=np.float32)
    kernel(rows, stack.features, stack.thresholds, stack.default_left, stack.leaves, stack.node_offset,
           stack.leaf_offset, stack.tree_start, stack.depth, stack.base_score, out)
    return out[:, :n]


def available_engines() -> tuple[str, ...]:
    return ENGINES if numba is not None else ("numpy",)


def warm_up() -> None:
    """Compile the numba kernels now rather than on the first request."""
    if numba is None:
        return
    tree = Forest(objective="reg:squarederror", quantiles=(), n_features=1, base_score=np.float32(0.0), depth=1,
                  features=np.zeros((1, 1), np.uint32), thresholds=np.zeros((1, 1), np.float32),
                  default_left=np.ones((1, 1), bool), leaves=np.zeros((1, 2), np.float32))
    stack = ForestStack.of([tree])
    for value in (0.0, np.nan):
        rows = np.full((8, 1), value, np.float32)
        evaluate(stack, rows)
        rows.flags.writeable = False  # rows decoded from a request buffer are read-only: another signature
        evaluate(stack, rows)


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.ascontiguousarray(np.concatenate(parts) if parts else np.empty(0), dtype=dtype)


def _offsets(counts: list[np.ndarray]) -> np.ndarray:
    sizes = np.concatenate(counts) if counts else np.empty(0, np.uint64)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64) if len(sizes) else sizes


def _evaluate_numpy(forest: Forest, x: np.ndarray) -> np.ndarray:
    n, trees = len(x), np.arange(forest.n_trees)[None, :]
    rows = np.arange(n)[:, None]
    slot = np.zeros((n, forest.n_trees), dtype=np.intp)
    for _ in range(forest.depth):
        value = x[rows, forest.features[trees, slot]]
        right = ~(value < forest.thresholds[trees, slot])
        missing = np.isnan(value)
        if missing.any():
            right &= ~(missing & forest.default_left[trees, slot])
        slot = 2 * slot + 1 + right
    leaf = forest.leaves[trees, slot - (2 ** forest.depth - 1)]
    # XGBoost adds base_score, then each tree in order, in float32: a cumulative sum keeps that order.
    terms = np.concatenate([np.full((n, 1), forest.base_score, dtype=np.float32), leaf], axis=1)
    return np.cumsum(terms, axis=1, dtype=np.float32)[:, -1]


if numba is not None:
    _U = numba.uint64  # unsigned indices: no negative-index wraparound in the dependency chain

    @numba.njit(nogil=True, boundscheck=False, cache=False)
    def _walk_finite(x, features, thresholds, default_left, leaves, node_offset, leaf_offset,
                     tree_start, depth, base_score, out):  # pragma: no cover - compiled
        n = x.shape[0]
        n8 = n - n % 8
        one, two, zero = _U(1), _U(2), _U(0)
        for m in range(base_score.shape[0]):
            levels = depth[m]
            first_leaf = _U((1 << levels) - 1)
            for r in range(n):
                out[m, r] = base_score[m]
            for t in range(tree_start[m], tree_start[m + 1]):
                f = features[node_offset[t]:]
                th = thresholds[node_offset[t]:]
                lv = leaves[leaf_offset[t]:]
                for r in range(0, n8, 8):
                    x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
                    x4, x5, x6, x7 = x[r + 4], x[r + 5], x[r + 6], x[r + 7]
                    i0 = i1 = i2 = i3 = i4 = i5 = i6 = i7 = zero
                    for _ in range(levels):
                        i0 = two * i0 + one + _U(x0[_U(f[i0])] >= th[i0])
                        i1 = two * i1 + one + _U(x1[_U(f[i1])] >= th[i1])
                        i2 = two * i2 + one + _U(x2[_U(f[i2])] >= th[i2])
                        i3 = two * i3 + one + _U(x3[_U(f[i3])] >= th[i3])
                        i4 = two * i4 + one + _U(x4[_U(f[i4])] >= th[i4])
                        i5 = two * i5 + one + _U(x5[_U(f[i5])] >= th[i5])
                        i6 = two * i6 + one + _U(x6[_U(f[i6])] >= th[i6])
                        i7 = two * i7 + one + _U(x7[_U(f[i7])] >= th[i7])
                    out[m, r] += lv[i0 - first_leaf]
                    out[m, r + 1] += lv[i1 - first_leaf]
                    out[m, r + 2] += lv[i2 - first_leaf]
                    out[m, r + 3] += lv[i3 - first_leaf]
                    out[m, r + 4] += lv[i4 - first_leaf]
                    out[m, r + 5] += lv[i5 - first_leaf]
                    out[m, r + 6] += lv[i6 - first_leaf]
                    out[m, r + 7] += lv[i7 - first_leaf]
                for r in range(n8, n):
                    xr = x[r]
                    i = zero
                    for _ in range(levels):
                        i = two * i + one + _U(xr[_U(f[i])] >= th[i])
                    out[m, r] += lv[i - first_leaf]

    @numba.njit(nogil=True, boundscheck=False, cache=False)
    def _walk_with_missing(x, features, thresholds, default_left, leaves, node_offset, leaf_offset,
                           tree_start, depth, base_score, out):  # pragma: no cover - compiled
        n = x.shape[0]
        one, two, zero = _U(1), _U(2), _U(0)
        for m in range(base_score.shape[0]):
            levels = depth[m]
            first_leaf = _U((1 << levels) - 1)
            for r in range(n):
                out[m, r] = base_score[m]
            for t in range(tree_start[m], tree_start[m + 1]):
                f = features[node_offset[t]:]
                th = thresholds[node_offset[t]:]
                dl = default_left[node_offset[t]:]
                lv = leaves[leaf_offset[t]:]
                for r in range(n):
                    xr = x[r]
                    i = zero
                    for _ in range(levels):
                        value = xr[_U(f[i])]
                        if value != value:
                            right = dl[i] == 0
                        else:
                            right = not (value < th[i])
                        i = two * i + one + _U(right)
                    out[m, r] += lv[i - first_leaf]
