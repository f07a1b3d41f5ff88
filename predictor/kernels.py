"""Evaluate several :class:`~predictor.forest.Forest` models on the same rows in one pass.

Two engines compute the same numbers (tests hold them to XGBoost's own predictions):

- ``native``: the compiled walk of ``headroom._native`` (``native/src/forest.rs``), built with the package. Every
  float32 is mapped to an order-preserving 32-bit key (:func:`order_keys`): a node is one word ``key(threshold) << 31
  | feature`` and a row value one word ``key(x) << 31 | 0x7FFFFFFF``; both stay below 2**63, so ``x >= threshold``
  (go right; float32 semantics) is exactly the sign bit of ``node - value``, and a level costs two loads, a
  subtraction and a shift. Trees are 1-based heaps (children ``2i`` and ``2i+1``); eight rows are walked
  interleaved so their independent lookups overlap in the CPU. Rows go through in chunks that stay in the L1 cache;
  a chunk with a missing value (NaN, which follows the node's default direction) takes a careful row-by-row walk.
  Nothing is compiled at run time (``make`` builds it for any x86-64, see the Makefile).
- ``numpy``: a pure reference that walks all rows × trees of one model level by level.

``threads > 1`` splits the rows of a large batch between the calling thread and a small pool (the
compiled walk releases the GIL); small batches always run on the calling thread alone.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from headroom._native import Forests
from headroom.predictor.forest import Forest

ENGINES = ("native", "numpy")
MIN_ROWS_PER_THREAD = 128  # smaller shares are not worth a hand-off to another thread (tens of µs)
MAX_FEATURES = 1 << 16  # a node word keeps the feature index in its low 16 bits
CHUNK_ROWS = 256  # rows the compiled walk takes through every tree at a time (native/src/forest.rs)


def default_engine() -> str:
    return "native"


def order_keys(values: np.ndarray) -> np.ndarray:
    """uint32 keys of float32 values with ``a < b`` exactly when ``key(a) < key(b)`` (no NaN).

    ``-0.0`` becomes ``+0.0`` first (they compare equal), then non-negative values get their sign bit
    set and negative ones all bits flipped. The compiled row conversion applies the same map.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    bits = np.where(bits == 0x80000000, np.uint32(0), bits)
    return np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)


@dataclass(frozen=True)
class ForestStack:
    """Several forests over the same features, evaluated together; row ``m`` of a result is ``forests[m]``.

    ``compiled`` holds every tree as a 1-based heap of ``2**depth`` slots (slot 0 unused): node words and default
    directions, then the leaves.
    """

    forests: tuple[Forest, ...]
    compiled: Forests = field(repr=False)

    @classmethod
    def of(cls, forests: Sequence[Forest]) -> ForestStack:
        forests = tuple(forests)
        widest = max((f.n_features for f in forests), default=0)
        if widest > MAX_FEATURES:
            raise ValueError(f"models of {widest} features exceed the evaluator's maximum of {MAX_FEATURES}")
        heaps = [_heap(f) for f in forests]
        node_counts = [np.full(f.n_trees, 2 ** f.depth, dtype=np.uint64) for f in forests]
        leaf_counts = [np.full(f.n_trees, f.leaves.shape[1], dtype=np.uint64) for f in forests]
        return cls(forests=forests, compiled=Forests(
            _concat([words.ravel() for words, _ in heaps], np.uint64),
            _concat([left.ravel() for _, left in heaps], np.uint8),
            _concat([f.leaves.ravel() for f in forests], np.float32),
            _offsets(node_counts), _offsets(leaf_counts),
            np.concatenate([[0], np.cumsum([f.n_trees for f in forests])]).astype(np.int64),
            np.array([f.depth for f in forests], dtype=np.int64),
            np.array([f.base_score for f in forests], dtype=np.float32)))

    @property
    def n_features(self) -> int:
        return max((f.n_features for f in self.forests), default=0)


def evaluate(stack: ForestStack, x: np.ndarray, engine: str | None = None, threads: int = 1) -> np.ndarray:
    """``(len(stack.forests), len(x))`` float32 predictions for the float32 rows ``x``."""
    x = np.require(x, np.float32, ("C", "A"))
    if x.ndim != 2 or x.shape[1] < stack.n_features:
        raise ValueError(f"expected rows of at least {stack.n_features} features, got shape {x.shape}")
    engine = engine or default_engine()
    if engine == "numpy":
        return np.stack([_evaluate_numpy(f, x) for f in stack.forests]) if stack.forests \
            else np.empty((0, len(x)), dtype=np.float32)
    if engine != "native":
        raise ValueError(f"unknown engine {engine!r}; available: {available_engines()}")
    n = len(x)
    out = np.empty((len(stack.forests), n), dtype=np.float32)
    if not stack.forests or not n:
        return out
    bits, width, predict = x.view(np.uint32), x.shape[1], stack.compiled.predict
    parts = min(threads, n // MIN_ROWS_PER_THREAD)
    if parts <= 1:
        predict(bits, width, out, 0, n)
        return out
    bounds = [n * part // parts for part in range(parts + 1)]
    helpers = [_pool(threads).submit(predict, bits, width, out, start, stop)
               for start, stop in itertools.pairwise(bounds[1:])]
    predict(bits, width, out, bounds[0], bounds[1])
    for helper in helpers:
        helper.result()
    return out


def available_engines() -> tuple[str, ...]:
    return ENGINES


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="trees")


def _heap(forest: Forest) -> tuple[np.ndarray, np.ndarray]:
    """Node words and default directions of every tree as ``(n_trees, 2**depth)`` 1-based heaps."""
    words = np.zeros((forest.n_trees, 2 ** forest.depth), dtype=np.uint64)
    left = np.ones((forest.n_trees, 2 ** forest.depth), dtype=np.uint8)
    words[:, 1:] = (order_keys(forest.thresholds).astype(np.uint64) << np.uint64(31)) | forest.features
    left[:, 1:] = forest.default_left
    return words, left


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
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
