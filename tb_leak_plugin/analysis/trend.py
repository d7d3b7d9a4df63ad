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
functions are implemented in `tb_leak_plugin.analysis._stats`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_leak_plugin.analysis._shapes import (  # re-exported: tuning knobs of the method
    MIN_WINDOW_POINTS,
    MIN_WINDOW_SHARE,
    ONSET_CANDIDATES,
    RESET_DROP_SD,
    SATURATION_PENALTY,
    SATURATION_TAUS,
    TAIL_FRACTION,
    analyse,
    desawtooth,
    find_resets,
)
from tb_leak_plugin.analysis._stats import diff_noise, median, robust_sd, t_cdf, t_ppf, t_sf
from tb_leak_plugin.units import format_quantity

__all__ = [
    "TrendResult", "assess_series",
    "MAX_BLOCKS", "ALPHA_LEAK", "ALPHA_AFTER_STEP", "MATERIAL_NOISE_SD", "NO_LEAK_NOISE_SD",
    "TAIL_FRACTION", "STOPPED_SLOPE_RATIO", "TAIL_MIN_RATIO", "RESET_DROP_SD",
    "ONSET_CANDIDATES", "MIN_WINDOW_SHARE", "MIN_WINDOW_POINTS", "MIN_EFFECTIVE_SAMPLES",
    "SATURATION_PENALTY", "SATURATION_TAUS", "NOISE_SUBSAMPLE", "MIN_SAMPLES", "SMALL_SERIES", "COUNT_SMALL_SERIES", "SMALL_LONG_INTERVAL", "SMALL_SAME_RATE",
]

# Long series are reduced to at most this many block medians (2x before blocking).
MAX_BLOCKS = 512
# Significance of the growth slope needed for a leak (one-sided). Strict, because
# the onset is searched for, and because false alarms cost users' trust.
ALPHA_LEAK = 1e-4
# Significance of the growth left once the largest single step is allowed for.
ALPHA_AFTER_STEP = 1e-3
# Growth over the window must be at least this many noise sd to be called a leak.
MATERIAL_NOISE_SD = 2.0
# A count (objects, functions, traces) must grow by more than this over the
# window to be a leak: whole units, so one or two increments are never one.
MIN_COUNT_GROWTH = 2.5
# "no_leak" needs the upper 95% bound of ongoing growth below this many noise sd.
NO_LEAK_NOISE_SD = 3.0
# Growth has "stopped" when the tail slope is confidently below this share of the slope.
STOPPED_SLOPE_RATIO = 0.5
# A leak's tail slope estimate must be at least this share of the whole slope.
TAIL_MIN_RATIO = 0.2
# Fewer effective (independent) samples than this cannot bound growth for "no_leak".
MIN_EFFECTIVE_SAMPLES = 8
# Raw points used to estimate the noise of long series.
NOISE_SUBSAMPLE = 20_000
# A memory series growing unevenly (in steps) is a leak when its lower 95%
# bound of growth over the window is at least this share of its level.
STAIRCASE_MIN_GROWTH = 0.02
# A point further than this many sd of the point-to-point noise from both its
# neighbours, which agree with each other, is an isolated spike (a bad
# reading), left out so that one point cannot flip a verdict.
SPIKE_NOISE_SD = 25.0
# Fewer finite samples than this are never judged.
MIN_SAMPLES = 4
# Series shorter than this are judged by `_decide_small` (the warm-up, onset
# and tail searches need more points).
SMALL_SERIES = 12
# A count series (objects, tensors, traces: heap-walk points) that the full
# analysis leaves inconclusive is also judged by the few-sample test up to
# this many samples.
COUNT_SMALL_SERIES = 24
# A small series leaks only if its growth between samples stays at least this
# share of its average rate in each of the last intervals (a filling cache
# slows down; a leak keeps its pace).
SMALL_STEADY_RATIO = 0.25
# When the last interval between samples covers more than this share of the
# fitted span, steady growth needs every one of the last intervals' rates
# within SMALL_SAME_RATE of the fitted rate.
SMALL_LONG_INTERVAL = 0.5
SMALL_SAME_RATE = 0.1

# TrendResult.shape: which explanation the verdict rests on.
_LEAK_SHAPES = {(False, "hinge"): "growth", (False, "saturating"): "growth_beyond_filling",
                (True, "hinge"): "growth_under_resets", (True, "saturating"): "growth_under_resets"}
