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
    import numpy as np
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
                # FIX: pass the rate as a numpy value (one trace for every value). Not
                # tf.constant(learning_rate): TensorFlow caches every Python number it
                # converts to a tensor, for good (~0.6 KiB each, a new one every step).
                train_step(x, np.float32(learning_rate))
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
            batch = rng.normal(size=(64, 512))
            activations = np.tanh(batch @ batch.T)  # 64 x 64: 32 KiB a step
            if leaky:
                kept.append(activations)  # LEAK: every step's array stays alive
            else:
                running_mean += (activations.mean() - running_mean) / (step + 1)  # FIX: a summary
            monitor.sample(step)


# The four classic causes of TensorFlow leaks: graphs and sessions (TF1 code),
# in-place updates whose results are kept, and graphs or functions built in
# the loop. The graph-mode patterns call tf.compat.v1.disable_eager_execution():
# safe, because every pattern runs in its own process.


def v1_graph_growth(run_dir, leaky, steps, profile):
    """tf.compat.v1 graph mode: the training ops are built inside the loop, so the graph grows."""
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.reset_default_graph()  # a fresh global graph for each run (the fixed one finalizes it)

    batches = np.random.default_rng(0).normal(size=(4, 256, 256)).astype("float32")
    x = tf.compat.v1.placeholder(tf.float32, [256, 256])
    w = tf.compat.v1.Variable(tf.random.normal([256, 256], stddev=0.05))

    def build_train_op():
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        return tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss), loss

    if not leaky:
        train_op, loss = build_train_op()  # FIX: build the graph once, before the loop ...
    init = tf.compat.v1.global_variables_initializer()
    if not leaky:
        tf.compat.v1.get_default_graph().finalize()  # ... and finalize it: adding an op now raises
    with tf.compat.v1.Session() as sess, _monitor(run_dir, profile) as monitor:
        sess.run(init)
        for step in range(steps):
            if leaky:
                train_op, loss = build_train_op()  # LEAK: new loss, gradient and update ops every step
            sess.run([train_op, loss], {x: batches[step % 4]})
            monitor.sample(step)


def session_per_step(run_dir, leaky, steps, profile):
    """tf.compat.v1: a new Session opened for every evaluation and never closed."""
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.reset_default_graph()

    batches = np.random.default_rng(0).normal(size=(2, 512, 256)).astype("float32")
    x = tf.compat.v1.placeholder(tf.float32, [512, 256])
    w = tf.compat.v1.Variable(tf.random.normal([256, 256], stddev=0.05))  # 256 KiB in every session
    hidden = x
    for _ in range(24):  # an evaluation tower (one shared weight, to keep the demo small)
        hidden = tf.nn.relu(tf.matmul(hidden, w))
    score = tf.reduce_mean(hidden)
    init = tf.compat.v1.global_variables_initializer()
    tf.compat.v1.get_default_graph().finalize()  # the graph is built once in both versions

    with _monitor(run_dir, profile) as monitor:
        if leaky:
            for step in range(steps):
                # LEAK: a session per evaluation, never closed. An InteractiveSession makes itself
                # the default session and stays on TensorFlow's default-session stack, with its own
                # runtime and its own copy of the variables, until close().
                sess = tf.compat.v1.InteractiveSession()
                sess.run(init)
                sess.run(score, {x: batches[step % 2]})
                monitor.sample(step)
        else:
            with tf.compat.v1.Session() as sess:  # FIX: one session, closed by its `with` block
                sess.run(init)
                for step in range(steps):
                    sess.run(score, {x: batches[step % 2]})
                    monitor.sample(step)


def inplace_updates(run_dir, leaky, steps, profile):
    """What in-place updates return, kept: `w.assign_sub(...)` results, a TensorArray grown in Python."""
    import tensorflow as tf

    w = tf.Variable(tf.random.normal([256, 256], stddev=0.05))
    ema = tf.Variable(tf.zeros([256, 256]))  # a moving average of the weights
    kept = []
    if leaky:
        trajectory = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            x = tf.random.normal([4096, 256])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            updated = w.assign_sub(0.01 * tape.gradient(loss, w))  # in place; returns the new value
            averaged = ema.assign(0.99 * ema + 0.01 * updated)
            if leaky:
                kept.append(updated)  # LEAK: the update's result, kept "for later" ...
                trajectory = trajectory.write(step, averaged)  # ... and a 256 KiB copy per step, never stacked
            else:
                kept.append(float(tf.norm(averaged)))  # FIX: keep a number, not the op's result
            monitor.sample(step)


