"""A symbolic feature search compiles a candidate expression into a Python function at every step, lambdify-style, and registers its source in ``linecache`` under a new file name that is never removed (no TensorFlow; a small, slow leak).

Source: sympy/sympy#27216 "Memory Leak in ``sympy.lambdify``" (a
neural symbolic regression algorithm "relies on calling
``sympy.lambdify`` hundreds of millions of times (~200M)" and "the memory
usage of the process steadily creeping up and eventually crashing the
program"; memory still increases "despite ... 'deleting' the lambdified
equation"). ``lambdify`` writes each generated function's source into
``linecache.cache`` under a unique ``<lambdifygenerated-N>`` name (with
mtime ``None``, so ``linecache.checkcache`` never drops it) to get
readable tracebacks. Fix, sympy/sympy#27223 "Clear garbage collected
lambdified functions from the linecache": a ``weakref.finalize`` on the
generated function removes its entry when the function is collected
(sympy/sympy#27232 shows that blanking the entry instead brings the leak
back).
Summary: a feature search for a small numpy regression proposes one random
expression over the 8 input features per step, compiles it with a
``lambdify``-like helper (``exec`` of generated source, the source put
into ``linecache.cache``), scores the new feature on the current
minibatch and keeps the 8 best functions in a hall of fame; the other
candidates are dropped at once. Every candidate's source stays in
``linecache`` for the rest of the run.

Here: minibatches of 64 rows, expressions of 3-6 operations (~150-250
characters of source), one SGD step of the regression on the hall-of-fame
features. The fixed twin attaches ``weakref.finalize(func,
linecache.cache.pop, filename, None)`` as sympy#27223 does, so only the
hall of fame's 8 entries stay (it fills in the first steps, then holds
steady).

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky +10.0 MiB RSS
from 20 % of the run to the end (~0.51 KiB a step; +2.0 gc-tracked objects
a step, each entry's tuple and list of lines: 33,850 / 43,945 / 73,773
objects at 20 % / 40 % / end), fixed +0.22 MiB (objects flat at ~24,400:
the hall of fame's entries only); ~0.4-0.8 ms a step with another job on
the machine (10-21 s for 25,000 steps).
"""
import itertools
import linecache
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/sympy/sympy/issues/27216"
SLICE = "holdout8"
STEPS = 25000
FEATURES = 8
BATCH = 64
HALL = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "list", "tuple"],
              "holder_any": ["linecache", "cache"]},
    "fixed": {"verdict_not": "leak"},
}

_counter = itertools.count()
_UNARY = ("np.tanh", "np.sin", "np.abs", "np.log1p(np.abs", "np.sqrt(np.abs")
_BINARY = ("+", "-", "*")


def _random_expr(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return "x%d" % rng.integers(FEATURES) if rng.random() < 0.8 else "%.3f" % rng.normal()
    if rng.random() < 0.4:
        f = _UNARY[rng.integers(len(_UNARY))]
        inner = _random_expr(rng, depth - 1)
        return "%s(%s))" % (f, inner) if f.count("(") == 1 and "(np" in f else "%s(%s)" % (f, inner)
    op = _BINARY[rng.integers(len(_BINARY))]
    return "(%s %s %s)" % (_random_expr(rng, depth - 1), op, _random_expr(rng, depth - 1))


def lambdify_like(expr, clean_up):
    """Compile ``expr`` into ``f(x0, ..., x7)`` and register its source, as ``sympy.lambdify`` does."""
    args = ", ".join("x%d" % i for i in range(FEATURES))
    source = "def _lambdifygenerated(%s):\n    return %s\n" % (args, expr)
    filename = "<lambdifygenerated-%d>" % next(_counter)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)
    func = namespace["_lambdifygenerated"]
    # mtime None, so linecache.checkcache() keeps it (for tracebacks through generated code)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if clean_up:                                         # the fix (sympy#27223)
        weakref.finalize(func, linecache.cache.pop, filename, None)
    return func


def _search(monitor, steps, clean_up):
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=FEATURES)
    hall = []                                            # (score, func)
    w = np.zeros(HALL + FEATURES)
    for step in range(steps):
        x = rng.normal(size=(BATCH, FEATURES))
        y = np.tanh(x @ true_w) + 0.3 * np.sin(x[:, 0] * x[:, 1])
        func = lambdify_like(_random_expr(rng, 4), clean_up)
        with np.errstate(all="ignore"):
            feat = np.nan_to_num(np.asarray(func(*x.T), dtype=np.float64) * np.ones(BATCH))
        resid = y - y.mean()
        score = abs(float(np.corrcoef(feat, resid)[0, 1])) if feat.std() > 1e-9 else 0.0
        if len(hall) < HALL or score > hall[-1][0]:
            hall.append((score, func))
            hall.sort(key=lambda t: -t[0])
            del hall[HALL:]
        del func                                         # a dropped candidate is garbage now
        cols = [x] + [np.nan_to_num(np.asarray(f(*x.T), dtype=np.float64) * np.ones(BATCH))[:, None]
                      for _, f in hall]
        with np.errstate(all="ignore"):
            feats = np.clip(np.hstack(cols), -10, 10)
            k = feats.shape[1]
            grad = feats.T @ (feats @ w[:k] - y) / BATCH
            w[:k] -= 0.01 * grad
        monitor.sample(step)


def leaky(monitor, steps):
    _search(monitor, steps, clean_up=False)


def fixed(monitor, steps):
    _search(monitor, steps, clean_up=True)
