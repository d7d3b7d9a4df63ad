"""One series in, one verdict out: is this memory series leaking?

`assess_series` answers "leak", "no_leak" or "inconclusive" for one series
(process RSS in bytes, live tensor counts, ...) logged against training steps,
with a robust growth rate, an autocorrelation-aware 95% interval and one
sentence of evidence.

Why not a plain trend test: training memory is not a straight line. It warms
up, caches fill to a bound, pools grow in stairs and stop, buffers fill and are
cleared (sawtooth), tables load once (step), and the noise is strongly
autocorrelated. A trend test that treats samples as independent calls nearly
all of those leaks. The method, in order:

1. Clean: drop non-finite samples, sort by step, keep the last of repeated steps.
2. Aggregate: long series become at most ~1,000 block medians, which keeps the
   cost bounded and makes spikes harmless.
3. Resets: when the series repeatedly drops far below its recent level and
   stays there (a buffer that is cleared), only the floor of each cycle is
   analysed: a leak raises the floor, a working buffer does not.
4. Warm-up: the initial transient is cut where a line fits the rest best per
   remaining sample (MSER with a linear fit, at most the first half).
5. Onset: a "flat, then linear" hinge is fitted after the warm-up; the hinge
   point is where sustained growth starts (late leaks).
6. Evidence: slope and 95% interval by least squares on winsorized points, with
   the variance and degrees of freedom widened by the lag-1 autocorrelation of
   the residuals (AR(1) effective sample size).
7. A leak needs all of: significant growth (p < 0.001), growth over the window
   material against the noise (>= 2 noise sd), growth that persists in the last
   40% of the window (a filled cache's slope collapses there), and growth that
   survives removing the single largest step (a table loaded once is not a leak).
8. "no_leak" needs evidence too: the ongoing growth's upper 95% bound must be
   small against the noise; otherwise the verdict is "inconclusive".

Everything here is pure numpy: no I/O, no TensorFlow, no state.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np

# Long series are reduced to at most this many block medians (2x before blocking).
MAX_BLOCKS = 512
# Significance of the growth slope needed for a leak (one-sided).
ALPHA_LEAK = 1e-3
# Growth that must remain after allowing one step anywhere in the window (one-sided).
ALPHA_AFTER_STEP = 1e-2
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
RESET_DROP_SD = 8.0
# Onset is searched on at most this many candidate points.
ONSET_CANDIDATES = 48
# The growth window keeps at least this share of the post-warm-up points.
MIN_WINDOW_SHARE = 0.2
MIN_WINDOW_POINTS = 10
# Cycle floors needed before a sawtooth series can be judged.
MIN_CYCLES = 5
# Raw points used to estimate the noise of long series.
NOISE_SUBSAMPLE = 20_000

_MAD_TO_SD = 1.4826
_NORMAL = NormalDist()


@dataclasses.dataclass
class TrendResult:
    """The verdict on one series, with the evidence behind it.

    Values are in the series' unit (``unit``, e.g. bytes) and steps unless the
    field name says otherwise (``_per_hour``, ``seconds_``).
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
    shape: str = ""  # what the series looked like: "linear", "stopped", "step", "resets", ...

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

    t_blk, y_blk = _aggregate_blocks(steps_f, values_f)
    resets = _find_resets(y_blk)
    sawtooth = len(resets) >= 2
    if sawtooth:
        t_an, y_an = _cycle_floors(t_blk, y_blk, resets)
        if t_an.size < MIN_CYCLES:
            return _too_few_cycles(n, dropped, unit, t_an.size, steps_f)
    else:
        t_an, y_an = t_blk, y_blk
    ev = _evidence(t_an, y_an)

    # Noise in the user's unit: raw residuals around the fit (floors for sawtooth).
    if sawtooth or t_an.size == n:
        noise = ev.resid_sd
    else:
        noise = _raw_noise(steps_f, values_f, ev)
    noise_floor = max(noise, 1e-9 * max(abs(float(np.median(y_an))), 1.0))
    steps_per_second = _steps_per_second(steps_f, walls_f, ev.t_onset)
    return _decide(ev, n, dropped, unit, noise, noise_floor, steps_per_second,
                   available_bytes, sawtooth, steps_f)


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
    finite = np.isfinite(s) & np.isfinite(v)
    dropped = int(size - np.count_nonzero(finite))
    if dropped:
        s, v = s[finite], v[finite]
        w = w[finite] if w is not None else None
    if s.size > 1:
        gaps = np.diff(s)
        if np.any(gaps < 0):
            order = np.argsort(s, kind="stable")
            s, v = s[order], v[order]
            w = w[order] if w is not None else None
            gaps = np.diff(s)
        if np.any(gaps == 0):
            # A restarted job rewrites steps; its last write is the one that stands.
            keep = np.ones(s.size, dtype=bool)
            keep[:-1] = gaps != 0
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
    scale = _MAD_TO_SD * float(np.median(np.abs(d - np.median(d))))
    if scale <= 0:
        scale = float(np.std(d))
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


