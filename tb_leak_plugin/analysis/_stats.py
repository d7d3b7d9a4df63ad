"""What the series model needs: least squares widened for autocorrelated
residuals, robust noise scales, and Student's t (scipy is not a dependency).
Pure numpy, no state.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from statistics import NormalDist

import numpy as np

MAD_TO_SD = 1.4826
_NORMAL = NormalDist()


# --------------------------------------------------------------------------- regression


@dataclasses.dataclass
class Regression:
    beta: np.ndarray
    se: np.ndarray        # per coefficient, widened for autocorrelation
    df: float             # effective degrees of freedom
    resid: np.ndarray


def regress(x_cols, y, min_inflation=1.0, inflation=None):
    """OLS of y on an intercept and ``x_cols``, winsorized once at 3 robust sd
    (a GC pause must not drive the slope); the variance widened by the
    residuals' autocorrelation, or by ``min_inflation`` where that is larger
    (the same noise around other segments), or by ``inflation`` if given."""
    # Centred columns: steps far from zero (a resumed run) must not swamp the intercept.
    cols = [np.asarray(c, dtype=np.float64) for c in x_cols]
    means = [float(c.mean()) for c in cols]
    design = np.column_stack([np.ones(y.size)] + [c - m for c, m in zip(cols, means)])
    k = design.shape[1]
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    resid = y - design @ beta
    s = robust_sd(resid)
    if s > 0:
        fit = design @ beta
        y = np.clip(y, fit - 3 * s, fit + 3 * s)
        beta = np.linalg.lstsq(design, y, rcond=None)[0]
        resid = y - design @ beta
    dof = max(y.size - k, 1)
    sigma2 = float(resid @ resid) / dof
    # An exact fit leaves only rounding noise, whose "autocorrelation" means nothing.
    exact = sigma2 <= 1e-20 * max(float(np.mean(y * y)), 1e-300)
    if inflation is None:
        inflation = 1.0 if exact else max(variance_inflation(resid), float(min_inflation))
    try:
        se = np.sqrt(np.maximum(np.diag(np.linalg.inv(design.T @ design)), 0.0) * sigma2 * inflation)
    except np.linalg.LinAlgError:
        se = np.full(k, math.inf)
    beta = beta.copy()
    beta[0] -= float(beta[1:] @ np.array(means))  # the intercept at the caller's zero
    # At least two degrees of freedom: a t with one (a Cauchy) makes any slope
    # insignificant, however many standard errors above zero it lies.
    return Regression(beta, se, max(min(2.0, float(dof)), dof / inflation), resid)


def drift(x_cols, y):
    """The same model on the sample-to-sample changes, as a random walk's
    drift: changes of y on changes of ``x_cols`` (the first is the steps),
    weighted by 1 / steps between samples (a walk's variance grows with
    them). Exact for noise that wanders as a random walk, where the lines'
    inflation degenerates (its degrees of freedom go to two); for stationary
    noise its variance is never too small: the slope telescopes to the ends'
    noise, n (1 - rho) / (1 - rho^n) >= 1 times overstated. Its slope is at
    beta[1]; there is no intercept (beta[0] is 0)."""
    cols = [np.diff(np.asarray(c, dtype=np.float64)) for c in x_cols]
    dt, dy = cols[0], np.diff(np.asarray(y, dtype=np.float64))
    k = len(cols)
    m = dy.size
    if m - k < 1 or not np.all(dt > 0):
        return Regression(np.zeros(k + 1), np.full(k + 1, math.inf), 1.0, dy)
    root_w = 1.0 / np.sqrt(dt)
    design = np.column_stack(cols) * root_w[:, None]
    beta = np.linalg.lstsq(design, dy * root_w, rcond=None)[0]
    resid = dy * root_w - design @ beta
    sigma2 = float(resid @ resid) / (m - k)
    try:
        se = np.sqrt(np.maximum(np.diag(np.linalg.inv(design.T @ design)), 0.0) * sigma2)
    except np.linalg.LinAlgError:
        se = np.full(k, math.inf)
    return Regression(np.r_[0.0, beta], np.r_[math.inf, se], float(m - k), resid)


# --------------------------------------------------------------------------- noise


def variance_inflation(resid):
    """How much autocorrelation inflates a fitted trend's variance (>= 1): the
    larger of (1 + rho) / (1 - rho) from the lag-1 autocorrelation and Geyer's
    initial positive sequence over all lags, which catches persistent noise
    under white jitter (an allocator level wandering), whose lag-1 looks modest."""
    rho = ar1(resid)
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


def ar1(resid):
    """Lag-1 autocorrelation of residuals, bias-corrected (Kendall: fitted
    residuals understate it by about (1 + 3 rho) / m) and raised by one standard
    error (too little makes every interval too narrow), in [0, 0.995]."""
    m = resid.size
    denom = float(resid @ resid)
    if m < 4 or denom <= 0:
        return 0.0
    r1 = float(resid[1:] @ resid[:-1]) / denom
    if m >= 12:
        r1 += (1 + 3 * max(r1, 0.0)) / m
    r1 += math.sqrt(max(1.0 - r1 * r1, 0.0) / m)
    return min(max(r1, 0.0), 0.995)


def median(x) -> float:
    """``float(np.median(x))``, without numpy's per-call cost on short arrays."""
    x = np.asarray(x)
    n = x.size
    if n == 0 or n > 64 or x.ndim != 1:
        return float(np.median(x))
    if np.isnan(x).any():
        return math.nan
    s = sorted(x.tolist())
    half = n // 2
    return float(s[half]) if n % 2 else 0.5 * (s[half - 1] + s[half])


def robust_sd(x):
    return MAD_TO_SD * median(np.abs(x - median(x))) if x.size else 0.0


def diff_noise(y):
    """Robust sd of sample-to-sample changes / sqrt(2): white jitter's noise,
    blind to wander, ramps and resets (~100,000 pairs at most)."""
    stride = max(1, y.size // 100_000)
    first = y[0:y.size - 1:stride]
    d = y[1::stride][: first.size] - first
    return robust_sd(d) / math.sqrt(2.0)


# --------------------------------------------------------------------------- t distribution (to ~1e-10)


def t_sf(t, df):
    """P(T > t) for Student's t with (possibly fractional) df."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > 1e5:
        return 1.0 - _NORMAL.cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def t_cdf(t, df):
    return 1.0 - t_sf(t, df)


@functools.lru_cache(maxsize=4096)
def t_ppf(q, df):
    """Quantile of Student's t: Cornish-Fisher, then safeguarded Newton steps."""
    z = _NORMAL.inv_cdf(q)
    if df > 1e5:
        return z
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q and hi < 1e12:
        hi *= 4.0
    x = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)
    x = min(max(x, lo), hi)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(60):
        err = t_cdf(x, df) - q
        lo, hi = (lo, x) if err > 0 else (x, hi)
        pdf = math.exp(logc - (df + 1) / 2 * math.log1p(x * x / df))
        nxt = x - err / pdf if pdf > 0 else (lo + hi) / 2
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2
        if abs(nxt - x) < 1e-10 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return x


def betainc(a, b, x):
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
