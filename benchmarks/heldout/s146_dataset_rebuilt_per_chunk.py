"""An eager loop reads its training text in chunks and builds a new ``tf.data.Dataset.from_tensor_slices(chunk).map(parse).batch(...)`` for every chunk, taking one batch from each; every dataset built and dropped leaves a little native memory behind (its traced map function, kernels and iterator resources), so memory creeps up by ~1 KiB a chunk while no Python object grows (eager loop, slow steps; small, slow leak, native memory only).

Source: tensorflow/tensorflow#20436 "Memory leaking in tf.data.Dataset
in eager mode" ("``tf.data.Dataset`` doesn't seem to free its own memory
usage even it is out of scope in eager execution mode ... I repeat
Block 2 many times and the memory usage grows each time. Note:
``gc.collect()`` doesn't have any effect"; the block rebuilds
``from_tensor_slices(...).shuffle(...).batch(...)`` and takes one batch)
and tensorflow/tensorflow#35152 "Memory leaks when using tf.strings.split
in map_func for tf.data.Dataset.map with eager execution" (memory grows
"when every dataset variable is created"). Fix used here (the threads'
advice): build the pipeline once, over a generator of chunks, and keep
iterating it.
Summary: CSV-like feature lines (16 comma-separated integers) arrive in
chunks of 256; for each chunk the loop builds a dataset that splits and
parses the lines and batches them, takes the first batch and trains a
linear model on it.

Here: 256-line chunks, batches of 64 x 16, a 16-1 linear regressor; one
new dataset a step (~35 ms a step, mostly tracing the map function).
The fixed twin has one dataset built with ``from_generator`` over the
same chunks.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
565.7 / 566.6 / 572.5 / 585.2 / 580.6 MiB RSS at 20 / 40 / 60 / 80 % /
end (~12 KiB a dataset, noisy) with gc objects saw-toothing between
~325,000 and ~365,000 (each dataset's cyclic garbage, freed at
collections; no floor rises), 40.6 s for 1,200 steps (~34 ms a step);
fixed 548.1 / 548.2 / 548.3 / 548.3 / 548.3 MiB with objects flat
(318,120 -> 318,122), 4.0 s (one pipeline, ~3 ms a step).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/20436"
SLICE = "holdout12"
STEPS = 1200
CHUNK = 256
BATCH = 64
FIELDS = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "dataset", "Function", "map"]},
    "fixed": {"verdict_not": "leak"},
}


def _chunk(rng):
    vals = rng.integers(0, 1000, (CHUNK, FIELDS))
    return np.array([",".join(map(str, row)) for row in vals])


def _parse(line):
    v = tf.strings.to_number(tf.strings.split(line, ","), tf.float32) / 1000.0
    return v, tf.reduce_sum(v[:4]) - tf.reduce_sum(v[4:8])


def _train(monitor, steps, once):
    rng = np.random.default_rng(0)
    chunks = [_chunk(rng) for _ in range(32)]
    w = tf.Variable(tf.zeros((FIELDS, 1)))
    if once:                                                  # the fix: one pipeline, iterated
        def gen():
            i = 0
            while True:
                yield chunks[i % len(chunks)]
                i += 1
        ds = (tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec([CHUNK], tf.string))
              .map(lambda c: c[:BATCH])                       # the same first batch of each chunk
              .unbatch().map(_parse).batch(BATCH))
        it = iter(ds)
    for step in range(steps):
        if once:
            x, y = next(it)
        else:
            ds = tf.data.Dataset.from_tensor_slices(chunks[step % len(chunks)]).map(_parse).batch(BATCH)
            x, y = next(iter(ds))                             # the leak: a new dataset per chunk
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w)[:, 0] - y) ** 2)
        w.assign_sub(0.05 * tape.gradient(loss, w))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, once=False)


def fixed(monitor, steps):
    _train(monitor, steps, once=True)