def _cycle_floors(t, y, resets):
    """One point per reset cycle: its start step and its minimum value."""
    starts = np.concatenate(([0], resets))
    return t[starts], np.minimum.reduceat(y, starts)


# --------------------------------------------------------------------------- fitting


@dataclasses.dataclass
class _Evidence:
    """Fits on the analysed points (block medians or cycle floors), in the user's units."""

    t: np.ndarray
    y: np.ndarray
    w_idx: int            # first point after warm-up
    c_idx: int            # first point of the growth window (onset)
    t_warmup: float
    t_onset: float
    t_end: float
    level: float          # fitted value at onset
    slope: float          # per step, hinge fit
    slope_se: float
    df: float
    p: float
    rho: float
    resid_sd: float       # robust sd of the fit residuals, in unit
    line_slope: float     # line over the post-warm-up window
    line_se: float
    line_df: float
    line_level: float
    tail_slope: float
    tail_se: float
    tail_df: float
    step_slope: float     # slope after allowing one step in the growth window
    step_se: float
    step_df: float
    step_p: float
    step_height: float
    step_height_se: float
    step_t: float
    window_points: int


def _evidence(t, y):
    """Fit warm-up cut, onset hinge, tail and one-step models to the analysed points."""
    m = y.size
    t0, span = float(t[0]), float(t[-1] - t[0])
    span = span if span > 0 else 1.0
    ts = (t - t0) / span
    center = float(np.median(y))
    yscale = _robust_sd(y - center)
    if yscale <= 0:
        yscale = float(np.std(y)) or 1.0
    ys = (y - center) / yscale

    w = _warmup_end(ts, ys)
    tw, yw = ts[w:], ys[w:]
    mw = tw.size
    min_window = max(MIN_WINDOW_POINTS, int(math.ceil(MIN_WINDOW_SHARE * mw)))
    last_c = max(0, mw - min_window)
    cands = np.unique(np.linspace(0, last_c, min(ONSET_CANDIDATES, last_c + 1)).astype(int))
    rss = _hinge_rss(tw, yw, cands)
    c_rel = int(cands[int(np.argmin(rss))])

    a, b, resid = _robust_line(np.maximum(0.0, tw - tw[c_rel]), yw)
    rho = _ar1(resid)
    infl = (1 + rho) / (1 - rho)
    sigma2 = float(resid @ resid) / max(mw - 2, 1)
    x = np.maximum(0.0, tw - tw[c_rel])
    sxx = float(np.sum((x - x.mean()) ** 2))
    se = math.sqrt(sigma2 * infl / sxx) if sxx > 0 else math.inf
    df = max(1.0, (mw - 2) / infl)
    p = _t_sf(b / se, df) if se > 0 and math.isfinite(se) else (0.0 if b > 0 else 1.0)

    # Line over the whole post-warm-up window: the basis for "no material growth".
    la, lb, lres = _robust_line(tw - tw[0], yw)
    lrho = _ar1(lres)
    linfl = (1 + lrho) / (1 - lrho)
    lsxx = float(np.sum((tw - tw.mean()) ** 2))
    lsig2 = float(lres @ lres) / max(mw - 2, 1)
    lse = math.sqrt(lsig2 * linfl / lsxx) if lsxx > 0 else math.inf
    ldf = max(1.0, (mw - 2) / linfl)

    # Tail of the growth window: does growth persist to the end?
    tc = tw[c_rel]
    tail = tw >= tc + (1 - TAIL_FRACTION) * (tw[-1] - tc)
    if np.count_nonzero(tail) >= 5:
        tt, yt = tw[tail], yw[tail]
        tsxx = float(np.sum((tt - tt.mean()) ** 2))
        tb_ = float(np.sum((tt - tt.mean()) * (yt - yt.mean())) / tsxx) if tsxx > 0 else 0.0
        tse = math.sqrt(sigma2 * infl / tsxx) if tsxx > 0 else math.inf
        tdf = max(1.0, (tt.size - 2) / infl)
    else:
        tb_, tse, tdf = b, math.inf, 1.0

    step = _one_step_fit(tw[c_rel:], yw[c_rel:])

    to_unit = yscale / span
    resid_sd = _robust_sd(resid) * yscale
    return _Evidence(
        t=t, y=y, w_idx=w, c_idx=w + c_rel,
        t_warmup=float(t[w]), t_onset=float(t[w + c_rel]), t_end=float(t[-1]),
        level=center + a * yscale, slope=b * to_unit, slope_se=se * to_unit, df=df, p=p,
        rho=rho, resid_sd=resid_sd,
        line_slope=lb * to_unit, line_se=lse * to_unit, line_df=ldf,
        line_level=center + la * yscale,
        tail_slope=tb_ * to_unit, tail_se=tse * to_unit, tail_df=tdf,
        step_slope=step[0] * to_unit, step_se=step[1] * to_unit, step_df=step[2],
        step_p=step[3], step_height=step[4] * yscale, step_height_se=step[5] * yscale,
        step_t=t0 + step[6] * span, window_points=int(m - (w + c_rel)),
    )


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
    s0, st, sy, stt, sty, syy = (a[: dmax + 1] for a in (s0, st, sy, stt, sty, syy))
    ctt = stt - st * st / s0
    cty = sty - st * sy / s0
    cyy = syy - sy * sy / s0
    with np.errstate(divide="ignore", invalid="ignore"):
        rss = np.where(ctt > 0, cyy - cty * cty / ctt, cyy)
    rss = np.maximum(rss, 0.0)
    return int(np.argmin(rss / (s0 * s0)))