def function_per_step(run_dir, leaky, steps, profile):
    """A new tf.function built every iteration and kept (a "compile cache" keyed per step)."""
    import numpy as np
    import tensorflow as tf

    w = tf.Variable(tf.random.normal([256, 256], stddev=0.05))

    def make_train_step(learning_rate):
        @tf.function
        def train_step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            w.assign_sub(learning_rate * tape.gradient(loss, w))
            return loss

        return train_step

    @tf.function
    def train_step(x, learning_rate):  # FIX: one tf.function, defined once outside the loop ...
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        w.assign_sub(learning_rate * tape.gradient(loss, w))
        return loss

    compiled = {}  # step functions by learning rate: "compile each configuration once"
    with _monitor(run_dir, profile) as monitor:
        for step in range(steps):
            learning_rate = 0.1 / (1.0 + 0.01 * step)  # a decaying schedule
            x = tf.random.normal([256, 256])
            if leaky:
                if learning_rate not in compiled:
                    # LEAK: the key changes every step: a new tf.function (and graph) per step, all kept
                    compiled[learning_rate] = make_train_step(learning_rate)
                compiled[learning_rate](x)
            else:
                train_step(x, np.float32(learning_rate))  # ... the rate passed as a numpy value
            monitor.sample(step)


def graph_in_loop(run_dir, leaky, steps, profile):
    """Ops added to a graph every step under `with tf.Graph().as_default():` (a batch as tf.constant)."""
    import numpy as np
    import tensorflow as tf

    batches = np.random.default_rng(0).normal(size=(4, 512, 128)).astype("float32")
    with tf.Graph().as_default() as graph:
        w = tf.compat.v1.Variable(tf.random.normal([128, 128], stddev=0.1))
        if not leaky:
            x = tf.compat.v1.placeholder(tf.float32, [512, 128])  # FIX: a placeholder, built once ...
            score = tf.reduce_mean(tf.nn.relu(tf.matmul(x, w)))
        init = tf.compat.v1.global_variables_initializer()
        if not leaky:
            graph.finalize()  # ... in a finalized graph
        with tf.compat.v1.Session(graph=graph) as sess, _monitor(run_dir, profile) as monitor:
            sess.run(init)
            for step in range(steps):
                batch = batches[step % 4]
                if leaky:
                    # LEAK: the batch becomes a constant in the graph (256 KiB), with new ops, every step
                    sess.run(tf.reduce_mean(tf.nn.relu(tf.matmul(tf.constant(batch), w))))
                else:
                    sess.run(score, {x: batch})  # ... and fed every step
                monitor.sample(step)

PATTERNS = {
    "tensor_history": tensor_history,
    "retracing": retracing,
    "keras_in_loop": keras_in_loop,
    "data_pipeline": data_pipeline,
    "unbounded_cache": unbounded_cache,
    "keras_fit": keras_fit,
    "plain_python": plain_python,
    "v1_graph_growth": v1_graph_growth,
    "session_per_step": session_per_step,
    "inplace_updates": inplace_updates,
    "function_per_step": function_per_step,
    "graph_in_loop": graph_in_loop,
}

# Patterns that must run without TensorFlow ever being imported.
NO_TENSORFLOW = {"plain_python"}

