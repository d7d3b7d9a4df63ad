"""A live "recent predictions" panel keeps the decoded class names of the last 512 predictions in a ``StringDType`` ring buffer, written from a fixed-width ``'U'`` array each step; every such assignment leaves its strings in the buffer's arena, which is never compacted (no TensorFlow; native memory only, small and slow).

Source: numpy/numpy#27172 "BUG: StringDtype: subscript assigning a 'U'
array puts the strings twice in the arena" ("The initial symptom was that
my ``StringDType`` arrays would use about 3x as much memory as expected
... if we repeat the assignment, we still get another 1165 additional
bytes allocated"; still open), with numpy/numpy#26860 on why the lost
arena space is never given back ("there is, rightfully so, no 'garbage
collection' on the chunk of arena that was cleared"). Fix, the conversion
the issue isolates: cast the ``'U'`` array to ``StringDType`` before the
assignment (``StringDType`` to ``StringDType`` assignment reuses the
arena; checked flat on NumPy 2.4).
Summary: a small numpy classifier is trained on streamed feature vectors;
every step its 16 predicted label ids are decoded through the label-name
table (``names[pred]``, a ``'U29'`` array, since the table was built with
``np.array(list_of_str)``) and written into the next 16 slots of
``PredictionLog.recent``, an ``np.empty(512, dtype=StringDType())`` ring
buffer that a dashboard reads every 2,000 steps. The buffer never holds
more than 512 names, but each slice assignment from the ``'U'`` array
copies the strings into the arena again and the old bytes are lost, so
the array's native arena grows by every batch of names. No Python object
is created or kept: ``gc.get_objects()`` stays flat.

Here: 29-character class names (longer than the 15 bytes stored inline),
a 64-100 softmax regression in numpy (~0.1 ms a step). The fixed twin
writes ``names[pred].astype(StringDType())``.

Checked without tb-leak (psutil RSS, gc objects and tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
+60.8 MiB RSS from 20 % of the run to the end (~0.52 KiB a step; 52.8 /
68.3 / 113.6 MiB at 20 % / 40 % / end) with gc objects flat (23,806 /
23,810 / 23,810) and tracemalloc 23.4 / 38.7 / 84.0 MiB (tracemalloc
sees the arena's allocations), fixed 36.9 / 37.0 / 37.0 MiB,
tracemalloc flat at 7.3 MiB; ~0.1 ms a step (16-17 s for 150,000 steps).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from numpy.dtypes import StringDType

SOURCE = "https://github.com/numpy/numpy/issues/27172"
SLICE = "holdout9"
STEPS = 150000
BATCH = 16
FEATURES = 64
CLASSES = 100
WINDOW = 512
PANEL_EVERY = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "StringDType", "ndarray", "numpy"],
              "holder_any": ["recent", "PredictionLog"]},
    "fixed": {"verdict_not": "leak"},
}

KINDS = ["pedestrian_crossing", "traffic_light_red", "cyclist_on_roadway", "parked_vehicle_"]


class PredictionLog:
    def __init__(self, cast_first):
        self.cast_first = cast_first
        self.recent = np.empty(WINDOW, dtype=StringDType())
        self.pos = 0

    def add(self, decoded):
        if self.cast_first:
            decoded = decoded.astype(StringDType())        # the fix: StringDType -> StringDType
        self.recent[self.pos:self.pos + len(decoded)] = decoded
        self.pos = (self.pos + len(decoded)) % WINDOW

    def panel(self):
        labels, counts = np.unique(self.recent[self.recent != ""], return_counts=True)
        return dict(zip(labels[np.argsort(counts)[-5:]].tolist(), np.sort(counts)[-5:].tolist()))


def _train(monitor, steps, cast_first):
    rng = np.random.default_rng(0)
    names = np.array(["class_%03d:%s" % (i, KINDS[i % len(KINDS)]) for i in range(CLASSES)])   # '<U29'
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    w = np.zeros((FEATURES, CLASSES), np.float32)
    log = PredictionLog(cast_first)
    last = None
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        z = x @ w
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        pred = p.argmax(1)
        p[np.arange(BATCH), y] -= 1.0
        w -= (0.05 / BATCH) * (x.T @ p)
        log.add(names[pred])
        if step % PANEL_EVERY == 0:
            last = log.panel()
        monitor.sample(step)
    return last


def leaky(monitor, steps):
    _train(monitor, steps, cast_first=False)


def fixed(monitor, steps):
    _train(monitor, steps, cast_first=True)