def _hinge_rss(tw, yw, cands):
    """RSS of y = a + b*max(0, t - t_c) for each candidate onset index c."""
    x = np.maximum(0.0, tw[None, :] - tw[cands][:, None])
    xc = x - x.mean(axis=1, keepdims=True)
    yc = yw - yw.mean()
    sxx = np.einsum("ij,ij->i", xc, xc)
    sxy = xc @ yc
    with np.errstate(divide="ignore", invalid="ignore"):
        rss = float(yc @ yc) - np.where(sxx > 0, sxy * sxy / sxx, 0.0)
    return rss


def _robust_line(x, y):
    """Least squares y = a + b*x after winsorizing at 3 robust sd; (a, b, residuals)."""
    a, b = _ols(x, y)
    resid = y - a - b * x
    s = _robust_sd(resid)
    if s > 0:
        fit = a + b * x
        y = np.clip(y, fit - 3 * s, fit + 3 * s)
        a, b = _ols(x, y)
        resid = y - a - b * x
    return a, b, resid


def _ols(x, y):
    xm, ym = float(x.mean()), float(y.mean())
    sxx = float(np.sum((x - xm) ** 2))
    b = float(np.sum((x - xm) * (y - ym)) / sxx) if sxx > 0 else 0.0
    return ym - b * xm, b


