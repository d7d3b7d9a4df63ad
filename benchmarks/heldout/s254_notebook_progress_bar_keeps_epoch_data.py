"""A notebook trains a Keras model with an eager ``GradientTape`` loop and wraps every epoch's freshly shuffled list of batches in a notebook progress bar written like tqdm 4.62.0's ``tqdm_notebook``, which sets ``self.container.pbar = self`` on its ipywidgets container; the widget registry keeps every displayed container, the container keeps its bar and the bar keeps its ``iterable``, so each finished epoch's shuffled copy of the training data stays alive (TensorFlow eager loop; grows in bursts, ~1.6 MiB at every epoch start, 50 steps apart).

Source: tqdm/tqdm issue #1216 "Memory leak in ``tqdm_notebook``": "In some
cases, using the ``tqdm_notebook`` class to iterate through an object
multiple times will accumulate copies of the object in memory. This causes
the user to run out of memory when, for example, using ``tqdm_notebook`` to
iterate through a large dataset once per epoch in neural net training. The
root cause is the reference cycle created on this line"; fixed in v4.62.2
(pull request #1229, "fix notebook memory leak (#1216)"): the container
holds a weak proxy, ``self.container.pbar = proxy(self)``. Fix used here
(the release's): ``pbar`` is a ``weakref.proxy``, so the finished bar and
its iterable are freed; the displayed container widgets stay registered
(a few hundred bytes an epoch, as in a real notebook where finished bars
remain on screen), in both variants.
Summary: ``ipywidgets`` and the bar are stand-ins with their shapes: every
``Widget`` registers itself in the class-level ``Widget.widgets`` dict by
model id until ``close()``; ``tqdm_notebook`` builds a ``TqdmHBox`` of
``HTML``, ``FloatProgress`` and ``HTML`` widgets in ``status_printer``,
displays it and, with ``leave=True`` (the default), leaves it open when the
loop ends. The model is a Keras 128-256-128-10 classifier trained eagerly
(Adam, no ``tf.function``, as notebooks often do); each epoch shuffles the
3,200x128 float32 training set into 50 batches of 64 (fancy indexing
copies) and iterates them through ``tqdm_notebook(batches, desc=...)``.

Here: 1,200 steps (24 epochs). The fixed bar stores a weak proxy in its
container.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 556.5 / 564.6 /
572.8 / 581.0 / 587.5 MiB RSS at 20 / 40 / 60 / 80 % / end (549.0 MiB at the
first step; ~1.6 MiB an epoch: the epoch's 50 shuffled batch copies,
3,200x128 float32 and their labels, kept through ``Widget.widgets`` ->
``TqdmHBox.pbar`` -> ``iterable``) with gc objects 315,261 at the first
step, then 315,273 / 315,308 / 315,343 / 315,378 / 315,608 at the same marks
(about seven an epoch, as in the fixed run: the arrays are not tracked),
57.3 s for 1,200 steps (~48 ms an eager step); fixed 552.1 / 552.1 / 552.3 /
552.4 / 552.4 MiB (the finished bars' widgets, ~0.3 KiB an epoch) with
objects 315,321 / 315,350 / 315,382 / 315,411 / 315,437, 57.6 s. 65 s a
variant in its process, imports included.
"""
import itertools
import os
import time
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tqdm/tqdm/issues/1216"
SLICE = "holdout21"
STEPS = 1200
PER_EPOCH = 50
BATCH = 64
FEATURES = 128
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tqdm_notebook", "list"],
              "holder_any": ["widgets", "Widget", "pbar", "TqdmHBox", "container"]},
    "fixed": {"verdict_not": "leak"},
}

# ---------------------------------------------------------------- ipywidgets stand-in

_ids = itertools.count()


class Widget:
    widgets = {}                                             # every open widget, by model id

    def __init__(self, **kwargs):
        self.model_id = "%032x" % next(_ids)
        self._trait_values = dict(kwargs)
        Widget.widgets[self.model_id] = self

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def close(self):
        Widget.widgets.pop(self.model_id, None)


