//! The predicted-latency producer's arithmetic after the models, for candidates that are every server of one pool:
//! the checks of each prediction, the servers' latency corrections, the prefill floor and the SLO headroom
//! (`router/framework/plugins/predicted_latency_producer.py`), operation for operation, so the values are the same
//! to the bit. The exponentials and logarithms stay NumPy's, on the Python side
//! (`router/framework/compiled_producer.py`): the correction factors come in already exponentiated, and the floor's
//! log factors are left to the caller.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Finish the models' predictions (`values`: float32, one row per model, in milliseconds) for `n` servers into `out`
/// (float64, 7 rows of `n`): the predicted TTFT, TPOT and E2E (NaN without an E2E model), the TTFT and
/// TPOT headroom (NaN where it does not apply) and, where the prefill floor raised the TTFT or E2E, the ratio of the
/// floor to the prediction it replaced (NaN elsewhere). `rows`: the models' rows of TTFT, TPOT and E2E. `factors`:
/// the servers' correction factors per target (3 rows of `n`), or None. `floor`: the servers' prefill pace,
/// `inflight_prefill_tokens` and `prefix_match`, or None. `tightest_tpot_slo`: per server (NaN: none). `tpot_factor`
/// divides the effective TPOT SLO. Returns None when some server has no usable prediction (a value not finite or
/// negative), else whether the floor raised any.
#[pyfunction]
#[pyo3(signature = (values, rows, factors, floor, prompt_tokens, tightest_tpot_slo, slo_ttft_ms, slo_tpot_ms, has_slo,
                    stream, slo_buffer_factor, tpot_factor, out))]
#[allow(clippy::too_many_arguments)]
pub fn finish_predictions(py: Python<'_>, values: &Bound<'_, PyAny>, rows: (usize, usize, Option<usize>),
                          factors: Option<&Bound<'_, PyAny>>,
                          floor: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>, prompt_tokens: f64,
                          tightest_tpot_slo: &Bound<'_, PyAny>, slo_ttft_ms: Option<f64>, slo_tpot_ms: Option<f64>,
                          has_slo: bool, stream: bool, slo_buffer_factor: f64, tpot_factor: f64,
                          out: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    let tightest = read::<f64>(py, tightest_tpot_slo, "tightest_tpot_slo", None)?;
    let n = tightest.len();
    let values = read::<f32>(py, values, "values", None)?;
    let models = values.len().checked_div(n).unwrap_or(0);
    let (ttft_row, tpot_row, e2e_row) = rows;
    if values.len() != models * n || ttft_row.max(tpot_row).max(e2e_row.unwrap_or(0)) >= models {
        return Err(PyValueError::new_err(format!("{} values are not rows of {n} for models {rows:?}", values.len())));
    }
    let model = |row: usize| -> Vec<f64> { values[row * n..(row + 1) * n].iter().map(|&v| f64::from(v)).collect() };
    let (mut ttft, mut tpot) = (model(ttft_row), model(tpot_row));
    let mut e2e = e2e_row.map_or_else(|| vec![f64::NAN; n], model);
    let given = |column: &[f64]| column.iter().all(|&v| v.is_finite() && v >= 0.0);
    if !given(&ttft) || !given(&tpot) || (e2e_row.is_some() && !given(&e2e)) {
        return Ok(None);
    }
    if let Some(factors) = factors {
        let factors = read::<f64>(py, factors, "factors", Some(3 * n))?;
        for i in 0..n {
            ttft[i] *= factors[i];
            tpot[i] *= factors[n + i];
            e2e[i] *= factors[2 * n + i];
        }
    }
    let (mut ttft_raised, mut e2e_raised) = (vec![f64::NAN; n], vec![f64::NAN; n]);
    let mut raised = false;
    if let Some((pace, inflight, prefix)) = floor {
        let pace = read::<f64>(py, &pace, "prefill pace", Some(n))?;
        let inflight = read::<f64>(py, &inflight, "inflight_prefill_tokens", Some(n))?;
        let prefix = read::<f64>(py, &prefix, "prefix_match", Some(n))?;
        for i in 0..n {
            let floor = pace[i] * (inflight[i] + prompt_tokens * (1.0 - prefix[i]));
            for (value, ratio) in [(&mut ttft[i], &mut ttft_raised[i]), (&mut e2e[i], &mut e2e_raised[i])] {
                if floor > *value && *value > 0.0 {
                    *ratio = floor / *value;
                    *value = floor;
                    raised = true;
                }
            }
        }
    }
    let mut ttft_headroom = vec![f64::NAN; n];
    let mut tpot_headroom = vec![f64::NAN; n];
    if has_slo {
        if let Some(slo) = slo_ttft_ms {
            let (first, other) = if stream { (&ttft, &e2e) } else { (&e2e, &ttft) };
            for (headroom, at) in ttft_headroom.iter_mut().zip(response_ms(first, other)) {
                *headroom = slo - at;
            }
        }
        if stream {
            let own = slo_tpot_ms.unwrap_or(f64::NAN);
            for i in 0..n {
                tpot_headroom[i] = own.min(tightest[i]) * slo_buffer_factor / tpot_factor - tpot[i]; // NumPy's fmin
            }
        }
    }
    let columns = [&ttft, &tpot, &e2e, &ttft_headroom, &tpot_headroom, &ttft_raised, &e2e_raised]; // `out`'s rows
    let out = PyBuffer::<f64>::get(out)?;
    if out.item_count() != columns.len() * n || !out.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("out must be float64 of {} rows of {n}", columns.len())));
    }
    let out = out.as_mut_slice(py).ok_or_else(|| PyValueError::new_err("out must be writable"))?;
    for (row, column) in columns.into_iter().enumerate() {
        for (cell, &value) in out[row * n..(row + 1) * n].iter().zip(column) {
            cell.set(value);
        }
    }
    Ok(Some(raised))
}

/// `contract.targets.response_ms` for servers compared, with `first` the column wanted and `other` its stand-in.
pub fn response_ms(first: &[f64], other: &[f64]) -> Vec<f64> {
    let swap = first.iter().zip(other).any(|(f, o)| f.is_nan() && !o.is_nan());
    let (first, other) = if swap { (other, first) } else { (first, other) };
    first.iter().zip(other).map(|(&f, &o)| if f.is_nan() { o } else { f }).collect()
}

/// A buffer's values, in order (`n` of them, when given).
fn read<T: pyo3::buffer::Element + Copy>(py: Python<'_>, values: &Bound<'_, PyAny>, name: &str,
                                          n: Option<usize>) -> PyResult<Vec<T>> {
    let buffer = PyBuffer::<T>::get(values).map_err(|err| PyValueError::new_err(format!("{name}: {err}")))?;
    if n.is_some_and(|n| buffer.item_count() != n) {
        return Err(PyValueError::new_err(format!("{name} must hold {} values", n.unwrap_or(0))));
    }
    buffer.to_vec(py)
}
