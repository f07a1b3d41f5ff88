//! The predicted profile's default pipeline after its producer, as one call: the prefix-affinity, SLO-tier,
//! late-concentration and TPOT-protection filters (any of them, in any order), the latency scorers, the SLO admitter
//! and the max-score picker. `router/framework/compiled.py` decides when a profile is of this shape and every
//! candidate has a prediction; each step is its Python plugin's arithmetic, operation for operation, and draws from
//! the router's `random.Random` where and in the order the plugin does, so survivors, scores, rejections and picks
//! are the same to the bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::producer::response_ms;

/// The share of its range a latency scorer gives a candidate predicted to meet its SLO, at least.
const POSITIVE_FLOOR: f64 = 0.01;

/// A filter of the profile, with its parameters (the Python plugin's `Params`).
#[derive(Clone, Copy)]
enum Filter {
    Affinity { threshold: f64, strict: f64, explore: f64, max_ttft_penalty_ms: f64 },
    Tiers { explore_negative: f64 },
    Concentrate { late_margin: f64, include_tpot: bool, only_in_a_burst: bool, late_cap: f64, late_slack: f64 },
    Protect { tolerance: f64, ttft_margin: f64, ttft_penalty: f64 },
}

/// A latency scorer's parameters and its weight in the profile.
#[derive(Clone, Copy)]
struct Scorer {
    most: bool,
    ttft_weight: f64,
    tpot_weight: f64,
    weight: f64,
}

/// The request, as the steps read it.
struct Ask {
    slo_ttft_ms: Option<f64>,
    has_slo: bool,
    stream: bool,
}

/// One value per candidate, in candidate order.
struct Columns {
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    e2e: Vec<f64>,
    ttft_headroom: Vec<f64>,
    tpot_headroom: Vec<f64>,
    prefix_match: Vec<f64>,
    prefill_backlog: Vec<f64>,
    at_risk: Vec<f64>,
    idle: Vec<bool>,
    cold: Vec<bool>,
}

impl Columns {
    /// Whether a candidate's SLO verdict is known, and whether it meets the SLO (`CandidateSet.slo_verdicts`; every
    /// candidate here is predicted).
    fn verdict(&self, i: usize) -> (bool, bool) {
        let (ttft, tpot) = (self.ttft_headroom[i], self.tpot_headroom[i]);
        let known = !(ttft.is_nan() && tpot.is_nan());
        (known, known && (ttft.is_nan() || ttft >= 0.0) && (tpot.is_nan() || tpot >= 0.0))
    }
}

/// The profile as configured.
#[pyclass(frozen, module = "headroom._native")]
pub struct PredictedProfile {
    filters: Vec<Filter>,
    scorers: Vec<Scorer>,
    weight_sum: f64,
    protect_running: Option<bool>,
    tie_tolerance: f64,
}

#[pymethods]
impl PredictedProfile {
    /// `filters`: `(kind, parameters)` in the profile's order: `affinity` (threshold, strict threshold, exploration
    /// probability, max TTFT penalty ms), `tiers` (epsilon of exploring the negative tier), `concentrate` (late
    /// margin, include TPOT, only in a burst, late cap, late slack; the flags as 0 or 1), `protect` (tolerance, TTFT
    /// margin, TTFT penalty). `scorers`: `(most, ttft weight, tpot weight, weight in the profile)` of each latency
    /// scorer. `protect_running`: the SLO admitter's parameter, None without one. `tie_tolerance`: the picker's.
    #[new]
    fn new(filters: Vec<(String, Vec<f64>)>, scorers: Vec<(bool, f64, f64, f64)>, protect_running: Option<bool>,
           tie_tolerance: f64) -> PyResult<Self> {
        let filters = filters.into_iter().map(|(kind, p)| parse_filter(&kind, &p)).collect::<PyResult<Vec<_>>>()?;
        if scorers.is_empty() {
            return Err(PyValueError::new_err("the predicted profile needs at least one latency scorer"));
        }
        let scorers: Vec<Scorer> = scorers.into_iter()
            .map(|(most, ttft_weight, tpot_weight, weight)| Scorer { most, ttft_weight, tpot_weight, weight })
            .collect();
        let weight_sum = scorers.iter().fold(0.0, |sum, s| sum + s.weight);
        Ok(PredictedProfile { filters, scorers, weight_sum, protect_running, tie_tolerance })
    }

