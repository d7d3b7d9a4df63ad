"""One series in, one verdict out: is this series still growing by a material amount?

The model. A training-memory series is a piecewise-linear trend plus
stationary, autocorrelated noise. Warm-up, a cache filling, an allocator
stair, a table loaded once, a leak's onset: each is a segment of the trend.
A buffer that fills and is cleared (two or more resets) is a sawtooth whose
floor carries the trend. What the user asks about is the *current* growth:
the slope of the last segment (of the floor, for a sawtooth).

1. Clean: drop non-finite samples, sort by step, keep the last of repeated
   steps; leave out isolated spikes (one bad reading whose neighbours agree).
2. Blocks: more than 1,024 samples become 512-1,023 block medians, so that
   the same code runs from 4 points to a million in bounded time.
3. Segments: optimal partitioning into lines, each new segment paying a
   penalty of ``segment_penalty * noise variance * log(points)``. The noise
   is estimated twice: from point-to-point changes, then from the residuals
   of that first segmentation, widened by their autocorrelation time.
4. Current slope: least squares over the last segment, its variance and
   degrees of freedom widened by the residuals' integrated autocorrelation
   time (`_stats.regress`). A sawtooth is fitted as floor + ramp since the
   last reset, from its first reset on.
5. Decision against ``Policy.materiality`` (two one-sided tests): ``leak``
   when the lower bound at ``alpha_leak`` clears it, ``no_leak`` when the
   upper 95% bound stays under it, else ``inconclusive`` with the bound that
   failed and about how many more steps would decide.

Pure numpy: no I/O, no TensorFlow, no state.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_leak_plugin.analysis._stats import ar1, diff_noise, median, regress, robust_sd, t_ppf, t_sf, variance_inflation
from tb_leak_plugin.analysis.policy import POLICY, Policy
from tb_leak_plugin.analysis.results import TrendResult, clip01, fit_dict, fmt, fmt_range, samples_note, too_few

__all__ = ["TrendResult", "assess_series", "POLICY", "Policy"]


@dataclasses.dataclass
class _Fit:
    """The current segment: where it starts, its slope and the evidence."""

    t_start: float
    level: float          # fitted value at t_start
    slope: float
    se: float
    df: float
    noise: float
    segments: int         # segments found (1: one line throughout)
    resets: int           # sawtooth resets (0: none)
    jump: float           # fitted jump into the current segment (0 if none)
    used: int             # points in the current segment
    shift: float = 0.0    # one level shift inside the current segment, if fitted
    readings: list = dataclasses.field(default_factory=list)  # (slope, se, df) of each reading
    leak_readings: list = dataclasses.field(default_factory=list)  # ... and those a leak must also hold under
    refill: float = 0.0   # the drop a growth right after one reset may be refilling
    t_segment: float | None = None  # where the current segment begins, before its first points are trimmed


def assess_series(steps, values, wall_times=None, *, unit="bytes", available_bytes=None,
                  min_samples=None, final_release=False, whole: float | None = None,
                  policy: Policy = POLICY) -> TrendResult:
    """Decide whether one series still grows by a material amount.

    ``steps``/``values``/``wall_times``: one sample per step, any order,
    repeated steps keep the last; NaN/inf values are dropped and counted.
    ``available_bytes``: memory left, for a bytes series' time to exhaustion.
    ``final_release``: leave out a last sample that falls most of the way back
    to the start (the loop's data freed after it returned; for series whose
    fall is the program's, see `report._final_release`).
    ``whole``: for a part of the process's memory, the bytes of the whole
    (``Policy.materiality``).
    Never raises on numeric input of any length.
    """
    t, y, w, dropped = _prepare(steps, values, wall_times)
    t, y, w, left_out = _drop_spikes(t, y, w, policy)
    if final_release:
        t, y, w, released = _drop_final_release(t, y, w, policy)
        left_out += released
    n = int(y.size)
    need = max(int(min_samples if min_samples is not None else policy.min_samples), 3)
    note = samples_note(dropped, left_out)
    if n < need or float(t[-1] - t[0]) <= 0:
        return too_few(n, need, unit, dropped, note, w)
    if not float(np.max(np.abs(y))) < 1e150:
        result = too_few(n, need, unit, dropped, note, w)
        result.reason = f"values up to {float(np.max(np.abs(y))):.3g} {unit} are too large to analyse"
        return result
    tb, yb = _blocks(t, y, policy.max_blocks)
    fit = _fit_current(tb, yb, unit, policy, raw=(t, y) if y.size <= 2 * policy.max_blocks else None)
    span = float(t[-1] - t[0])
    level = float(median(np.abs(yb)))
    material = policy.materiality(unit, level, span, whole), policy.materiality(unit, level, span)
    return _decide(fit, material, t, w, n, span, unit, available_bytes, dropped, note, policy)


# --------------------------------------------------------------------------- preparation


def _prepare(steps, values, wall_times):
    """Finite samples sorted by step, the last kept per step; and how many were dropped."""
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
        w = w[:size] if w is not None and w.size >= size else None
    finite = np.isfinite(v) & np.isfinite(s)
    dropped = int(size - np.count_nonzero(finite))
    s, v = s[finite], v[finite]
    w = w[finite] if w is not None else None
    if s.size > 1 and float(np.min(np.diff(s))) <= 0:
        order = np.argsort(s, kind="stable")
        s, v = s[order], v[order]
        w = w[order] if w is not None else None
        # A restarted job rewrites steps; its last write is the one that stands.
        keep = np.ones(s.size, dtype=bool)
        keep[:-1] = np.diff(s) != 0
        s, v = s[keep], v[keep]
        w = w[keep] if w is not None else None
    return s, v, w, dropped


def _drop_spikes(t, y, w, policy):
    """Leave out isolated spikes: a point far from both neighbours, which agree.
    (Series long enough to be reduced to block medians need not: a median
    already ignores one bad reading in its block.)"""
    if y.size < 5 or y.size > 2 * policy.max_blocks:
        return t, y, w, 0
    scale = diff_noise(y)
    if not scale > 0:
        return t, y, w, 0
    bar = policy.spike_sd * scale
    left, right = y[1:-1] - y[:-2], y[1:-1] - y[2:]
    spike = (np.abs(left) > bar) & (np.abs(right) > bar) & (np.sign(left) == np.sign(right)) \
        & (np.abs(y[2:] - y[:-2]) < 0.25 * np.minimum(np.abs(left), np.abs(right)))
    if not spike.any():
        return t, y, w, 0
    keep = np.ones(y.size, dtype=bool)
    keep[1:-1] = ~spike
    return t[keep], y[keep], (w[keep] if w is not None else None), int(np.count_nonzero(spike))


def _drop_final_release(t, y, w, policy, least=None):
    """Leave out a last sample that falls more than half way back after a
    rise, when the samples before it come close to it (see the policy), in a
    series of at least ``least`` samples (default: one more than a series
    needs to be judged, so that what is left can be)."""
    least = policy.min_samples + 1 if least is None else least
    if y.size < least or float(t[-1] - t[-2]) > policy.release_gap_share * float(t[-2] - t[0]):
        return t, y, w, 0
    grown = float(y[-2] - np.min(y[:-1]))
    rising = np.count_nonzero(np.diff(y[:-1]) > 0) >= 0.6 * (y.size - 2)
    if grown > 0 and float(y[-2] - y[-1]) > 0.5 * grown and rising:
        return t[:-1], y[:-1], (w[:-1] if w is not None else None), 1
    return t, y, w, 0


def falls_back_at_end(steps, values, policy: Policy = POLICY) -> bool:
    """Whether the last sample falls more than half way back after a rise,
    however far it lies from the samples before it (a release at close that
    ``final_release`` may not leave out, see the policy's release_gap_share):
    a rise through the three walks before it is enough here (a run's
    shortest census, the baseline and two walks)."""
    t, y, _w, _dropped = _prepare(steps, values, None)
    reach = dataclasses.replace(policy, release_gap_share=math.inf)
    return _drop_final_release(t, y, None, reach, least=policy.min_samples)[3] == 1


def _blocks(t, y, max_blocks):
    """Medians over blocks of equal span in steps (at most ``max_blocks``).

    The trend is a function of the training step, and the monitor samples
    densely early and ever more sparsely later (points grow with the square
    root of the run): a stretch of steps must weigh the same whatever the
    number of points in it. A handful of points (heap walks) is kept as is.
    """
    n = y.size
    if n <= SMALL_SERIES:
        return t, y
    edges = np.linspace(t[0], t[-1], min(n, max_blocks) + 1)
    idx = np.minimum(np.searchsorted(edges, t, side="right") - 1, edges.size - 2)
    bounds = np.flatnonzero(np.diff(idx)) + 1
    if bounds.size == n - 1:
        return t, y  # one point a block already
    starts = np.r_[0, bounds]
    sizes = np.diff(np.r_[starts, n])
    if sizes.max() <= 2 * sizes.min():
        # Evenly sampled: blocks of equal count (the remainder from the start,
        # the least informative end).
        if n <= 2 * max_blocks:
            return t, y
        k = n // max_blocks
        m = n // k
        r = n - m * k
        return t[r:].reshape(m, k)[:, k // 2], np.partition(y[r:].reshape(m, k), k // 2, axis=1)[:, k // 2]
    ty = [(t[a + (c - 1) // 2], median(y[a:a + c])) for a, c in zip(starts.tolist(), sizes.tolist())]
    return np.array([p[0] for p in ty]), np.array([p[1] for p in ty])


# Fewer points than this are not put in blocks (heap walks).
SMALL_SERIES = 64


# --------------------------------------------------------------------------- the model


def _resolution(y, unit):
    """The smallest change a series can show: one unit of a count, else a
    rounding error of its level (noise is never taken as smaller)."""
    return 1.0 if unit != "bytes" else max(1.0, 1e-9 * float(np.max(np.abs(y))))


# Residual degrees of freedom a reading that a claim must survive needs: with
# one, the t is a Cauchy, under which no slope is significant however exact
# (or, by chance, one whose near-exact fit is). A consequence of the t test,
# not a tuning: a reading is only taken where it leaves this many.
_CLAIM_DF = 2


def _fit_current(t, y, unit, policy, raw=None) -> _Fit:
    # A buffer's cycles are seen in every sample (blocks would blur them).
    if raw is not None:
        cycles = _resets(raw[1], unit, policy)
        if cycles.size >= policy.sawtooth_resets:
            fit = _fit_sawtooth(raw[0], raw[1], cycles, unit)
            if not _floor_refuted(fit, raw[0], raw[1], cycles, policy):
                return fit
    resets = _resets(y, unit, policy)
    if resets.size >= policy.sawtooth_resets and raw is None:
        fit = _fit_sawtooth(t, y, resets, unit)
        if not _floor_refuted(fit, t, y, resets, policy):
            return fit
        resets = np.zeros(0, dtype=int)
    res = _resolution(y, unit)
    starts, noise_var, pooled = _segment_with_noise(t, y, res, policy)
    # The current segment has at least min_segment points, however short
    # the series (a slope through two heap walks has no noise to judge it by).
    s = min(int(starts[-1]), max(y.size - policy.min_segment, 0))
    t_segment = float(t[s])
    if s > 0:
        # Where a segment starts is uncertain by a few points: its first
        # points may still belong to the regime before (a ramp's end, a
        # leak's onset), which would bias the slope. They are left out.
        s = min(s + int(policy.trim_share * (y.size - s)), y.size - policy.min_segment)
    tt, yy = t[s:], y[s:]
    reg, cols, readings, leak_readings = _readings(t, y, tt, yy, starts, noise_var, pooled, policy)
    refill = _refill(t, y, resets, s, readings[0][0], policy)
    jump = float(reg.beta[0] - y[s - 1]) if s > 0 else 0.0
    return _Fit(t_start=float(tt[0]), level=float(reg.beta[0]), slope=readings[0][0],
                se=readings[0][1], df=readings[0][2], noise=_noise(reg.resid, res),
                segments=int(starts.size), resets=0, jump=jump, used=int(yy.size),
                shift=float(reg.beta[2]) if len(cols) > 1 else 0.0, readings=readings, refill=refill,
                leak_readings=leak_readings, t_segment=t_segment)


def _segment_with_noise(t, y, res, policy):
    """Segment with the noise of white jitter, then again with the noise
    around that segmentation, widened by its autocorrelation (wander must not
    read as regime changes), until that noise stops growing (the jitter's
    is only where the search starts: it may be larger than the noise around
    the segments, or far smaller, when the noise wanders). Segments cut
    into wander leave residuals that understate it (short, autocorrelated
    series were cut at the noise a first, over-cut segmentation left, and the
    last segment's slope was the wander's). Returns the segment starts, the
    noise variance and its autocorrelation inflation."""
    noise_var, pooled = max(_local_noise(t, y), res / 2) ** 2, 1.0
    starts = _segment(t, y, noise_var, policy)
    for round_ in range(policy.noise_rounds):
        # The noise is read around the model the current segment is fitted
        # with: a one-off shift inside it (which no split may cut off there,
        # see final_share) is part of that model, not wander.
        last = int(starts[-1])
        shift = _level_shift(t[last:], y[last:], noise_var, policy)
        resid = _segment_residuals(t, y, np.union1d(starts, [last + shift]) if shift else starts)
        inflation = variance_inflation(resid)
        around = max(robust_sd(resid), res / 2) ** 2 * inflation
        if round_ and not around > noise_var * (1.0 + 1e-6):
            break
        noise_var, pooled = around, max(pooled, inflation) if round_ else inflation
        starts = _segment(t, y, noise_var, policy)
    return starts, noise_var, pooled


def _readings(t, y, tt, yy, starts, noise_var, pooled, policy):
    """The current segment's growth under each reading a claim must survive:
    (the fit, its columns, the readings, the readings a leak claim must survive)."""
    # The noise is one process throughout (the model's assumption): its
    # autocorrelation, estimated on every segment, bounds the current one's.
    reg = regress([tt - tt[0]], yy, min_inflation=pooled)
    readings = [(float(reg.beta[1]), float(reg.se[1]), float(reg.df))]
    cols = [tt - tt[0]]
    shift = _level_shift(tt, yy, noise_var, policy)
    if shift:
        # One level shift inside the segment: growth is read besides it. A
        # rise in a series that has risen in steps before may be one more
        # stair: then it is read both ways. A fall (a release) is only ever
        # read besides.
        cols.append((np.arange(yy.size) >= shift).astype(np.float64))
        reg = regress(cols, yy, min_inflation=pooled)
        besides = (float(reg.beta[1]), float(reg.se[1]), float(reg.df))
        # A rise is a stair only where the series has risen in like steps
        # (within Policy.like_step_ratio) and kept them, at least twice before.
        size = float(reg.beta[2])
        ratio = policy.like_step_ratio
        stairs = size > 0 and sum(size / ratio < r < ratio * size for r in _rises(t, y, starts, ratio)) >= 2
        # Each claim must hold under the reading least favourable to it: a
        # leak besides the shift (the least growth the data allow), no leak
        # also with the rise read as one more stair (the most).
        leak_readings = [besides]
        readings = [besides] + (readings if stairs else [])
    else:
        leak_readings = list(readings)
    if yy.size - 1 - (len(cols) + 1) >= _CLAIM_DF:
        # No claim may rest on one sample: the last, whose leverage is the
        # largest (heap walks early and one at close), is left out once,
        # whenever a line through the others still has residuals to judge
        # it by (four heap walks at steps 0, 5, 14 and 249: a one-off rise
        # between the last two is not a trend). Two at least: with one, the
        # t is a Cauchy, and no slope is significant however exact (a module
        # registry gaining one entry every 40 steps at four walks, 2,900
        # standard errors above materiality, stayed inconclusive); a
        # four-point segment is judged on its own df of 2.
        last = regress([c[:-1] for c in cols], yy[:-1], min_inflation=pooled)
        leak_readings.append((float(last.beta[1]), float(last.se[1]), float(last.df)))
        readings = readings + [leak_readings[-1]]
    return reg, cols, readings, leak_readings


def _refill(t, y, resets, s, slope, policy) -> float:
    """Growth right after the series was cut down may be a buffer refilling:
    it is a leak only once it has grown past what the drop let go (the drop's
    size, or 0 when no recent drop explains it). A drop with fewer than
    ``min_segment`` samples after it is not followed by the growth measured:
    that came before it (memory let go at the last walk, whose collection
    found garbage too, so that the fall is read besides the growth, not left
    out), and nothing refills."""
    if resets.size and int(resets[-1]) + 1 >= s - policy.min_segment \
            and y.size - (int(resets[-1]) + 1) >= policy.min_segment:
        r = int(resets[-1])
        drop = float(y[r] - y[r + 1])
        if slope * float(t[-1] - t[r + 1]) < drop:
            return drop
    return 0.0


def _local_noise(t, y) -> float:
    """Robust sd of each point's distance from the line through its two
    neighbours: blind to any trend and to uneven spacing (heap walks dense
    early, sparse late). At most ~100,000 triples are used."""
    stride = max(1, y.size // 100_000)
    tt, yy = t[::stride], y[::stride]
    if yy.size < 3:
        return 0.0
    w = (tt[1:-1] - tt[:-2]) / (tt[2:] - tt[:-2])
    r = yy[1:-1] - (yy[:-2] + w * (yy[2:] - yy[:-2]))
    # Var(r) = sd^2 * (1 + w^2 + (1 - w)^2): 1.5 sd^2 for even spacing.
    return robust_sd(r / np.sqrt(1.0 + w * w + (1.0 - w) ** 2))


def _level_shift(t, y, noise_var, policy) -> int:
    """Where one level shift inside the current segment (a table loaded, a
    release) explains it better than a line alone, by more than the penalty
    of a segment; 0 if nowhere. The slope is then the growth besides it."""
    n = y.size
    # A handful of heap walks: the shift may be the last walk alone (a rise
    # between the early walks and the one at close is one jump or a rate).
    L = max(1, min(policy.min_segment, (n - 2) // 3))
    # A line and a shift leave n - 3 residual degrees of freedom, and a
    # reading a claim must survive needs two (with one, the t is a Cauchy:
    # no slope is significant however exact, and four heap walks of tensors
    # kept at every overflow, 14, 122, 226, 378, stayed undecided).
    if n < max(2 * L + 2, 3 + _CLAIM_DF):
        return 0
    x = t - t.mean()
    sxx = float(x @ x)
    if not sxx > 0:
        return 0
    e = y - y.mean() - x * (float(x @ y) / sxx)
    tail_e = np.cumsum(e[::-1])[::-1]        # sum of e[i:] for each i
    tail_x = np.cumsum(x[::-1])[::-1]
    # At least two samples after it: a last sample alone that falls is for
    # the run to judge (a release at close, see report._final_release).
    # Before it, one is enough: the segment's start is not where its jump
    # is (the current segment keeps a share of the run, and its first points
    # are trimmed), so a jump may come a sample or two into it (a heap
    # walk's allocations two samples after the start, 64 KiB a step
    # exactly on both sides, read as a shift at the fourth sample and a
    # wide slope, stayed undecided; one sample in, at the third: leak, but
    # with a slope interval ten times too wide).
    c = np.arange(1, n - max(L, 2) + 1)
    if c.size == 0:
        return 0
    k = (n - c).astype(np.float64)
    uu = k - k * k / n - tail_x[c] ** 2 / sxx
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(uu > 1e-9, tail_e[c] ** 2 / uu, 0.0)
    at = int(np.argmax(gain))
    return int(c[at]) if gain[at] > policy.segment_penalty * noise_var * math.log(max(n, 3)) else 0


def _noise(resid, res):
    sd = robust_sd(resid)
    return sd if sd > res * 1e-3 else 0.0


def _fit_sawtooth(t, y, resets, unit) -> _Fit:
    """A buffer filled and cleared: the trend is its floor's. The first sample
    after each reset is the floor plus the ramp since the reset, which fell
    somewhere in the interval before that sample: the floor lies between
    that sample and one interval's ramp lower. The monitor spaces its samples
    further apart as the run ages, so the first sample after a reset may
    land further up the ramp late in a run (a metric's lists refilled every
    epoch: read as floors, those samples rose 30 B a step where the floor
    rose 1.5), and no claim may rest on where in the interval the reset fell:
    each must hold with the floors read as sampled and read half the ramp
    lower, where a reset falls on average (the slope reported is the samples'
    own). The trend of the intervals is what biases a floor line; the part of
    that uncertainty that drifts from cycle to cycle bounds the floors' noise
    from below."""
    floors = resets + 1
    d = np.diff(y)
    dt = np.diff(t)
    rising = d > 0
    ramp = float(median(d[rising] / dt[rising])) if rising.any() else 0.0
    gaps = t[floors] - t[floors - 1]
    tf = t[floors]
    step_err = ramp * float(median(dt)) / math.sqrt(12.0)
    res = _resolution(y, unit)
    if tf.size < 3 or not float(tf[-1] - tf[0]) > 0:
        return _Fit(t_start=float(t[0]), level=float(y[floors][0]), slope=0.0, se=math.inf, df=1.0, noise=step_err,
                    segments=1, resets=int(resets.size), jump=0.0, used=int(tf.size))
    # The floors' noise is the series' noise a cycle apart: its lag-1
    # autocorrelation, estimated on every sample around floor + ramp, to the
    # power of the samples in a cycle.
    start = int(floors[0])
    phase = t[start:] - t[start:][np.r_[0, floors[1:] - start][
        np.searchsorted(floors[1:] - start, np.arange(t.size - start), side="right")]]
    around = regress([t[start:] - t[start], phase], y[start:]).resid
    rho = ar1(around) ** max(1.0, float(median(np.diff(floors))))
    exact = robust_sd(around) <= (2.0 * res if unit != "bytes" else 0.0)
    sxx = float(np.sum((tf - tf.mean()) ** 2))

    # The intervals' trend (sampling thins as the run ages), their scatter
    # being the noise step_err bounds; and the ramp since a reset is at most
    # a full buffer, which no drop exceeds (cycles shorter than the
    # intervals: the ramp does not run on over the whole interval).
    full = float(np.max(y[floors - 1] - y[floors]))
    spread = np.minimum(ramp * np.polyval(np.polyfit(tf - tf[0], gaps, 1), tf - tf[0]), full)

    def line(share):
        reg = regress([tf - tf[0]], y[floors] - share * spread, inflation=1.0 if exact else (1 + rho) / (1 - rho))
        return reg, (float(reg.beta[1]), math.hypot(float(reg.se[1]), step_err / math.sqrt(sxx)), float(reg.df))

    reg, raw = line(0.0)
    ends = [raw, line(0.5)[1]]
    return _Fit(t_start=float(tf[0]), level=float(reg.beta[0]), slope=raw[0], se=raw[1],
                df=raw[2], noise=max(robust_sd(reg.resid), step_err), segments=1,
                resets=int(resets.size), jump=0.0, used=int(tf.size), readings=ends, leak_readings=list(ends))


def _floor_refuted(fit, t, y, resets, policy) -> bool:
    """Whether the samples after the last floor lie far below the floor line
    (see ``policy.floor_refute_sd``)."""
    after = slice(int(resets[-1]) + 1, None)
    # "Half of them" needs a median of at least three: fewer refute nothing.
    if y[after].size < 3 or not math.isfinite(fit.slope) or not fit.noise > 0:
        return False
    below = fit.level + fit.slope * (t[after] - fit.t_start) - y[after]
    return float(median(below)) > policy.floor_refute_sd * fit.noise


def _resets(y, unit, policy) -> np.ndarray:
    """Indices i where y[i] -> y[i+1] is a sustained drop (a buffer cleared)."""
    if y.size < 8:
        return np.zeros(0, dtype=int)
    d = np.diff(y)
    bar = max(policy.reset_sd * robust_sd(d) / math.sqrt(2.0),
              policy.reset_range_share * float(np.max(y) - np.min(y)), _resolution(y, unit))
    drops = np.flatnonzero(d < -bar)
    # A drop that rebounds at once is a dip, and one back to where the point
    # before was is the end of a spike: neither is a reset.
    rebound = np.r_[d, 0.0][drops + 1] > 0.5 * np.abs(d[drops])
    undone = y[drops + 1] > y[np.maximum(drops - 1, 0)] - bar
    resets = drops[~rebound & ~undone]
    # A reset empties what filled: between resets the series refills a part
    # of what they drop (counted over the cycles together: a cycle sampled
    # twice may show little of its ramp). Drops with nothing refilled between
    # them are a series stepping down (an allocator handing pages back), not
    # a buffer's cycles. (Before the first reset lies the warm-up.)
    if resets.size >= 2:
        refilled = sum(float(y[b] - np.min(y[a + 1:b + 1])) for a, b in zip(resets[:-1], resets[1:]))
        dropped = float(np.sum(y[resets[1:]] - y[resets[1:] + 1]))
        if refilled < policy.refill_share * dropped:
            return resets[:1]
    return resets


def _segment(t, y, noise_var, policy, max_segments=None) -> np.ndarray:
    """Start indices (into t) of the segments of a partition into lines:
    binary segmentation on block means, a split kept when it lowers the
    residual sum of squares by more than the penalty."""
    k = max(1, int(math.ceil(y.size / policy.segment_points)))
    m = y.size // k
    # A handful of heap walks: a baseline split off needs fewer points.
    L = max(2, min(policy.min_segment, m // 3))
    if m < 2 * L:
        return np.zeros(1, dtype=int)
    r = y.size - m * k
    tp = t[r:].reshape(m, k).mean(axis=1)
    yp = y[r:].reshape(m, k).mean(axis=1)
    scale = float(np.max(np.abs(yp - yp[0])))
    if not scale > 1e-150:  # flat, or so small its squares underflow
        return np.zeros(1, dtype=int)
    x = (tp - tp[0]) / max(float(tp[-1] - tp[0]), 1e-300)
    z = (yp - yp[0]) / scale
    cums = [np.r_[0.0, np.cumsum(v)] for v in (np.ones(m), x, x * x, z, x * z, z * z)]
    beta = policy.segment_penalty * (noise_var / k) / (scale * scale) * math.log(max(m, 3))
    starts, todo = {0}, [(0, m)]
    while todo and len(starts) < (max_segments or policy.max_segments):
        a, b = todo.pop()
        # Each part keeps L points, except that the first segment of the
        # series may be a short baseline (samples before the loop warmed up).
        # The current segment keeps a share of the run: a trend is a trend
        # over a stretch, not over the last few points after a stair.
        # The share is of the run's steps, not of its points: the schedule
        # spaces points further apart as the run ages.
        hi = b - L if b < m else min(b - L, int(np.searchsorted(x, 1.0 - policy.final_share, side="right")) - 1)
        cuts = np.arange(1 if a == 0 else a + L, hi + 1)
        if cuts.size == 0:
            continue
        gain = _sse(cums, a, b) - _sse(cums, a, cuts) - _sse(cums, cuts, b)
        at = int(np.argmax(gain))
        if gain[at] > beta:
            c = int(cuts[at])
            starts.add(c)
            todo += [(a, c), (c, b)]
    found = np.array(sorted(starts), dtype=int)
    return np.where(found > 0, found * k + r, 0)


def _sse(cums, i, j):
    """Residual sum of squares of a line through points [i, j), for each i."""
    n, sx, sxx, sy, sxy, syy = (c[j] - c[i] for c in cums)
    with np.errstate(divide="ignore", invalid="ignore"):
        cxx = sxx - sx * sx / n
        cxy = sxy - sx * sy / n
        cyy = syy - sy * sy / n
        sse = np.where(cxx > 1e-18, cyy - cxy * cxy / np.where(cxx > 1e-18, cxx, 1.0), cyy)
    return np.maximum(np.where(n > 2, sse, 0.0), 0.0)


def _segment_residuals(t, y, starts):
    out = []
    for a, b in zip(starts, np.r_[starts[1:], y.size]):
        if b - a >= 3:
            out.append(regress([t[a:b] - t[a]], y[a:b]).resid)
    return np.concatenate(out) if out else y - median(y)


def _rises(t, y, starts, ratio) -> list:
    """The jumps up between consecutive segments (a segment's fitted start
    above where the one before was heading) that the series kept: a rise
    that a later fall of like size (within ``ratio``) gave back is a
    level toggled, not a stair (a process's memory mapping one 88 KiB region
    and unmapping it again, four times over a run, is two levels)."""
    kept, before = [], None
    for a, b in zip(starts, np.r_[starts[1:], y.size]):
        if b - a < 2:
            before = None
            continue
        reg = regress([t[a:b] - t[a]], y[a:b])
        if before is not None:
            jump = float(reg.beta[0] - (before.beta[0] + before.beta[1] * (t[a] - before_t0)))
            if jump > 0:
                kept.append(jump)
            elif jump < 0:
                # The latest rise this fall gives back, if one is of its size.
                for i in range(len(kept) - 1, -1, -1):
                    if kept[i] / ratio < -jump < ratio * kept[i]:
                        del kept[i]
                        break
        before, before_t0 = reg, t[a]
    return kept


# --------------------------------------------------------------------------- decision


def _p_above(b, se, df, bar):
    """One-sided p that the slope is at most ``bar`` (small: it is above)."""
    return t_sf((b - bar) / se, df) if se > 0 else float(b <= bar)


def growth_shown(result: TrendResult, alpha: float) -> bool:
    """Whether the series' growth is above materiality at one-sided level
    ``alpha`` under every reading a leak claim must survive: evidence short of
    a leak (``POLICY.alpha_leak``) that still stands against "no leak"."""
    material = result.materiality
    readings = result.leak_readings or result.readings
    if material is None or not readings:
        return False
    return max(_p_above(b, se, max(df, 1.0), material) for b, se, df in readings) < alpha


def growth_ruled_out(result: TrendResult, alpha: float) -> bool:
    """Whether the series' growth is below materiality, at the run's length
    so far, at one-sided level ``alpha`` under every reading: the mirror of
    ``growth_shown``, short of ``no_leak`` (which rules growth out over
    ``Policy.clean_horizon`` times the run). What a leak claim on something
    this memory holds must overcome."""
    material = result.clean_materiality if math.isfinite(result.clean_materiality) else result.materiality
    readings = result.readings
    if material is None or not math.isfinite(material) or not readings:
        return False
    return max(1.0 - _p_above(b, se, max(df, 1.0), material) if se > 0 else float(b >= material)
               for b, se, df in readings) < alpha


def _decide(fit, materials, t, w, n, span, unit, available_bytes, dropped, note, policy) -> TrendResult:
    """``materials``: what a leak claim must clear, and what "no leak" is held under (``Policy.materiality``)."""
    material, clean_material = materials
    b, se, df = fit.slope, fit.se, max(fit.df, 1.0)
    readings = fit.readings or [(b, se, df)]
    clean_bar = clean_material / policy.clean_horizon
    # Each claim must hold under every reading of the segment.
    p_leak = max(_p_above(rb, rse, max(rdf, 1.0), material) for rb, rse, rdf in fit.leak_readings or readings)
    p_clean = max(1.0 - _p_above(rb, rse, max(rdf, 1.0), clean_bar) if rse > 0 else float(rb >= clean_bar)
                  for rb, rse, rdf in readings)
    if fit.refill:
        p_leak = 1.0
    # The interval is that of every reading a claim stands on: their hull.
    lo, hi = b, b
    for rb, rse, rdf in list(readings) + list(fit.leak_readings):
        half = t_ppf(0.975, max(rdf, 1.0)) * rse if rse > 0 else 0.0
        lo, hi = min(lo, rb - half), max(hi, rb + half)
    sps = _steps_per_second(t, w, fit.t_start)
    seg = t[-1] - fit.t_start
    since = f"the last {int(n - np.searchsorted(t, fit.t_start))} of {n} samples since step {int(fit.t_start)}"
    evidence = (f"{fmt(b, unit)}/step (95% CI {fmt_range(lo, hi, unit)}) over {since}"
                f"{_context(fit, unit)}")
    bar = f"{fmt(material, unit)}/step"
    clean_txt = f"{fmt(clean_bar, unit)}/step"
    common = dict(slope_per_step=b, slope_ci=(lo, hi), slope_se=se, slope_df=df,
                  readings=[list(r) for r in readings],
                  leak_readings=[] if fit.refill else [list(r) for r in fit.leak_readings or readings],
                  slope_per_hour=b * sps * 3600.0 if sps else None,
                  samples=n, noise=fit.noise, unit=unit, dropped_samples=dropped, materiality=material,
                  clean_materiality=clean_material,
                  fit=fit_dict(fit.t_start, float(t[-1]), fit.level, b, lo, hi, fit.t_segment),
                  total_growth=b * seg, seconds_to_exhaustion=None, steps_to_exhaustion=None)
    if p_leak < policy.alpha_leak:
        steps_ex = _exhaustion(unit, available_bytes, b)
        common.update(steps_to_exhaustion=steps_ex,
                      seconds_to_exhaustion=steps_ex / sps if steps_ex is not None and sps else None)
        return TrendResult(verdict="leak", confidence=clip01(1.0 - p_leak), p_value=p_leak,
                           onset_step=int(fit.t_start), warmup_end_step=None,
                           reason=f"{'floor ' if fit.resets else ''}grows {evidence}; above the {bar} "
                                  f"that is material{note}",
                           shape="growth_under_resets" if fit.resets else "growth", **common)
    warmup = int(fit.t_start) if fit.t_start > t[0] else None
    if p_clean < policy.alpha_clean:
        return TrendResult(verdict="no_leak", confidence=clip01(1.0 - p_clean), p_value=max(p_leak, 0.5),
                           onset_step=None, warmup_end_step=warmup,
                           reason=(f"no leak above {clean_txt} (95%): {fmt(b, unit)}/step, at most "
                                   f"{fmt(b + t_ppf(1 - policy.alpha_clean, df) * se, unit)}/step (upper 95% bound) "
                                   f"over {since}{_context(fit, unit)}{note}"), shape=_clean_shape(fit, unit),
                           **common)
    steps_needed = _decide_steps(b, se, df, materials, span, policy)
    more = f"; about {steps_needed:,} more steps would decide at this rate" if steps_needed else ""
    why = _undecided(fit, b, unit, clean_bar, bar, clean_txt)
    return TrendResult(verdict="inconclusive", confidence=clip01(1.0 - max(1.0 - p_leak, 1.0 - p_clean)),
                       p_value=p_leak, onset_step=None, warmup_end_step=warmup, reason=f"{why}: {evidence}{more}{note}",
                       shape="unclear", decide_steps=steps_needed, **common)


def _undecided(fit, b, unit, clean_bar, bar, clean_txt) -> str:
    """Why neither bound decides: a refill not yet past its drop, or which bound failed."""
    if fit.refill:
        return f"grows since a drop of {fmt(fit.refill, unit)}, not yet past it: a buffer refilling or a leak"
    if b > clean_bar:
        return f"growth not yet shown above the {bar} that is material (lower bound too low)"
    return f"growth not yet bounded under {clean_txt} (upper bound too high)"


def _context(fit, unit) -> str:
    if fit.resets:
        return f", across {fit.resets} buffer resets"
    if fit.shift:
        return f", besides a one-off shift of {fmt(fit.shift, unit)}"
    if fit.segments > 1:
        return f" (after {fit.segments - 1} earlier segment{'s' if fit.segments > 2 else ''}: warm-up, fills or steps)"
    return ""


def _clean_shape(fit, unit) -> str:
    if fit.resets:
        return "resets"
    if fit.segments > 1:
        return "step" if abs(fit.jump) > 4 * max(fit.noise, _resolution(np.array([fit.level]), unit)) else "plateau"
    return "flat"


def _decide_steps(b, se, df, materials, span, policy) -> int | None:
    """How many more steps, at the current slope and with the error shrinking
    as a line's does (span^-1.5), until one of the two bounds decides."""
    if not (se > 0 and span > 0):
        return None
    z_leak, z_clean = t_ppf(1 - policy.alpha_leak, df), t_ppf(1 - policy.alpha_clean, df)
    for k in policy.decide_horizons:
        se_k, m_k, c_k = se * k ** -1.5, materials[0] / k, materials[1] / k
        if b - z_leak * se_k > m_k or b + z_clean * se_k < c_k / policy.clean_horizon:
            return int(math.ceil(span * (k - 1)))
    return None


def _exhaustion(unit, available, slope):
    if unit != "bytes" or available is None or not slope > 0:
        return None
    try:
        available = float(available)
    except (TypeError, ValueError):
        return None
    return available / slope if math.isfinite(available) and available >= 0 else None


def _steps_per_second(t, w, t_from):
    """Training speed: the median of per-interval step rates (pauses do not slow it)."""
    if w is None:
        return None
    start = int(np.searchsorted(t, t_from))
    stride = max(1, (t.size - start) // 2000)
    tt, ww = t[start::stride], w[start::stride]
    ok = np.isfinite(ww)
    dt, dw = np.diff(tt[ok]), np.diff(ww[ok])
    good = dw > 0
    if not np.any(good):
        return None
    rate = float(median(dt[good] / dw[good]))
    return rate if rate > 0 and math.isfinite(rate) else None
