"""Evaluate several :class:`~predictor.forest.Forest` models on the same rows in one pass.

Two engines compute the same numbers (tests hold them to XGBoost's own predictions):

- ``numba``: a compiled walk (no C compiler needed; the first call on a machine compiles it and caches the
  machine code on disk for later processes, :func:`warm_up` does that ahead of traffic). Every float32 is mapped to an order-preserving 32-bit key (:func:`order_keys`), so a
  node is one word ``key(threshold) << 31 | feature`` and a row value one word ``key(x) << 31 |
  0x7FFFFFFF``. Both stay below 2**63, so ``x >= threshold`` (go right; float32 semantics) is exactly
  the sign bit of ``node - value``: a level costs two loads, a subtraction and a shift. Trees are 1-based
  heaps (children ``2i`` and ``2i+1``); the root's word is loaded once per tree; eight rows are walked
  interleaved so their independent lookups overlap in the CPU. Rows go through in chunks; a chunk with a
  missing value (NaN, which follows the node's default direction) takes a careful row-by-row walk.
- ``numpy``: a pure fallback that walks all rows × trees of one model level by level.

``threads > 1`` splits the rows of a large batch between the calling thread and a small pool (the
compiled walk releases the GIL); small batches always run on the calling thread alone.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from headroom.contract.features import FEATURE_NAMES
from headroom.predictor.forest import Forest

try:
    import numba

    COMPILED = True
except ImportError:  # the pure engine still works
    COMPILED = False

ENGINES = ("numba", "numpy")
MIN_ROWS_PER_THREAD = 128  # smaller shares are not worth a hand-off to another thread (tens of µs)
MAX_FEATURES = 1 << 16  # a node word keeps the feature index in its low 16 bits
Kernel = TypeVar("Kernel", bound=Callable[..., Any])
Row = tuple[None, ...]  # a row's width as a type numba compiles for (see _ROW_SHAPES)
BLOCK_ROWS = 8  # rows walked interleaved (the compiled walk is written out for eight)
CHUNK_ROWS = 256  # rows walked through every tree at a time: their words (20 KiB at 10 features) fit L1
MISSING_WORD = 0  # a row word no value produces (real ones end in 0x7FFFFFFF): the value is NaN
_ROW_SHAPES: dict[int, tuple[None, ...]] = {}  # row width -> the tuple whose type carries it (see _predict)


def default_engine() -> str:
    return "numba" if COMPILED else "numpy"


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

    Each tree is a 1-based heap of ``2**depth`` slots (slot 0 unused): node words and default directions.
    """

    forests: tuple[Forest, ...]
    nodes: np.ndarray = field(repr=False)  # uint64 node words, all trees
    default_left: np.ndarray = field(repr=False)  # uint8, aligned with nodes
    leaves: np.ndarray = field(repr=False)  # float32
    node_offset: np.ndarray = field(repr=False)  # per tree, uint64
    leaf_offset: np.ndarray = field(repr=False)  # per tree, uint64
    tree_start: np.ndarray = field(repr=False)  # per forest + 1, int64
    depth: np.ndarray = field(repr=False)  # per forest, int64
    base_score: np.ndarray = field(repr=False)  # per forest, float32

    @classmethod
    def of(cls, forests: Sequence[Forest]) -> ForestStack:
        forests = tuple(forests)
        widest = max((f.n_features for f in forests), default=0)
        if widest > MAX_FEATURES:
            raise ValueError(f"models of {widest} features exceed the evaluator's maximum of {MAX_FEATURES}")
        heaps = [_heap(f) for f in forests]
        node_counts = [np.full(f.n_trees, 2 ** f.depth, dtype=np.uint64) for f in forests]
        leaf_counts = [np.full(f.n_trees, f.leaves.shape[1], dtype=np.uint64) for f in forests]
        return cls(
            forests=forests,
            nodes=_concat([words.ravel() for words, _ in heaps], np.uint64),
            default_left=_concat([left.ravel() for _, left in heaps], np.uint8),
            leaves=_concat([f.leaves.ravel() for f in forests], np.float32),
            node_offset=_offsets(node_counts), leaf_offset=_offsets(leaf_counts),
            tree_start=np.concatenate([[0], np.cumsum([f.n_trees for f in forests])]).astype(np.int64),
            depth=np.array([f.depth for f in forests], dtype=np.int64),
            base_score=np.array([f.base_score for f in forests], dtype=np.float32))

    @property
    def n_features(self) -> int:
        return max((f.n_features for f in self.forests), default=0)


