"""A sample filter drops blurred frames by matching each sample's path against a glob built from that sample's own recording session (``fnmatch.fnmatch(path, f"{session}/*_blurred.png")``); every distinct pattern is translated, compiled and kept in ``fnmatch``'s module-level ``lru_cache`` of up to 32,768 patterns, so a stream of new sessions adds a compiled regular expression per sample (no TensorFlow; small, slow leak).

Source: python/cpython#86965 (bpo-42799) "Please document fnmatch LRU
cache size (256) and suggest alternatives" and its fix, PR #27084
"fnmatch module: bump up size of lru_cache for patterns", which raised
``_compile_pattern``'s cache from 256 to 32,768 entries; in the review
of gh-122289 (PR #122289) the cache's footprint was weighed ("4MB can be
quite big") and kept at 32k. A program that builds a new pattern per
item therefore keeps up to 32,768 compiled patterns (and their ``match``
methods) alive for the rest of the process. Fix used here (the
alternative the issue asks the docs to suggest): compile the constant
part once (``re.compile(fnmatch.translate("*_blurred.png"))``) and
compare the session prefix as a plain string.
Summary: a numpy classifier streams 64-feature samples from a
camera-rig dataset where every sample comes from a new recording
session (``rig-03/sess-0012345``); the blurred-frame filter builds its
glob from the session, so each call misses the cache and stores a new
compiled pattern.

Here: batches of 384 x 64 float32 features, a 64-96-8 MLP with plain SGD,
one filtered path a step. The fixed twin matches with one precompiled
regex.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
43.4 / 49.2 / 67.6 MiB RSS at 20 % / 40 % / end (~0.85 KiB a step) with
gc objects 35,987 / 47,624 / 83,798 (two a step: a compiled pattern and
its ``match`` method in the cache), 13.0 s for 30,000 steps; fixed
36.9 / 36.9 / 36.9 MiB with objects flat (23,808 / 23,810 / 23,813),
11.2 s.
"""
import fnmatch
import os
import re

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/86965"
SLICE = "holdout12"
STEPS = 30000
BATCH = 384
FEATURES = 64
HIDDEN = 96
CLASSES = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Pattern", "method", "builtin_function", "re.", "fnmatch", "str"],
              "holder_any": ["_compile_pattern", "fnmatch", "lru"]},
    "fixed": {"verdict_not": "leak"},
}

BLURRED_RE = re.compile(fnmatch.translate("*_blurred.png"))     # the fix: the constant part, compiled once


def is_blurred(path, session, precompiled):
    if precompiled:
        return path.startswith(session + "/") and BLURRED_RE.match(path[len(session) + 1:]) is not None
    return fnmatch.fnmatch(path, "%s/*_blurred.png" % session)   # the leak: a new cached pattern per session


def _train(monitor, steps, precompiled):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    w1 = (rng.normal(size=(FEATURES, HIDDEN)) * 0.1).astype(np.float32)
    w2 = np.zeros((HIDDEN, CLASSES), np.float32)
    kept = 0
    for step in range(steps):
        session = "rig-%02d/sess-%07d" % (step % 7, step)
        kind = "blurred" if step % 9 == 0 else "sharp"
        path = "%s/cam%d_%05d_%s.png" % (session, step % 4, step % 50000, kind)
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        if is_blurred(path, session, precompiled):
            x = x * np.float32(0.5)                            # down-weight instead of dropping the batch
        else:
            kept += 1
        h = np.maximum(x @ w1, 0.0)
        z = h @ w2
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        p[np.arange(BATCH), y] -= 1.0
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.05 * (h.T @ p) / BATCH
        w1 -= 0.05 * (x.T @ gh) / BATCH
        monitor.sample(step)
    return kept


def leaky(monitor, steps):
    _train(monitor, steps, precompiled=False)


def fixed(monitor, steps):
    _train(monitor, steps, precompiled=True)
