"""One series in, one verdict out: is this memory series leaking?

`assess_series` answers "leak", "no_leak" or "inconclusive" for one series
(process RSS in bytes, live tensors, objects of one type, ...) logged against
training steps, with a growth rate, an autocorrelation-aware 95% interval, a
p-value for Benjamini-Hochberg across many series, and one sentence of evidence.

Why not a plain trend test: training memory is not a straight line. It warms
up, caches fill to a bound, pools grow in stairs and stop, buffers fill and are
cleared (sawtooth), tables load once (a step), and the noise is strongly
autocorrelated. Least squares at p < 0.05 or Mann-Kendall at p < 0.01 call
most such clean series leaks (see benchmarks/bench_detection.py). The method:

1. Clean: drop non-finite samples, sort by step, keep the last of repeated steps.
2. Aggregate: more than 1,024 samples become 512-1,023 block medians, which
   bounds the cost (1,000,000 points in well under 100 ms) and defuses spikes.
3. Sawtooth: two or more sustained drops (5 sd of the point-to-point changes,
   no rebound) mark a buffer that is cleared. The ramp is removed by fitting
   y = a + b*step + c*(steps since the last reset); what is left is flat for a
   working buffer and rises when the floor leaks.
4. Warm-up: cut where a line fits the rest best per remaining point (MSER with a
   linear fit, at most the first half).
5. Onset: a "flat, then linear" hinge fitted after the warm-up; its corner is
   where sustained growth starts (late leaks). When a cache-filling curve
   (line + A*(1 - exp(-x/tau))) fits clearly better, growth is measured beyond
   the filling instead.
6. Evidence: least squares on winsorized points; the slope's variance and
   degrees of freedom are widened by the residuals' integrated autocorrelation
   time: the larger of an AR(1) estimate (lag-1 autocorrelation, bias-corrected
   plus one standard error) and Geyer's initial positive sequence over all lags.
7. A leak needs all of: growth significant at p < 1e-4 (the onset is searched
   for; false alarms cost trust); growth over the window of at least 2 noise sd;
   growth that persists in the last 40% of the window (a filled cache or pool
   goes flat there); growth that a single step does not explain better (a table
   loaded once); and growth that does not vanish if the whole series, warm-up
   included, is read as one slowly filling cache.
8. "no_leak" needs evidence too: some explanation (flat, plateau, filling,
   step) must bound the ongoing growth's upper 95% limit below 3 noise sd with
   at least 8 effective samples. Everything else is "inconclusive", with the
   reason why.

Pure numpy: no I/O, no TensorFlow, no state. scipy is not needed: the Student-t
functions at the bottom are implemented here.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np

# Long series are reduced to at most this many block medians (2x before blocking).
MAX_BLOCKS = 512
# Significance of the growth slope needed for a leak (one-sided). Strict, because
# the onset is searched for, and because false alarms cost users' trust.
ALPHA_LEAK = 1e-4
# Significance of the growth left once the largest single step is allowed for.
ALPHA_AFTER_STEP = 1e-3
# Growth over the window must be at least this many noise sd to be called a leak.
MATERIAL_NOISE_SD = 2.0
# "no_leak" needs the upper 95% bound of ongoing growth below this many noise sd.
NO_LEAK_NOISE_SD = 3.0
# The persistence check looks at the last TAIL_FRACTION of the growth window.
TAIL_FRACTION = 0.4
# Growth has "stopped" when the tail slope is confidently below this share of the slope.
STOPPED_SLOPE_RATIO = 0.5
# A leak's tail slope estimate must be at least this share of the whole slope.
TAIL_MIN_RATIO = 0.2
# A drop counts as a buffer reset when it exceeds this many sd of point-to-point changes.
RESET_DROP_SD = 5.0
# Onset is searched on at most this many candidate points.
ONSET_CANDIDATES = 48
# The growth window keeps at least this share of the post-warm-up points.
MIN_WINDOW_SHARE = 0.2
MIN_WINDOW_POINTS = 20
# Fewer effective (independent) samples than this cannot bound growth for "no_leak".
MIN_EFFECTIVE_SAMPLES = 8
# A saturating fit replaces the hinge when it lowers the RSS by this many noise variances.
SATURATION_PENALTY = 10.0
SATURATION_TAUS = 16
# Raw points used to estimate the noise of long series.
NOISE_SUBSAMPLE = 20_000

_MAD_TO_SD = 1.4826
# TrendResult.shape: which explanation the verdict rests on.
_LEAK_SHAPES = {(False, "hinge"): "growth", (False, "saturating"): "growth_beyond_filling",
                (True, "hinge"): "growth_under_resets", (True, "saturating"): "growth_under_resets"}
_CLEAN_SHAPES = {"flat": "flat", "step": "step", "saturating": "filling", "stopped": "plateau"}
_NORMAL = NormalDist()


@dataclasses.dataclass
class TrendResult:
    """The verdict on one series, with the evidence behind it.

    Values are in the series' unit (``unit``: bytes, objects, ...) and steps,
    unless the name says otherwise.

    verdict: "leak", "no_leak" or "inconclusive".
    confidence: 0..1. For a leak, the smaller of 1 - p_value and the chance
      that growth exceeds the materiality bar (2 noise sd); for no_leak, the
      chance that ongoing growth stays under 3 noise sd; for inconclusive,
      1 minus the larger of those two (1.0 when there were too few samples).
    slope_per_step, slope_ci: growth per step and its 95% interval; over the
      growth window (onset to end) for a leak, else over everything after the
      warm-up. The interval is widened for autocorrelated noise.
    slope_per_hour: slope_per_step times the median steps per hour of wall time.
    p_value: one-sided p-value that growth continues, for Benjamini-Hochberg
      across series: the largest of the slope test and, where they apply, the
      tests of the slope left beside a single step, after a plateau, or beyond
      a filling cache.
    onset_step: first step of sustained growth (leaks only).
    warmup_end_step: first step after the excluded warm-up, None if none.
    samples: finite samples used (after dropping NaN/inf and repeated steps).
    noise: robust sd of the samples around the fitted trend.
    total_growth: fitted growth over the window slope_per_step applies to.
    seconds_to_exhaustion, steps_to_exhaustion: for a bytes leak with
      ``available_bytes``: when the growth eats it at the current rate.
    fit: the trend line for a chart: start_step, end_step, start_value,
      end_value, ci_low_end, ci_high_end.
    reason: one sentence of evidence.
    dropped_samples: non-finite samples left out.
    shape: what the verdict rests on. leak: "growth", "growth_beyond_filling"
      (a leak on top of a filling cache), "growth_under_resets" (the floor of a
      sawtooth rises). no_leak: "flat", "plateau" (grew, then stopped),
      "filling" (slowing to a plateau), "step" (one jump), "resets" (a sawtooth
      with a flat floor). inconclusive: "unclear", "too_few".
    """

    verdict: str
    confidence: float
    slope_per_step: float
    slope_ci: tuple
    slope_per_hour: float | None
    p_value: float
    onset_step: int | None
    warmup_end_step: int | None
    samples: int
    noise: float
    total_growth: float
    seconds_to_exhaustion: float | None
    steps_to_exhaustion: float | None
    fit: dict
    reason: str
    unit: str = "bytes"
    dropped_samples: int = 0
    shape: str = ""

    def to_dict(self) -> dict:
        """A JSON-safe dict: non-finite numbers become None, tuples lists."""
        return _json_safe(dataclasses.asdict(self))


def assess_series(steps, values, wall_times=None, *, unit="bytes", available_bytes=None,
                  min_samples=20) -> TrendResult:
    """Decide whether one series grows like a leak.

    Args:
      steps: training steps (integers; any order, repeats allowed: the last wins).
      values: one value per step, in ``unit``; NaN/inf samples are dropped.
      wall_times: optional seconds (e.g. since the epoch), one per step; gives
        ``slope_per_hour`` and ``seconds_to_exhaustion``.
      unit: the values' unit ("bytes", "objects", ...), used in ``reason``.
      available_bytes: for ``unit == "bytes"``, memory still free at the end of
        the series; gives the time and steps until a leak exhausts it.
      min_samples: fewer finite samples than this give "inconclusive".

    Returns:
      A `TrendResult`. Never raises on numeric input of any length.
    """
    steps_f, values_f, walls_f, dropped = _prepare(steps, values, wall_times)
    n = int(values_f.size)
    if n < max(int(min_samples), 3):
        return _too_few(n, dropped, unit, min_samples)
    scale = float(np.max(np.abs(values_f)))
    if not scale < 1e150:
        # Squares of such values overflow; no memory series gets near this.
        result = _too_few(n, dropped, unit, min_samples)
        result.reason = f"values up to {scale:.3g} {unit} are too large to analyse"
        result.shape = "unclear"
        return result

    t_blk, y_blk = _aggregate_blocks(steps_f, values_f)
    resets = _find_resets(y_blk)
    # One drop is a release (or a step down); two or more make a sawtooth.
    sawtooth = resets.size >= 2
    if sawtooth:
        t_an, y_an, ramp, cycle_noise = _desawtooth(t_blk, y_blk, resets)
    else:
        t_an, y_an = t_blk, y_blk
    an = _analyse(t_an, y_an)
    if an.t_end != steps_f[-1]:
        # Block steps are block middles; the trend runs to the last real step.
        an.t_end = float(steps_f[-1])
        an.level = float(an.predict(np.array([an.t_end]))[0]) - an.slope * (an.t_end - an.t_onset)

    # Noise in the user's unit: raw residuals around the fit.
    if sawtooth:
        noise = cycle_noise if t_blk.size == n else max(cycle_noise, _diff_noise(values_f))
    elif t_an.size == n:
        noise = an.resid_sd
    else:
        noise = _raw_noise(steps_f, values_f, an)
    noise_floor = max(noise, 1e-9 * max(abs(float(np.median(y_an))), 1.0))
    aliasing = 0.0
    if sawtooth:
        # The reset happens somewhere between two samples, and where it falls
        # drifts from cycle to cycle when the sampling interval beats against
        # the period: the floor can wander by one ramp step with no leak at all.
        aliasing = max(0.0, ramp * float(np.median(np.diff(t_blk))))
    steps_per_second = _steps_per_second(steps_f, walls_f, an.t_onset)
    return _decide(an, n, dropped, unit, noise, noise_floor, aliasing, steps_per_second,
                   available_bytes, resets.size if sawtooth else 0, steps_f)


# --------------------------------------------------------------------------- preparation


def _prepare(steps, values, wall_times):
    """Finite samples sorted by step, last one kept per step; also the drop count."""
    try:
        s = np.asarray(steps, dtype=np.float64).ravel()
        v = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return np.empty(0), np.empty(0), None, 0
    size = min(s.size, v.size)
    s, v = s[:size], v[:size]
    w = None
    if wall_times is not None:
        try:
            w = np.asarray(wall_times, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            w = None
        if w is not None and w.size < size:
            w = None
        elif w is not None:
            w = w[:size]
    finite = np.isfinite(v)
    if not np.issubdtype(np.asarray(steps).dtype, np.integer):
        finite &= np.isfinite(s)
    dropped = int(size - np.count_nonzero(finite))
    if dropped:
        s, v = s[finite], v[finite]
        w = w[finite] if w is not None else None
    if s.size > 1:
        smallest_gap = float(np.min(np.diff(s)))
        if smallest_gap < 0:
            order = np.argsort(s, kind="stable")
            s, v = s[order], v[order]
            w = w[order] if w is not None else None
            smallest_gap = float(np.min(np.diff(s)))
        if smallest_gap == 0:
            # A restarted job rewrites steps; its last write is the one that stands.
            keep = np.ones(s.size, dtype=bool)
            keep[:-1] = np.diff(s) != 0
            s, v = s[keep], v[keep]
            w = w[keep] if w is not None else None
    return s, v, w, dropped


def _aggregate_blocks(t, y):
    """At most ~2*MAX_BLOCKS points: block medians of equal-count blocks.

    The few samples that do not fill a block are taken from the start, the
    least informative end of a leak series.
    """
    n = y.size
    if n <= 2 * MAX_BLOCKS:
        return t, y
    k = n // MAX_BLOCKS
    m = n // k
    r = n - m * k
    yb = np.partition(y[r:].reshape(m, k), k // 2, axis=1)[:, k // 2]
    tb = t[r:].reshape(m, k)[:, k // 2]
    return tb, yb


def _find_resets(y):
    """Indices that start a new cycle after a sustained drop (buffer cleared)."""
    if y.size < 8:
        return np.empty(0, dtype=int)
    d = np.diff(y)
    deviation = np.abs(d - np.median(d))
    scale = _MAD_TO_SD * float(np.median(deviation))
    if scale <= 0:
        # Noise-free ramps: most changes are identical, so the MAD is zero.
        scale = float(np.mean(deviation))
        if scale <= 0:
            return np.empty(0, dtype=int)
    threshold = RESET_DROP_SD * scale
    idx = np.nonzero(d < np.median(d) - threshold)[0] + 1
    idx = idx[(idx >= 2) & (idx <= y.size - 2)]
    if idx.size == 0:
        return idx
    # A spike up before, or down after, the drop is an outlier, not a reset:
    # the level must stay down on both neighbours.
    before = np.minimum(y[idx - 1], y[idx - 2])
    after = np.maximum(y[idx], y[idx + 1])
    return idx[before - after > threshold / 2]


def _desawtooth(t, y, resets):
    """Remove the periodic fill-and-clear ramp, keeping any growth of its floor.

    Fits y = a + b*t + c*phase, where phase is the steps since the cycle's
    reset (the first point after it), and returns the points from the first
    reset on with c*phase subtracted: a working buffer leaves a flat series,
    a leak under it a rising one. Points before the first reset are left out,
    since that cycle may start mid-ramp or in the warm-up.
    Returns (steps, values, ramp per step c, noise): the noise is the robust sd
    of the residuals around each cycle's own ramp, free of how well the cycles
    line up with each other.
    """
    start = int(resets[0])
    tt, yy = t[start:], y[start:]
    cycle = np.searchsorted(resets, np.arange(start, t.size), side="right") - 1
    phase = tt - t[resets][cycle]
    fit = _regress([tt - tt[0], phase], yy)
    ramp = float(fit.beta[2])
    # Within-cycle residuals: each cycle's mean removed, one common ramp.
    bounds = resets - start
    counts = np.diff(np.append(bounds, tt.size))
    y_in = yy - np.repeat(np.add.reduceat(yy, bounds) / counts, counts)
    p_in = phase - np.repeat(np.add.reduceat(phase, bounds) / counts, counts)
    spp = float(p_in @ p_in)
    resid = y_in - (float(p_in @ y_in) / spp if spp > 0 else 0.0) * p_in
    lost = bounds.size + 1  # one mean per cycle and the ramp
    noise = _robust_sd(resid) * math.sqrt(tt.size / max(tt.size - lost, 1))
    return tt, yy - ramp * phase, ramp, noise


# --------------------------------------------------------------------------- fitting


@dataclasses.dataclass
class _Regression:
    """Least squares with the slope's variance widened for AR(1) residuals."""

    beta: np.ndarray
    se: np.ndarray        # per coefficient, autocorrelation-aware
    df: float             # effective degrees of freedom
    resid: np.ndarray
    sigma2: float
    inflation: float      # (1 + rho) / (1 - rho)

    def p_positive(self, j=1):
        """One-sided p-value that coefficient j is > 0."""
        b, se = float(self.beta[j]), float(self.se[j])
        if not se > 0 or not math.isfinite(se):
            return 0.0 if b > 0 and se == 0 else 1.0
        return _t_sf(b / se, self.df)


