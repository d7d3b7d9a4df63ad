"""An eager TensorFlow pose pipeline tracks flies clip by clip with a fresh tracker per clip, written like sleap-nn's ``Tracker`` before issue #574 was fixed: ``_track_objects: Dict[int, Track] = {}`` is a bare mutable default under ``@attrs.define``, so every ``Tracker`` shares one class-level dict, and each new track id (ids come from a process-wide counter, identity switches spawn new ones) leaves its ``Track`` there after the clip's tracker is gone (TensorFlow eager; small: ~1 ``Track`` and ~0.3 KiB a step).

Source: talmolab/sleap-nn issue #574 "``Tracker._track_objects`` shares one
dict across all Tracker instances (mutable attrs default)" (closed):
"With ``@attrs.define``, a bare ``= {}`` default is **not** wrapped in a
factory - the *same dict object* is shared by every ``Tracker`` instance
created in the process ... **Unbounded growth (memory):** the dict is never
pruned. It accumulates one ``sio.Track`` per unique ``track_id`` ever
created". Fix used here (the issue's): ``attrs.field(factory=dict)``, so
each tracker owns its dict and it goes with the tracker at the end of the
clip.
Summary: the tracker is a stand-in with sleap-nn's shape (``track()``
matching this frame's instances to the previous frame's by centroid
distance, unmatched instances starting a new ``Track`` named
``track_<id>``); ``Track`` is a small class like ``sio.Track``. The
keypoint model is a Keras 64-32-10 network (5 keypoints) run eagerly on 8
flattened 8x8 crops a frame; detections are jittered so about one instance
a frame loses its match and spawns a new track. A clip is 40 frames.

Here: 8,000 frames (200 clips). The fixed tracker owns its dict.
"""
import itertools
import os
from typing import Dict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import attrs
import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/talmolab/sleap-nn/issues/574"
SLICE = "holdout25"
STEPS = 8000
CLIP = 40
ANIMALS = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Track", "dict", "str"],
              "holder_any": ["_track_objects", "Tracker", "SharedTracker"]},
    "fixed": {"verdict_not": "leak"},
}

_track_ids = itertools.count()


class Track:
    """``sio.Track``-like."""
    def __init__(self, name, spawned_on):
        self.name = name
        self.spawned_on = spawned_on


@attrs.define
class SharedTracker:
    max_dist: float = 6.0
    _track_objects: Dict[int, Track] = {}                 # one dict for every tracker (issue #574)
    _prev: list = attrs.field(factory=list)

    def track(self, centroids, frame_idx):
        assigned = []
        free = list(self._prev)
        for c in centroids:
            best, best_d = None, self.max_dist
            for j, (tid, pc) in enumerate(free):
                d = float(np.hypot(*(c - pc)))
                if d < best_d:
                    best, best_d = j, d
            if best is None:
                tid = next(_track_ids)
                self._track_objects[tid] = Track("track_%d" % tid, frame_idx)
            else:
                tid = free.pop(best)[0]
            assigned.append((tid, c))
        self._prev = assigned
        return [self._track_objects[tid] for tid, _ in assigned]


@attrs.define
class OwnTracker(SharedTracker):
    _track_objects: Dict[int, Track] = attrs.field(factory=dict)    # the fix


def _run(monitor, steps, tracker_cls):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
    tracker = None
    pos = None
    n_tracks = 0
    for step in range(steps):
        if step % CLIP == 0:
            tracker = tracker_cls()                        # a new tracker per clip (per video)
            pos = rng.uniform(0, 200, (ANIMALS, 2)).astype(np.float32)
        pos += rng.normal(0, 1.0, pos.shape).astype(np.float32)
        crops = rng.standard_normal((ANIMALS, 64)).astype(np.float32)
        kp = model(tf.constant(crops), training=False).numpy().reshape(ANIMALS, 5, 2)
        jump = rng.random(ANIMALS) < 0.12                  # detection jitter: identity switches
        centroids = pos + kp.mean(1) * 0.1 + jump[:, None] * 20.0
        tracks = tracker.track(list(centroids), step)
        n_tracks = max(n_tracks, len(tracks))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, SharedTracker)


def fixed(monitor, steps):
    _run(monitor, steps, OwnTracker)
