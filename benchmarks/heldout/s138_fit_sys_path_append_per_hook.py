"""A monitoring callback runs site-specific hook modules at every batch end and, before importing each one, appends the hooks directory to ``sys.path`` without checking whether it is already there; ``sys.path`` grows by eight entries a batch for the rest of the run, and every failed optional import has to walk the whole list (``model.fit``; small, slow leak with a per-epoch cost that grows).

Source: openpbs/openpbs#2512 "Python sys.path check before append leak"
("Adding a check for a path before appending it to sys.path to prevent
it from being added more than once. In hooks, sys.path remains for each
call, resulting in a memory leak without this check ... This was found
while debugging #2501 by using gc.get_objects() and compare before and
after hooks were run"; "appending to sys.path without checking grows the
size of sys.path for every append"). Fix, as in the PR: append only if
the directory is not already on ``sys.path``.
Summary: a classifier trained with ``model.fit`` has a ``SiteHooks``
callback that, at each batch end, runs eight small hook modules
(threshold alarms, loss-spike detectors ...) written to a temporary
hooks directory at start. ``run_hook`` builds the directory path with
``os.path.join`` and appends it to ``sys.path`` before
``importlib.import_module(name)`` (a ``sys.modules`` hit after the first
batch). Each batch adds eight path strings (~0.1 KiB each, with the
list's slots); at each epoch end an optional ``site_overrides`` hook is
looked up with ``importlib.util.find_spec``, which fails after scanning
every entry of the growing list.

Here: 16 features, a 16-32-3 Keras MLP, batches of 32, 100 batches an
epoch, 80 epochs. The fixed twin checks ``if path not in sys.path``
first. Both restore ``sys.path`` when training ends.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub
callback): leaky 563.5 / 566.3 / 570.1 MiB RSS at 20 % / 40 % / end (~1
KiB a batch: eight path strings and their list slots) with gc objects
flat (327,838: strings are not tracked), the time per batch growing from
~1.2 ms to ~4 ms on average as the epoch-end lookup walks the longer
list (24.3 s for 8,000 batches); fixed 562.6 / 565.2 / 565.3 MiB,
objects flat (327,838), ~1.1 ms a batch (9.5 s).
"""
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/openpbs/openpbs/pull/2512"
SLICE = "holdout11"
STEPS = 8000           # batches; 100 per epoch, 80 epochs
STEPS_PER_EPOCH = 100
N_HOOKS = 8
BATCH = 32
FEATURES = 16
CLASSES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "list", "sys.path", "path"],
              "holder_any": ["sys.path", "path"]},
    "fixed": {"verdict_not": "leak"},
}

_HOOK_SOURCE = '''
_state = {"n": 0, "worst": 0.0}

def on_batch(logs):
    _state["n"] += 1
    loss = float(logs.get("loss", 0.0))
    if loss > _state["worst"]:
        _state["worst"] = loss
    return loss > %f
'''


class SiteHooks(keras.callbacks.Callback):
    def __init__(self, root, check_first):
        super().__init__()
        self.root, self.check_first = root, check_first
        self.names = ["site_hook_%d" % i for i in range(N_HOOKS)]
        self.alarms = 0

    def run_hook(self, name, logs):
        hooks_dir = os.path.join(self.root, "hooks")           # a new string each call
        if not self.check_first or hooks_dir not in sys.path:   # the fix: check before appending
            sys.path.append(hooks_dir)                          # the leak: appended on every call
        return importlib.import_module(name).on_batch(logs)

    def on_train_batch_end(self, batch, logs=None):
        for name in self.names:
            self.alarms += bool(self.run_hook(name, logs or {}))

    def on_epoch_end(self, epoch, logs=None):
        hooks_dir = os.path.join(self.root, "hooks")
        if not self.check_first or hooks_dir not in sys.path:
            sys.path.append(hooks_dir)
        importlib.util.find_spec("site_overrides")              # optional; never there: walks sys.path


def _fit(logdir, steps, check_first):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    root = tempfile.mkdtemp(prefix="sitehooks-")
    os.makedirs(os.path.join(root, "hooks"))
    for i in range(N_HOOKS):
        with open(os.path.join(root, "hooks", "site_hook_%d.py" % i), "w") as fh:
            fh.write(_HOOK_SOURCE % (2.0 + i))
    saved_path = list(sys.path)
    try:
        centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        n = STEPS_PER_EPOCH * BATCH
        y = rng.integers(0, CLASSES, n)
        x = centers[y] + rng.standard_normal((n, FEATURES), dtype=np.float32)
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(CLASSES)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        epochs = max(1, steps // STEPS_PER_EPOCH)
        model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0,
                  callbacks=[SiteHooks(root, check_first), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        sys.path[:] = saved_path
        for i in range(N_HOOKS):
            sys.modules.pop("site_hook_%d" % i, None)
        shutil.rmtree(root, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, check_first=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, check_first=True)
