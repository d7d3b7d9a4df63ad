"""One series in, one verdict out: does this series still grow by a material amount?

A series is a piecewise-linear trend plus stationary, autocorrelated noise,
or a sawtooth (a buffer filled and cleared) whose floor carries the trend.
The verdict is on the current growth, the slope of the last segment (of the
floor), tested both ways against ``Policy.materiality``. The steps, their
reasons and the cases behind them: docs/method.md. Pure numpy, no state.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_leak_plugin.analysis._stats import ar1, diff_noise, drift, median, regress, robust_sd, t_ppf, t_sf, variance_inflation
from tb_leak_plugin.analysis.policy import POLICY, Policy
from tb_leak_plugin.analysis.results import TrendResult, clip01, fit_dict, fmt, fmt_range, samples_note, too_few

__all__ = ["TrendResult", "assess_series", "POLICY", "Policy"]

# Fewer points than this are not put in blocks (heap walks).
SMALL_SERIES = 64
# Residual degrees of freedom a reading a claim rests on needs: with one, the
# t is a Cauchy, under which no slope is significant however exact. A
# consequence of the t test, not a tuning.
_CLAIM_DF = 2


@dataclasses.dataclass
class _Fit:
    """The current segment (a sawtooth's floor line) and its evidence."""

    t_start: float        # its first point used (the segment's first points trimmed)
    level: float          # fitted value at t_start
    slope: float
    se: float
    df: float
    noise: float
    segments: int = 1     # segments found
    resets: int = 0       # sawtooth resets (0: none)
    jump: float = 0.0     # fitted jump into the current segment
    shift: float = 0.0    # one level shift inside it, if fitted
    readings: list = dataclasses.field(default_factory=list)       # (slope, se, df): what "no leak" must hold under
    leak_readings: list = dataclasses.field(default_factory=list)  # ... and what a leak must hold under
    refill: float = 0.0   # the drop a growth right after a reset may be refilling
    t_segment: float | None = None  # where the segment begins, before trimming


def assess_series(steps, values, wall_times=None, *, unit="bytes", available_bytes=None,
                  min_samples=None, final_release=False, whole: float | None = None,
                  policy: Policy = POLICY) -> TrendResult:
    """Decide whether one series still grows by a material amount; never raises on numeric input.

    Samples in any order (a repeated step keeps its last write); non-finite
    ones are dropped and counted. ``available_bytes``: memory left, for the
    time to exhaustion. ``final_release``: leave out a last sample that falls
    most of the way back (the loop's data freed when it returned). ``whole``:
    for a part of the process's memory, the bytes of the whole.
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
        return dataclasses.replace(too_few(n, need, unit, dropped, note, w), reason=(
            f"values up to {float(np.max(np.abs(y))):.3g} {unit} are too large to analyse"))
    tb, yb = _blocks(t, y, policy.max_blocks)
    fit = _fit_current(tb, yb, unit, policy, raw=(t, y) if y.size <= 2 * policy.max_blocks else None)
    span = float(t[-1] - t[0])
    level = float(median(np.abs(yb)))
    material = policy.materiality(unit, level, span, whole), policy.materiality(unit, level, span)
    return _decide(fit, material, t, w, n, span, unit, available_bytes, dropped, note, policy)


# --------------------------------------------------------------------------- preparation


def _take(index, *arrays):
    return tuple(a[index] if a is not None else None for a in arrays)


def _prepare(steps, values, wall_times):
    """Finite samples sorted by step, the last kept per step; and how many were dropped."""
    try:
        s = np.asarray(steps, dtype=np.float64).ravel()
        v = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return np.empty(0), np.empty(0), None, 0
    size = min(s.size, v.size)
    s, v, w = s[:size], v[:size], _walls(wall_times, size)
    finite = np.isfinite(v) & np.isfinite(s)
    dropped = int(size - np.count_nonzero(finite))
    s, v, w = _take(finite, s, v, w)
    if s.size > 1 and float(np.min(np.diff(s))) <= 0:
        s, v, w = _take(np.argsort(s, kind="stable"), s, v, w)
        # A restarted job rewrites steps; its last write is the one that stands.
        s, v, w = _take(np.r_[np.diff(s) != 0, True], s, v, w)
    return s, v, w, dropped


def _walls(wall_times, size):
    try:
        w = np.asarray(wall_times, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    return w[:size] if wall_times is not None and w.size >= size else None


def _drop_spikes(t, y, w, policy):
    """Leave out isolated spikes: a point far from both neighbours, which agree
    (block medians already ignore one bad reading in their block)."""
    scale = diff_noise(y) if 5 <= y.size <= 2 * policy.max_blocks else 0.0
    if not scale > 0:
        return t, y, w, 0
    bar = policy.spike_sd * scale
    left, right = y[1:-1] - y[:-2], y[1:-1] - y[2:]
    spike = (np.abs(left) > bar) & (np.abs(right) > bar) & (np.sign(left) == np.sign(right)) \
        & (np.abs(y[2:] - y[:-2]) < 0.25 * np.minimum(np.abs(left), np.abs(right)))
    return (*_take(np.r_[True, ~spike, True], t, y, w), int(np.count_nonzero(spike)))


def _drop_final_release(t, y, w, policy, least=None):
    """Leave out a last sample that falls more than half way back after a rise
    when the samples before it come close to it (``release_gap_share``), in a
    series of at least ``least`` samples (default: enough to judge the rest)."""
    least = policy.min_samples + 1 if least is None else least
    if y.size < least or float(t[-1] - t[-2]) > policy.release_gap_share * float(t[-2] - t[0]):
        return t, y, w, 0
    grown = float(y[-2] - np.min(y[:-1]))
    rising = np.count_nonzero(np.diff(y[:-1]) > 0) >= 0.6 * (y.size - 2)
    if grown > 0 and float(y[-2] - y[-1]) > 0.5 * grown and rising:
        return (*_take(slice(None, -1), t, y, w), 1)
    return t, y, w, 0


def falls_back_at_end(steps, values, policy: Policy = POLICY) -> bool:
    """Whether the last sample falls more than half way back after a rise
    through at least three samples (a short run's baseline and two walks),
    however far it lies from them (a release at close ``final_release`` may keep)."""
    t, y, _w, _dropped = _prepare(steps, values, None)
    reach = dataclasses.replace(policy, release_gap_share=math.inf)
    return _drop_final_release(t, y, None, reach, least=policy.min_samples)[3] == 1


def _blocks(t, y, max_blocks):
    """Medians over blocks of equal span in steps (at most ``max_blocks``): the
    schedule thins its points as the run ages, and a stretch of steps must weigh
    the same whatever its number of points. Heap walks are kept as they are."""
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
        # Evenly sampled: blocks of equal count (the remainder from the start).
        if n <= 2 * max_blocks:
            return t, y
        k = n // max_blocks
        m = n // k
        r = n - m * k
        return t[r:].reshape(m, k)[:, k // 2], np.partition(y[r:].reshape(m, k), k // 2, axis=1)[:, k // 2]
    ty = [(t[a + (c - 1) // 2], median(y[a:a + c])) for a, c in zip(starts.tolist(), sizes.tolist())]
    return np.array([p[0] for p in ty]), np.array([p[1] for p in ty])


# --------------------------------------------------------------------------- the model


def _resolution(y, unit):
    """The smallest change a series can show: one of a count, else a rounding error of its level."""
    return 1.0 if unit != "bytes" else max(1.0, 1e-9 * float(np.max(np.abs(y))))


def _fit_current(t, y, unit, policy, raw=None) -> _Fit:
    """A sawtooth's floor where the series is one (looked for in the raw
    samples where they are few enough: blocks blur cycles), else the last of
    its segments, whose first points (``trim_share``) may be the regime before."""
    src = raw if raw is not None else (t, y)
    resets = _resets(src[1], unit, policy)
    if resets.size >= policy.sawtooth_resets:
        fit = _fit_sawtooth(*src, resets, unit)
        if not _floor_refuted(fit, *src, resets, policy):
            return fit
        resets = resets[:0]
    if raw is not None:
        resets = _resets(y, unit, policy)
    res = _resolution(y, unit)
    starts, noise_var, pooled = _segment_with_noise(t, y, res, policy)
    s = min(int(starts[-1]), max(y.size - policy.min_segment, 0))
    t_segment = float(t[s])
    if s > 0:
        s = min(s + int(policy.trim_share * (y.size - s)), y.size - policy.min_segment)
    reg, readings, leak_readings = _readings(t, y, s, starts, noise_var, pooled, policy)
    # The line through the segment's middle at the reading's slope (a walk's drift has no level).
    level = float(reg.beta[0]) + (float(reg.beta[1]) - readings[0][0]) * float(np.mean(t[s:] - t[s]))
    return _Fit(t_start=float(t[s]), level=level, slope=readings[0][0], se=readings[0][1],
                df=readings[0][2], noise=_noise(reg.resid, res), segments=int(starts.size),
                jump=float(reg.beta[0] - y[s - 1]) if s > 0 else 0.0,
                shift=float(reg.beta[2]) if reg.beta.size > 2 else 0.0, readings=readings,
                leak_readings=leak_readings, refill=_refill(t, y, resets, s, readings[0][0], policy),
                t_segment=t_segment)


def _segment_with_noise(t, y, res, policy):
    """Segment at the jitter's noise, then again at the noise around that
    segmentation (with the one shift the current segment may carry), widened
    by its autocorrelation, until it stops growing: wander must not read as
    regimes. Returns the starts, the noise variance and its inflation."""
    noise_var, pooled = max(_local_noise(t, y), res / 2) ** 2, 1.0
    starts = _segment(t, y, noise_var, policy)
    for round_ in range(policy.noise_rounds):
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


def _reading(reg, cols=None, y=None):
    """A fit's growth (slope, se, df); with ``cols`` and ``y``, the same
    model read as a random walk's drift too, and of the two the one with the
    narrower 95% interval: stationary noise is read by the line, widened for
    its autocorrelation; noise that wanders as a random walk, whose
    autocorrelation leaves the line two degrees of freedom, by its changes."""
    line = float(reg.beta[1]), float(reg.se[1]), float(reg.df)
    if cols is None:
        return line
    walk = drift(cols, y)
    walk = float(walk.beta[1]), float(walk.se[1]), float(walk.df)
    if not walk[1] < math.inf:
        return line
    return min(line, walk, key=lambda r: t_ppf(0.975, max(r[2], 1.0)) * r[1])


def _readings(t, y, s, starts, noise_var, pooled, policy):
    """The growth of the segment from ``s`` under each reading a claim must
    survive: (the fit, the readings "no leak" must hold under, a leak's)."""
    tt, yy = t[s:], y[s:]
    cols = [tt - tt[0]]
    # One noise process: the autocorrelation around every segment bounds this one's.
    reg = regress(cols, yy, min_inflation=pooled)
    readings = [_reading(reg, cols, yy)]
    shift = _level_shift(tt, yy, noise_var, policy)
    if shift:
        # Growth besides one level shift. A rise like (``like_step_ratio``) two
        # kept rises before is one more stair too, for "no leak" only.
        cols.append((np.arange(yy.size) >= shift).astype(np.float64))
        reg = regress(cols, yy, min_inflation=pooled)
        size, ratio = float(reg.beta[2]), policy.like_step_ratio
        stairs = size > 0 and sum(size / ratio < r < ratio * size for r in _rises(t, y, starts, ratio)) >= 2
        readings = [_reading(reg, cols, yy)] + (readings if stairs else [])
    leak_readings = readings[:1]
    if yy.size - 1 - (len(cols) + 1) >= _CLAIM_DF:
        # No claim rests on the last sample alone, the one of most leverage.
        last_out = [c[:-1] for c in cols]
        leak_readings.append(_reading(regress(last_out, yy[:-1], min_inflation=pooled), last_out, yy[:-1]))
        readings = readings + leak_readings[-1:]
    return reg, readings, leak_readings


def _refill(t, y, resets, s, slope, policy) -> float:
    """The drop a growth right after the last reset may be refilling (a leak
    only once past it), or 0; a drop with under ``min_segment`` samples after
    it refills nothing (the growth came before it)."""
    if resets.size and int(resets[-1]) + 1 >= s - policy.min_segment \
            and y.size - (int(resets[-1]) + 1) >= policy.min_segment:
        r = int(resets[-1])
        drop = float(y[r] - y[r + 1])
        if slope * float(t[-1] - t[r + 1]) < drop:
            return drop
    return 0.0


def _local_noise(t, y) -> float:
    """Robust sd of each point's distance from the line through its two
    neighbours: blind to a trend and to uneven spacing (~100,000 triples at most)."""
    stride = max(1, y.size // 100_000)
    tt, yy = t[::stride], y[::stride]
    if yy.size < 3:
        return 0.0
    w = (tt[1:-1] - tt[:-2]) / (tt[2:] - tt[:-2])
    r = yy[1:-1] - (yy[:-2] + w * (yy[2:] - yy[:-2]))
    return robust_sd(r / np.sqrt(1.0 + w * w + (1.0 - w) ** 2))  # Var(r) = sd^2 (1 + w^2 + (1 - w)^2)


def _level_shift(t, y, noise_var, policy) -> int:
    """Where one level shift (a table loaded, a release) explains the segment
    better than a line alone by more than a segment's penalty; 0 if nowhere.
    At least two samples after it (a last one alone is the run's to judge), and
    room for ``_CLAIM_DF`` residual degrees of freedom besides the line and it."""
    n = y.size
    L = max(1, min(policy.min_segment, (n - 2) // 3))
    if n < max(2 * L + 2, 3 + _CLAIM_DF):
        return 0
    x = t - t.mean()
    sxx = float(x @ x)
    if not sxx > 0:
        return 0
    e = y - y.mean() - x * (float(x @ y) / sxx)
    tail_e = np.cumsum(e[::-1])[::-1]        # sum of e[i:] for each i
    tail_x = np.cumsum(x[::-1])[::-1]
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
    """The floor's line of a buffer filled and cleared. The first sample after
    a reset lies up to one interval's ramp above the floor, and later intervals
    are longer: each claim must hold with the floors read as sampled and half
    that ramp lower (at most a full buffer). Floor noise: the series' own, a
    cycle apart, and at least the drifting part of that position's uncertainty."""
    floors = resets + 1
    d, dt = np.diff(y), np.diff(t)
    rising = d > 0
    ramp = float(median(d[rising] / dt[rising])) if rising.any() else 0.0
    gaps = t[floors] - t[floors - 1]
    tf = t[floors]
    step_err = ramp * float(median(dt)) / math.sqrt(12.0)
    if tf.size < 3 or not float(tf[-1] - tf[0]) > 0:
        return _Fit(t_start=float(t[0]), level=float(y[floors][0]), slope=0.0, se=math.inf, df=1.0,
                    noise=step_err, resets=int(resets.size))
    start = int(floors[0])
    phase = t[start:] - t[start:][np.r_[0, floors[1:] - start][
        np.searchsorted(floors[1:] - start, np.arange(t.size - start), side="right")]]
    around = regress([t[start:] - t[start], phase], y[start:]).resid
    rho = ar1(around) ** max(1.0, float(median(np.diff(floors))))
    exact = robust_sd(around) <= (2.0 * _resolution(y, unit) if unit != "bytes" else 0.0)
    sxx = float(np.sum((tf - tf.mean()) ** 2))
    full = float(np.max(y[floors - 1] - y[floors]))
    spread = np.minimum(ramp * np.polyval(np.polyfit(tf - tf[0], gaps, 1), tf - tf[0]), full)

    def line(share):
        reg = regress([tf - tf[0]], y[floors] - share * spread, inflation=1.0 if exact else (1 + rho) / (1 - rho))
        return reg, (float(reg.beta[1]), math.hypot(float(reg.se[1]), step_err / math.sqrt(sxx)), float(reg.df))

    reg, raw = line(0.0)
    ends = [raw, line(0.5)[1]]
    return _Fit(t_start=float(tf[0]), level=float(reg.beta[0]), slope=raw[0], se=raw[1], df=raw[2],
                noise=max(robust_sd(reg.resid), step_err), resets=int(resets.size), readings=ends,
                leak_readings=list(ends))


def _floor_refuted(fit, t, y, resets, policy) -> bool:
    """Whether half the samples after the last floor (three at least) lie
    ``floor_refute_sd`` of its noise below the floor line."""
    after = slice(int(resets[-1]) + 1, None)
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
    # A drop that rebounds at once is a dip; one back to the point before, a spike's end.
    rebound = np.r_[d, 0.0][drops + 1] > 0.5 * np.abs(d[drops])
    undone = y[drops + 1] > y[np.maximum(drops - 1, 0)] - bar
    resets = drops[~rebound & ~undone]
    # Between resets a buffer refills a share of what they drop (over the
    # cycles together); drops with nothing refilled are a series stepping down.
    if resets.size >= 2:
        refilled = sum(float(y[b] - np.min(y[a + 1:b + 1])) for a, b in zip(resets[:-1], resets[1:]))
        dropped = float(np.sum(y[resets[1:]] - y[resets[1:] + 1]))
        if refilled < policy.refill_share * dropped:
            return resets[:1]
    return resets


def _segment(t, y, noise_var, policy, max_segments=None) -> np.ndarray:
    """Start indices of a partition into lines: binary segmentation on block
    means, a split kept where it lowers the squared error by more than the
    penalty. Parts keep L points (the first may be a short baseline); the last
    keeps ``final_share`` of the run's steps (not points: they thin out)."""
    k = max(1, int(math.ceil(y.size / policy.segment_points)))
    m = y.size // k
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
    out = [regress([t[a:b] - t[a]], y[a:b]).resid for a, b in zip(starts, np.r_[starts[1:], y.size]) if b - a >= 3]
    return np.concatenate(out) if out else y - median(y)


def _rises(t, y, starts, ratio) -> list:
    """The jumps up between consecutive segments that the series kept: a rise
    a later fall of like size (within ``ratio``) gave back is a level toggled."""
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
                given_back = [i for i, r in enumerate(kept) if r / ratio < -jump < ratio * r]
                if given_back:
                    del kept[given_back[-1]]
        before, before_t0 = reg, t[a]
    return kept


# --------------------------------------------------------------------------- decision


def _p(b, se, df, bar, above):
    """One-sided p against the claim that the slope is above ``bar`` (or below it)."""
    if not se > 0:
        return float(b <= bar) if above else float(b >= bar)
    p = t_sf((b - bar) / se, max(df, 1.0))
    return p if above else 1.0 - p


def _p_claim(readings, bar, above) -> float:
    """The claim's p under the reading least favourable to it."""
    return max(_p(b, se, df, bar, above) for b, se, df in readings)


def growth_shown(result: TrendResult, alpha: float) -> bool:
    """Whether growth is above materiality at one-sided ``alpha`` under every
    reading a leak must survive: evidence short of ``alpha_leak``."""
    readings = result.leak_readings or result.readings
    return result.materiality is not None and bool(readings) and _p_claim(readings, result.materiality, True) < alpha


def growth_ruled_out(result: TrendResult, alpha: float) -> bool:
    """Whether growth is below materiality at the run's length so far (not
    ``clean_horizon`` times it, as ``no_leak``), at one-sided ``alpha``."""
    material = result.clean_materiality if math.isfinite(result.clean_materiality) else result.materiality
    return material is not None and math.isfinite(material) and bool(result.readings) \
        and _p_claim(result.readings, material, False) < alpha


def _decide(fit, materials, t, w, n, span, unit, available_bytes, dropped, note, policy) -> TrendResult:
    """Two one-sided tests of the current growth against ``materials``: what a
    leak claim must clear, and what "no leak" is held under (``clean_horizon``)."""
    material, clean_material = materials
    b, se, df = fit.slope, fit.se, max(fit.df, 1.0)
    readings = fit.readings or [(b, se, df)]
    leak_readings = fit.leak_readings or readings
    clean_bar = clean_material / policy.clean_horizon
    p_leak = 1.0 if fit.refill else _p_claim(leak_readings, material, True)
    p_clean = _p_claim(readings, clean_bar, False)
    lo = hi = b  # the interval: the hull of every reading's
    for rb, rse, rdf in readings + leak_readings:
        half = t_ppf(0.975, max(rdf, 1.0)) * rse if rse > 0 else 0.0
        lo, hi = min(lo, rb - half), max(hi, rb + half)
    sps = _steps_per_second(t, w, fit.t_start)
    since = f"the last {int(n - np.searchsorted(t, fit.t_start))} of {n} samples since step {int(fit.t_start)}"
    over = f"over {since}{_context(fit, unit)}"
    bar, clean_txt = f"{fmt(material, unit)}/step", f"{fmt(clean_bar, unit)}/step"
    common = dict(slope_per_step=b, slope_ci=(lo, hi), slope_se=se, slope_df=df, readings=[list(r) for r in readings],
                  leak_readings=[] if fit.refill else [list(r) for r in leak_readings],
                  slope_per_hour=b * sps * 3600.0 if sps else None, samples=n, noise=fit.noise, unit=unit,
                  dropped_samples=dropped, materiality=material, clean_materiality=clean_material,
                  fit=fit_dict(fit.t_start, float(t[-1]), fit.level, b, lo, hi, fit.t_segment),
                  total_growth=b * (t[-1] - fit.t_start), seconds_to_exhaustion=None, steps_to_exhaustion=None)
    evidence = f"{fmt(b, unit)}/step (95% CI {fmt_range(lo, hi, unit)}) {over}"
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
        upper = fmt(b + t_ppf(1 - policy.alpha_clean, df) * se, unit)
        return TrendResult(verdict="no_leak", confidence=clip01(1.0 - p_clean), p_value=max(p_leak, 0.5),
                           onset_step=None, warmup_end_step=warmup, shape=_clean_shape(fit, unit),
                           reason=f"no leak above {clean_txt} (95%): {fmt(b, unit)}/step, at most {upper}/step "
                                  f"(upper 95% bound) {over}{note}", **common)
    steps_needed = _decide_steps(b, se, df, materials, span, policy)
    more = f"; about {steps_needed:,} more steps would decide at this rate" if steps_needed else ""
    if fit.refill:
        why = f"grows since a drop of {fmt(fit.refill, unit)}, not yet past it: a buffer refilling or a leak"
    elif b > clean_bar:
        why = f"growth not yet shown above the {bar} that is material (lower bound too low)"
    else:
        why = f"growth not yet bounded under {clean_txt} (upper bound too high)"
    return TrendResult(verdict="inconclusive", confidence=clip01(1.0 - max(1.0 - p_leak, 1.0 - p_clean)),
                       p_value=p_leak, onset_step=None, warmup_end_step=warmup, reason=f"{why}: {evidence}{more}{note}",
                       shape="unclear", decide_steps=steps_needed, **common)


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
    """More steps, at the current slope and with the error shrinking as a
    line's does (span^-1.5), until one of the two bounds decides."""
    if not (se > 0 and span > 0):
        return None
    z_leak, z_clean = t_ppf(1 - policy.alpha_leak, df), t_ppf(1 - policy.alpha_clean, df)
    for k in policy.decide_horizons:
        se_k, m_k, c_k = se * k ** -1.5, materials[0] / k, materials[1] / k
        if b - z_leak * se_k > m_k or b + z_clean * se_k < c_k / policy.clean_horizon:
            return int(math.ceil(span * (k - 1)))
    return None


def _exhaustion(unit, available, slope):
    try:
        available = float(available)
    except (TypeError, ValueError):
        return None
    ok = unit == "bytes" and slope > 0 and math.isfinite(available) and available >= 0
    return available / slope if ok else None


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
