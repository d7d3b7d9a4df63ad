"""A telemetry loader decodes every frame's status word into an ``enum.IntFlag``; once the rigs are updated to a firmware that packs a rolling frame counter into the word's reserved upper bits (after 40 % of the run), every status is a value the flag class has never seen, and ``IntFlag`` creates a pseudo-member for it and caches it in the class's ``_value2member_map_`` for good (no TensorFlow; late onset, small, slow leak).

Source: hikari-py/hikari#265 "Task/intflag", where the project replaced
``enum.IntFlag`` by its own flag type with a bounded member cache
(``_MAX_CACHED_MEMBERS = int(2 ** 12)``), where the standard one keeps a
pseudo-member for every new combination it is called with, and
python/cpython#132684 / PR #132790 "[Enum] only call _missing_ in
__contains__ for Flags", where ethanfurman confirms that creating (and
keeping) new members is intended for flags: "Only ``Flag``s might create
new members, and that's intentional" (on 3.11 ``IntFlag``'s boundary is
``KEEP``, PR #24215 / bpo-38250: "``KEEP`` will ... keep all bits").
Fix used here: mask the word to the defined bits before converting
(``FrameStatus(word & KNOWN_BITS)``) and keep the counter as a plain int.
Summary: a numpy regressor reads sensor frames whose 16-bit status word
holds OK / SATURATED / DROPPED / INTERPOLATED / CALIBRATING bits; the
new firmware puts a 20-bit frame counter above bit 16, so from the
switch on each frame's ``FrameStatus(word)`` is a new pseudo-member.

Here: frames of 1,024 x 48 float32 samples, a 48-64-1 linear model with
plain SGD; the firmware switch at 40 % of the steps. The fixed twin
masks the word to the known bits.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
37.7 / 37.4 / 40.9 / 47.3 MiB RSS at 20 % / 40 % / 60 % / end (flat
until the switch, then ~0.4 KiB a step) with gc objects 23,609 /
23,612 / 31,602 / 47,601 (one pseudo-member a frame from 40 % on),
28.0 s for 40,000 steps (~0.7 ms a step); fixed 37.7 / 37.4 / 37.3 /
37.7 MiB with objects flat (23,609 / 23,611 / 23,612 / 23,614), 29.1 s.
"""
import enum
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/hikari-py/hikari/pull/265"
SLICE = "holdout12"
STEPS = 40000
ONSET = 0.4
FRAME = 1024
FEATURES = 48
HIDDEN = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["FrameStatus", "IntFlag", "enum", "int"],
              "holder_any": ["_value2member_map_", "FrameStatus"]},
    "fixed": {"verdict_not": "leak"},
}


class FrameStatus(enum.IntFlag):
    OK = 1
    SATURATED = 2
    DROPPED = 4
    INTERPOLATED = 8
    CALIBRATING = 16


KNOWN_BITS = 31


def decode_status(word, mask):
    if mask:
        return FrameStatus(word & KNOWN_BITS), word >> 16      # the fix: only defined bits become flags
    return FrameStatus(word), word >> 16                       # the leak: a cached pseudo-member per new word


def _train(monitor, steps, mask):
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    w1 = (rng.normal(size=(FEATURES, HIDDEN)) * 0.1).astype(np.float32)
    w2 = np.zeros((HIDDEN, 1), np.float32)
    onset = int(steps * ONSET)
    skipped = 0
    for step in range(steps):
        bits = 1 | (2 if step % 13 == 0 else 0) | (8 if step % 5 == 0 else 0)
        word = bits | ((step << 16) if step >= onset else 0)   # new firmware: frame counter in the upper bits
        status, counter = decode_status(word, mask)
        x = rng.standard_normal((FRAME, FEATURES), dtype=np.float32)
        y = x @ w_true + 0.1 * rng.standard_normal((FRAME, 1), dtype=np.float32)
        if FrameStatus.SATURATED in status:
            x = np.clip(x, -2.0, 2.0)
        if FrameStatus.DROPPED in status:
            skipped += 1
            monitor.sample(step)
            continue
        h = np.maximum(x @ w1, 0.0)
        err = h @ w2 - y
        gh = (err @ w2.T) * (h > 0)
        w2 -= 0.01 * (h.T @ err) / FRAME
        w1 -= 0.01 * (x.T @ gh) / FRAME
        monitor.sample(step)
    return skipped


def leaky(monitor, steps):
    _train(monitor, steps, mask=False)


def fixed(monitor, steps):
    _train(monitor, steps, mask=True)
