"""An adaptive Metropolis sampler monitors its own mixing by computing the integrated autocorrelation time of the whole log-likelihood trace every five steps with an FFT helper that, like NumPy's old ``fftpack``, caches its twiddle factors per transform length in a module-level ``_fft_cache`` dict; the trace grows every step, so every estimate uses a length never seen before and the cache keeps one more, slightly larger, complex array each time (numpy, no TensorFlow; grows every five steps, faster as the chain grows).

Source: numpy/numpy pull request #7686 "ENH: Changing FFT cache to a
bounded LRU cache": "The currently existing simple dictionary cache can
grow without limit. ... This is not just a theoretical issue - we've
encountered this in practice here: obspy/obspy#1424"; choderalab/pymbar
issue #168 hit the same cache from an autocorrelation estimate ("fft stores
a cache of working memory for different sizes of fft's, so you can run into
memory problems if you call this too many times with too many different
n's, which is exactly what we do"). Fix used here (the PR's): the cache is
an LRU bounded by the bytes it holds (4 MiB here, 100 MB in the PR).
Summary: Bayesian logistic regression (2,000 points, 16 features, Gaussian
prior); each step makes 60 random-walk Metropolis proposals and records
the log-likelihood. The autocorrelation uses a zero-padded real FFT of
length 2T computed from a half-length complex FFT plus cached twiddle
factors ``exp(-2j*pi*k/n)``; the proposal scale adapts to the estimated
autocorrelation time.

Here: 4,000 steps, trace lengths 400 -> 4,400 (800 estimates). The fixed
cache evicts its least recently used lengths beyond 4 MiB.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky 41.2 / 49.1 /
60.9 / 76.7 / 96.3 MiB RSS at 20 / 40 / 60 / 80 % / end (one complex
twiddle array of T+1 values per estimate, so the growth speeds up with the
chain: ~10 KiB a step between 20 and 40 %, ~25 KiB a step over the last
fifth) with gc objects 24,022 -> 24,026 (flat: arrays are not tracked, the
cache is one dict), 13.5 s for 4,000 steps (~3.4 ms a step); fixed 41.2 /
46.0 / 45.6 / 44.9 / 44.3 MiB (the 4 MiB LRU is full by ~30 % of the run,
then only replaces) with objects 24,022 -> 24,027, 10.9 s.
"""
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/numpy/numpy/pull/7686"
SLICE = "holdout17"
STEPS = 4000
N_DATA = 2000
DIM = 16
PROPOSALS = 60
BURN_IN = 400
EVERY = 5
CACHE_BYTES = 4 * 2 ** 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "complex"],
              "holder_any": ["_fft_cache", "fft_cache"]},
    "fixed": {"verdict_not": "leak"},
}


class _LRUCache:
    """numpy#7686's fix: a dict kept under a byte budget, least recently used out first."""

    def __init__(self, max_bytes):
        self._dict = collections.OrderedDict()
        self._max_bytes = max_bytes

    def get(self, key):
        value = self._dict.pop(key, None)
        if value is not None:
            self._dict[key] = value
        return value

    def put(self, key, value):
        self._dict[key] = value
        while len(self._dict) > 1 and sum(v.nbytes for v in self._dict.values()) > self._max_bytes:
            self._dict.popitem(last=False)


_fft_cache = {}                                          # leaky: one entry per length, forever
_fft_lru = _LRUCache(CACHE_BYTES)                         # fixed


def _twiddles(n, bounded):
    if bounded:
        w = _fft_lru.get(n)
        if w is None:
            w = np.exp(-2j * np.pi * np.arange(n // 2 + 1) / n)
            _fft_lru.put(n, w)
        return w
    w = _fft_cache.get(n)
    if w is None:
        w = np.exp(-2j * np.pi * np.arange(n // 2 + 1) / n)
        _fft_cache[n] = w                                 # the leak: never evicted
    return w


def rfft(x, n, bounded):
    """Real FFT of length n (even) from a half-length complex FFT and cached twiddles."""
    buf = np.zeros(n)
    buf[:len(x)] = x
    z = np.fft.fft(buf[0::2] + 1j * buf[1::2])
    m = n // 2
    zk = np.concatenate([z, z[:1]])
    zc = np.conj(zk[::-1])
    w = _twiddles(n, bounded)
    return 0.5 * (zk + zc) - 0.5j * w * (zk - zc)


def autocorr_time(trace, bounded):
    x = np.asarray(trace) - np.mean(trace)
    n = 2 * len(x)
    f = rfft(x, n, bounded)
    acf = np.fft.irfft(f * np.conj(f), n)[:len(x)]
    acf /= acf[0]
    window = np.argmax(acf < 0.05) or len(x) // 2
    return 1.0 + 2.0 * acf[1:window].sum()


def _train(monitor, steps, bounded):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(DIM)
    x = rng.standard_normal((N_DATA, DIM))
    y = (rng.random(N_DATA) < 1.0 / (1.0 + np.exp(-x @ w_true))).astype(float)

    def log_post(w):
        z = x @ w
        return float(y @ z - np.logaddexp(0.0, z).sum() - 0.5 * w @ w)

    w = np.zeros(DIM)
    lp = log_post(w)
    scale = 0.05
    trace = []
    for _ in range(BURN_IN):                             # burn-in, before training is monitored
        prop = w + scale * rng.standard_normal(DIM)
        lq = log_post(prop)
        if np.log(rng.random()) < lq - lp:
            w, lp = prop, lq
        trace.append(lp)
    tau = 1.0
    for step in range(steps):
        accepted = 0
        for _ in range(PROPOSALS):
            prop = w + scale * rng.standard_normal(DIM)
            lq = log_post(prop)
            if np.log(rng.random()) < lq - lp:
                w, lp = prop, lq
                accepted += 1
        trace.append(lp)
        if step % EVERY == 0:
            tau = autocorr_time(trace, bounded)           # a new FFT length every time
            scale *= np.exp(0.05 * (accepted / PROPOSALS - 0.25) - 0.001 * (tau > 5))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded=True)
