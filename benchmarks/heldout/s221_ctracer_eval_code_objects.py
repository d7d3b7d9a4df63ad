"""A symbolic feature search proposes two candidate features a step as expression strings with fresh random constants and scores them with ``eval()`` on the current batch, while the whole run executes under a coverage.py-style C tracer (CI measures the coverage of the training code); the tracer takes a reference to the code object of every frame it sees called and never releases it, so each ``eval()``'d expression's code object outlives it, with no Python object pointing at it (numpy, no TensorFlow; native: the code objects, their constants and bytecode are not tracked by the gc; grows every step, ~1.3 KiB a step).

Source: coveragepy/coveragepy issue #1924 "Memory leak in CTracer": "The
CTracer leaks code objects. This can cause the memory footprint to grow,
especially if a large number of code objects are created, as with
``eval()`` in a loop" (described in pytest-dev/pytest-cov#676; fixed in
coverage 7.6.11). Fix used here (the release's): the tracer no longer
keeps the extra reference (it still traces every call).
Summary: regression on 12 input columns (batches of 256); each step two
candidate expressions such as ``np.tanh(0.731*x3 - x7) + 0.052*x1*x9`` are
generated, compiled by ``eval`` against the batch columns and scored by
their correlation with the current residual; the best 16 features are kept
(compiled once, the compiled code kept with them) and a ridge readout on
them is refit every 50 steps. The tracer is the stand-in for the C one: a
``sys.settrace`` function that takes the leaked reference with
``Py_IncRef`` (ctypes) on every call event, as the C code did, so the
leaked objects have no referrer.

Here: 24,000 steps. The fixed tracer takes no extra reference.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 43.0 / 49.1 / 55.2 / 61.4 / 67.5
MiB RSS at 20 / 40 / 60 / 80 % / end (36.2 MiB at the first step; ~1.3 KiB
a step: the two candidates' code objects with their constants, names and
bytecode, kept by the leaked references) with gc objects 23,660 at the
first step, then 24,074 / 23,721 / 23,901 / 23,570 / 23,907 at the same
marks (flat: code objects and their tuples of constants are not tracked),
12.6 s for 24,000 steps (~0.52 ms a step); fixed 36.9 / 36.9 / 36.9 / 36.9
/ 36.9 MiB with objects 23,698 / 23,649 / 23,699 / 23,701 / 23,703, 10.8 s
(~0.45 ms a step). 11-13 s a variant in its process.
"""
import ctypes
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/coveragepy/coveragepy/issues/1924"
SLICE = "holdout19"
STEPS = 24000
BATCH = 256
COLUMNS = 12
KEEP = 16
REFIT_EVERY = 50
CANDIDATES = 2
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "code"]},
    "fixed": {"verdict_not": "leak"},
}

_Py_IncRef = ctypes.pythonapi.Py_IncRef
_Py_IncRef.argtypes = [ctypes.py_object]
_Py_IncRef.restype = None


class CoverageTracer:
    """Stand-in for coverage's CTracer: counts the calls of every frame it is shown."""

    def __init__(self, leaks_code_refs):
        self.leaks_code_refs = leaks_code_refs
        self.calls = 0
        self.files = set()

    def _trace(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            self.calls += 1
            if code.co_filename not in self.files and not code.co_filename.startswith("<feature"):
                self.files.add(code.co_filename)
            if self.leaks_code_refs:
                _Py_IncRef(code)                             # the reference CTracer never released
        return None

    def start(self):
        self._previous = sys.gettrace()
        sys.settrace(self._trace)

    def stop(self):
        sys.settrace(self._previous)


_UNARY = ["np.tanh", "np.sin", "np.abs", "np.sqrt1p", "np.log1p_abs"]
_ENV = {"np": np}


def _sqrt1p(a):
    return np.sqrt(1.0 + np.abs(a))


def _log1p_abs(a):
    return np.log1p(np.abs(a))


np_ns = type("npns", (), {"tanh": np.tanh, "sin": np.sin, "abs": np.abs,
                          "sqrt1p": staticmethod(_sqrt1p), "log1p_abs": staticmethod(_log1p_abs)})
_ENV["np"] = np_ns


def _random_expr(rng):
    i, j, k, m = (int(v) for v in rng.integers(0, COLUMNS, 4))
    a, b, c = (float(v) for v in rng.normal(0, 1, 3))
    f = _UNARY[int(rng.integers(0, len(_UNARY)))]
    return "%s(%.6f*x%d - x%d) + %.6f*x%d*x%d" % (f, a, i, j, b * c, k, m)


def _run(monitor, steps, leaks_code_refs):
    rng = np.random.default_rng(0)
    tracer = CoverageTracer(leaks_code_refs)
    kept = []                                                # (score, expr, code), at most KEEP
    coef = np.zeros(0)
    tracer.start()
    try:
        for step in range(steps):
            X = rng.standard_normal((BATCH, COLUMNS))
            y = np.tanh(X[:, 0] - 0.5 * X[:, 3]) + 0.3 * X[:, 5] * X[:, 7] + 0.1 * rng.standard_normal(BATCH)
            cols = {"x%d" % c: X[:, c] for c in range(COLUMNS)}
            feats = np.stack([eval(code, _ENV, cols) for _, _, code in kept], axis=1) if kept else None
            pred = feats @ coef if feats is not None and len(coef) == feats.shape[1] else np.zeros(BATCH)
            resid = y - pred
            for _ in range(CANDIDATES):
                expr = _random_expr(rng)
                value = eval(expr, _ENV, cols)               # compiled afresh: a new code object
                score = abs(float(np.corrcoef(value, resid)[0, 1]))
                if np.isfinite(score) and (len(kept) < KEEP or score > kept[-1][0]):
                    kept.append((score, expr, compile(expr, "<feature>", "eval")))
                    kept.sort(key=lambda t: -t[0])
                    del kept[KEEP:]
            if step % REFIT_EVERY == 0 and kept:
                F = np.stack([eval(code, _ENV, cols) for _, _, code in kept], axis=1)
                coef = np.linalg.solve(F.T @ F + 1e-2 * np.eye(F.shape[1]), F.T @ y)
                kept = [(0.95 * s, e, c) for s, e, c in kept]  # let newer candidates in
            monitor.sample(step)
    finally:
        tracer.stop()


def leaky(monitor, steps):
    _run(monitor, steps, leaks_code_refs=True)


def fixed(monitor, steps):
    _run(monitor, steps, leaks_code_refs=False)