_CLEAN_SHAPES = {"flat": "flat", "step": "step", "saturating": "filling", "stopped": "plateau"}


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
                  min_samples=MIN_SAMPLES, final_release=False) -> TrendResult:
    """Decide whether one series grows like a leak.

    Args:
      steps: training steps (integers; any order, repeats allowed: the last wins).
      values: one value per step, in ``unit``; NaN/inf samples are dropped.
      wall_times: optional seconds (e.g. since the epoch), one per step; gives
        ``slope_per_hour`` and ``seconds_to_exhaustion``.
      unit: the values' unit ("bytes", "objects", ...), used in ``reason``.
      available_bytes: for ``unit == "bytes"``, memory still free at the end of
        the series; gives the time and steps until a leak exhausts it.
      final_release: leave out a last sample that falls back most of the way
        to the start (see `_drop_final_release`); for counts that garbage
        collection does not move (live tensors, arrays, traces), and for
        object counts the analysis of the run shows alive at a full collection.
      min_samples: fewer finite samples than this give "inconclusive". Below
        ``SMALL_SERIES`` samples a simpler test decides (see `_decide_small`):
        how many samples a verdict needs follows from the noise, so an exact
        count that grows by the same amount between every sample is called
        on a handful, and a noisy one is not.

    Returns:
      A `TrendResult`. Never raises on numeric input of any length.
    """
    steps_f, values_f, walls_f, dropped = _prepare(steps, values, wall_times)
    steps_f, values_f, walls_f, spikes = _drop_spikes(steps_f, values_f, walls_f)
    if final_release:
        steps_f, values_f, walls_f, released = _drop_final_release(steps_f, values_f, walls_f)
        spikes += released
    n = int(values_f.size)
    if n < max(int(min_samples), 3):
        return _too_few(n, dropped, unit, min_samples, walls_f)
    if n < SMALL_SERIES:
        return _decide_small(steps_f, values_f, walls_f, dropped, unit, available_bytes, spikes)
    scale = float(np.max(np.abs(values_f)))
    if not scale < 1e150:
        # Squares of such values overflow; no memory series gets near this.
        result = _too_few(n, dropped, unit, min_samples)
        result.reason = f"values up to {scale:.3g} {unit} are too large to analyse"
        result.shape = "unclear"
        return result

    t_blk, y_blk = _aggregate_blocks(steps_f, values_f)
    resets = find_resets(y_blk)
    # One drop is a release (or a step down); two or more make a sawtooth.
    sawtooth = resets.size >= 2
    if sawtooth:
        t_an, y_an, ramp, cycle_noise = desawtooth(t_blk, y_blk, resets)
    else:
        t_an, y_an = t_blk, y_blk
    an = analyse(t_an, y_an)
    if an.t_end != steps_f[-1]:
        # Block steps are block middles; the trend runs to the last real step.
        an.t_end = float(steps_f[-1])
        an.level = float(an.predict(np.array([an.t_end]))[0]) - an.slope * (an.t_end - an.t_onset)

    # Noise in the user's unit: raw residuals around the fit.
    if sawtooth:
        noise = cycle_noise if t_blk.size == n else max(cycle_noise, diff_noise(values_f))
    elif t_an.size == n:
        noise = an.resid_sd
    else:
        noise = _raw_noise(steps_f, values_f, an)
    noise_floor = max(noise, 1e-9 * max(abs(float(median(y_an))), 1.0))
    aliasing = 0.0
    if sawtooth:
        # The reset happens somewhere between two samples, and where it falls
        # drifts from cycle to cycle when the sampling interval beats against
        # the period: the floor can wander by one ramp step with no leak at all.
        aliasing = max(0.0, ramp * float(median(np.diff(t_blk))))
    counts = unit != "bytes" and bool(np.all(values_f == np.round(values_f)))
    result = _decide(_Evidence(
        an=an, steps=steps_f, n=n, dropped=dropped, spikes=spikes, unit=unit, noise=noise,
        noise_floor=noise_floor, aliasing=aliasing, level=float(median(np.abs(values_f))),
        sps=_steps_per_second(steps_f, walls_f, an.t_onset), available_bytes=available_bytes,
        n_resets=resets.size if sawtooth else 0, counts=counts))
    if result.verdict == "inconclusive" and counts and n < COUNT_SMALL_SERIES:
        # A count sampled at a score of heap walks: the residuals' autocorrelation,
        # estimated from so few points, can leave one degree of freedom to a
        # line that misses no point by more than a few objects. The few-sample
        # test judges it on its own terms (growth between each of the last samples).
        small = _decide_small(steps_f, values_f, walls_f, dropped, unit, available_bytes, spikes)
        if small.verdict == "leak" and small.total_growth >= MIN_COUNT_GROWTH:
            return small
    return result


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