    /// Decide among candidates that all have predictions. The columns are float64, one value per candidate:
    /// predicted `ttft`, `tpot` and `e2e` (NaN: none), `ttft_headroom` and `tpot_headroom` (NaN: does not apply),
    /// and the servers' `prefix_match`, `inflight_prefill_tokens`, `tpot_at_risk`, `num_waiting`, `num_running`,
    /// `inflight_requests` and `kv_cache_usage`; `cold_kv_usage` is the usage below which a server is cold. The
    /// request: its TTFT SLO (None: none), whether it has any SLO, streams, may be shed. Writes the survivors'
    /// positions into `survivors` (intp, as long as the candidates) and their scores into `scores` (float64, as
    /// long). Returns how many survived, the picked survivor's position (None when rejected) and, when rejected,
    /// whether some server is predicted to meet the SLO (the admitter's two reasons).
    #[pyo3(signature = (ttft, tpot, e2e, ttft_headroom, tpot_headroom, prefix_match, inflight_prefill_tokens,
                        tpot_at_risk, num_waiting, num_running, inflight_requests, kv_cache_usage, cold_kv_usage,
                        slo_ttft_ms, has_slo, stream, sheddable, survivors, scores, rng))]
    #[allow(clippy::too_many_arguments)]
    fn decide(&self, py: Python<'_>, ttft: &Bound<'_, PyAny>, tpot: &Bound<'_, PyAny>, e2e: &Bound<'_, PyAny>,
              ttft_headroom: &Bound<'_, PyAny>, tpot_headroom: &Bound<'_, PyAny>, prefix_match: &Bound<'_, PyAny>,
              inflight_prefill_tokens: &Bound<'_, PyAny>, tpot_at_risk: &Bound<'_, PyAny>,
              num_waiting: &Bound<'_, PyAny>, num_running: &Bound<'_, PyAny>, inflight_requests: &Bound<'_, PyAny>,
              kv_cache_usage: &Bound<'_, PyAny>, cold_kv_usage: f64, slo_ttft_ms: Option<f64>, has_slo: bool,
              stream: bool, sheddable: bool, survivors: &Bound<'_, PyAny>, scores: &Bound<'_, PyAny>,
              rng: &Bound<'_, PyAny>) -> PyResult<(usize, Option<usize>, bool)> {
        let n = read(py, ttft, "ttft", None)?.len();
        if n == 0 {
            return Err(PyValueError::new_err("cannot pick from no candidates"));
        }
        let column = |values: &Bound<'_, PyAny>, name: &str| read(py, values, name, Some(n));
        let (waiting, running, inflight) = (column(num_waiting, "num_waiting")?, column(num_running, "num_running")?,
                                            column(inflight_requests, "inflight_requests")?);
        let columns = Columns {
            ttft: column(ttft, "ttft")?,
            tpot: column(tpot, "tpot")?,
            e2e: column(e2e, "e2e")?,
            ttft_headroom: column(ttft_headroom, "ttft_headroom")?,
            tpot_headroom: column(tpot_headroom, "tpot_headroom")?,
            prefix_match: column(prefix_match, "prefix_match")?,
            prefill_backlog: column(inflight_prefill_tokens, "inflight_prefill_tokens")?,
            at_risk: column(tpot_at_risk, "tpot_at_risk")?,
            idle: (0..n).map(|i| waiting[i] == 0.0 && running[i] == 0.0 && inflight[i] == 0.0).collect(),
            cold: column(kv_cache_usage, "kv_cache_usage")?.iter().map(|&usage| usage < cold_kv_usage).collect(),
        };
        let ask = Ask { slo_ttft_ms, has_slo, stream };
        let survivors_out = PyBuffer::<isize>::get(survivors)?;
        let scores_out = PyBuffer::<f64>::get(scores)?;
        if survivors_out.item_count() != n || scores_out.item_count() != n {
            return Err(PyValueError::new_err(format!("survivors and scores must hold {n} values each")));
        }
        let mut kept: Vec<usize> = (0..n).collect();
        for filter in &self.filters {
            let narrowed = filter.apply(&ask, &columns, &kept, rng)?;
            if !narrowed.is_empty() {  // a filter may narrow, never empty
                kept = narrowed;
            }
        }
        let weighted = self.score(&ask, &columns, &kept);
        let writable = |what: &str| PyValueError::new_err(format!("{what} must be a writable array"));
        let survivors_out = survivors_out.as_mut_slice(py).ok_or_else(|| writable("survivors"))?;
        let scores_out = scores_out.as_mut_slice(py).ok_or_else(|| writable("scores"))?;
        for (j, (&position, &score)) in kept.iter().zip(&weighted).enumerate() {
            survivors_out[j].set(position as isize);
            scores_out[j].set(score);
        }
        if let Some(protect_running) = self.protect_running {
            if let Some(some_meet) = rejection(&ask, sheddable, protect_running, &columns) {
                return Ok((kept.len(), None, some_meet));
            }
        }
        Ok((kept.len(), Some(self.pick(&weighted, rng)?), false))
    }
}