class HTML(Widget):
    def __init__(self, value=""):
        super().__init__(value=value)
        self.value = value


class FloatProgress(Widget):
    def __init__(self, min=0, max=1):
        super().__init__(min=min, max=max)
        self.min, self.max, self.value, self.bar_style = min, max, 0, ""


class HBox(Widget):
    def __init__(self, children=()):
        super().__init__()
        self.children = list(children)


def display(obj):
    obj._displayed = True

# ---------------------------------------------------------------- tqdm stand-in


class std_tqdm:
    _instances = weakref.WeakSet()

    def __init__(self, iterable=None, desc=None, total=None, leave=True, mininterval=0.1):
        if total is None and iterable is not None:
            total = len(iterable)
        self.iterable = iterable
        self.desc = desc or ""
        self.total = total
        self.leave = leave
        self.mininterval = mininterval
        self.n = 0
        self.start_t = self.last_print_t = time.time()
        self.postfix = None
        std_tqdm._instances.add(self)

    @property
    def format_dict(self):
        return {"n": self.n, "total": self.total, "elapsed": time.time() - self.start_t, "prefix": self.desc,
                "postfix": self.postfix}

    def __iter__(self):
        for obj in self.iterable:
            yield obj
            self.n += 1
            now = time.time()
            if now - self.last_print_t >= self.mininterval:
                self.display()
                self.last_print_t = now
        self.close()

    def set_postfix_str(self, s):
        self.postfix = s

    def close(self):
        std_tqdm._instances.discard(self)


class TqdmHBox(HBox):
    def __repr__(self):
        pbar = getattr(self, "pbar", None)
        if pbar is None:
            return super().__repr__()
        d = pbar.format_dict
        return "%s %d/%d" % (d["prefix"], d["n"], d["total"] or 0)


class tqdm_notebook(std_tqdm):
    WEAK_PBAR = False                                        # tqdm >= 4.62.2

    @staticmethod
    def status_printer(total=None, desc=None):
        pbar = FloatProgress(min=0, max=total or 1)
        ltext, rtext = HTML(), HTML()
        if desc:
            ltext.value = desc
        return TqdmHBox(children=[ltext, pbar, rtext])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.container = self.status_printer(self.total, self.desc)
        self.container.pbar = weakref.proxy(self) if self.WEAK_PBAR else self
        display(self.container)
        self.displayed = True

    def display(self, bar_style=None, close=False):
        ltext, pbar, rtext = self.container.children
        pbar.value = self.n
        rtext.value = "%d/%d %s" % (self.n, self.total or 0, self.postfix or "")
        if bar_style:
            pbar.bar_style = bar_style
        if close:
            self.container.close()

    def close(self):
        super().close()
        if self.total and self.n < self.total:
            self.display(bar_style="danger")
        elif self.leave:
            self.display(bar_style="success")
        else:
            self.display(close=True)

# ---------------------------------------------------------------- training


def _run(monitor, steps, weak_pbar):
    tqdm_notebook.WEAK_PBAR = weak_pbar
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y_all = rng.integers(0, CLASSES, PER_EPOCH * BATCH).astype(np.int32)
    x_all = (centers[y_all] + 1.5 * rng.standard_normal((len(y_all), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = 0
    epoch = 0
    try:
        while step < steps:
            perm = rng.permutation(len(y_all))
            batches = [(x_all[perm[i:i + BATCH]], y_all[perm[i:i + BATCH]]) for i in range(0, len(perm), BATCH)]
            bar = tqdm_notebook(batches, desc="epoch %d" % epoch)
            for xb, yb in bar:
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb, model(xb, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                if step % 10 == 0:
                    bar.set_postfix_str("loss=%.4f" % float(loss))
                monitor.sample(step)
                step += 1
                if step >= steps:
                    break
            del bar, batches
            epoch += 1
    finally:
        Widget.widgets.clear()


def leaky(monitor, steps):
    _run(monitor, steps, weak_pbar=False)


def fixed(monitor, steps):
    _run(monitor, steps, weak_pbar=True)
