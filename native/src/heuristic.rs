//! The heuristic profile's default pipeline as one call: its scorers (free KV cache, queue, prefix match), their
//! clamped weighted mean, and the weighted-random picker (sharpness 1). `router/framework/compiled.py` decides when
//! a profile is this one; the arithmetic is the Python plugins' own, operation for operation, so scores and picks
//! are the same to the bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A scorer of the heuristic profile, by its column of the servers' state.
#[derive(Clone, Copy)]
enum Scorer {
    KvCacheFree,
    Queue,
    PrefixMatch,
}

/// The profile as configured: its scorers in order with their weights, and the sum of the weights.
#[pyclass(frozen, module = "headroom._native")]
pub struct HeuristicProfile {
    scorers: Vec<(Scorer, f64)>,
    weight_sum: f64,
}

#[pymethods]
impl HeuristicProfile {
    /// `scorers`: `(kind, weight)` in the profile's order, kind one of `kv-cache-free`, `queue`, `prefix-match`.
    #[new]
    fn new(scorers: Vec<(String, f64)>) -> PyResult<Self> {
        if scorers.is_empty() {
            return Err(PyValueError::new_err("the heuristic profile needs at least one scorer"));
        }
        let mut parsed = Vec::with_capacity(scorers.len());
        let mut weight_sum = 0.0;
        for (kind, weight) in scorers {
            let scorer = match kind.as_str() {
                "kv-cache-free" => Scorer::KvCacheFree,
                "queue" => Scorer::Queue,
                "prefix-match" => Scorer::PrefixMatch,
                _ => return Err(PyValueError::new_err(format!("no compiled scorer {kind:?}"))),
            };
            parsed.push((scorer, weight));
            weight_sum += weight;
        }
        Ok(HeuristicProfile { scorers: parsed, weight_sum })
    }

    /// Score the candidates whose `kv_cache_usage`, `num_waiting` and `prefix_match` columns (float64, one value per
    /// candidate) are given into `scores` (float64, as long), and pick one: with probability proportional to its
    /// score through `rng.random()`, or, when every score is 0, uniformly through `rng.randrange(n)`. Returns the
    /// picked candidate's position.
    fn pick(&self, py: Python<'_>, kv_cache_usage: &Bound<'_, PyAny>, num_waiting: &Bound<'_, PyAny>,
            prefix_match: &Bound<'_, PyAny>, scores: &Bound<'_, PyAny>, rng: &Bound<'_, PyAny>) -> PyResult<usize> {
        let usage = column(kv_cache_usage, "kv_cache_usage")?;
        let waiting = column(num_waiting, "num_waiting")?;
        let prefix = column(prefix_match, "prefix_match")?;
        let out = column(scores, "scores")?;
        let n = usage.item_count();
        if n == 0 {
            return Err(PyValueError::new_err("cannot pick from no candidates"));
        }
        for (name, buffer) in [("num_waiting", &waiting), ("prefix_match", &prefix), ("scores", &out)] {
            if buffer.item_count() != n {
                return Err(PyValueError::new_err(format!("{name} holds {} values for {n} candidates", buffer.item_count())));
            }
        }
        let out = out.as_mut_slice(py).ok_or_else(|| PyValueError::new_err("scores must be writable"))?;
        let usage = usage.as_slice(py).expect("checked C-contiguous");
        let waiting = waiting.as_slice(py).expect("checked C-contiguous");
        let prefix = prefix.as_slice(py).expect("checked C-contiguous");
        let (low, high) = waiting.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), q| {
            let q = q.get();
            (nan_min(low, q), nan_max(high, q))
        });
        for i in 0..n {
            let mut total = 0.0;
            for (j, &(scorer, weight)) in self.scorers.iter().enumerate() {
                let raw = match scorer {
                    Scorer::KvCacheFree => 1.0 - usage[i].get(),
                    Scorer::Queue if high == low => 1.0,
                    Scorer::Queue => (high - waiting[i].get()) / (high - low),
                    Scorer::PrefixMatch => prefix[i].get(),
                };
                let part = if weight == 1.0 { clamp(raw) } else { weight * clamp(raw) };
                total = if j == 0 { part } else { total + part };
            }
            out[i].set(if self.weight_sum == 1.0 { total } else { total / self.weight_sum });
        }
        let mut cumulative = 0.0;
        for score in out.iter() {
            let score = score.get();
            cumulative += if score > 0.0 { score } else { 0.0 };
        }
        if cumulative <= 0.0 {
            return rng.call_method1("randrange", (n,))?.extract();
        }
        let target: f64 = rng.call_method0("random")?.extract::<f64>()? * cumulative;
        let mut running = 0.0;
        for (i, score) in out.iter().enumerate() {
            let score = score.get();
            running += if score > 0.0 { score } else { 0.0 };
            if running > target {
                return Ok(i);
            }
        }
        Ok(n - 1)
    }
}

/// A C-contiguous float64 buffer.
fn column(values: &Bound<'_, PyAny>, name: &str) -> PyResult<PyBuffer<f64>> {
    let buffer = PyBuffer::<f64>::get(values).map_err(|err| PyValueError::new_err(format!("{name}: {err}")))?;
    if !buffer.is_c_contiguous() || buffer.dimensions() != 1 {
        return Err(PyValueError::new_err(format!("{name} must be a contiguous one-dimensional float64 array")));
    }
    Ok(buffer)
}

/// NumPy's `fmin(fmax(x, 0), 1)`: NaN counts as 0.
fn clamp(x: f64) -> f64 {
    x.max(0.0).min(1.0)
}

/// NumPy's `min` over an array: NaN wins.
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }
}

/// NumPy's `max` over an array: NaN wins.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}