impl PredictedProfile {
    /// The clamped weighted mean of the scorers' scores (the engine's `_weighted`).
    fn score(&self, ask: &Ask, columns: &Columns, kept: &[usize]) -> Vec<f64> {
        let mut total: Vec<f64> = Vec::new();
        for (j, scorer) in self.scorers.iter().enumerate() {
            let raw = scorer.score(ask, columns, kept);
            for (i, value) in raw.into_iter().enumerate() {
                let part = if scorer.weight == 1.0 { clamp(value) } else { scorer.weight * clamp(value) };
                if j == 0 { total.push(part) } else { total[i] += part }
            }
        }
        if self.weight_sum != 1.0 {
            total.iter_mut().for_each(|value| *value /= self.weight_sum);
        }
        total
    }

    /// The max-score picker: the highest score, a tie broken by `rng.randrange`.
    fn pick(&self, scores: &[f64], rng: &Bound<'_, PyAny>) -> PyResult<usize> {
        let values: Vec<f64> = scores.iter().map(|&s| if s.is_nan() { f64::NEG_INFINITY } else { finite(s) }).collect();
        let floor = values.iter().copied().fold(f64::NEG_INFINITY, py_max) - self.tie_tolerance;
        let best: Vec<usize> = (0..values.len()).filter(|&i| values[i] >= floor).collect();
        if best.len() > 1 {
            let drawn: usize = rng.call_method1("randrange", (best.len(),))?.extract()?;
            return Ok(best[drawn]);
        }
        Ok(best[0])
    }
}

impl Filter {
    /// The candidates (positions) this filter keeps of `kept`, in its order; empty when it would keep none.
    fn apply(&self, ask: &Ask, c: &Columns, kept: &[usize], rng: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
        let all = || kept.to_vec();
        let only = |keep: &dyn Fn(usize) -> bool| kept.iter().copied().filter(|&i| keep(i)).collect::<Vec<_>>();
        Ok(match *self {
            Filter::Affinity { threshold, strict, explore, max_ttft_penalty_ms } => {
                if threshold <= 0.0 || kept.len() <= 1 || (explore > 0.0 && draw(rng)? < explore) {
                    return Ok(all());
                }
                let mut warm = if strict > 0.0 { only(&|i| c.prefix_match[i] >= strict) } else { Vec::new() };
                if warm.is_empty() {
                    warm = only(&|i| c.prefix_match[i] >= threshold);
                    if warm.is_empty() {
                        return Ok(all());
                    }
                }
                let best_warm = min_of(warm.iter().map(|&i| c.ttft[i]));
                let best_all = min_of(kept.iter().map(|&i| c.ttft[i]));
                if best_warm - best_all > max_ttft_penalty_ms { all() } else { warm }
            }
            Filter::Tiers { explore_negative } => {
                if !ask.has_slo {
                    return Ok(all());
                }
                let verdicts: Vec<(usize, bool, bool)> = kept.iter()
                    .map(|&i| { let (known, meets) = c.verdict(i); (i, known, meets) })
                    .collect();
                let positive = verdicts.iter().any(|&(_, k, m)| k && m);
                let negative = verdicts.iter().any(|&(_, k, m)| k && !m);
                if !positive || !negative {
                    return Ok(all());
                }
                let keep_negative = explore_negative > 0.0 && draw(rng)? < explore_negative;
                let tier = verdicts.iter().filter(|&&(_, k, m)| k && m != keep_negative).map(|&(i, _, _)| i);
                tier.chain(verdicts.iter().filter(|&&(_, k, _)| !k).map(|&(i, _, _)| i)).collect()
            }
            Filter::Concentrate { late_margin, include_tpot, only_in_a_burst, late_cap, late_slack } => {
                let Some(slo) = ask.slo_ttft_ms else { return Ok(all()) };
                if kept.len() < 2 || kept.iter().any(|&i| c.ttft[i].is_nan()) {
                    return Ok(all());
                }
                let in_time = |i: usize| {
                    c.ttft[i] <= (1.0 + late_margin) * slo && !(include_tpot && c.tpot_headroom[i] < 0.0)
                };
                if kept.iter().any(|&i| in_time(i)) {
                    return Ok(all());
                }
                if only_in_a_burst && min_of(kept.iter().map(|&i| c.prefill_backlog[i])) == 0.0 {
                    return Ok(all());
                }
                let fastest = min_of(kept.iter().map(|&i| c.ttft[i]));
                let bound = py_min(late_cap * slo, fastest + late_slack * slo);
                let capped = only(&|i| c.ttft[i] <= bound);
                let keep = if capped.is_empty() {  // late past the cap everywhere: where it is least late
                    only(&|i| c.ttft[i] == fastest)
                } else {
                    let most = capped.iter().map(|&i| c.prefill_backlog[i]).fold(f64::NEG_INFINITY, nan_max);
                    capped.into_iter().filter(|&i| c.prefill_backlog[i] == most).collect()
                };
                if keep.len() == kept.len() { all() } else { keep }
            }
            Filter::Protect { tolerance, ttft_margin, ttft_penalty } => {
                let risks = kept.iter().map(|&i| c.at_risk[i]);
                if risks.clone().fold(f64::NEG_INFINITY, nan_max) <= min_of(risks) + tolerance {  // NaN: goes on
                    return Ok(all());
                }
                let allowed = allowed(ask, c, kept, ttft_margin, ttft_penalty);
                let least = min_of(kept.iter().zip(&allowed).filter(|&(_, &a)| a).map(|(&i, _)| c.at_risk[i]));
                let keep: Vec<bool> = kept.iter().zip(&allowed)
                    .map(|(&i, &a)| a && c.at_risk[i] <= least + tolerance)
                    .collect();
                if keep == allowed {
                    all()
                } else {
                    kept.iter().zip(&keep).filter(|&(_, &k)| k).map(|(&i, _)| i).collect()
                }
            }
        })
    }
}