def _one_step_fit(t, y):
    """Best line + one step; returns the slope evidence left after the step.

    (slope, slope_se, df, p, height, height_se, step_t), all in scaled units.
    """
    m = y.size
    if m < 10:
        return (0.0, math.inf, 1.0, 1.0, 0.0, math.inf, float(t[0]) if m else 0.0)
    cands = np.unique(np.linspace(3, m - 3, min(ONSET_CANDIDATES, m - 5)).astype(int))
    xc = t - t.mean()
    yc = y - y.mean()
    sxx = float(xc @ xc)
    b0 = float(xc @ yc) / sxx
    yr = yc - b0 * xc
    z = (np.arange(m)[None, :] >= cands[:, None]).astype(np.float64)
    zc = z - z.mean(axis=1, keepdims=True)
    bz = (zc @ xc) / sxx
    zr = zc - bz[:, None] * xc[None, :]
    szz = np.einsum("ij,ij->i", zr, zr)
    szy = zr @ yr
    gain = np.where(szz > 0, szy * szy / np.maximum(szz, 1e-300), 0.0)
    best = int(np.argmax(gain))
    h = float(szy[best] / szz[best]) if szz[best] > 0 else 0.0
    b = b0 - h * float(bz[best])
    resid = yr - h * zr[best]
    rho = _ar1(resid)
    infl = (1 + rho) / (1 - rho)
    sigma2 = float(resid @ resid) / max(m - 3, 1)
    sxz = float(xc @ zc[best])
    szz_c = float(zc[best] @ zc[best])
    denom_b = sxx - (sxz * sxz / szz_c if szz_c > 0 else 0.0)
    denom_h = szz[best]
    se_b = math.sqrt(sigma2 * infl / denom_b) if denom_b > 0 else math.inf
    se_h = math.sqrt(sigma2 * infl / denom_h) if denom_h > 0 else math.inf
    df = max(1.0, (m - 3) / infl)
    p = _t_sf(b / se_b, df) if se_b > 0 and math.isfinite(se_b) else (0.0 if b > 0 else 1.0)
    return (b, se_b, df, p, h, se_h, float(t[cands[best]]))


def _ar1(resid):
    """Lag-1 autocorrelation of residuals, corrected for its small-sample bias, in [0, 0.995]."""
    m = resid.size
    denom = float(resid @ resid)
    if m < 4 or denom <= 0:
        return 0.0
    r1 = float(resid[1:] @ resid[:-1]) / denom
    # Fitted residuals understate autocorrelation by about (1 + 3*rho)/m (Kendall),
    # plus 1/m for the fitted slope.
    r1 = r1 + (2 + 3 * max(r1, 0.0)) / m
    return min(max(r1, 0.0), 0.995)


def _robust_sd(x):
    if x.size == 0:
        return 0.0
    return _MAD_TO_SD * float(np.median(np.abs(x - np.median(x))))


