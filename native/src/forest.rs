//! The tree walk of `predictor/kernels.py`: stacked forests evaluated over float32 rows without the GIL. The layout
//! is the Python side's (`ForestStack`): every tree a 1-based heap of node words `key(threshold) << 31 | feature`
//! with its default directions, leaves after; a row value becomes the word `key(x) << 31 | 0x7FFFFFFF` (0 when it
//! is missing), so that `x >= threshold` (go right, float32 semantics) is the sign bit of `node - value`. Each row
//! adds `base_score` and then its trees' leaves in order, in float32, as XGBoost does.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};

const MISSING_WORD: u64 = 0; // no value's word: real ones end in 0x7FFFFFFF
const FEATURE_MASK: u64 = (1 << 16) - 1; // a node word keeps its feature in the low 16 bits
const BLOCK: usize = 8; // rows walked interleaved, so that their independent lookups overlap
const CHUNK: usize = 256; // rows whose words stay in the L1 cache while every tree is walked over them

/// The forests of one `ForestStack`, copied and checked once: every index a walk can reach is inside its array.
#[pyclass(frozen, module = "headroom._native")]
pub struct Forests {
    nodes: Vec<u64>,
    default_left: Vec<u8>,
    leaves: Vec<f32>,
    node_offset: Vec<usize>,
    leaf_offset: Vec<usize>,
    tree_start: Vec<usize>,
    depth: Vec<u32>,
    base_score: Vec<f32>,
    width: usize, // the fewest values a row needs: one past the highest feature split on
}

#[pymethods]
impl Forests {
    /// The arrays of a `ForestStack`: `nodes` (uint64), `default_left` (uint8), `leaves` (float32), `node_offset`
    /// and `leaf_offset` (uint64, per tree), `tree_start` (int64, per forest + 1), `depth` (int64, per forest) and
    /// `base_score` (float32, per forest).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(nodes: &Bound<'_, PyAny>, default_left: &Bound<'_, PyAny>, leaves: &Bound<'_, PyAny>,
           node_offset: &Bound<'_, PyAny>, leaf_offset: &Bound<'_, PyAny>, tree_start: &Bound<'_, PyAny>,
           depth: &Bound<'_, PyAny>, base_score: &Bound<'_, PyAny>) -> PyResult<Self> {
        let indices = |object, name| -> PyResult<Vec<usize>> {
            Ok(owned::<u64>(object, name)?.into_iter().map(|i| i as usize).collect())
        };
        let counts = |object, name| -> PyResult<Vec<i64>> { owned::<i64>(object, name) };
        let forests = Forests {
            nodes: owned(nodes, "nodes")?, default_left: owned(default_left, "default_left")?,
            leaves: owned(leaves, "leaves")?, node_offset: indices(node_offset, "node_offset")?,
            leaf_offset: indices(leaf_offset, "leaf_offset")?,
            tree_start: counts(tree_start, "tree_start")?.into_iter().map(|i| i.max(0) as usize).collect(),
            depth: counts(depth, "depth")?.into_iter().map(|d| d.clamp(0, 64) as u32).collect(),
            base_score: owned(base_score, "base_score")?, width: 0,
        };
        forests.checked()
    }

    /// Predict rows `start..stop` of `bits` (C-contiguous float32 rows of `width` values, viewed as uint32) into
    /// columns `start..stop` of `out` (float32, one row per forest, as many columns as `bits` has rows), the GIL
    /// released.
    fn predict(&self, py: Python<'_>, bits: &Bound<'_, PyAny>, width: usize, out: &Bound<'_, PyAny>, start: usize,
               stop: usize) -> PyResult<()> {
        let bits = buffer::<u32>(bits, "bits")?;
        let out = buffer::<f32>(out, "out")?;
        let rows = bits.item_count().checked_div(width).unwrap_or(0);
        if width < self.width.max(1) || bits.item_count() != rows * width || start > stop || stop > rows {
            return Err(PyValueError::new_err(format!(
                "rows {start}..{stop} of {} values in rows of {width} (the forests read {} per row)",
                bits.item_count(), self.width)));
        }
        if out.readonly() || out.item_count() != self.base_score.len() * rows {
            return Err(PyValueError::new_err(format!("out must be writable float32 of {} forests × {rows} rows",
                                                     self.base_score.len())));
        }
        let bits = slice(&bits);
        // SAFETY: `out` is a writable, C-contiguous buffer of `forests * rows` float32 held for the whole call.
        let out = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f32, out.item_count()) };
        py.detach(|| self.walk(bits, width, rows, out, start, stop));
        Ok(())
    }

    /// Build the feature rows of one request on `rows` servers (`contract.features.feature_matrix`) and predict them
    /// into `out` (float32, one row per forest, `rows` columns). `columns` are the raw columns in order, each a
    /// float64 array of `rows` values or one number for every row; `derived` the positions of `prompt_tokens`,
    /// `prefix_match` and `num_waiting` among them, from which the last two features follow (the uncached prompt, in
    /// float32, and whether any request waits). Returns false, predicting nothing, when a feature is not finite.
    fn predict_columns(&self, py: Python<'_>, columns: Vec<Bound<'_, PyAny>>, rows: usize,
                       derived: (usize, usize, usize), out: &Bound<'_, PyAny>) -> PyResult<bool> {
        let raw = columns.len();
        let (prompt, prefix, waiting) = derived;
        let width = raw + 2;
        if prompt.max(prefix).max(waiting) >= raw || width < self.width.max(1) {
            return Err(PyValueError::new_err(format!(
                "{raw} raw columns with derived positions {derived:?} (the forests read {} features)", self.width)));
        }
        let out = buffer::<f32>(out, "out")?;
        if out.readonly() || out.item_count() != self.base_score.len() * rows {
            return Err(PyValueError::new_err(format!("out must be writable float32 of {} forests × {rows} rows",
                                                     self.base_score.len())));
        }
        let mut x = vec![0f32; rows * width];
        for (j, column) in columns.iter().enumerate() {
            let number = column.is_instance_of::<PyInt>() || column.is_instance_of::<PyFloat>();
            let array = if number { None } else { PyBuffer::<f64>::get(column).ok().filter(|b| b.dimensions() == 1) };
            let Some(values) = array else { // one number for every row (an int, a float, a NumPy scalar)
                let value = column.extract::<f64>()
                    .map_err(|err| PyValueError::new_err(format!("raw column {j}: {err}")))? as f32;
                (0..rows).for_each(|i| x[i * width + j] = value);
                continue;
            };
            if values.item_count() != rows {
                return Err(PyValueError::new_err(format!("raw column {j} holds {} values, not {rows}",
                                                         values.item_count())));
            }
            let copied;
            let values = if values.is_c_contiguous() { slice(&values) } else { copied = values.to_vec(py)?; &copied };
            for (i, value) in values.iter().enumerate() {
                x[i * width + j] = *value as f32;
            }
        }
        for row in x.chunks_exact_mut(width) {
            row[raw] = row[prompt] * (1.0 - row[prefix]);
            row[raw + 1] = if row[waiting] > 0.0 { 1.0 } else { 0.0 };
        }
        if !x.iter().all(|value| value.is_finite()) {
            return Ok(false);
        }
        let bits: Vec<u32> = x.iter().map(|value| value.to_bits()).collect();
        // SAFETY: `out` is a writable, C-contiguous buffer of `forests * rows` float32 held for the whole call.
        let out = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f32, out.item_count()) };
        py.detach(|| self.walk(&bits, width, rows, out, 0, rows));
        Ok(true)
    }
}