def _drop_spikes(t, y, w):
    """Leave out isolated spikes: a point far from both neighbours, which agree.

    A buffer reset or a step is a change of level (the neighbours disagree);
    a spike goes and comes back. Returns the arrays without spikes and their count.
    """
    if y.size < 5:
        return t, y, w, 0
    d = np.diff(y)
    scale = robust_sd(d) / math.sqrt(2.0)
    level = float(median(np.abs(y)))
    if not scale > 0:
        scale = 1e-3 * level if level > 0 else 0.0
    if not scale > 0:
        return t, y, w, 0
    bar = SPIKE_NOISE_SD * scale
    left, right = y[1:-1] - y[:-2], y[1:-1] - y[2:]
    across = np.abs(y[2:] - y[:-2])
    spike = (np.abs(left) > bar) & (np.abs(right) > bar) & (np.sign(left) == np.sign(right)) \
        & (across < 0.25 * np.minimum(np.abs(left), np.abs(right)))
    if not spike.any():
        return t, y, w, 0
    keep = np.ones(y.size, dtype=bool)
    keep[1:-1] = ~spike
    return t[keep], y[keep], (w[keep] if w is not None else None), int(np.count_nonzero(spike))


def _drop_final_release(t, y, w):
    """Leave out a last sample that falls back most of the way to the start.

    The monitor's last sample is taken at ``close()``, often after the
    training function returned and its locals (the list that leaked) were
    freed. What grew until then is still the loop's behaviour; the drop at
    the very end says nothing about a long run. Returns the arrays and 1 if
    the last sample was left out, else 0.
    """
    if y.size < 5:
        return t, y, w, 0
    grown = float(y[-2] - np.min(y[:-1]))
    drop = float(y[-2] - y[-1])
    steps_up = np.diff(y[:-1])
    rising = np.count_nonzero(steps_up > 0) >= 0.6 * steps_up.size
    if grown > 0 and drop > 0.5 * grown and rising:
        return t[:-1], y[:-1], (w[:-1] if w is not None else None), 1
    return t, y, w, 0


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