def _raw_noise(t, y, ev):
    """Robust sd of raw samples around the fitted hinge, on a strided subsample."""
    start = int(np.searchsorted(t, ev.t_warmup))
    tr, yr = t[start:], y[start:]
    stride = max(1, tr.size // NOISE_SUBSAMPLE)
    tr, yr = tr[::stride], yr[::stride]
    fit = ev.level + ev.slope * np.maximum(0.0, tr - ev.t_onset)
    return _robust_sd(yr - fit)


def _steps_per_second(t, w, t_from):
    """Training speed over the analysed window: median of per-interval step rates."""
    if w is None:
        return None
    sel = t >= t_from
    tt, ww = t[sel], w[sel]
    ok = np.isfinite(ww)
    tt, ww = tt[ok], ww[ok]
    if tt.size < 2:
        return None
    stride = max(1, tt.size // 2000)
    tt, ww = tt[::stride], ww[::stride]
    dt, dw = np.diff(tt), np.diff(ww)
    good = dw > 0
    if not np.any(good):
        return None
    # Median, so that pauses and restarts (huge gaps) do not slow the estimate.
    rate = float(np.median(dt[good] / dw[good]))
    return rate if rate > 0 and math.isfinite(rate) else None


# --------------------------------------------------------------------------- verdict


def _decide(ev, n, dropped, unit, noise, noise_floor, sps, available_bytes, sawtooth, steps):
    window = ev.t_end - ev.t_onset
    growth = ev.slope * window
    growth_se = ev.slope_se * window
    material = MATERIAL_NOISE_SD * noise_floor
    no_leak_bound = NO_LEAK_NOISE_SD * noise_floor
    t975 = _t_ppf(0.975, ev.df)

    significant = ev.slope > 0 and ev.p < ALPHA_LEAK
    is_material = growth >= material
    tail_t = _t_ppf(0.99, ev.tail_df)
    stopped = ev.tail_slope + tail_t * ev.tail_se < STOPPED_SLOPE_RATIO * ev.slope
    weak_tail = ev.tail_slope < TAIL_MIN_RATIO * ev.slope
    step_window = ev.t_end - ev.t_onset
    survives_step = (ev.step_slope > 0 and ev.step_p < ALPHA_AFTER_STEP
                     and ev.step_slope * step_window >= 0.5 * material)
    p_value = max(ev.p, ev.step_p) if significant else ev.p

    samples_note = _samples_note(n, dropped)
    window_samples = _samples_since(steps, ev.t_onset)
    common = dict(samples=n, noise=noise, unit=unit, dropped_samples=dropped)

    if significant and is_material and not stopped and not weak_tail and survives_step:
        lo = ev.slope - t975 * ev.slope_se
        hi = ev.slope + t975 * ev.slope_se
        conf = min(1.0 - p_value, _t_cdf((growth - material) / max(growth_se, 1e-300), ev.df))
        per_hour = ev.slope * sps * 3600.0 if sps else None
        sec_ex = steps_ex = None
        if unit == "bytes" and available_bytes is not None and ev.slope > 0:
            try:
                avail = float(available_bytes)
            except (TypeError, ValueError):
                avail = math.nan
            if math.isfinite(avail) and avail >= 0:
                steps_ex = avail / ev.slope
                sec_ex = steps_ex / sps if sps else None
        reason = (f"{'floor ' if sawtooth else ''}grows {_fmt(ev.slope, unit)}/step "
                  f"(95% CI {_fmt(lo, unit)}-{_fmt(hi, unit)}) over the last "
                  f"{window_samples} of {n} samples since step {int(ev.t_onset)}"
                  f"{' across buffer resets' if sawtooth else ''}{samples_note}")
        return TrendResult(
            verdict="leak", confidence=_clip01(conf), slope_per_step=ev.slope,
            slope_ci=(lo, hi), slope_per_hour=per_hour, p_value=p_value,
            onset_step=int(ev.t_onset), warmup_end_step=_warmup_step(ev),
            total_growth=growth, seconds_to_exhaustion=sec_ex, steps_to_exhaustion=steps_ex,
            fit=_fit_dict(ev.t_onset, ev.t_end, ev.level, ev.slope, lo, hi),
            reason=reason, shape="resets-leak" if sawtooth else "growth", **common)

    # Not a leak. Say "no_leak" only when ongoing growth is bounded below the noise.
    line_window = ev.t_end - ev.t_warmup
    lt = _t_ppf(0.975, ev.line_df)
    line_ub = (ev.line_slope + _t_ppf(0.95, ev.line_df) * ev.line_se) * line_window
    bounds = [("flat", line_ub, ev.line_slope, ev.line_se * line_window, ev.line_df)]
    if significant and stopped:
        tail_ub = (ev.tail_slope + _t_ppf(0.95, ev.tail_df) * ev.tail_se) * window
        bounds.append(("stopped", tail_ub, ev.tail_slope, ev.tail_se * window, ev.tail_df))
    step_is_real = ev.step_height > 0 and ev.step_height > 4 * ev.step_height_se
    if significant and not survives_step and step_is_real:
        step_ub = (ev.step_slope + _t_ppf(0.95, ev.step_df) * ev.step_se) * step_window
        bounds.append(("step", step_ub, ev.step_slope, ev.step_se * step_window, ev.step_df))
    kind, ub, b_used, g_se, g_df = min(bounds, key=lambda x: x[1])
    g_hat = b_used * (line_window if kind == "flat" else window)
    conf_clean = _t_cdf((no_leak_bound - g_hat) / max(g_se, 1e-300), g_df)
    line_lo, line_hi = ev.line_slope - lt * ev.line_se, ev.line_slope + lt * ev.line_se
    fit = _fit_dict(ev.t_warmup, ev.t_end, ev.line_level, ev.line_slope, line_lo, line_hi)
    base = dict(slope_per_step=ev.line_slope, slope_ci=(line_lo, line_hi),
                slope_per_hour=ev.line_slope * sps * 3600.0 if sps else None,
                onset_step=None, warmup_end_step=_warmup_step(ev),
                total_growth=ev.line_slope * line_window, seconds_to_exhaustion=None,
                steps_to_exhaustion=None, fit=fit, **common)
    if kind in ("stopped", "step"):
        p_value = max(p_value, ev.step_p if kind == "step" else
                      _t_sf(ev.tail_slope / ev.tail_se, ev.tail_df) if ev.tail_se > 0 else 1.0)

    if ub < no_leak_bound:
        if kind == "stopped":
            reason = (f"grew until about step {int(ev.t_onset + (1 - TAIL_FRACTION) * window)}, "
                      f"then stopped: at most {_fmt(max(ub, 0.0), unit)} more over the last "
                      f"{_samples_since(steps, ev.t_end - TAIL_FRACTION * window)} samples "
                      f"(a cache or pool that filled)")
        elif kind == "step":
            reason = (f"one-off step of {_fmt(ev.step_height, unit)} near step "
                      f"{int(ev.step_t)}; no material growth before or after it")
        elif sawtooth:
            reason = (f"periodic resets ({ev.t.size} cycles); the floor grows at most "
                      f"{_fmt(max(ub, 0.0), unit)} over the run")
        else:
            reason = (f"no material growth: at most {_fmt(max(ub, 0.0), unit)} over the last "
                      f"{_samples_since(steps, ev.t_warmup)} of {n} samples (noise "
                      f"{_fmt(noise, unit)})")
        return TrendResult(verdict="no_leak", confidence=_clip01(conf_clean), p_value=p_value,
                           reason=reason + samples_note,
                           shape={"flat": "resets" if sawtooth else "flat"}.get(kind, kind),
                           **base)

    conf_leak = _t_cdf((growth - material) / max(growth_se, 1e-300), ev.df)
    if significant and is_material and (stopped or weak_tail):
        why = "growth may have stopped near the end"
    elif significant and is_material and not survives_step:
        why = "the growth is mostly one step"
    elif significant:
        why = "growth is below the noise"
    else:
        why = "too noisy to tell"
    reason = (f"{why}: growth between {_fmt(line_lo * line_window, unit)} and "
              f"{_fmt(line_hi * line_window, unit)} over {_samples_since(steps, ev.t_warmup)} "
              f"samples, noise {_fmt(noise, unit)}{samples_note}")
    return TrendResult(verdict="inconclusive",
                       confidence=_clip01(1.0 - max(conf_leak, conf_clean)),
                       p_value=p_value, reason=reason, shape="unclear", **base)


def _warmup_step(ev):
    return int(ev.t_warmup) if ev.w_idx > 0 else None


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


def _too_few_cycles(n, dropped, unit, cycles, steps):
    result = _too_few(n, dropped, unit, 0)
    result.reason = (f"the series is reset {cycles - 1} times; {MIN_CYCLES} or more reset "
                     f"cycles are needed to tell whether the floor grows"
                     + _samples_note(n, dropped))
    result.shape = "resets"
    return result


def _fmt(x, unit):
    """Human number in the unit: binary prefixes for bytes, 3 significant digits otherwise."""
    if x is None or not math.isfinite(x):
        return "n/a"
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
