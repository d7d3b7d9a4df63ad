"""A numpy telemetry model is trained on event records whose RFC 3339 timestamps are parsed by a C-accelerated parser written like udatetime's ``from_string`` before issue #24 was fixed: the C path (``from_rfc3339_string``) ``strdup``s its input to tokenise it and never frees the copy, so every parsed timestamp leaves a ~48-byte chunk in the C heap, while the pure-Python fallback does not leak (plain Python + numpy, no TensorFlow; native memory only: ~4.5 KiB a step, no Python object grows).

Source: freach/udatetime issue #24 "Memory leak in from_string" (closed):
"udatetime version 0.13 leaks memory when calling from_string ... The pure
python version of from_string does not leak, only the C-extension
(from_rfc3339_string) does." Diagnosis: "The strdup call on line 124 of
rfc3339.c should be free-d similar to the way to the way that the strdup
call on line 219 is free-d. Otherwise, every invocation appears to leak
memory"; maintainer: "Issue is fixed and fix will be released in 0.0.15".
Fix used here (the issue's): the copy is freed after parsing (allocator
churn, no growth).
Summary: the parser is a stand-in with udatetime's shape
(``from_string(s)`` returning a timezone-aware ``datetime``); the "C" path
``strdup``s the encoded string through ``ctypes``, reads the fields back
from the C copy and, in the leaky build, never calls ``free``. Each step
parses 96 records' timestamps (jittered arrivals from several sensors,
with offsets), builds inter-arrival features and takes one SGD step of a
numpy linear model (32 features, batches of 96).

Here: 16,000 steps. The fixed parser frees its copy.
"""
import ctypes
import ctypes.util
import datetime
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/freach/udatetime/issues/24"
SLICE = "holdout25"
STEPS = 16000
RECORDS = 96
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.strdup.restype = ctypes.c_void_p
_libc.strdup.argtypes = [ctypes.c_char_p]
_libc.free.argtypes = [ctypes.c_void_p]
_free_copy = True
_TZ = {}


def _tz(minutes):
    tz = _TZ.get(minutes)
    if tz is None:
        tz = _TZ[minutes] = datetime.timezone(datetime.timedelta(minutes=minutes))
    return tz


def from_rfc3339_string(s):
    """udatetime's C path: tokenise a strdup'd copy."""
    raw = s.encode()
    copy = _libc.strdup(raw)                                  # rfc3339.c line 124
    buf = ctypes.string_at(copy, len(raw))
    y, mo, d = int(buf[0:4]), int(buf[5:7]), int(buf[8:10])
    h, mi, sec, us = int(buf[11:13]), int(buf[14:16]), int(buf[17:19]), int(buf[20:26])
    sign = -1 if buf[26:27] == b"-" else 1
    off = sign * (int(buf[27:29]) * 60 + int(buf[30:32]))
    if _free_copy:
        _libc.free(copy)                                      # the fix (udatetime #24)
    return datetime.datetime(y, mo, d, h, mi, sec, us, tzinfo=_tz(off))


def from_string(s):
    return from_rfc3339_string(s)


def _run(monitor, steps, free_copy):
    global _free_copy
    _free_copy = free_copy
    rng = np.random.default_rng(0)
    base = datetime.datetime(2026, 5, 1, tzinfo=datetime.timezone.utc)
    w = np.zeros((32, 1), np.float32)
    true_w = rng.standard_normal((32, 1)).astype(np.float32)
    offsets = [0, 60, -300, 330, 120]
    t = 0.0
    for step in range(steps):
        stamps = []
        for i in range(RECORDS):
            t += float(rng.exponential(0.8))
            off = offsets[i % 5]
            local = base + datetime.timedelta(seconds=t, minutes=off)
            stamps.append(local.strftime("%Y-%m-%dT%H:%M:%S.%f") + ("%+03d:%02d" % (off // 60, abs(off) % 60)))
        parsed = [from_string(s).timestamp() for s in stamps]
        gaps = np.diff(np.asarray(parsed, np.float64), prepend=parsed[0]).astype(np.float32)
        x = np.stack([gaps ** k / (1 + k) for k in range(1, 5)] + [np.sin(gaps * j) for j in range(28)], 1)
        y = x @ true_w
        w -= 0.01 * x.T @ (x @ w - y) / RECORDS
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, free_copy=False)


def fixed(monitor, steps):
    _run(monitor, steps, free_copy=True)
