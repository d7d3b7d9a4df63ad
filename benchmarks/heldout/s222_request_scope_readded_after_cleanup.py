"""An asyncio shard loader gives every batch load its own flask_injector-style ``RequestScope``, a werkzeug-style ``Local`` whose storage is keyed by the current task; at the end of each load ``reset()`` first calls the local manager's ``cleanup()`` (which pops the task's entry) and then assigns ``self._locals.scope = {}``, which puts a fresh entry back under the same task, so the storage keeps every finished load task and, through the task's result, the batch it returned (numpy + asyncio, no TensorFlow; grows every step, ~6 KiB a step).

Source: python-injector/flask_injector issue #9 "Memory leak with eventlet
enabled": "the leak comes from GreenThread objects not being released by
RequestScope ... ``self._local_manager.cleanup()`` pops the reference to
the GreenThread object but ``self._locals.scope = {}`` adds the reference
back to the ``__storage__`` dictionary held by ``self._locals``, so
GreenThread object is not dereferenced ... The problem disappears when
switching the order of the two lines" (fixed by #11). Fix used here (the
issue's): ``reset()`` assigns the fresh scope first and cleans up last.
Summary: a 32-384-4 MLP (ReLU, softmax) trained by SGD on batches of 32 read
from simulated sensor shards (CSV rows parsed in Python); each batch is loaded by
``loop.run_until_complete(load_batch(i))`` (a task per load) whose
scope-bound "shard session" provider decodes the rows; the storage's ident
is ``asyncio.current_task()``, as werkzeug's was ``greenlet.getcurrent()``
under eventlet.

Here: 15,000 steps. The fixed scope resets in the issue's order.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 57.6 / 75.3 / 93.3 / 111.0 / 129.3
MiB RSS at 20 / 40 / 60 / 80 % / end (39.9 MiB at the first step; ~6 KiB a
step: a finished ``Task`` with its result, the batch's float32 rows and
labels, and the re-added ``{"scope": {}}`` entry in ``Local.__storage__``)
with gc objects 27,308 at the first step, then 42,149 / 57,005 / 72,066 /
87,028 / 101,990 at the same marks (5 a step), 14.7 s for 15,000 steps (~1
ms a step); fixed 40.1 / 40.1 / 40.1 / 40.1 / 40.1 MiB with objects 27,304
-> 27,312 (+2 a mark: the check's own records), 11.7 s (~0.78 ms a step).
12-15 s a variant in its process.
"""
import asyncio
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python-injector/flask_injector/issues/9"
SLICE = "holdout19"
STEPS = 15000
BATCH = 32
FEATURES = 32
HIDDEN = 384
CLASSES = 4
LR = 0.1
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Task", "ndarray", "numpy", "dict", "tuple"],
              "holder_any": ["__storage__", "_locals", "storage", "RequestScope", "Local"]},
    "fixed": {"verdict_not": "leak"},
}


def _ident():
    return asyncio.current_task()


class Local:
    """werkzeug.local.Local: attributes stored per ident in ``__storage__``."""

    def __init__(self):
        object.__setattr__(self, "__storage__", {})

    def __getattr__(self, name):
        try:
            return self.__storage__[_ident()][name]
        except KeyError:
            raise AttributeError(name)

    def __setattr__(self, name, value):
        self.__storage__.setdefault(_ident(), {})[name] = value

    def __release_local__(self):
        self.__storage__.pop(_ident(), None)


class LocalManager:
    def __init__(self, locals_):
        self.locals = list(locals_)

    def cleanup(self):
        for local in self.locals:
            local.__release_local__()


class RequestScope:
    def __init__(self, reset_in_fixed_order):
        self._locals = Local()
        self._local_manager = LocalManager([self._locals])
        self._fixed_order = reset_in_fixed_order

    def prepare(self):
        self._locals.scope = {}

    def get(self, key, provider):
        scope = self._locals.scope
        if key not in scope:
            scope[key] = provider()
        return scope[key]

    def reset(self):
        if self._fixed_order:                                # the fix (flask_injector#11)
            self._locals.scope = {}
            self._local_manager.cleanup()
        else:
            self._local_manager.cleanup()
            self._locals.scope = {}                          # re-adds the current task's entry


class ShardSession:
    def __init__(self, centers):
        self.centers = centers
        self.reads = 0

    def _fetch(self, index):
        """The shard's rows as CSV text (the simulated storage read)."""
        rng = np.random.default_rng(index)
        y = rng.integers(0, CLASSES, BATCH)
        x = self.centers[y] + 0.8 * rng.standard_normal((BATCH, FEATURES))
        return "\n".join("%d," % c + ",".join("%.5f" % v for v in row) for c, row in zip(y, x))

    def decode(self, index):
        self.reads += 1
        rows = [line.split(",") for line in self._fetch(index).split("\n")]
        y = np.array([int(r[0]) for r in rows])
        x = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float32)
        return x, y


def _train(monitor, steps, reset_in_fixed_order):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    scope = RequestScope(reset_in_fixed_order)

    async def load_batch(index):
        scope.prepare()
        try:
            session = scope.get("shard_session", lambda: ShardSession(centers))
            return session.decode(index)
        finally:
            scope.reset()

    W1 = rng.standard_normal((FEATURES, HIDDEN)) * 0.2
    W2 = rng.standard_normal((HIDDEN, CLASSES)) * 0.2
    loop = asyncio.new_event_loop()
    try:
        for step in range(steps):
            x, y = loop.run_until_complete(load_batch(step))
            h = np.maximum(x @ W1, 0.0)
            logits = h @ W2
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(BATCH), y] -= 1.0
            gW2 = h.T @ p / BATCH
            gh = (p @ W2.T) * (h > 0)
            W1 -= LR * x.T @ gh / BATCH
            W2 -= LR * gW2
            monitor.sample(step)
    finally:
        loop.close()


def leaky(monitor, steps):
    _train(monitor, steps, reset_in_fixed_order=False)


def fixed(monitor, steps):
    _train(monitor, steps, reset_in_fixed_order=True)