fn buffer<T: Element>(object: &Bound<'_, PyAny>, name: &str) -> PyResult<PyBuffer<T>> {
    let buffer = PyBuffer::<T>::get(object).map_err(|err| PyValueError::new_err(format!("{name}: {err}")))?;
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{name} must be C-contiguous")));
    }
    Ok(buffer)
}

fn owned<T: Element + Copy>(object: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<T>> {
    Ok(slice(&buffer::<T>(object, name)?).to_vec())
}

fn slice<T: Element>(buffer: &PyBuffer<T>) -> &[T] {
    // SAFETY: a C-contiguous buffer of `item_count` elements of T (checked by `buffer`), alive as long as `buffer`.
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const T, buffer.item_count()) }
}

impl Forests {
    fn checked(mut self) -> PyResult<Self> {
        let bad = |what: &str| Err(PyValueError::new_err(format!("inconsistent forests: {what}")));
        let trees = self.node_offset.len();
        let forests = self.base_score.len();
        if self.leaf_offset.len() != trees || self.default_left.len() != self.nodes.len()
            || self.depth.len() != forests || self.tree_start.len() != forests + 1 {
            return bad("array lengths");
        }
        let mut width = 0;
        for m in 0..forests {
            let (first, last, depth) = (self.tree_start[m], self.tree_start[m + 1], self.depth[m]);
            if last < first || last > trees || !(1..=16).contains(&depth) {
                return bad("tree ranges or depths");
            }
            let slots = 1usize << depth;
            for t in first..last {
                let (nodes, leaves) = (self.node_offset[t], self.leaf_offset[t]);
                if nodes.checked_add(slots).is_none_or(|end| end > self.nodes.len())
                    || leaves.checked_add(slots).is_none_or(|end| end > self.leaves.len()) {
                    return bad("a tree beyond its arrays");
                }
                for word in &self.nodes[nodes + 1..nodes + slots] {
                    width = width.max((word & FEATURE_MASK) as usize + 1);
                }
            }
        }
        self.width = width;
        Ok(self)
    }