def _raw_noise(t, y, an):
    """Robust sd of raw samples around the fitted model, on a strided subsample."""
    start = int(np.searchsorted(t, an.t_warmup))
    tr, yr = t[start:], y[start:]
    stride = max(1, tr.size // NOISE_SUBSAMPLE)
    tr, yr = tr[::stride], yr[::stride]
    return robust_sd(yr - an.predict(tr))


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
    rate = float(median(dt[good] / dw[good]))
    return rate if rate > 0 and math.isfinite(rate) else None


# --------------------------------------------------------------------------- verdict


@dataclasses.dataclass
class _Evidence:
    """What a verdict on one (long enough) series rests on."""

    an: object               # the fitted shapes (``_shapes.Analysis``)
    steps: np.ndarray        # finite sample steps, sorted
    n: int                   # finite samples
    dropped: int             # non-finite samples left out
    spikes: int              # isolated spikes left out
    unit: str
    noise: float             # robust sd of samples around the fit, in ``unit``
    noise_floor: float       # noise, at least a rounding error of the level
    aliasing: float          # how far a sawtooth's floor can wander from sampling alone
    level: float             # median |value|
    sps: float | None        # training steps per second
    available_bytes: float | None
    n_resets: int            # sawtooth resets (0: no sawtooth)
    counts: bool = False     # whole numbers of things (not bytes): objects, functions, traces

    @property
    def window(self) -> float:
        return self.an.t_end - self.an.t_onset

    @property
    def common(self) -> dict:
        return {"samples": self.n, "noise": self.noise, "unit": self.unit, "dropped_samples": self.dropped}

    @property
    def note(self) -> str:
        return _samples_note(self.n, self.dropped, self.spikes)


@dataclasses.dataclass
class _Checks:
    """The tests a leak must pass, and the numbers they used."""

    growth: float            # fitted growth over the window
    growth_se: float
    material: float          # the bar growth must clear
    significant: bool
    is_material: bool
    stopped: bool            # the tail is confidently flatter than the slope
    weak_tail: bool          # the tail estimate is far below the slope (or missing)
    survives_step: bool      # growth is not better explained by one step
    step_better: bool
    staircase: bool          # memory growing in steps whose lower bound is material
    p_value: float

    @property
    def leaks(self) -> bool:
        steady = self.significant and self.is_material and not self.stopped and not self.weak_tail \
            and self.survives_step
        return steady or self.staircase


def _decide(ev: _Evidence) -> TrendResult:
    checks = _leak_checks(ev)
    if checks.leaks:
        return _leak_result(ev, checks)
    clean = _clean_result(ev, checks)
    if clean is not None:
        return clean
    return _inconclusive_result(ev, checks)


def _leak_checks(ev: _Evidence) -> _Checks:
    an = ev.an
    growth = an.slope * ev.window
    growth_se = an.slope_se * ev.window
    # Aliasing raises the bar for a leak but never lowers the bar for "no_leak":
    # coarse sampling hides a leak as easily as it fakes one.
    material = max(MATERIAL_NOISE_SD * ev.noise_floor, ev.aliasing)
    if ev.counts:
        # A count that went up once or twice (one more function traced at
        # the end of model.fit) is an event, not a leak.
        material = max(material, MIN_COUNT_GROWTH)
    significant = an.slope > 0 and an.p < ALPHA_LEAK
    # Without a tail to look at, persistence cannot be checked: no leak verdict.
    stopped, weak_tail = False, an.tail is None
    if an.tail is not None:
        t_slope, t_se, t_df = an.tail
        stopped = t_slope + t_ppf(0.99, t_df) * t_se < STOPPED_SLOPE_RATIO * an.slope
        weak_tail = t_slope < TAIL_MIN_RATIO * an.slope
    st = an.step
    step_better = st is not None and st["step_better"]
    survives_step = not step_better or (
        st["after_slope"] > 0 and st["after_p"] < ALPHA_AFTER_STEP
        and st["after_slope"] * ev.window >= 0.5 * material)
    p_value = max(an.p, st["after_p"]) if step_better else an.p
    # Memory that grows in steps (RSS maps memory a few MiB at a time): the
    # whole window's lower bound of growth, if it is a material share of the
    # level and the growth has not stopped, is a leak however uneven.
    l_level, l_slope, l_se, l_df = an.line
    line_window = an.t_end - an.t_warmup
    line_lo = l_slope - t_ppf(0.975, l_df) * l_se
    # The tail must still grow for sure, at a good share of the average pace.
    tail_grows = an.tail is not None and not stopped and not weak_tail and \
        an.tail[0] - t_ppf(0.99, an.tail[2]) * an.tail[1] > 0
    staircase = (ev.unit == "bytes" and tail_grows and line_lo > 0
                 and line_lo * line_window >= STAIRCASE_MIN_GROWTH * ev.level
                 and line_lo * line_window >= material)
    if staircase and not (significant and not stopped and not weak_tail and survives_step):
        p_value = t_sf(l_slope / l_se, l_df) if l_se > 0 else 0.0
    return _Checks(growth=growth, growth_se=growth_se, material=material, significant=significant,
                   is_material=growth >= material, stopped=stopped, weak_tail=weak_tail,
                   survives_step=survives_step, step_better=step_better, staircase=staircase,
                   p_value=p_value)


def _exhaustion(ev: _Evidence, slope: float):
    """(seconds, steps) until available memory runs out at ``slope`` bytes/step."""
    if ev.unit != "bytes" or ev.available_bytes is None or not slope > 0:
        return None, None
    avail = _as_float(ev.available_bytes)
    if not (math.isfinite(avail) and avail >= 0):
        return None, None
    steps_ex = avail / slope
    return (steps_ex / ev.sps if ev.sps else None), steps_ex


def _leak_result(ev: _Evidence, checks: _Checks) -> TrendResult:
    an, unit = ev.an, ev.unit
    sawtooth = ev.n_resets > 0
    if checks.staircase and not (checks.significant and checks.is_material and not checks.weak_tail
                                 and checks.survives_step):
        return _staircase_result(ev, checks)
    t975 = t_ppf(0.975, an.df)
    lo, hi = an.slope - t975 * an.slope_se, an.slope + t975 * an.slope_se
    conf = min(1.0 - checks.p_value,
               t_cdf((checks.growth - checks.material) / max(checks.growth_se, 1e-300), an.df))
    sec_ex, steps_ex = _exhaustion(ev, an.slope)
    where = " across buffer resets" if sawtooth else ""
    if an.model == "saturating":
        where += " (beyond a cache filling up)"
    reason = (f"{'floor ' if sawtooth else ''}grows {_fmt(an.slope, unit)}/step "
              f"(95% CI {_fmt_range(lo, hi, unit)}) over the last "
              f"{_samples_since(ev.steps, an.t_onset)} of {ev.n} samples since step "
              f"{int(an.t_onset)}{where}{ev.note}")
    return TrendResult(
        verdict="leak", confidence=_clip01(conf), slope_per_step=an.slope,
        slope_ci=(lo, hi), slope_per_hour=an.slope * ev.sps * 3600.0 if ev.sps else None,
        p_value=checks.p_value, onset_step=int(an.t_onset), warmup_end_step=_warmup_step(an),
        total_growth=checks.growth, seconds_to_exhaustion=sec_ex, steps_to_exhaustion=steps_ex,
        fit=_fit_dict(an.t_onset, an.t_end, an.level, an.slope, lo, hi),
        reason=reason, shape=_LEAK_SHAPES[(sawtooth, an.model)], **ev.common)


def _staircase_result(ev: _Evidence, checks: _Checks) -> TrendResult:
    an, unit = ev.an, ev.unit
    l_level, l_slope, l_se, l_df = an.line
    line_window = an.t_end - an.t_warmup
    lt = t_ppf(0.975, l_df)
    lo, hi = l_slope - lt * l_se, l_slope + lt * l_se
    sec_ex, steps_ex = _exhaustion(ev, l_slope)
    share = lo * line_window / ev.level if ev.level > 0 else math.nan
    reason = (f"grows in steps: {_fmt(l_slope, unit)}/step on average (95% CI {_fmt_range(lo, hi, unit)}), "
              f"at least {_fmt(lo * line_window, unit)} ({share:.1%} of its level) over the last "
              f"{_samples_since(ev.steps, an.t_warmup)} of {ev.n} samples, and not slowing{ev.note}")
    return TrendResult(
        verdict="leak", confidence=_clip01(1.0 - checks.p_value), slope_per_step=l_slope,
        slope_ci=(lo, hi), slope_per_hour=l_slope * ev.sps * 3600.0 if ev.sps else None,
        p_value=checks.p_value, onset_step=int(an.t_warmup), warmup_end_step=_warmup_step(an),
        total_growth=l_slope * line_window, seconds_to_exhaustion=sec_ex, steps_to_exhaustion=steps_ex,
        fit=_fit_dict(an.t_warmup, an.t_end, l_level, l_slope, lo, hi),
        reason=reason, shape="growth_in_steps", **ev.common)


def _line_base(ev: _Evidence) -> dict:
    """Fields of a not-leak result: the straight line over the post-warm-up window."""
    an = ev.an
    l_level, l_slope, l_se, l_df = an.line
    line_window = an.t_end - an.t_warmup
    lt = t_ppf(0.975, l_df)
    line_lo, line_hi = l_slope - lt * l_se, l_slope + lt * l_se
    return dict(slope_per_step=l_slope, slope_ci=(line_lo, line_hi),
                slope_per_hour=l_slope * ev.sps * 3600.0 if ev.sps else None,
                onset_step=None, warmup_end_step=_warmup_step(an),
                total_growth=l_slope * line_window, seconds_to_exhaustion=None,
                steps_to_exhaustion=None,
                fit=_fit_dict(an.t_warmup, an.t_end, l_level, l_slope, line_lo, line_hi),
                **ev.common)


def _bounded_explanations(ev: _Evidence, checks: _Checks) -> tuple[dict, float]:
    """Explanations (flat, filling, plateau, step) that bound ongoing growth
    below ``NO_LEAK_NOISE_SD`` noise, with their confidence; and the best
    confidence of any explanation."""
    an = ev.an
    window = ev.window
    st = an.step
    l_level, l_slope, l_se, l_df = an.line
    line_window = an.t_end - an.t_warmup
    no_leak_bound = NO_LEAK_NOISE_SD * ev.noise_floor
    # Significant growth that no structure explains is never called "no_leak",
    # however small against the noise: the noise may be the thing that is wrong.
    explanations = {} if checks.significant else {"flat": (l_slope, l_se, l_df, line_window)}
    if an.filling is not None:
        explanations["saturating"] = an.filling + (window,)
    if an.tail is not None and checks.stopped:
        explanations["stopped"] = an.tail + (window,)
    if checks.step_better and st["height"] > 4 * st["height_se"]:
        explanations["step"] = (st["after_slope"], st["after_se"], st["after_df"], window)
    bounded, conf_clean = {}, 0.0
    for kind, (b, se, df, span) in explanations.items():
        upper = (b + t_ppf(0.95, df) * se) * span
        conf = t_cdf((no_leak_bound - b * span) / max(se * span, 1e-300), df)
        conf_clean = max(conf_clean, conf)
        if upper < no_leak_bound and df >= MIN_EFFECTIVE_SAMPLES:
            bounded[kind] = (upper, conf)
    return bounded, conf_clean


def _clean_result(ev: _Evidence, checks: _Checks) -> TrendResult | None:
    """``no_leak`` when some explanation bounds the ongoing growth below the noise."""
    an, unit = ev.an, ev.unit
    st = an.step
    bounded, _conf = _bounded_explanations(ev, checks)
    # The most specific explanation first; a step smaller than the bar for a
    # leak is noise to the reader, not news.
    big_step = checks.step_better and st["height"] >= checks.material
    order = ("step", "saturating", "stopped", "flat") if big_step else (
        "saturating", "stopped", "flat", "step")
    p_value = checks.p_value
    window = ev.window
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
                      f"{_samples_since(ev.steps, an.t_onset)} samples")
        elif kind == "stopped":
            t_slope, t_se, t_df = an.tail
            p_value = max(p_value, t_sf(t_slope / t_se, t_df) if t_se > 0 else 1.0)
            tail_from = an.t_end - TAIL_FRACTION * window
            reason = (f"grew, then stopped: at most {upper_txt} more over the last "
                      f"{_samples_since(ev.steps, tail_from)} samples (steps {int(tail_from)}-{int(an.t_end)})")
        elif ev.n_resets:
            reason = (f"a buffer that fills and is cleared ({ev.n_resets} resets); its floor "
                      f"grows at most {upper_txt} over the run")
        else:
            reason = (f"no material growth: at most {upper_txt} over the last "
                      f"{_samples_since(ev.steps, an.t_warmup)} of {ev.n} samples (noise "
                      f"{_fmt(ev.noise, unit)})")
        shape = "resets" if ev.n_resets and kind == "flat" else _CLEAN_SHAPES[kind]
        return TrendResult(verdict="no_leak", confidence=_clip01(conf), p_value=p_value,
                           reason=reason + ev.note, shape=shape, **_line_base(ev))
    return None