/// The TPOT protection's candidates it may choose (`TpotProtectionFilter._allowed`).
fn allowed(ask: &Ask, c: &Columns, kept: &[usize], ttft_margin: f64, ttft_penalty: f64) -> Vec<bool> {
    let Some(slo) = ask.slo_ttft_ms else { return vec![true; kept.len()] };
    if kept.iter().all(|&i| c.ttft[i].is_nan()) {
        return vec![true; kept.len()];
    }
    let fastest = kept.iter().map(|&i| c.ttft[i]).filter(|t| !t.is_nan()).fold(f64::INFINITY, f64::min);
    let mut limit = (1.0 - ttft_margin) * slo;
    if fastest > limit {
        limit = fastest + ttft_penalty * slo;
    }
    kept.iter().map(|&i| !(c.ttft[i] > limit)).collect()
}

impl Scorer {
    /// The latency scorer's raw scores of the survivors `kept` (`LatencyScorer.score`).
    fn score(&self, ask: &Ask, c: &Columns, kept: &[usize]) -> Vec<f64> {
        let verdicts: Vec<(bool, bool)> = kept.iter().map(|&i| c.verdict(i)).collect();
        let mut scores = vec![0.0; kept.len()];
        let rows = |keep: &dyn Fn(bool, bool) -> bool| -> Vec<usize> {
            (0..kept.len()).filter(|&j| keep(verdicts[j].0, verdicts[j].1)).collect()
        };
        let of = |column: &[f64], rows: &[usize]| -> Vec<f64> { rows.iter().map(|&j| column[kept[j]]).collect() };
        let positive = rows(&|known, meets| known && meets);
        if !positive.is_empty() {  // by headroom
            let spread = combine(&[(of(&c.ttft_headroom, &positive), self.ttft_weight),
                                   (of(&c.tpot_headroom, &positive), self.tpot_weight)]);
            for (&j, x) in positive.iter().zip(spread) {
                let x = if self.most { x } else { 1.0 - x };
                scores[j] = POSITIVE_FLOOR + (1.0 - POSITIVE_FLOOR) * x;
            }
            return scores;
        }
        let known = rows(&|known, _| known);
        let parts = if !known.is_empty() {  // by deficit
            if kept.iter().any(|&i| c.idle[i]) {
                return kept.iter().map(|&i| if c.idle[i] { 1.0 } else { 0.0 }).collect();
            }
            let deficit = |column: &[f64]| of(column, &known).into_iter().map(|h| np_maximum(0.0, -h)).collect();
            vec![(deficit(&c.ttft_headroom), self.ttft_weight), (deficit(&c.tpot_headroom), self.tpot_weight)]
        } else {  // by latency, every candidate predicted
            let every: Vec<usize> = (0..kept.len()).collect();
            if ask.stream {
                vec![(of(&c.ttft, &every), self.ttft_weight), (of(&c.tpot, &every), self.tpot_weight)]
            } else {
                vec![(response_ms(&of(&c.e2e, &every), &of(&c.ttft, &every)), 1.0)]
            }
        };
        let rows = if known.is_empty() { (0..kept.len()).collect() } else { known };
        for (&j, x) in rows.iter().zip(combine(&parts)) {
            scores[j] = 1.0 - x;
        }
        scores
    }
}