def _regress(x_cols, y):
    """OLS of y on an intercept and ``x_cols``, winsorized once at 3 robust sd."""
    design = np.column_stack([np.ones(y.size)] + list(x_cols))
    k = design.shape[1]
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    resid = y - design @ beta
    s = _robust_sd(resid)
    if s > 0:
        # Spikes (a GC pause, a logging hiccup) must not drive the slope.
        fit = design @ beta
        y = np.clip(y, fit - 3 * s, fit + 3 * s)
        beta = np.linalg.lstsq(design, y, rcond=None)[0]
        resid = y - design @ beta
    dof = max(y.size - k, 1)
    sigma2 = float(resid @ resid) / dof
    # An exact fit leaves only rounding noise, whose "autocorrelation" means nothing.
    exact = sigma2 <= 1e-20 * max(float(np.mean(y * y)), 1e-300)
    inflation = 1.0 if exact else _variance_inflation(resid)
    try:
        cov = np.linalg.inv(design.T @ design)
        se = np.sqrt(np.maximum(np.diag(cov), 0.0) * sigma2 * inflation)
    except np.linalg.LinAlgError:
        se = np.full(k, math.inf)
    return _Regression(beta, se, max(1.0, dof / inflation), resid, sigma2, inflation)


@dataclasses.dataclass
class _Analysis:
    """What the fits say about the analysed points, in the user's unit and steps."""

    t_warmup: float
    w_idx: int
    model: str            # "hinge" (flat, then linear) or "saturating" (plateau approach + linear)
    t_onset: float
    t_end: float
    level: float          # fitted value at onset
    slope: float          # per step
    slope_se: float
    df: float
    p: float
    resid_sd: float
    predict: object       # steps -> fitted values, for residual noise on raw samples
    line: tuple           # (level at warm-up end, slope, se, df) over the post-warm-up window
    tail: tuple | None    # (slope, se, df) over the last TAIL_FRACTION of the growth window
    step: dict | None     # one-step explanation of the growth window, see _step_test
    filling: tuple | None  # (slope, se, df) left beyond a filling cache, for "no_leak"


