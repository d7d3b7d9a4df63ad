"""Statistics the trend test needs: regression, noise scale, Student-t.

Least squares whose slope variance is widened for autocorrelated residuals
(`regress`), robust noise estimates, and the Student-t distribution.

Pure numpy: no I/O, no TensorFlow, no state. scipy is not needed: the Student-t
functions at the bottom are implemented here.
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
        return t_sf(b / se, self.df)


def regress(x_cols, y, min_inflation=1.0, inflation=None):
    """OLS of y on an intercept and ``x_cols``, winsorized once at 3 robust sd.

    ``min_inflation``: the variance inflation known from elsewhere (the same
    noise process around the other segments of the series); the residuals'
    own estimate is used where larger. ``inflation``:
    use this inflation instead of estimating it from the residuals."""
    # Columns centred (and the intercept restored after): steps far from
    # zero (a run resumed at step 10**12) must not swamp the intercept.
    cols = [np.asarray(c, dtype=np.float64) for c in x_cols]
    means = [float(c.mean()) for c in cols]
    design = np.column_stack([np.ones(y.size)] + [c - m for c, m in zip(cols, means)])
    k = design.shape[1]
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    resid = y - design @ beta
    s = robust_sd(resid)
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
    if inflation is None:
        inflation = 1.0 if exact else max(variance_inflation(resid), float(min_inflation))
    try:
        cov = np.linalg.inv(design.T @ design)
        se = np.sqrt(np.maximum(np.diag(cov), 0.0) * sigma2 * inflation)
    except np.linalg.LinAlgError:
        se = np.full(k, math.inf)
    # Back to the caller's columns: the intercept at zero, its error through the slopes.
    beta = beta.copy()
    shift = np.array([0.0] + means)
    beta[0] -= float(beta[1:] @ shift[1:])
    if k > 1 and np.all(np.isfinite(se)):
        try:
            vec = np.r_[1.0, -shift[1:]]
            se = se.copy()
            se[0] = math.sqrt(max(float(vec @ cov @ vec) * sigma2 * inflation, 0.0))
        except (NameError, ValueError):
            pass
    # At least two degrees of freedom: a t with one (a Cauchy) makes any slope
    # insignificant, however many standard errors above zero it lies.
    return Regression(beta, se, max(min(2.0, float(dof)), dof / inflation), resid, sigma2, inflation)



# --------------------------------------------------------------------------- noise


def variance_inflation(resid):
    """How much autocorrelation inflates the variance of a fitted trend (>= 1).

    The larger of two estimates of the integrated autocorrelation time:
    (1 + rho) / (1 - rho) from the lag-1 autocorrelation (AR(1)), and Geyer's
    initial positive sequence over all lags. The second catches persistent
    noise hidden under white jitter (a slowly wandering allocator level plus
    per-sample noise), whose lag-1 correlation looks modest.
    """
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


def median(x) -> float:
    """``float(np.median(x))`` of a 1-D array, without numpy's per-call cost
    on the short arrays the analysis mostly has (NaN if any value is NaN)."""
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
    if x.size == 0:
        return 0.0
    return MAD_TO_SD * median(np.abs(x - median(x)))


def diff_noise(y):
    """Robust sd of sample-to-sample changes / sqrt(2): the noise of white jitter.

    Blind to slow wander, but also to ramps and resets, which is what a
    sawtooth's noise estimate needs. Uses at most ~100,000 pairs.
    """
    stride = max(1, y.size // 100_000)
    first = y[0:y.size - 1:stride]
    d = y[1::stride][: first.size] - first
    return robust_sd(d) / math.sqrt(2.0)



# --------------------------------------------------------------------------- t distribution
# scipy is not a dependency; these are accurate to ~1e-10, far beyond what a verdict needs.


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


def t_ppf(q, df):
    """Quantile of Student's t: Cornish-Fisher start, then safeguarded Newton
    steps (remembered: the analysis asks for a few levels at the same df)."""
    return _t_ppf(float(q), float(df))


@functools.lru_cache(maxsize=4096)
def _t_ppf(q, df):
    z = _NORMAL.inv_cdf(q)
    if df > 1e5:
        return z
    if q < 0.5:
        return -_t_ppf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    # Bracket [lo, hi] keeps Newton from running away on heavy tails (small df).
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q and hi < 1e12:
        hi *= 4.0
    x = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)
    x = min(max(x, lo), hi)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(60):
        err = t_cdf(x, df) - q
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