    fn walk(&self, bits: &[u32], width: usize, rows: usize, out: &mut [f32], start: usize, stop: usize) {
        let forests = self.base_score.len();
        let stride = CHUNK.min(stop - start) + BLOCK; // a small batch touches no more memory than it needs
        let mut words = vec![0u64; stride * width];
        let mut acc = vec![0f32; forests * stride];
        let mut first = start;
        while first < stop {
            let n = CHUNK.min(stop - first);
            let padded = n.div_ceil(BLOCK) * BLOCK;
            if row_words(&bits[first * width..(first + n) * width], &mut words) {
                self.walk_with_missing(&words, width, n, &mut acc, stride);
            } else {
                for k in n * width..padded * width {
                    words[k] = words[k % width]; // pad with copies of the first row, dropped below
                }
                self.walk_finite(&words, width, padded, &mut acc, stride);
            }
            for m in 0..forests {
                out[m * rows + first..m * rows + first + n].copy_from_slice(&acc[m * stride..m * stride + n]);
            }
            first += n;
        }
    }

    /// `walk(tree, sums)` for every tree of every forest in order, `sums` being the forest's `n` sums in `acc` (rows of
    /// `stride`), each started at its base score.
    fn each_tree(&self, acc: &mut [f32], n: usize, stride: usize, mut walk: impl FnMut(&Tree<'_>, &mut [f32])) {
        for m in 0..self.base_score.len() {
            let sums = &mut acc[m * stride..m * stride + n];
            sums.fill(self.base_score[m]);
            for t in self.tree_start[m]..self.tree_start[m + 1] {
                let offset = self.node_offset[t];
                walk(&Tree { nodes: &self.nodes[offset..], default_left: &self.default_left[offset..],
                             leaves: &self.leaves[self.leaf_offset[t]..], depth: self.depth[m] }, sums);
            }
        }
    }

    #[allow(clippy::needless_range_loop)] // the eight lanes, each a register
    fn walk_finite(&self, words: &[u64], width: usize, n: usize, acc: &mut [f32], stride: usize) {
        self.each_tree(acc, n, stride, |tree, sums| {
            let (nodes, first_leaf) = (tree.nodes, 1usize << tree.depth);
            let root = nodes[1];
            let f0 = (root & FEATURE_MASK) as usize;
            for (block, sums) in sums.chunks_exact_mut(BLOCK).enumerate() {
                let x = &words[block * BLOCK * width..(block + 1) * BLOCK * width];
                let mut at = [0usize; BLOCK];
                for r in 0..BLOCK {
                    at[r] = 2 + (root.wrapping_sub(x[r * width + f0]) >> 63) as usize;
                }
                for _ in 1..tree.depth {
                    for r in 0..BLOCK {
                        // SAFETY: `checked` bounds every node index below 2**depth and every feature below width.
                        let node = unsafe { *nodes.get_unchecked(at[r]) };
                        let value = unsafe { *x.get_unchecked(r * width + (node & FEATURE_MASK) as usize) };
                        at[r] = 2 * at[r] + (node.wrapping_sub(value) >> 63) as usize;
                    }
                }
                for r in 0..BLOCK {
                    sums[r] += unsafe { *tree.leaves.get_unchecked(at[r] - first_leaf) };
                }
            }
        });
    }

    fn walk_with_missing(&self, words: &[u64], width: usize, n: usize, acc: &mut [f32], stride: usize) {
        self.each_tree(acc, n, stride, |tree, sums| {
            for (r, sum) in sums.iter_mut().enumerate() {
                let x = &words[r * width..(r + 1) * width];
                let mut at = 1usize;
                for _ in 0..tree.depth {
                    let node = tree.nodes[at];
                    let value = x[(node & FEATURE_MASK) as usize];
                    let right = if value == MISSING_WORD { tree.default_left[at] == 0 } else { node < value };
                    at = 2 * at + right as usize;
                }
                *sum += tree.leaves[at - (1usize << tree.depth)];
            }
        });
    }
}

/// One tree: its node words and default directions (a 1-based heap of `2**depth` slots) and its leaves.
struct Tree<'a> {
    nodes: &'a [u64],
    default_left: &'a [u8],
    leaves: &'a [f32],
    depth: u32,
}

/// The rows' words; whether any value is missing (NaN).
fn row_words(bits: &[u32], words: &mut [u64]) -> bool {
    let mut missing = false;
    for (word, &b) in words.iter_mut().zip(bits) {
        if b & 0x7FFF_FFFF > 0x7F80_0000 {
            *word = MISSING_WORD;
            missing = true;
        } else {
            let b = if b == 0x8000_0000 { 0 } else { b }; // -0.0 compares equal to +0.0
            let key = if b >> 31 != 0 { !b } else { b | 0x8000_0000 };
            *word = (u64::from(key) << 31) | 0x7FFF_FFFF;
        }
    }
    missing
}
