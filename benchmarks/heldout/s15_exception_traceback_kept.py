"""Keeping caught exceptions (with their tracebacks) for an end-of-run report (no TensorFlow).

Source: ipython/ipython#11572 "fix a memory leak on exception (caused by the
stored traceback)" (same cause in celery/celery#6024).
Summary: a stored exception keeps its ``__traceback__``, whose frames keep every
local variable alive, so each kept error pins the large arrays of the function
that raised it. The fix: do not keep live tracebacks; keep a formatted summary
(``traceback.format_exception_only``), bounded, and clear the frames.
"""
import collections
import traceback

import numpy as np

SOURCE = "https://github.com/ipython/ipython/pull/11572"
SLICE = "tune"
STEPS = 3000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["traceback", "frame", "BadRecord", "ValueError", "ndarray", "numpy"]},
    "fixed": {"verdict_not": "leak"},
}


class BadRecord(ValueError):
    pass


def _decode(rng, step):
    decoded = rng.standard_normal((64, 64), dtype=np.float32)     # 16 KiB local
    if step % 3 == 0:                                             # one record in three is malformed
        raise BadRecord(f"record {step}: checksum mismatch")
    return decoded.mean()


def leaky(monitor, steps):
    rng = np.random.default_rng(0)
    errors = []
    total = 0.0
    for step in range(steps):
        try:
            total += _decode(rng, step)
        except BadRecord as exc:
            errors.append(exc)                   # keeps exc.__traceback__ -> frames -> `decoded`
        monitor.sample(step)


def fixed(monitor, steps):
    rng = np.random.default_rng(0)
    counts = collections.Counter()
    recent = collections.deque(maxlen=20)
    total = 0.0
    for step in range(steps):
        try:
            total += _decode(rng, step)
        except BadRecord as exc:
            traceback.clear_frames(exc.__traceback__)
            counts[type(exc).__name__] += 1
            recent.append("".join(traceback.format_exception_only(type(exc), exc)))
        monitor.sample(step)
