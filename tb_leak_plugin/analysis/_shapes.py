"""The shapes a memory series takes, fitted: warm-up, onset, filling, steps, resets.

Each function reads one structure from the points (see the method in
`tb_leak_plugin.analysis.trend`): buffer resets and the sawtooth they make,
the warm-up cut (MSER), the onset of growth (a hinge), a cache filling up
(line + A*(1 - exp(-x/tau))), one-off steps, and whether growth persists in
the tail. `analyse` combines them into what the fits say; the verdict is
`trend`'s.

Pure numpy: no I/O, no TensorFlow, no state.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_leak_plugin.analysis._stats import MAD_TO_SD, median, regress, robust_sd

# The persistence check looks at the last TAIL_FRACTION of the growth window.
TAIL_FRACTION = 0.4
# A drop counts as a buffer reset when it exceeds this many sd of point-to-point changes.
RESET_DROP_SD = 5.0
# Onset is searched on at most this many candidate points.
ONSET_CANDIDATES = 48
# The growth window keeps at least this share of the post-warm-up points.
MIN_WINDOW_SHARE = 0.2
MIN_WINDOW_POINTS = 20
# A saturating fit replaces the hinge when it lowers the RSS by this many noise variances.
SATURATION_PENALTY = 10.0
SATURATION_TAUS = 16


# --------------------------------------------------------------------------- resets


def find_resets(y):
    """Indices that start a new cycle after a sustained drop (buffer cleared)."""
    if y.size < 8:
        return np.empty(0, dtype=int)
    d = np.diff(y)
    deviation = np.abs(d - median(d))
    scale = MAD_TO_SD * float(median(deviation))
    if scale <= 0:
        # Noise-free ramps: most changes are identical, so the MAD is zero.
        scale = float(np.mean(deviation))
        if scale <= 0:
            return np.empty(0, dtype=int)
    threshold = RESET_DROP_SD * scale
    idx = np.nonzero(d < median(d) - threshold)[0] + 1
    idx = idx[(idx >= 2) & (idx <= y.size - 2)]
    if idx.size == 0:
        return idx
    # A spike up before, or down after, the drop is an outlier, not a reset:
    # the level must stay down on both neighbours.
    before = np.minimum(y[idx - 1], y[idx - 2])
    after = np.maximum(y[idx], y[idx + 1])
    return idx[before - after > threshold / 2]


def desawtooth(t, y, resets):
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
    fit = regress([tt - tt[0], phase], yy)
    ramp = float(fit.beta[2])
    # Within-cycle residuals: each cycle's mean removed, one common ramp.
    bounds = resets - start
    counts = np.diff(np.append(bounds, tt.size))
    y_in = yy - np.repeat(np.add.reduceat(yy, bounds) / counts, counts)
    p_in = phase - np.repeat(np.add.reduceat(phase, bounds) / counts, counts)
    spp = float(p_in @ p_in)
    resid = y_in - (float(p_in @ y_in) / spp if spp > 0 else 0.0) * p_in
    lost = bounds.size + 1  # one mean per cycle and the ramp
    noise = robust_sd(resid) * math.sqrt(tt.size / max(tt.size - lost, 1))
    return tt, yy - ramp * phase, ramp, noise


# --------------------------------------------------------------------------- fitting


@dataclasses.dataclass
class Analysis:
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


def analyse(t, y):
    """Warm-up cut, growth model (hinge or saturating), tail and step checks."""
    t0, span = float(t[0]), float(t[-1] - t[0])
    span = span if span > 0 else 1.0
    center = float(median(y))
    yscale = robust_sd(y - center) or float(np.std(y)) or 1.0
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
    hinge = regress([np.maximum(0.0, tw - tw[c_rel])], yw)
    line = regress([tw - tw[0]], yw)

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
    return Analysis(
        t_warmup=float(t[w]), w_idx=w, model=model,
        t_onset=t_onset, t_end=t_end, level=level, slope=slope,
        slope_se=float(fit.se[1]) * to_slope, df=fit.df, p=fit.p_positive(1),
        resid_sd=robust_sd(fit.resid) * yscale, predict=predict,
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
    return float(taus[pick]), float(rss[pick]), regress([x, design[pick, :, 2]], ys), bound


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
    return float(taus[best]), float(rss[best]), regress([x, g[best]], yw)


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
    joint = regress([t - t[0], (np.arange(m) >= s_joint).astype(np.float64)], y)
    only = regress([(np.arange(m) >= s_best).astype(np.float64)], y)
    return {
        "step_better": bool(float(np.min(rss_step)) < rss_line),
        "height": float(only.beta[1]), "height_se": float(only.se[1]),
        "t_step": float(t[s_best]),
        "after_slope": float(joint.beta[1]), "after_se": float(joint.se[1]),
        "after_df": joint.df, "after_p": joint.p_positive(1),
    }
