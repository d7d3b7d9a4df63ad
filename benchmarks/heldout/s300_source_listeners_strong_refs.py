"""An active-learning labelling loop trains a numpy classifier while a GUI shows each queried sample in a fresh preview table bound to the shared data source, written like Toga's ``Source`` before pull request #4061: the source keeps strong references to every listener widget ever added, so each replaced preview (with its rendered rows and thumbnail) stays alive in ``_listeners`` and keeps being notified on every insert (plain Python + numpy, no TensorFlow; ~3 KiB a step: a widget, its rows and a small ``ndarray``).

Source: beeware/toga pull request #4061 "Fix Source listener memory leak":
"This fixes the potential memory leak from keeping strong references to
listener widgets which are no longer being used discussed in #4030 by
only keeping weak references to the listeners. The only additional
restriction is the the listener objects must now be able to be
weak-referenced." Reviewer: "Nice fix, esp. good job juggling the weak
refs." Fix used here (the PR's): ``_listeners`` holds ``weakref.ref``\s,
pruned when their widget is gone, so a replaced preview is freed at once
(churn without growth).
Summary: the source and widgets are stand-ins with Toga's shape
(``ListSource`` with ``add_listener`` / ``notify(notification, **kw)`` /
``append``; a ``PreviewTable`` widget with ``insert`` / ``change`` / ``clear``
handlers, 8 rendered rows and a 24x24 ``float32`` thumbnail). Each step the
loop scores a pool of 2,048 unlabelled 64-feature samples with a numpy
logistic regression, queries the least certain one, shows it in a new
preview (replacing the last), appends its label to the source and takes
one SGD step on the labelled set's last 256 rows.

Here: 10,000 steps. The fixed source holds weak references.
"""
import collections
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/beeware/toga/pull/4061"
SLICE = "holdout25"
STEPS = 10000
POOL = 2048
FEATURES = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["PreviewTable", "ndarray", "list", "str"],
              "holder_any": ["_listeners", "ListSource", "source"]},
    "fixed": {"verdict_not": "leak"},
}


class ListSource:
    def __init__(self, weak):
        self.weak = weak
        self._listeners = []
        self._data = collections.deque(maxlen=256)

    def add_listener(self, listener):
        self._listeners.append(weakref.ref(listener) if self.weak else listener)

    def _live(self):
        if not self.weak:
            return list(self._listeners)
        live = [r() for r in self._listeners]
        self._listeners = [r for r, obj in zip(self._listeners, live) if obj is not None]   # the fix (toga #4061)
        return [obj for obj in live if obj is not None]

    def notify(self, notification, **kwargs):
        for listener in self._live():
            method = getattr(listener, notification, None)
            if method is not None:
                method(**kwargs)

    def append(self, row):
        self._data.append(row)
        self.notify("insert", index=len(self._data) - 1, item=row)


class PreviewTable:
    def __init__(self, source, sample, score):
        self.source = source
        self.rows = ["feature %02d: %+.3f" % (i, v) for i, v in enumerate(sample[:8])]
        self.thumbnail = np.outer(sample[:24], sample[24:48]).astype(np.float32)
        self.title = "query score %.4f" % score
        self.dirty = False
        source.add_listener(self)

    def insert(self, index, item):
        self.dirty = True

    def clear(self):
        self.rows = []


def _run(monitor, steps, weak):
    rng = np.random.default_rng(0)
    source = ListSource(weak)
    true_w = rng.standard_normal(FEATURES).astype(np.float32)
    w = np.zeros(FEATURES, np.float32)
    xs = collections.deque(maxlen=256)
    ys = collections.deque(maxlen=256)
    preview = None
    for step in range(steps):
        pool = rng.standard_normal((POOL, FEATURES)).astype(np.float32)
        p = 1.0 / (1.0 + np.exp(-(pool @ w)))
        q = int(np.abs(p - 0.5).argmin())
        preview = PreviewTable(source, pool[q], float(p[q]))      # replaces the last preview
        label = float(pool[q] @ true_w > 0)
        source.append({"index": step, "label": label})
        xs.append(pool[q].copy())
        ys.append(label)
        X = np.asarray(xs)
        Y = np.asarray(ys, np.float32)
        w -= 0.1 * X.T @ (1.0 / (1.0 + np.exp(-(X @ w))) - Y) / len(Y)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, weak=False)


def fixed(monitor, steps):
    _run(monitor, steps, weak=True)