def evaluate(stack: ForestStack, x: np.ndarray, engine: str | None = None, threads: int = 1) -> np.ndarray:
    """``(len(stack.forests), len(x))`` float32 predictions for the float32 rows ``x``."""
    x = np.require(x, np.float32, ("C", "A"))  # contiguous and aligned: the compiled signatures
    if x.ndim != 2 or x.shape[1] < stack.n_features:
        raise ValueError(f"expected rows of at least {stack.n_features} features, got shape {x.shape}")
    engine = engine or default_engine()
    if engine == "numpy":
        return np.stack([_evaluate_numpy(f, x) for f in stack.forests]) if stack.forests \
            else np.empty((0, len(x)), dtype=np.float32)
    if engine != "numba" or not COMPILED:
        raise ValueError(f"unknown or unavailable engine {engine!r}; available: {available_engines()}")
    n = len(x)
    out = np.empty((len(stack.forests), n), dtype=np.float32)
    row = _ROW_SHAPES.setdefault(x.shape[1], (None,) * x.shape[1])
    bits = x.view(np.uint32)
    arrays = (stack.nodes, stack.default_left, stack.leaves, stack.node_offset, stack.leaf_offset,
              stack.tree_start, stack.depth, stack.base_score, out)
    parts = min(threads, n // MIN_ROWS_PER_THREAD)
    if parts <= 1:
        _predict(bits, *arrays, 0, n, row)
        return out
    bounds = [n * part // parts for part in range(parts + 1)]
    helpers = [_pool(threads).submit(_predict, bits, *arrays, start, stop, row)
               for start, stop in itertools.pairwise(bounds[1:])]
    _predict(bits, *arrays, bounds[0], bounds[1], row)
    for helper in helpers:
        helper.result()
    return out


def available_engines() -> tuple[str, ...]:
    return ENGINES if COMPILED else ("numpy",)


def warm_up() -> None:
    """Compile the numba kernels for rows of the contract's features ahead of traffic."""
    if not COMPILED:
        return
    n_features = len(FEATURE_NAMES)
    tree = Forest(objective="reg:squarederror", quantiles=(), n_features=1, base_score=np.float32(0.0), depth=1,
                  features=np.zeros((1, 1), np.uint32), thresholds=np.zeros((1, 1), np.float32),
                  default_left=np.ones((1, 1), bool), leaves=np.zeros((1, 2), np.float32))
    stack = ForestStack.of([tree])
    for value in (0.0, np.nan):
        rows = np.full((8, n_features), value, np.float32)
        evaluate(stack, rows)
        rows.flags.writeable = False  # rows decoded from a request buffer are read-only: another signature
        evaluate(stack, rows)


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


def _jit(function: Kernel) -> Kernel:
    """Compiled without the GIL or bounds checks, and cached on disk (``NUMBA_CACHE_DIR``, see
    :mod:`headroom.process`) so that only the first process on a machine pays the compile; where no cache
    can be written (a read-only file system), each process compiles."""
    try:
        compiled = numba.njit(nogil=True, boundscheck=False, cache=True)(function)
    except RuntimeError:  # numba found no writable cache location
        compiled = numba.njit(nogil=True, boundscheck=False)(function)
    return cast(Kernel, compiled)  # a dispatcher is called as the function it compiles


# The compiled walk. ``row`` is a tuple of ``width`` Nones (features per row): its length is part of its type,
# so ``width = len(row)`` is a compile-time constant and each row width gets its own specialization (found by
# the dispatcher's ordinary type lookup, and cached on disk like any other), whose row stride keeps the eight
# interleaved rows' addresses as constant
# offsets of one register.

def _row_words(bits: np.ndarray, start: int, stop: int, words: np.ndarray,
               row: Row) -> bool:  # pragma: no cover - compiled
    """The rows' words (see :func:`order_keys`); returns whether any value is missing."""
    width = len(row)
    u = numba.uint64
    low = u(0x7FFFFFFF)
    missing = False
    k = 0
    for r in range(start, stop):
        for f in range(width):
            b = u(bits[r, f])
            if (b & u(0x7FFFFFFF)) > u(0x7F800000):
                words[k] = u(MISSING_WORD)
                missing = True
            else:
                if b == u(0x80000000):
                    b = u(0)
                key = (b ^ u(0xFFFFFFFF)) if b >> u(31) else (b | u(0x80000000))
                words[k] = (key << u(31)) | low
            k += 1
    return missing


def _walk_finite(words: np.ndarray, n: int, nodes: np.ndarray, leaves: np.ndarray, node_offset: np.ndarray,
                 leaf_offset: np.ndarray, tree_start: np.ndarray, depth: np.ndarray, base_score: np.ndarray,
                 acc: np.ndarray, row: Row) -> None:  # pragma: no cover - compiled
    """Blocks of eight rows (``n`` is a multiple of eight); a right turn is the sign bit of node - value."""
    width = len(row)
    u = numba.uint64  # unsigned indices: no negative-index wraparound in the dependency chain
    one, two, sign = u(1), u(2), u(63)
    feature = u(MAX_FEATURES - 1)
    s1, s2, s3, s4, s5, s6, s7 = u(width), u(2 * width), u(3 * width), u(4 * width), u(5 * width), \
        u(6 * width), u(7 * width)
    for m in range(base_score.shape[0]):
        levels = depth[m]
        first_leaf = one << u(levels)
        acc[m, :n] = base_score[m]
        for t in range(tree_start[m], tree_start[m + 1]):
            nd = nodes[node_offset[t]:]
            lv = leaves[leaf_offset[t]:]
            root = nd[1]
            f0 = root & feature
            for r in range(0, n, BLOCK_ROWS):
                xr = words[r * width:]
                i0 = two + ((root - xr[f0]) >> sign)
                i1 = two + ((root - xr[s1 + f0]) >> sign)
                i2 = two + ((root - xr[s2 + f0]) >> sign)
                i3 = two + ((root - xr[s3 + f0]) >> sign)
                i4 = two + ((root - xr[s4 + f0]) >> sign)
                i5 = two + ((root - xr[s5 + f0]) >> sign)
                i6 = two + ((root - xr[s6 + f0]) >> sign)
                i7 = two + ((root - xr[s7 + f0]) >> sign)
                for _ in range(levels - 1):
                    a = nd[i0]
                    i0 = i0 + i0 + ((a - xr[a & feature]) >> sign)
                    a = nd[i1]
                    i1 = i1 + i1 + ((a - xr[s1 + (a & feature)]) >> sign)
                    a = nd[i2]
                    i2 = i2 + i2 + ((a - xr[s2 + (a & feature)]) >> sign)
                    a = nd[i3]
                    i3 = i3 + i3 + ((a - xr[s3 + (a & feature)]) >> sign)
                    a = nd[i4]
                    i4 = i4 + i4 + ((a - xr[s4 + (a & feature)]) >> sign)
                    a = nd[i5]
                    i5 = i5 + i5 + ((a - xr[s5 + (a & feature)]) >> sign)
                    a = nd[i6]
                    i6 = i6 + i6 + ((a - xr[s6 + (a & feature)]) >> sign)
                    a = nd[i7]
                    i7 = i7 + i7 + ((a - xr[s7 + (a & feature)]) >> sign)
                acc[m, r] += lv[i0 - first_leaf]
                acc[m, r + 1] += lv[i1 - first_leaf]
                acc[m, r + 2] += lv[i2 - first_leaf]
                acc[m, r + 3] += lv[i3 - first_leaf]
                acc[m, r + 4] += lv[i4 - first_leaf]
                acc[m, r + 5] += lv[i5 - first_leaf]
                acc[m, r + 6] += lv[i6 - first_leaf]
                acc[m, r + 7] += lv[i7 - first_leaf]


def _walk_with_missing(words: np.ndarray, n: int, nodes: np.ndarray, default_left: np.ndarray, leaves: np.ndarray,
                       node_offset: np.ndarray, leaf_offset: np.ndarray, tree_start: np.ndarray, depth: np.ndarray,
                       base_score: np.ndarray, acc: np.ndarray, row: Row) -> None:  # pragma: no cover - compiled
    width = len(row)
    u = numba.uint64
    one, feature = u(1), u(MAX_FEATURES - 1)
    for m in range(base_score.shape[0]):
        levels = depth[m]
        first_leaf = one << u(levels)
        acc[m, :n] = base_score[m]
        for t in range(tree_start[m], tree_start[m + 1]):
            nd = nodes[node_offset[t]:]
            dl = default_left[node_offset[t]:]
            lv = leaves[leaf_offset[t]:]
            for r in range(n):
                xr = words[r * width:]
                i = one
                for _ in range(levels):
                    a = nd[i]
                    value = xr[a & feature]
                    right = dl[i] == 0 if value == u(MISSING_WORD) else a < value
                    i = i + i + u(right)
                acc[m, r] += lv[i - first_leaf]


def _predict(bits: np.ndarray, nodes: np.ndarray, default_left: np.ndarray, leaves: np.ndarray,
             node_offset: np.ndarray, leaf_offset: np.ndarray, tree_start: np.ndarray, depth: np.ndarray,
             base_score: np.ndarray, out: np.ndarray, start: int, stop: int,
             row: Row) -> None:  # pragma: no cover - compiled
    """Rows ``start:stop`` of ``bits`` (float32 rows of ``width`` features viewed as uint32) into columns
    ``start:stop`` of out, in chunks whose row words stay in the L1 cache while every tree is walked over
    them. A chunk is padded to whole blocks with copies of its first row, whose results are dropped."""
    width = len(row)
    chunk = min(stop - start, CHUNK_ROWS)
    padded = chunk + (BLOCK_ROWS - chunk % BLOCK_ROWS) % BLOCK_ROWS
    words = np.empty(padded * width, dtype=np.uint64)
    acc = np.empty((base_score.shape[0], padded), dtype=np.float32)
    for first in range(start, stop, CHUNK_ROWS):
        n = min(first + CHUNK_ROWS, stop) - first
        if _row_words(bits, first, first + n, words, row):
            _walk_with_missing(words, n, nodes, default_left, leaves, node_offset, leaf_offset, tree_start,
                               depth, base_score, acc, row)
        else:
            blocks = n + (BLOCK_ROWS - n % BLOCK_ROWS) % BLOCK_ROWS
            for k in range(n * width, blocks * width):
                words[k] = words[k % width]
            _walk_finite(words, blocks, nodes, leaves, node_offset, leaf_offset, tree_start, depth, base_score,
                         acc, row)
        out[:, first:first + n] = acc[:, :n]


if COMPILED:
    _row_words = _jit(_row_words)
    _walk_finite = _jit(_walk_finite)
    _walk_with_missing = _jit(_walk_with_missing)
    _predict = _jit(_predict)