def _analyse(t, y):
    """Warm-up cut, growth model (hinge or saturating), tail and step checks."""
    t0, span = float(t[0]), float(t[-1] - t[0])
    span = span if span > 0 else 1.0
    center = float(np.median(y))
    yscale = _robust_sd(y - center) or float(np.std(y)) or 1.0
    # Everything below works on steps in [0, 1] and values in robust-sd units.
    ts, ys = (t - t0) / span, (y - center) / yscale
    to_slope = yscale / span

    w = _warmup_end(ts, ys)
    tw, yw = ts[w:], ys[w:]
    mw = tw.size
    min_window = max(MIN_WINDOW_POINTS, math.ceil(MIN_WINDOW_SHARE * mw))
    last_c = max(0, mw - min_window)
    cands = np.unique(np.linspace(0, last_c, min(ONSET_CANDIDATES, last_c + 1)).astype(int))
    rss = _hinge_rss(tw, yw, cands)
    # Ties (an exact line fits with any corner at its start) go to the earliest onset.
    best = int(np.flatnonzero(rss <= rss.min() + 1e-12 * (float(yw @ yw) + 1e-300))[0])
    c_rel = int(cands[best])
    hinge = _regress([np.maximum(0.0, tw - tw[c_rel])], yw)
    line = _regress([tw - tw[0]], yw)

    # A filling cache (line + A*(1 - exp(-x/tau))) replaces the hinge when it
    # explains the data clearly better. The whole series, warm-up included, is
    # tried first: the warm-up cut may have thrown away the fast early part of
    # a slowly filling cache, the very evidence that it slows down.
    # A hinge that already fits exactly leaves nothing for a curve to explain.
    exact = float(rss[best]) <= 1e-12 * float(yw @ yw) + 1e-300
    sat = _whole_saturation(ts, ys, w, hinge) if w > 0 and not exact else None
    if sat is not None:
        start, filling = 0, sat[3]
    elif exact:
        sat = None
    else:
        sat = _saturation(tw, yw, 0.5)
        start = w
        if sat is not None and (float(rss[best]) - sat[1]
                                < SATURATION_PENALTY * sat[2].sigma2 * sat[2].inflation):
            sat = None
        if sat is not None:
            filling = (float(sat[2].beta[1]), float(sat[2].se[1]), sat[2].df)
    tg, yg = ts, ys
    if sat is not None:
        tau, _, fit = sat[:3]
        filling = (filling[0] * to_slope, filling[1] * to_slope, filling[2])
        model = "saturating"
        a, b, amp = (float(v) for v in fit.beta)
        ts0 = float(ts[start])
        # The tail and step checks look at what is left once the filling is removed.
        yg = ys - amp * (1 - np.exp(-np.maximum(ts - ts0, 0.0) / tau))

        def predict(steps):
            x = (steps - t0) / span - ts0
            xp = np.maximum(x, 0.0)
            return center + yscale * (a + b * x + amp * (1 - np.exp(-xp / tau)))
    else:
        start, model, fit, filling = w + c_rel, "hinge", hinge, None
        a, b = (float(v) for v in fit.beta)
        tc = float(tw[c_rel])

        def predict(steps):
            return center + yscale * (a + b * np.maximum(0.0, (steps - t0) / span - tc))
    slope = float(fit.beta[1]) * to_slope
    t_onset, t_end = float(t[start]), float(t[-1])
    # The chart's trend line ends on the fitted end value and has the leak's slope.
    level = float(predict(np.array([t_end]))[0]) - slope * (t_end - t_onset)

    tg, yg = tg[start:], yg[start:]
    tail = _tail_slope(tg, yg, fit)
    if tail is not None:
        tail = (tail[0] * to_slope, tail[1] * to_slope, tail[2])
    step = _step_test(tg, yg)
    if step is not None:
        step.update(height=step["height"] * yscale, height_se=step["height_se"] * yscale,
                    t_step=t0 + step["t_step"] * span, after_slope=step["after_slope"] * to_slope,
                    after_se=step["after_se"] * to_slope)
    return _Analysis(
        t_warmup=float(t[w]), w_idx=w, model=model,
        t_onset=t_onset, t_end=t_end, level=level, slope=slope,
        slope_se=float(fit.se[1]) * to_slope, df=fit.df, p=fit.p_positive(1),
        resid_sd=_robust_sd(fit.resid) * yscale, predict=predict,
        line=(center + float(line.beta[0]) * yscale, float(line.beta[1]) * to_slope,
              float(line.se[1]) * to_slope, line.df),
        tail=tail, step=step, filling=filling)


