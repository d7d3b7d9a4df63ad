"""An image classifier debugs its eager mixup augmentation with a PySnooper-style ``@snoop`` decorator left on the helper; the tracer records each traced frame's local reprs in ``frame_to_local_reprs``, a dict keyed by the frame, and never deletes the entry when the frame returns, so every call's finished frame stays alive with its locals, the batch's image tensors (eager TensorFlow augmentation + ``tf.function`` step; grows every step, ~110 KiB a step).

Source: cool-RR/PySnooper pull request #111 "Delete frames when exiting to
free up memory": "``Tracer`` currently holds on to every frame it has
traced, including all its local variables (not just their reprs). Try this
script ... and check ``top``. The memory usage skyrockets." Fix used here
(the PR's): on the ``'return'`` event the tracer deletes the frame's entry
from ``frame_to_local_reprs``.
Summary: a small Keras CNN (two 3x3 convolutions, 3 classes) trained with
Adam in a ``tf.function`` step on synthetic 8x8 RGB patterns, batches of
32; each batch first goes through ``augment(images, labels)``, an eager
mixup + flip + noise helper (random draws from a ``tf.random.Generator``)
decorated with the tracer (``sys.settrace`` for the decorated code
only, a ``custom_repr`` that prints tensors as shape and dtype, the last
200 output lines kept in a ring buffer instead of written to stderr).

Here: 1,200 steps. The fixed tracer forgets a frame when it returns.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 589.9 / 615.5 /
641.2 / 666.6 / 692.3 MiB RSS at 20 / 40 / 60 / 80 % / end (565.5 MiB at
the first step; ~110 KiB a step: every ``augment`` frame with its image
tensors, ``images``, ``mixed``, ``flipped`` and ``noisy``, 24 KiB each, in
``Tracer.frame_to_local_reprs``) with gc objects 326,800 at the first
step, then 331,847 / 337,367 / 342,887 / 348,407 / 353,927 at the same
marks (23 a step: the frame, its locals and reprs dicts with their
strings, its eager tensors), 17.7 s for 1,200 steps (~15 ms a step, ~8 ms
of it the line tracing); fixed 570.0 / 570.1 / 570.2 / 570.3 / 570.3 MiB
with objects 326,465 / 326,331 / 326,331 / 326,331 / 326,331, 14.7 s (~12
ms a step); a 3,600-step fixed run went 569.9 -> 570.3 MiB with its
objects flat, and the same loop with no tracer at all creeps the same way
(569.5 -> 570.3 MiB in 3,600 steps, ~4.9 ms a step), TensorFlow's own.
18-22 s a variant in its process, imports included.
"""
import collections
import functools
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/cool-RR/PySnooper/pull/111"
SLICE = "holdout19"
STEPS = 1200
BATCH = 32
SIZE = 8
CLASSES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "frame"],
              "holder_any": ["frame_to_local_reprs", "Tracer", "snoop"]},
    "fixed": {"verdict_not": "leak"},
}


class Tracer:
    """A cut-down PySnooper ``snoop``: traces the decorated function line by line."""

    def __init__(self, release_frames, custom_repr=(), max_length=100):
        self.release_frames = release_frames
        self.custom_repr = custom_repr
        self.max_length = max_length
        self.frame_to_local_reprs = {}
        self.target_codes = set()
        self.output = collections.deque(maxlen=200)
        self._previous_traces = []

    def __call__(self, function):
        self.target_codes.add(function.__code__)

        @functools.wraps(function)
        def simple_wrapper(*args, **kwargs):
            with self:
                return function(*args, **kwargs)
        return simple_wrapper

    def __enter__(self):
        self._previous_traces.append(sys.gettrace())
        sys.settrace(self.trace)

    def __exit__(self, exc_type, exc_value, tb):
        sys.settrace(self._previous_traces.pop())

    def _repr(self, value):
        for cls, fn in self.custom_repr:
            if isinstance(value, cls):
                return fn(value)
        r = repr(value)
        return r if len(r) <= self.max_length else r[:self.max_length - 3] + "..."

    def trace(self, frame, event, arg):
        if frame.f_code not in self.target_codes:
            return None
        old_local_reprs = self.frame_to_local_reprs.get(frame, {})
        self.frame_to_local_reprs[frame] = local_reprs = {
            name: self._repr(value) for name, value in frame.f_locals.items()}
        for name, value_repr in local_reprs.items():
            if name not in old_local_reprs:
                self.output.append("New var:....... %s = %s" % (name, value_repr))
            elif old_local_reprs[name] != value_repr:
                self.output.append("Modified var:.. %s = %s" % (name, value_repr))
        self.output.append("%-9s %s:%d" % (event, frame.f_code.co_name, frame.f_lineno))
        if event == "return":
            self.output.append("Return value:.. %s" % self._repr(arg))
            if self.release_frames:                          # the fix (PySnooper#111)
                del self.frame_to_local_reprs[frame]
        return self.trace


def _tensor_repr(t):
    return "<%s %s %s>" % (type(t).__name__, tuple(t.shape), t.dtype.name)


def _make_batch(rng, templates):
    y = rng.integers(0, CLASSES, BATCH)
    x = templates[y] + 0.3 * rng.standard_normal((BATCH, SIZE, SIZE, 3))
    return x.astype(np.float32), y.astype(np.int32)


def _train(monitor, steps, release_frames):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    templates = rng.standard_normal((CLASSES, SIZE, SIZE, 3)).astype(np.float32)
    gen = tf.random.Generator.from_seed(0)
    snoop = Tracer(release_frames, custom_repr=((tf.Tensor, _tensor_repr), (np.ndarray, _tensor_repr)))

    @snoop
    def augment(images, labels):
        onehot = tf.one_hot(labels, CLASSES)
        lam = tf.constant(float(rng.beta(0.4, 0.4)))
        perm = tf.argsort(gen.uniform([BATCH]))
        mixed = lam * images + (1.0 - lam) * tf.gather(images, perm)
        flipped = tf.image.flip_left_right(mixed)
        noisy = flipped + gen.normal(tf.shape(flipped), stddev=0.05)
        targets = lam * onehot + (1.0 - lam) * tf.gather(onehot, perm)
        return noisy, targets

    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)),
                              keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
    @tf.function
    def train_step(images, targets):
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        xb, yb = _make_batch(rng, templates)
        images, targets = augment(tf.constant(xb), tf.constant(yb))   # eager, traced by snoop
        train_step(images, targets)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, release_frames=False)


def fixed(monitor, steps):
    _train(monitor, steps, release_frames=True)