def _inconclusive_result(ev: _Evidence, checks: _Checks) -> TrendResult:
    an, unit = ev.an, ev.unit
    _bounded, conf_clean = _bounded_explanations(ev, checks)
    base = _line_base(ev)
    line_lo, line_hi = base["slope_ci"]
    line_window = an.t_end - an.t_warmup
    conf_leak = t_cdf((checks.growth - checks.material) / max(checks.growth_se, 1e-300), an.df)
    if checks.significant and checks.is_material and an.tail is None:
        why = "too few points since the onset to check that growth persists"
    elif checks.significant and checks.is_material and (checks.stopped or checks.weak_tail):
        why = "growth may have stopped near the end"
    elif checks.significant and checks.is_material and not checks.survives_step:
        why = "the growth is mostly one step"
    elif an.model == "saturating":
        why = "growth is slowing but may not stop"
    elif checks.significant:
        why = "growth is small against the noise"
    elif line_lo > 0:
        # The straight line grows for sure, but the shape that fits best
        # (a filling cache, a late onset) does not: the growth is uneven.
        why = "grows, but unevenly (in steps, or slowing)"
    else:
        why = "too noisy to tell"
    reason = (f"{why}: growth of {_fmt_range(line_lo * line_window, line_hi * line_window, unit)}"
              f" (95% CI) over the last {_samples_since(ev.steps, an.t_warmup)} of {ev.n} samples, "
              f"noise {_fmt(ev.noise, unit)}{ev.note}")
    return TrendResult(verdict="inconclusive",
                       confidence=_clip01(1.0 - max(conf_leak, conf_clean)),
                       p_value=checks.p_value, reason=reason, shape="unclear", **base)


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