def _tail_slope(t, y, fit):
    """Slope over the last TAIL_FRACTION of the growth window (at least 5 points).

    Uses the whole window's noise level and autocorrelation, which the tail
    alone is too short to estimate. Returns (slope, se, df) or None.
    """
    if t.size < 8:
        return None
    in_tail = t >= t[0] + (1 - TAIL_FRACTION) * (t[-1] - t[0])
    in_tail[-5:] = True
    tt, yt = t[in_tail], y[in_tail]
    sxx = float(np.sum((tt - tt.mean()) ** 2))
    if sxx <= 0:
        return None
    slope = float(np.sum((tt - tt.mean()) * (yt - yt.mean()))) / sxx
    se = math.sqrt(fit.sigma2 * fit.inflation / sxx)
    return slope, se, max(1.0, (tt.size - 2) / fit.inflation)


def _whole_saturation(ts, ys, w, hinge):
    """The whole series, warm-up included, read as one filling cache plus a line.

    Fits y = a + b*x + A*(1 - exp(-x/tau)) for a grid of tau. The time constant
    is poorly determined and trades off against the slope b, so among the tau
    that fit about as well as the best, the one least favourable to a leak
    (smallest t statistic of b) is kept. Used only when the series clearly is
    such a curve: a significant filling term, and residuals as small as the
    hinge's after the warm-up cut. Returns (tau, rss, regression, (slope, se,
    df) for the plausible tau that leaves the most growth), or None.
    """
    m = ys.size
    if m < 12:
        return None
    x = ts - ts[0]
    coarse = np.geomspace(max(1.0 / m, 1.0 / 500), 0.3, 2 * SATURATION_TAUS)
    fits = _filling_fits(x, ys, coarse)
    if fits is None:
        return None
    # The coarse grid steps by ~20% in tau; a large cache fitted with a tau that
    # is off by that much leaves a misfit the slope would absorb. Refine.
    near = float(coarse[int(np.argmin(fits[3]))])
    fine = _filling_fits(x, ys, np.geomspace(near / 1.25, near * 1.25, SATURATION_TAUS))
    if fine is not None:
        fits = tuple(np.concatenate([c, f]) for c, f in zip(fits, fine))
    taus, design, beta, rss, resid, inflation, se = fits
    best = int(np.argmin(rss))
    hinge_var = float(np.mean(hinge.resid ** 2))
    keep = ((rss <= rss[best] * (1 + 4 * inflation[best] / (m - 3)))
            & (beta[:, 2] > 4 * se[:, 2])
            & (rss / m <= 1.3 * hinge_var)
            & (np.mean(resid[:, w:] ** 2, axis=1) <= 1.15 * hinge_var))
    if not np.any(keep):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        t_stat = np.where(se[:, 1] > 0, beta[:, 1] / se[:, 1], np.inf)
    pick = int(np.argmin(np.where(keep, t_stat, np.inf)))
    # For a "no_leak" claim the opposite tau is the cautious one: the plausible
    # tau that leaves the most growth.
    worst = int(np.argmax(np.where(keep, beta[:, 1] + 2 * se[:, 1], -np.inf)))
    bound = (float(beta[worst, 1]), float(se[worst, 1]),
             max(1.0, (m - 3) / float(inflation[worst])))
    return float(taus[pick]), float(rss[pick]), _regress([x, design[pick, :, 2]], ys), bound


