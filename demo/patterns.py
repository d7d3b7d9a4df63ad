"""Real TensorFlow leak patterns, each with its fixed twin.

Every pattern is a small training loop ``run(run_dir, leaky, steps, profile)``
that writes tb-leak summaries through the public API into ``run_dir``. The
leaky and fixed versions differ only in the lines marked ``LEAK`` / ``FIX``.
Patterns run in their own processes (see ``run_demo.py``), so one pattern's
leak never colours another's series.
"""

from __future__ import annotations

import collections
import os

# Every run uses the Monitor's default sampling, as a user's would: only the
# profiler window (profile_steps) is asked for, so the Leak tab can show the op.


def _monitor(run_dir, profile, **extra):
    import tb_leak_plugin as tbleak

    return tbleak.Monitor(run_dir, profile_steps=profile, **extra)


def tensor_history(run_dir, leaky, steps, profile):
    """Losses and outputs kept as tensors in a Python list (`history.append(loss)`)."""
    import tensorflow as tf

    w = tf.Variable(tf.random.normal([256, 256], stddev=0.05))

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            loss = tf.reduce_mean(tf.square(logits))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss, logits

    history = []
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            loss, logits = train_step(tf.random.normal([256, 256]))
            if leaky:
                history.append((loss, logits))  # LEAK: every step's tensors stay alive
            else:
                history.append(float(loss))  # FIX: keep a Python number
            monitor.sample(step)


def retracing(run_dir, leaky, steps, profile):
    """A tf.function called with a new Python float every step: one new graph per call."""
    import tensorflow as tf

    w = tf.Variable(tf.random.normal([64, 64], stddev=0.05))

    @tf.function
    def train_step(x, learning_rate):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        w.assign_sub(learning_rate * tape.gradient(loss, w))
        return loss

    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            learning_rate = 0.1 / (1.0 + 0.01 * step)  # a decaying schedule
            x = tf.random.normal([32, 64])
            if leaky:
                train_step(x, learning_rate)  # LEAK: a Python float is part of the trace key
            else:
                train_step(x, tf.constant(learning_rate))  # FIX: pass a tensor
            monitor.sample(step)


def keras_in_loop(run_dir, leaky, steps, profile):
    """A Keras model built inside the loop (e.g. a fresh evaluation head) without clearing."""
    import keras
    import tensorflow as tf

    def build():
        hidden = [keras.layers.Dense(64, activation="relu") for _ in range(8)]
        return keras.Sequential([keras.Input((32,)), *hidden, keras.layers.Dense(1)])

    x = tf.random.normal([16, 32])
    model = None if leaky else build()  # FIX: build once, outside the loop
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            if leaky:
                model = build()  # LEAK: each build leaves Keras/TensorFlow state behind
            model(x)
            monitor.sample(step)


def data_pipeline(run_dir, leaky, steps, profile):
    """A tf.data pipeline over a Python generator rebuilt inside the loop."""
    import numpy as np
    import tensorflow as tf

    rows = np.random.default_rng(0).normal(size=(256, 32)).astype("float32")

    def examples():
        yield from rows

    def make_dataset():
        signature = tf.TensorSpec([32], tf.float32)
        return tf.data.Dataset.from_generator(examples, output_signature=signature).batch(32)

    w = tf.Variable(tf.random.normal([32, 8], stddev=0.1))
    iterator = None if leaky else iter(make_dataset().repeat())  # FIX: one pipeline, one iterator
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            if leaky:
                batch = next(iter(make_dataset()))  # LEAK: a new pipeline (and py-function) per step
            else:
                batch = next(iterator)
            w.assign_sub(0.001 * tf.reduce_mean(tf.matmul(batch, w)) * tf.ones_like(w))
            monitor.sample(step)


def unbounded_cache(run_dir, leaky, steps, profile):
    """A feature store that caches every step's features in a dict never trimmed."""
    import tensorflow as tf

    class FeatureStore:
        def __init__(self, max_items=None):
            self.cache = collections.OrderedDict()
            self.max_items = max_items

        def put(self, key, features):
            self.cache[key] = (features.numpy(), key)
            if self.max_items is not None:
                while len(self.cache) > self.max_items:  # FIX: bounded, oldest out first
                    self.cache.popitem(last=False)

    w = tf.Variable(tf.random.normal([64, 64], stddev=0.05))
    store = FeatureStore(max_items=None if leaky else 32)  # LEAK: no bound
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            features = tf.nn.relu(tf.matmul(tf.random.normal([64, 64]), w))
            store.put(step, features)
            monitor.sample(step)


def keras_fit(run_dir, leaky, steps, profile):
    """model.fit with a callback that keeps every batch's predictions as tensors."""
    import keras
    import numpy as np
    import tensorflow as tf

    import tb_leak_plugin as tbleak

    class TrackPredictions(keras.callbacks.Callback):
        def __init__(self, probe_batch):
            super().__init__()
            self.probe_batch = probe_batch
            self.history = []

        def on_train_batch_end(self, batch, logs=None):
            predictions = self.model(self.probe_batch, training=False)
            if leaky:
                self.history.append(predictions)  # LEAK: tensors kept for later plotting
            else:
                self.history.append(float(tf.reduce_mean(predictions)))  # FIX: keep a number

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * steps, 16)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256)])
    model.compile(optimizer="sgd", loss="mse")
    probe_batch = tf.constant(rng.normal(size=(256, 16)).astype("float32"))  # 256 KiB outputs
    leak_callback = tbleak.keras.LeakCallback(run_dir, profile_steps=profile)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0,
              callbacks=[TrackPredictions(probe_batch), leak_callback])


def plain_python(run_dir, leaky, steps, profile):
    """No TensorFlow at all: a numpy loop that keeps every batch's array."""
    import numpy as np

    import tb_leak_plugin as tbleak

    rng = np.random.default_rng(0)
    kept = []
    running_mean = 0.0
    with tbleak.Monitor(run_dir) as monitor:
        for step in range(steps):
            batch = rng.normal(size=(64, 64))
            activations = np.tanh(batch @ batch.T)
            if leaky:
                kept.append(activations)  # LEAK: every step's array stays alive
            else:
                running_mean += (activations.mean() - running_mean) / (step + 1)  # FIX: a summary
            monitor.sample(step)


PATTERNS = {
    "tensor_history": tensor_history,
    "retracing": retracing,
    "keras_in_loop": keras_in_loop,
    "data_pipeline": data_pipeline,
    "unbounded_cache": unbounded_cache,
    "keras_fit": keras_fit,
    "plain_python": plain_python,
}

# Patterns that must run without TensorFlow ever being imported.
NO_TENSORFLOW = {"plain_python"}

# What the analysis should name as the cause of each leaky run: a culprit
# kind, and a piece of its name or its hint.
EXPECTED_CAUSE = {
    "tensor_history": ("object_type", "EagerTensor"),
    "retracing": ("retracing", "train_step"),
    "keras_in_loop": ("series", "native_memory"),
    "data_pipeline": ("object_type", "py_function_registry"),
    "unbounded_cache": ("tensors", "numpy"),
    "keras_fit": ("object_type", "EagerTensor"),
    "plain_python": ("tensors", "numpy"),
}


def run_pattern(name: str, logdir: str, steps: int, profile: tuple[int, int] | None) -> None:
    """Run the fixed twin, then the leaky version, of one pattern into ``logdir``."""
    function = PATTERNS[name]
    for variant in ("fixed", "leaky"):
        run_dir = os.path.join(logdir, name, variant)
        function(run_dir, variant == "leaky", steps, None if name in NO_TENSORFLOW else profile)
