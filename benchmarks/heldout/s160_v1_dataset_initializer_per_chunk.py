"""A TF1-style evaluation loop (``tf.compat.v1`` graph and session) streams image chunks from disk and, for every chunk, builds ``tf.data.Dataset.from_tensor_slices(chunk)`` and runs ``iterator.make_initializer(dataset)`` on one reinitializable iterator; every chunk's pixels are embedded in the default graph as a ``Const`` node together with new dataset and initializer ops, so the graph grows by the chunk's size each time and nothing is ever freed (TF1 graph mode; large leak, from the start).

Source: tensorflow/tensorflow#31061 "tf.data.iterator make_initializer
multiple creates new ops instead of using old" (each call "creates new
ops causing the memory to grow"; "I know i can use placeholder"), with
the same report in #27414 ("every image set it read in stayed there in
the memory"); mrry in #12859: "``Dataset.from_tensor_slices()`` will
always convert its arguments to tensors, so if you have a large input,
it will always be encoded in the graph", "If you need arbitrary Python logic to construct the list, you could
instead use ``Dataset.from_generator(...)``, which will not encode [the
data] into the graph" (#19657 / #56916 suggest a placeholder fed through
``feed_dict`` instead). Fix used here (mrry's): one dataset built once
with ``Dataset.from_generator`` over the chunk reader (``unbatch`` then
``batch``), initialized once. The placeholder variant was not used:
re-running a placeholder-fed initializer per chunk still grows this
TensorFlow's C heap by ~2.7 KiB a run under a do-nothing monitor.
Summary: a frozen 2-layer scorer applied to 24 x 24 RGB crops that
arrive in chunks of 16 (108 KiB of float32 each); each chunk is read
back in 8 batches of 2.

Here: 320 chunks, 2,560 steps (one ``sess.run`` of the scorer a
step). The fixed twin streams the same chunks through one generator-backed
dataset.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
620.9 / 688.6 / 756.3 / 823.9 / 884.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (~1.05 MiB a chunk: each chunk's 108 KiB ``Const`` is kept in the
graph and copied into the session) with gc objects 316,133 / 318,243 /
320,357 / 322,468 / 324,579 (33 a chunk: the new ops and tensors), 14.4 s
for 2,560 steps, the step time growing with the graph; fixed 550.3 /
550.4 / 550.5 / 550.5 / 550.5 MiB with objects flat (316,320 ->
316,324), 3.4 s.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/31061"
SLICE = "holdout14"
STEPS = 2560
CHUNK = 16
BATCH = 2
SIDE = 24
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "Operation", "Tensor", "Graph", "const"]},
    "fixed": {"verdict_not": "leak"},
}


def _run(monitor, steps, stream_chunks):
    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        spec = tf.TensorSpec((None, SIDE, SIDE, 3), tf.float32)
        iterator = v1.data.Iterator.from_structure(tf.float32, tf.TensorShape([None, SIDE, SIDE, 3]))
        images = iterator.get_next()
        w1 = tf.constant(rng.normal(size=(SIDE * SIDE * 3, 64)).astype(np.float32) * 0.01)
        w2 = tf.constant(rng.normal(size=(64, 1)).astype(np.float32) * 0.1)
        flat = tf.reshape(images, (-1, SIDE * SIDE * 3))
        score = tf.reduce_mean(tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(flat, w1)), w2)))
        if stream_chunks:                                         # the fix: one dataset over all chunks
            def chunks():
                crng = np.random.default_rng(1)
                while True:
                    yield crng.random((CHUNK, SIDE, SIDE, 3), dtype=np.float32)   # "read from disk"
            stream = tf.data.Dataset.from_generator(chunks, output_signature=spec).unbatch().batch(BATCH)
            init_op = iterator.make_initializer(stream)
    sess = v1.Session(graph=graph)
    if stream_chunks:
        sess.run(init_op)                                         # initialized once
    per_chunk = CHUNK // BATCH
    total = 0.0
    for step in range(steps):
        if not stream_chunks and step % per_chunk == 0:
            chunk = rng.random((CHUNK, SIDE, SIDE, 3), dtype=np.float32)     # "read from disk"
            with graph.as_default():                              # the leak: a Const + ops per chunk
                ds = tf.data.Dataset.from_tensor_slices(chunk).batch(BATCH)
                sess.run(iterator.make_initializer(ds))
        total += sess.run(score)
        monitor.sample(step)
    sess.close()
    return total


def leaky(monitor, steps):
    _run(monitor, steps, stream_chunks=False)


def fixed(monitor, steps):
    _run(monitor, steps, stream_chunks=True)