def _filling_fits(x, ys, taus):
    """Least squares of y on [1, x, 1 - exp(-x/tau)] for each tau, vectorised.

    Returns (taus, design, beta, rss, resid, inflation, se) or None.
    """
    m = ys.size
    design = np.stack(np.broadcast_arrays(
        np.ones(m)[None, :], x[None, :], 1.0 - np.exp(-x[None, :] / taus[:, None])), axis=2)
    xtx = np.einsum("tmi,tmj->tij", design, design)
    try:
        inv = np.linalg.inv(xtx)
    except np.linalg.LinAlgError:
        return None
    beta = np.einsum("tij,tj->ti", inv, np.einsum("tmi,m->ti", design, ys))
    resid = ys[None, :] - np.einsum("tmi,ti->tm", design, beta)
    rss = np.einsum("tm,tm->t", resid, resid)
    r1 = np.einsum("tm,tm->t", resid[:, 1:], resid[:, :-1]) / np.maximum(rss, 1e-300)
    rho = np.clip(r1 + (1 + 3 * np.maximum(r1, 0.0)) / m, 0.0, 0.995)
    inflation = (1 + rho) / (1 - rho)
    se = np.sqrt(np.maximum(np.einsum("tii->ti", inv), 0.0)
                 * (rss / (m - 3) * inflation)[:, None])
    return taus, design, beta, rss, resid, inflation, se