def _samples_note(n, dropped, spikes=0):
    notes = []
    if dropped:
        notes.append(f"{dropped} non-finite sample{'s' if dropped != 1 else ''} dropped")
    if spikes:
        notes.append(f"{spikes} isolated spike{'s' if spikes != 1 else ''} or final release left out")
    return f" ({'; '.join(notes)})" if notes else ""


def _too_few(n, dropped, unit, min_samples, walls=None):
    need = max(int(min_samples), 3)
    return TrendResult(
        verdict="inconclusive", confidence=1.0, slope_per_step=math.nan,
        slope_ci=(math.nan, math.nan), slope_per_hour=None, p_value=1.0, onset_step=None,
        warmup_end_step=None, samples=n, noise=math.nan, total_growth=math.nan,
        seconds_to_exhaustion=None, steps_to_exhaustion=None, fit={},
        reason=f"only {n} finite sample{'s' if n != 1 else ''}, need at least {need}"
               + _samples_note(n, dropped) + _advice(n, walls),
        unit=unit, dropped_samples=dropped, shape="too_few")


def _advice(n, walls) -> str:
    """What to do about too little data, in the user's terms."""
    if n >= SMALL_SERIES * 2:
        return ""
    span = ""
    if walls is not None and walls.size >= 2 and np.all(np.isfinite(walls[[0, -1]])):
        seconds = float(walls[-1] - walls[0])
        if seconds > 0:
            span = f" over {_duration(seconds)}"
    return (f" ({n} samples{span}: run longer, or sample more densely with "
            f"Monitor(overhead_budget=0.05))")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _decide_small(t, y, walls, dropped, unit, available_bytes, spikes=0) -> TrendResult:
    """A verdict from a few samples: least squares after the first sample, plus
    the growth between each of the last samples.

    The first sample is usually a baseline taken before the loop warmed up,
    so the line is fitted to the others. A leak needs growth significant at
    ``ALPHA_LEAK`` with the interval from the residuals (an exact count that
    grows by the same amount every step has none), material against the
    noise, and steady: the last three intervals between samples each grow at
    least ``SMALL_STEADY_RATIO`` of the fitted rate (a cache that fills slows
    down, a one-off step grows in one interval only). ``no_leak`` needs the
    last two intervals flat within the noise, or an upper bound on growth
    under the noise. Anything else is inconclusive, with advice.
    """
    n = int(y.size)
    tf, yf = (t[1:], y[1:]) if n >= 5 else (t, y)
    m = int(yf.size)
    span = float(tf[-1] - tf[0])
    common = {"samples": n, "unit": unit, "dropped_samples": dropped}
    sps = _steps_per_second(t, walls, float(tf[0]))
    x = tf - tf[0]
    sxx = float(np.sum((x - x.mean()) ** 2))
    if span <= 0 or sxx <= 0:
        return _too_few(n, dropped, unit, n + 1, walls)
    slope = float(np.sum((x - x.mean()) * (yf - yf.mean()))) / sxx
    level = float(yf.mean() - slope * x.mean())
    resid = yf - (level + slope * x)
    df = max(m - 2, 1)
    sigma = math.sqrt(float(resid @ resid) / df)
    scale = max(abs(float(median(yf))), 1.0)
    exact = sigma <= 1e-9 * scale
    se = sigma / math.sqrt(sxx)
    p_value = (0.0 if slope > 0 else 1.0) if exact else t_sf(slope / se, df)
    t975 = t_ppf(0.975, df)
    lo, hi = (slope, slope) if exact else (slope - t975 * se, slope + t975 * se)
    growth = slope * span
    # Noise: the scatter around the line, or for exact data the counting unit.
    noise = sigma if not exact else 0.0
    material = max(MATERIAL_NOISE_SD * noise, 1.0 if unit != "bytes" else 1e-9 * scale)
    rates = np.diff(yf) / np.diff(tf)
    last = rates[-3:] if rates.size >= 3 else rates
    steady = slope > 0 and bool(np.all(last >= SMALL_STEADY_RATIO * slope))
    if steady and span > 0 and float(tf[-1] - tf[-2]) > SMALL_LONG_INTERVAL * span:
        # One interval covers most of the run (samples taken early, and one
        # at the end): a one-off rise inside it looks like steady growth.
        # Only the same rate in every interval tells them apart.
        steady = bool(np.all(np.abs(last - slope) <= SMALL_SAME_RATE * slope))
    fit = _fit_dict(tf[0], tf[-1], level, slope, lo, hi)
    base = dict(slope_per_step=slope, slope_ci=(lo, hi),
                slope_per_hour=slope * sps * 3600.0 if sps else None,
                warmup_end_step=int(tf[0]) if m < n else None, noise=noise, fit=fit, **common)
    spread = f"{n} samples from step {int(t[0])} to {int(t[-1])}"
    if p_value < ALPHA_LEAK and growth >= material and steady and m >= 4:
        sec_ex = steps_ex = None
        if unit == "bytes" and available_bytes is not None:
            avail = _as_float(available_bytes)
            if math.isfinite(avail) and avail >= 0:
                steps_ex = avail / slope
                sec_ex = steps_ex / sps if sps else None
        how = "by the same amount between every sample" if exact else "between every one of the last samples"
        reason = (f"grows {_fmt(slope, unit)}/step (95% CI {_fmt_range(lo, hi, unit)}), {how}: "
                  f"{spread}{_samples_note(n, dropped, spikes)}")
        conf = 1.0 - p_value if exact else min(1.0 - p_value, t_cdf((growth - material) / max(se * span, 1e-300), df))
        return TrendResult(verdict="leak", confidence=_clip01(conf), p_value=p_value,
                           onset_step=int(tf[0]), total_growth=growth, seconds_to_exhaustion=sec_ex,
                           steps_to_exhaustion=steps_ex, reason=reason, shape="growth", **base)
    tail_change = float(yf[-1] - yf[-3]) if m >= 3 else math.inf
    # Flat at the end is evidence only for exact data; noisy data must bound its growth.
    flat_end = exact and abs(tail_change) <= (0.0 if unit != "bytes" else 1e-9 * scale)
    if not exact and m >= 3:
        late = yf[-3:] - (level + slope * x[-3:])
        flat_end = tail_change <= 0 and float(np.max(np.abs(late))) <= noise and growth < material
        # The same count at each of the last three samples: stopped, whatever came before.
        flat_end = flat_end or (unit != "bytes" and bool(np.all(yf[-3:] == yf[-1])))
    upper = hi * span if math.isfinite(hi) else math.inf
    bounded = upper < NO_LEAK_NOISE_SD * noise if noise > 0 else hi <= 0
    rises = np.diff(yf[:-1])
    # Growth at every interval but the last, which falls most of the way
    # back: the noise it makes says nothing of growth before it.
    fell_back = (m >= 3 and bool(np.all(rises > 0))
                 and float(yf[-2] - yf[-1]) > 0.5 * float(yf[-2] - yf[0])
                 # (the noise is no bar here: the fall makes it)
                 and float(yf[-2] - yf[0]) > max(0.0 if unit == "bytes" else MIN_COUNT_GROWTH,
                                                 0.01 * float(median(np.abs(yf)))))
    if fell_back:
        flat_end = bounded = False
    if m >= 4 and (flat_end or bounded):
        if flat_end:
            reason = (f"no growth over the last 2 of {n} samples (steps {int(tf[-3])} to {int(tf[-1])}); "
                      f"{_fmt(max(float(yf[-1] - yf[0]), 0.0), unit)} before that")
            shape = "plateau" if yf[-1] - yf[0] > material else "flat"
        else:
            reason = f"no material growth: at most {_fmt(max(upper, 0.0), unit)} over {spread}"
            shape = "flat"
        return TrendResult(verdict="no_leak", confidence=0.9 if flat_end else 0.8, p_value=max(p_value, 0.5),
                           onset_step=None, total_growth=growth, seconds_to_exhaustion=None,
                           steps_to_exhaustion=None, reason=reason + _samples_note(n, dropped, spikes), shape=shape, **base)
    if fell_back:
        before = float(yf[-2] - yf[0]) / max(float(tf[-2] - tf[0]), 1.0)
        reason = (f"grew {_fmt(before, unit)}/step at every sample from step {int(tf[0])} to {int(tf[-2])}, "
                  f"then fell back at the last one (step {int(tf[-1])}): what the loop kept and let go of "
                  f"when it ended, or garbage the last collection freed{_samples_note(n, dropped, spikes)}")
        return TrendResult(verdict="inconclusive", confidence=0.5, p_value=p_value, onset_step=None,
                           total_growth=growth, seconds_to_exhaustion=None, steps_to_exhaustion=None,
                           reason=reason, shape="unclear", **base)
    if slope > 0 and p_value < ALPHA_LEAK and not steady:
        why = "grows, but not steadily between the last samples"
    elif slope > 0 and p_value < ALPHA_LEAK:
        why = "grows, but by less than the noise"
    else:
        why = "too few samples to tell growth from noise"
    reason = (f"{why}: {_fmt(slope, unit)}/step (95% CI {_fmt_range(lo, hi, unit)}) from "
              f"{spread}{_samples_note(n, dropped, spikes)}{_advice(n, walls)}")
    return TrendResult(verdict="inconclusive", confidence=0.5, p_value=p_value, onset_step=None,
                       total_growth=growth, seconds_to_exhaustion=None, steps_to_exhaustion=None,
                       reason=reason, shape="too_few", **base)


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
    return format_quantity(x, unit)


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