/// `latency_scorer._combine`: the weighted mean of per-part min-max normalised values; parts missing (NaN) or equal
/// everywhere drop out.
fn combine(parts: &[(Vec<f64>, f64)]) -> Vec<f64> {
    let mut total = vec![0.0; parts[0].0.len()];
    let mut weight_sum = 0.0;
    for (values, weight) in parts {
        let weight = *weight;
        if weight <= 0.0 || values.is_empty() || values.iter().any(|v| v.is_nan()) {
            continue;
        }
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if high <= low {
            continue;
        }
        for (t, v) in total.iter_mut().zip(values) {
            *t += weight * (v - low) / (high - low);
        }
        weight_sum += weight;
    }
    if weight_sum > 0.0 {
        total.iter_mut().for_each(|t| *t /= weight_sum);
    }
    total
}

/// The SLO admitter's verdict over every candidate: None to admit, else whether some server meets the SLO.
fn rejection(ask: &Ask, sheddable: bool, protect_running: bool, c: &Columns) -> Option<bool> {
    if !ask.has_slo || !sheddable {
        return None;
    }
    let verdicts: Vec<(bool, bool)> = (0..c.ttft.len()).map(|i| c.verdict(i)).collect();
    if !verdicts.iter().all(|&(known, _)| known) {
        return None;
    }
    let safe = |i: usize| verdicts[i].1 && (!protect_running || c.at_risk[i] == 0.0);
    if (0..verdicts.len()).any(|i| safe(i) || c.idle[i] || c.cold[i]) {
        return None;
    }
    Some(verdicts.iter().any(|&(_, meets)| meets))
}

fn parse_filter(kind: &str, p: &[f64]) -> PyResult<Filter> {
    let want = match kind { "affinity" => 4, "tiers" => 1, "concentrate" => 5, "protect" => 3, _ => 0 };
    if want == 0 {
        return Err(PyValueError::new_err(format!("no compiled filter {kind:?}")));
    }
    if p.len() != want {
        return Err(PyValueError::new_err(format!("filter {kind:?} takes {want} parameters, got {}", p.len())));
    }
    Ok(match kind {
        "affinity" => Filter::Affinity { threshold: p[0], strict: p[1], explore: p[2], max_ttft_penalty_ms: p[3] },
        "tiers" => Filter::Tiers { explore_negative: p[0] },
        "concentrate" => Filter::Concentrate { late_margin: p[0], include_tpot: p[1] != 0.0,
                                                only_in_a_burst: p[2] != 0.0, late_cap: p[3], late_slack: p[4] },
        _ => Filter::Protect { tolerance: p[0], ttft_margin: p[1], ttft_penalty: p[2] },
    })
}

/// A contiguous float64 buffer's values (of `n` of them, when given).
fn read(py: Python<'_>, values: &Bound<'_, PyAny>, name: &str, n: Option<usize>) -> PyResult<Vec<f64>> {
    let buffer = PyBuffer::<f64>::get(values).map_err(|err| PyValueError::new_err(format!("{name}: {err}")))?;
    if buffer.dimensions() != 1 || n.is_some_and(|n| buffer.item_count() != n) {
        return Err(PyValueError::new_err(format!("{name} must be a float64 array of one value per candidate")));
    }
    Ok(buffer.to_vec(py)?)
}

/// `rng.random()`.
fn draw(rng: &Bound<'_, PyAny>) -> PyResult<f64> {
    rng.call_method0("random")?.extract()
}

/// NumPy's `min` over an array: NaN wins.
fn min_of(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(f64::INFINITY, |low, v| if low.is_nan() || v.is_nan() { f64::NAN } else { low.min(v) })
}

/// NumPy's `max` over an array: NaN wins.
fn nan_max(high: f64, v: f64) -> f64 {
    if high.is_nan() || v.is_nan() { f64::NAN } else { high.max(v) }
}

/// NumPy's `maximum(a, b)`: NaN wins.
fn np_maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

/// Python's `min(a, b)`: `b` only when it is less.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

/// Python's `max(a, b)`: `b` only when it is greater.
fn py_max(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// NumPy's `nan_to_num` of an infinity: the largest or smallest float.
fn finite(x: f64) -> f64 {
    if x == f64::INFINITY { f64::MAX } else if x == f64::NEG_INFINITY { f64::MIN } else { x }
}

/// NumPy's `fmin(fmax(x, 0), 1)`: NaN counts as 0.
fn clamp(x: f64) -> f64 {
    x.max(0.0).min(1.0)
}