def _warmup_end(ts, ys):
    """Index where the warm-up ends: MSER with a linear fit, within the first half.

    MSER picks the cut d minimising RSS(line on d..end) / (points left)^2: cutting
    pays off only while the cut points fit much worse than the rest.
    """
    m = ys.size
    if m < 12:
        return 0
    rev = slice(None, None, -1)
    s0 = np.arange(m, 0, -1, dtype=np.float64)
    st = np.cumsum(ts[rev])[rev]
    sy = np.cumsum(ys[rev])[rev]
    stt = np.cumsum((ts * ts)[rev])[rev]
    sty = np.cumsum((ts * ys)[rev])[rev]
    syy = np.cumsum((ys * ys)[rev])[rev]
    dmax = min(m // 2, m - 8)
    s0, st, sy, stt, sty, syy = (v[: dmax + 1] for v in (s0, st, sy, stt, sty, syy))
    ctt = stt - st * st / s0
    cty = sty - st * sy / s0
    cyy = syy - sy * sy / s0
    with np.errstate(divide="ignore", invalid="ignore"):
        rss = np.where(ctt > 0, cyy - cty * cty / np.where(ctt > 0, ctt, 1.0), cyy)
    # Below rounding error, a fit is exact: an exact line fits every cut, and
    # the tie goes to the smallest cut.
    rss = np.where(rss > 1e-12 * float(cyy[0]), rss, 0.0)
    return int(np.argmin(rss / (s0 * s0)))


def _hinge_rss(tw, yw, cands):
    """RSS of y = a + b*max(0, t - t_c) for each candidate onset index c."""
    x = np.maximum(0.0, tw[None, :] - tw[cands][:, None])
    xc = x - x.mean(axis=1, keepdims=True)
    yc = yw - yw.mean()
    sxx = np.einsum("ij,ij->i", xc, xc)
    sxy = xc @ yc
    return float(yc @ yc) - np.where(sxx > 0, sxy * sxy / np.where(sxx > 0, sxx, 1.0), 0.0)


def _saturation(tw, yw, tau_max):
    """Best line + plateau approach, y = a + b*x + A*(1 - exp(-x/tau)) with A > 0.

    A cache that fills slows down until it stops; a leak keeps its rate. The
    growth that remains once the filling is accounted for is b.
    ``tau_max`` bounds tau as a share of the window: a longer time constant is
    indistinguishable from a line within the window.
    Returns (tau, rss, regression) or None when no concave fit exists.
    """
    m = yw.size
    x = tw - tw[0]
    length = float(x[-1])
    if m < 12 or length <= 0:
        return None
    taus = np.geomspace(max(length / m, length / 500), tau_max * length, SATURATION_TAUS)
    g = 1.0 - np.exp(-x[None, :] / taus[:, None])
    xc = x - x.mean()
    sxx = float(xc @ xc)
    yc = yw - yw.mean()
    yr = yc - (float(xc @ yc) / sxx) * xc
    gc = g - g.mean(axis=1, keepdims=True)
    gr = gc - ((gc @ xc) / sxx)[:, None] * xc[None, :]
    sgg = np.einsum("ij,ij->i", gr, gr)
    sgy = gr @ yr
    ok = (sgg > 1e-12) & (sgy > 0)
    if not np.any(ok):
        return None
    rss = np.where(ok, float(yr @ yr) - sgy * sgy / np.where(ok, sgg, 1.0), np.inf)
    best = int(np.argmin(rss))
    return float(taus[best]), float(rss[best]), _regress([x, g[best]], yw)


def _step_test(t, y):
    """Does one step explain the growth window better than a line?

    Compares a flat-step-flat fit with a line (same number of parameters), and
    measures the slope that remains when a line and one step are fitted together.
    Returns None when the window is too short to tell, else a dict in scaled units.
    """
    m = y.size
    if m < 6:
        return None
    cands = np.unique(np.linspace(2, m - 2, min(ONSET_CANDIDATES, m - 3)).astype(int))
    yc = y - y.mean()
    csum = np.cumsum(yc)
    left = csum[cands - 1]
    # Step-only RSS per candidate: total minus what the two segment means explain.
    explained = left * left / cands + left * left / (m - cands)
    rss_step = float(yc @ yc) - explained
    s_best = int(cands[int(np.argmin(rss_step))])
    xc = t - t.mean()
    sxx = float(xc @ xc)
    rss_line = float(yc @ yc) - (float(xc @ yc) ** 2 / sxx if sxx > 0 else 0.0)

    # Line + step: the step placed where it takes the most slope away from the line.
    z = (np.arange(m)[None, :] >= cands[:, None]).astype(np.float64)
    zc = z - z.mean(axis=1, keepdims=True)
    zr = zc - ((zc @ xc) / sxx)[:, None] * xc[None, :] if sxx > 0 else zc
    yr = yc - (float(xc @ yc) / sxx) * xc if sxx > 0 else yc
    szz = np.einsum("ij,ij->i", zr, zr)
    gain = np.where(szz > 0, (zr @ yr) ** 2 / np.where(szz > 0, szz, 1.0), 0.0)
    s_joint = int(cands[int(np.argmax(gain))])
    joint = _regress([t - t[0], (np.arange(m) >= s_joint).astype(np.float64)], y)
    only = _regress([(np.arange(m) >= s_best).astype(np.float64)], y)
    return {
        "step_better": bool(float(np.min(rss_step)) < rss_line),
        "height": float(only.beta[1]), "height_se": float(only.se[1]),
        "t_step": float(t[s_best]),
        "after_slope": float(joint.beta[1]), "after_se": float(joint.se[1]),
        "after_df": joint.df, "after_p": joint.p_positive(1),
    }


def _variance_inflation(resid):
    """How much autocorrelation inflates the variance of a fitted trend (>= 1).

    The larger of two estimates of the integrated autocorrelation time:
    (1 + rho) / (1 - rho) from the lag-1 autocorrelation (AR(1)), and Geyer's
    initial positive sequence over all lags. The second catches persistent
    noise hidden under white jitter (a slowly wandering allocator level plus
    per-sample noise), whose lag-1 correlation looks modest.
    """
    rho = _ar1(resid)
    inflation = (1 + rho) / (1 - rho)
    m = resid.size
    if m < 12:
        return inflation
    x = resid - resid.mean()
    spectrum = np.fft.rfft(x, 2 * m)
    acov = np.fft.irfft(spectrum * np.conj(spectrum))[: m // 2]
    if acov[0] <= 0:
        return inflation
    r = acov / acov[0]
    pairs = r[0:r.size - 1:2] + r[1:r.size:2]
    stop = np.nonzero(pairs <= 0)[0]
    pairs = pairs[: stop[0]] if stop.size else pairs
    # Geyer's monotone sequence: a pair sum never exceeds the previous one.
    tau = -1.0 + 2.0 * float(np.sum(np.minimum.accumulate(pairs)))
    return max(inflation, min(tau, float(m)))


def _ar1(resid):
    """Lag-1 autocorrelation of residuals, bias-corrected, in [0, 0.995]."""
    m = resid.size
    denom = float(resid @ resid)
    if m < 4 or denom <= 0:
        return 0.0
    r1 = float(resid[1:] @ resid[:-1]) / denom
    if m >= 12:
        # Fitted residuals understate autocorrelation by about (1 + 3*rho)/m (Kendall).
        r1 += (1 + 3 * max(r1, 0.0)) / m
    # One standard error more: on short series the estimate is poor, and too
    # little autocorrelation makes every interval too narrow, both ways.
    r1 += math.sqrt(max(1.0 - r1 * r1, 0.0) / m)
    return min(max(r1, 0.0), 0.995)


def _robust_sd(x):
    if x.size == 0:
        return 0.0
    return _MAD_TO_SD * float(np.median(np.abs(x - np.median(x))))


def _diff_noise(y):
    """Robust sd of sample-to-sample changes / sqrt(2): the noise of white jitter.

    Blind to slow wander, but also to ramps and resets, which is what a
    sawtooth's noise estimate needs. Uses at most ~100,000 pairs.
    """
    stride = max(1, y.size // 100_000)
    first = y[0:y.size - 1:stride]
    d = y[1::stride][: first.size] - first
    return _robust_sd(d) / math.sqrt(2.0)


def _raw_noise(t, y, an):
    """Robust sd of raw samples around the fitted model, on a strided subsample."""
    start = int(np.searchsorted(t, an.t_warmup))
    tr, yr = t[start:], y[start:]
    stride = max(1, tr.size // NOISE_SUBSAMPLE)
    tr, yr = tr[::stride], yr[::stride]
    return _robust_sd(yr - an.predict(tr))


def _steps_per_second(t, w, t_from):
    """Training speed over the analysed window: median of per-interval step rates."""
    if w is None:
        return None
    start = int(np.searchsorted(t, t_from))
    stride = max(1, (t.size - start) // 2000)
    tt, ww = t[start::stride], w[start::stride]
    ok = np.isfinite(ww)
    tt, ww = tt[ok], ww[ok]
    if tt.size < 2:
        return None
    dt, dw = np.diff(tt), np.diff(ww)
    good = dw > 0
    if not np.any(good):
        return None
    # Median, so that pauses and restarts (huge gaps) do not slow the estimate.
    rate = float(np.median(dt[good] / dw[good]))
    return rate if rate > 0 and math.isfinite(rate) else None


# --------------------------------------------------------------------------- verdict


def _decide(an, n, dropped, unit, noise, noise_floor, aliasing, sps, available_bytes,
            n_resets, steps):
    sawtooth = n_resets > 0
    window = an.t_end - an.t_onset
    growth = an.slope * window
    growth_se = an.slope_se * window
    # Aliasing raises the bar for a leak but never lowers the bar for "no_leak":
    # coarse sampling hides a leak as easily as it fakes one.
    material = max(MATERIAL_NOISE_SD * noise_floor, aliasing)
    no_leak_bound = NO_LEAK_NOISE_SD * noise_floor

    significant = an.slope > 0 and an.p < ALPHA_LEAK
    is_material = growth >= material
    # Without a tail to look at, persistence cannot be checked: no leak verdict.
    stopped, weak_tail = False, an.tail is None
    if an.tail is not None:
        t_slope, t_se, t_df = an.tail
        stopped = t_slope + _t_ppf(0.99, t_df) * t_se < STOPPED_SLOPE_RATIO * an.slope
        weak_tail = t_slope < TAIL_MIN_RATIO * an.slope
    st = an.step
    step_better = st is not None and st["step_better"]
    survives_step = not step_better or (
        st["after_slope"] > 0 and st["after_p"] < ALPHA_AFTER_STEP
        and st["after_slope"] * window >= 0.5 * material)
    p_value = max(an.p, st["after_p"]) if step_better else an.p

    samples_note = _samples_note(n, dropped)
    common = {"samples": n, "noise": noise, "unit": unit, "dropped_samples": dropped}

    if significant and is_material and not stopped and not weak_tail and survives_step:
        t975 = _t_ppf(0.975, an.df)
        lo, hi = an.slope - t975 * an.slope_se, an.slope + t975 * an.slope_se
        conf = min(1.0 - p_value, _t_cdf((growth - material) / max(growth_se, 1e-300), an.df))
        sec_ex = steps_ex = None
        if unit == "bytes" and available_bytes is not None:
            avail = _as_float(available_bytes)
            if math.isfinite(avail) and avail >= 0:
                steps_ex = avail / an.slope
                sec_ex = steps_ex / sps if sps else None
        where = " across buffer resets" if sawtooth else ""
        if an.model == "saturating":
            where += " (beyond a cache filling up)"
        reason = (f"{'floor ' if sawtooth else ''}grows {_fmt(an.slope, unit)}/step "
                  f"(95% CI {_fmt_range(lo, hi, unit)}) over the last "
                  f"{_samples_since(steps, an.t_onset)} of {n} samples since step "
                  f"{int(an.t_onset)}{where}{samples_note}")
        return TrendResult(
            verdict="leak", confidence=_clip01(conf), slope_per_step=an.slope,
            slope_ci=(lo, hi), slope_per_hour=an.slope * sps * 3600.0 if sps else None,
            p_value=p_value, onset_step=int(an.t_onset), warmup_end_step=_warmup_step(an),
            total_growth=growth, seconds_to_exhaustion=sec_ex, steps_to_exhaustion=steps_ex,
            fit=_fit_dict(an.t_onset, an.t_end, an.level, an.slope, lo, hi),
            reason=reason, shape=_LEAK_SHAPES[(sawtooth, an.model)], **common)

    # Not a leak. Say "no_leak" only when some explanation bounds the ongoing
    # growth below the noise; otherwise the data cannot tell.
    l_level, l_slope, l_se, l_df = an.line
    line_window = an.t_end - an.t_warmup
    # Significant growth that no structure explains is never called "no_leak",
    # however small against the noise: the noise may be the thing that is wrong.
    explanations = {} if significant else {"flat": (l_slope, l_se, l_df, line_window)}
    if an.filling is not None:
        explanations["saturating"] = an.filling + (window,)
    if an.tail is not None and stopped:
        explanations["stopped"] = an.tail + (window,)
    if step_better and st["height"] > 4 * st["height_se"]:
        explanations["step"] = (st["after_slope"], st["after_se"], st["after_df"], window)
    bounded, conf_clean = {}, 0.0
    for kind, (b, se, df, span) in explanations.items():
        upper = (b + _t_ppf(0.95, df) * se) * span
        conf = _t_cdf((no_leak_bound - b * span) / max(se * span, 1e-300), df)
        conf_clean = max(conf_clean, conf)
        if upper < no_leak_bound and df >= MIN_EFFECTIVE_SAMPLES:
            bounded[kind] = (upper, conf)
    lt = _t_ppf(0.975, l_df)
    line_lo, line_hi = l_slope - lt * l_se, l_slope + lt * l_se
    base = dict(slope_per_step=l_slope, slope_ci=(line_lo, line_hi),
                slope_per_hour=l_slope * sps * 3600.0 if sps else None,
                onset_step=None, warmup_end_step=_warmup_step(an),
                total_growth=l_slope * line_window, seconds_to_exhaustion=None,
                steps_to_exhaustion=None,
                fit=_fit_dict(an.t_warmup, an.t_end, l_level, l_slope, line_lo, line_hi),
                **common)

    # The most specific explanation first; a step smaller than the bar for a
    # leak is noise to the reader, not news.
    big_step = step_better and st["height"] >= material
    order = ("step", "saturating", "stopped", "flat") if big_step else (
        "saturating", "stopped", "flat", "step")
    for kind in order:
        if kind not in bounded:
            continue
        upper, conf = bounded[kind]
        upper_txt = _fmt(max(upper, 0.0), unit)
        if kind == "step":
            p_value = max(p_value, st["after_p"])
            reason = (f"one-off step of {_fmt(st['height'], unit)} near step "
                      f"{int(st['t_step'])}; at most {upper_txt} growth besides it")
        elif kind == "saturating":
            reason = (f"growth slows to a plateau (a cache or buffer filling up); "
                      f"at most {upper_txt} ongoing growth over the last "
                      f"{_samples_since(steps, an.t_onset)} samples")
        elif kind == "stopped":
            t_slope, t_se, t_df = an.tail
            p_value = max(p_value, _t_sf(t_slope / t_se, t_df) if t_se > 0 else 1.0)
            reason = (f"grew until about step {int(an.t_end - TAIL_FRACTION * window)}, "
                      f"then stopped: at most {upper_txt} more over the last "
                      f"{_samples_since(steps, an.t_end - TAIL_FRACTION * window)} samples")
        elif sawtooth:
            reason = (f"a buffer that fills and is cleared ({n_resets} resets); its floor "
                      f"grows at most {upper_txt} over the run")
        else:
            reason = (f"no material growth: at most {upper_txt} over the last "
                      f"{_samples_since(steps, an.t_warmup)} of {n} samples (noise "
                      f"{_fmt(noise, unit)})")
        shape = "resets" if sawtooth and kind == "flat" else _CLEAN_SHAPES[kind]
        return TrendResult(verdict="no_leak", confidence=_clip01(conf), p_value=p_value,
                           reason=reason + samples_note, shape=shape, **base)

    conf_leak = _t_cdf((growth - material) / max(growth_se, 1e-300), an.df)
    if significant and is_material and an.tail is None:
        why = "too few points since the onset to check that growth persists"
    elif significant and is_material and (stopped or weak_tail):
        why = "growth may have stopped near the end"
    elif significant and is_material and not survives_step:
        why = "the growth is mostly one step"
    elif an.model == "saturating":
        why = "growth is slowing but may not stop"
    elif significant:
        why = "growth is small against the noise"
    else:
        why = "too noisy to tell"
    reason = (f"{why}: growth of {_fmt_range(line_lo * line_window, line_hi * line_window, unit)}"
              f" (95% CI) over the last {_samples_since(steps, an.t_warmup)} of {n} samples, "
              f"noise {_fmt(noise, unit)}{samples_note}")
    return TrendResult(verdict="inconclusive",
                       confidence=_clip01(1.0 - max(conf_leak, conf_clean)),
                       p_value=p_value, reason=reason, shape="unclear", **base)


def _as_float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _warmup_step(an):
    return int(an.t_warmup) if an.w_idx > 0 else None


def _fit_dict(t_start, t_end, level, slope, lo, hi):
    span = t_end - t_start
    return {"start_step": int(t_start), "end_step": int(t_end), "start_value": level,
            "end_value": level + slope * span, "ci_low_end": level + lo * span,
            "ci_high_end": level + hi * span}


def _samples_since(steps, t_from):
    return int(steps.size - np.searchsorted(steps, t_from))


def _samples_note(n, dropped):
    if not dropped:
        return ""
    return f" ({dropped} non-finite sample{'s' if dropped != 1 else ''} dropped)"


def _too_few(n, dropped, unit, min_samples):
    need = max(int(min_samples), 3)
    return TrendResult(
        verdict="inconclusive", confidence=1.0, slope_per_step=math.nan,
        slope_ci=(math.nan, math.nan), slope_per_hour=None, p_value=1.0, onset_step=None,
        warmup_end_step=None, samples=n, noise=math.nan, total_growth=math.nan,
        seconds_to_exhaustion=None, steps_to_exhaustion=None, fit={},
        reason=f"only {n} finite sample{'s' if n != 1 else ''}, need at least {need}"
               + _samples_note(n, dropped),
        unit=unit, dropped_samples=dropped, shape="too_few")


def _fmt_range(lo, hi, unit):
    """"3.8-4.4 KiB" when both ends share a suffix, else "900 B-1.1 KiB"."""
    a, b = _fmt(lo, unit), _fmt(hi, unit)
    a_num, _, a_suffix = a.partition(" ")
    b_num, _, b_suffix = b.partition(" ")
    if a_suffix == b_suffix and a_suffix:
        return f"{a_num} to {b_num} {a_suffix}" if lo < 0 else f"{a_num}-{b_num} {a_suffix}"
    return f"{a} to {b}"


def _fmt(x, unit):
    """Human number in the unit: binary prefixes for bytes, 3 significant digits otherwise."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if abs(x) < 1e-9:
        x = 0.0  # rounding noise of an exact fit, not a number to show
    if unit == "bytes":
        mag = abs(x)
        for div, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if mag >= div:
                return f"{x / div:.3g} {name}"
        return f"{x:.3g} B"
    return f"{x:.3g} {unit}" if unit else f"{x:.3g}"


def _clip01(x):
    return float(min(1.0, max(0.0, x))) if math.isfinite(x) else 0.0


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


# --------------------------------------------------------------------------- t distribution
# scipy is not a dependency; these are accurate to ~1e-10, far beyond what a verdict needs.


def _t_sf(t, df):
    """P(T > t) for Student's t with (possibly fractional) df."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > 1e5:
        return 1.0 - _NORMAL.cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _t_cdf(t, df):
    return 1.0 - _t_sf(t, df)


def _t_ppf(q, df):
    """Quantile of Student's t: Cornish-Fisher start, then safeguarded Newton steps."""
    z = _NORMAL.inv_cdf(q)
    if df > 1e5:
        return z
    if q < 0.5:
        return -_t_ppf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    # Bracket [lo, hi] keeps Newton from running away on heavy tails (small df).
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < q and hi < 1e12:
        hi *= 4.0
    x = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)
    x = min(max(x, lo), hi)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(60):
        err = _t_cdf(x, df) - q
        if err > 0:
            hi = x
        else:
            lo = x
        pdf = math.exp(logc - (df + 1) / 2 * math.log1p(x * x / df))
        nxt = x - err / pdf if pdf > 0 else (lo + hi) / 2
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2
        if abs(nxt - x) < 1e-10 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return x


def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b) by Lentz's continued fraction."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def _betacf(a, b, x):
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h