# What the analysis should name as the cause of each leaky run: a culprit
# kind, and a piece of its name or its hint.
EXPECTED_CAUSE = {
    # (culprit kind, a piece of its name or its hint); a tuple of them where
    # two culprits name the same cause (live tensors as a type or a series).
    # The profiler trace's op whose outputs are never freed names the same cause.
    "tensor_history": (("object_type", "EagerTensor"), ("tensors", "tensors_kept"), ("op", "op_retains")),
    "retracing": (("retracing", "train_step"), ("retracing", "eager context functions")),
    "keras_in_loop": (("runtime", "keras_names"), ("series", "native_memory")),
    "data_pipeline": (("object_type", "py_function_registry"), ("runtime", "py_function_registry")),
    "unbounded_cache": (("tensors", "numpy"), ("container", "FeatureStore.cache")),
    "keras_fit": (("object_type", "EagerTensor"), ("tensors", "tensors_kept"), ("op", "op_retains")),
    # The arrays by count, or the local list that keeps them (a container
    # culprit: `plain_python() local `kept` → list of ndarray`), where the
    # numpy scan had no budget at enough walks to give its series a verdict.
    "plain_python": (("tensors", "numpy"), ("container", "`kept`")),
    "v1_graph_growth": ("graph", "graph_grows"),
    # The sessions by type, or the default-session stack that keeps them (a
    # container culprit: `_default_session_stack → ... → list of InteractiveSession`).
    "session_per_step": (("object_type", "Session"), ("container", "_default_session_stack")),
    "inplace_updates": (("object_type", "EagerTensor"), ("tensors", "tensors_kept"), ("container", "`kept`"),
                        ("op", "op_retains")),
    "function_per_step": (("retracing", "eager context functions"), ("retracing", "train_step")),
    "graph_in_loop": ("graph", "graph_grows"),
}

# Leaks held by the program's own Python code: a piece of the holder (the
# variable or attribute) that the top culprit's first leak trace must name.
HOLDER = {
    "tensor_history": "`history`",
    "unbounded_cache": "FeatureStore.cache",
    "keras_fit": "TrackPredictions.history",
    "plain_python": "`kept`",
    "inplace_updates": ("`kept`", "`trajectory`"),
}

# Steps of a run: the demo's --steps, scaled, and at most a cap (the profiler
# window moves with them). Where the leak grows the graph or the function
# library, every step is slower than the last (each sess.run extends the
# session's graph; each new trace adds to the library), so those loops run
# fewer steps; the session and in-place loops do heavier steps and are capped,
# so that a run stays within about 20-30 s on 2 cores.
STEPS = {
    # A numpy step takes ~0.45 ms: ten times the steps make a run of about
    # 1.5 s with --quick (at ~50 µs a step, a 0.6-s run on a loaded machine
    # got three heap walks, too few for its arrays' count to be judged);
    # a tensor_history step ~1 ms: twice the steps make a couple of seconds.
    "plain_python": (10.0, None),
    "tensor_history": (2.0, None),
    "unbounded_cache": (6.0, None),  # ~1 ms steps: about 2 s of training
    # Keras's fit itself settles over its first several hundred batches
    # (Python's blocks, measured without tb-leak: +35 a batch over the first
    # 100, +10 at 300-400, +2 at 600-700): a fixed twin 400 batches long was
    # still settling. ~4 ms a batch: 1,000 batches are about 4 s a twin.
    "keras_fit": (2.5, None),
    "v1_graph_growth": (0.5, 120),
    "session_per_step": (1.0, 250),
    # Its allocator's bytes rise in uneven steps (a TensorArray's tensors
    # freed and kept in batches): at 250 steps a loaded CI machine's run had
    # 122 points, its current segment 14 of them, and stayed `inconclusive`
    # ("about 249 more steps would decide"); 500 steps take 25-35 s there.
    "inplace_updates": (2.0, 500),
    "function_per_step": (1.0, 200),
    "graph_in_loop": (1.0, 200),
}


def pattern_steps(name: str, steps: int) -> int:
    """The steps a run of pattern ``name`` takes when the demo asks for ``steps``."""
    scale, cap = STEPS.get(name, (1.0, None))
    scaled = max(1, round(steps * scale))
    return scaled if cap is None else min(scaled, cap)


def run_pattern(name: str, logdir: str, steps: int, profile: tuple[int, int] | None) -> None:
    """Run the fixed twin, then the leaky version, of one pattern into ``logdir``."""
    function = PATTERNS[name]
    run_steps = pattern_steps(name, steps)
    if profile is not None and run_steps != steps:
        profile = (round(profile[0] * run_steps / steps), round(profile[1] * run_steps / steps))
    for variant in ("fixed", "leaky"):
        run_dir = os.path.join(logdir, name, variant)
        function(run_dir, variant == "leaky", run_steps, None if name in NO_TENSORFLOW else profile)
