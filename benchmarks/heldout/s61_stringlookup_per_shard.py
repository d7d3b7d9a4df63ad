"""A ``StringLookup`` built for each shard's vocabulary leaves its lookup table behind in native memory (eager).

Source: tensorflow/tensorflow#61866 "StringLookup / tf.lookup resource
cleanup on model cleared" (open; the same report as keras-team/keras#18386
and keras-team/tf-keras#136: a model with a ``StringLookup`` reloaded in a
loop, "Memory goes up every load"; the hash-table resource behind each
lookup is never freed when the layer or model goes away; "When using
Hashing it works"). Fix from the report: ``Hashing`` (no table) instead of
a vocabulary lookup that is rebuilt.
Summary: an evaluation loop scores sessions whose candidate item ids come
with the session: for each one it builds a ``StringLookup`` over that
session's 200-id vocabulary, maps the ids to indices and scores them with
an embedding model. Every layer is dropped after its session, but the
table it created stays in TensorFlow's native memory: no Python object
grows, only RSS.

Here: sessions of 32 events over 200 candidate ids, a 4096 x 16 embedding,
mean pooling and a dense scorer, all eager. The fixed twin hashes the ids
into the same 4096 buckets with ``keras.layers.Hashing``.

Checked without tb-leak (psutil RSS, gc objects, fresh process, TF 2.21 /
Keras 3.15 / Python 3.11): leaky +39.0 MiB RSS from 20 % of the run to the
end (~50 KiB per session; live objects after ``gc.collect()`` exactly
constant), fixed +0.1 MiB; ~14 ms a session (leaky, building the lookup
dominates), ~8 ms (fixed).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/61866"
SLICE = "holdout5"
STEPS = 1000           # sessions
VOCAB = 200
EVENTS = 32
BUCKETS = 4096
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native"]},
    "fixed": {"verdict_not": "leak"},
}


def _score_sessions(monitor, steps, hashing):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    embed = keras.layers.Embedding(BUCKETS + 1, 16)
    scorer = keras.layers.Dense(1)
    total = 0.0
    for step in range(steps):
        vocab = ["item-%d-%d" % (step, j) for j in range(VOCAB)]      # this session's candidates
        events = tf.constant([vocab[k] for k in rng.integers(0, VOCAB, size=EVENTS)])
        if hashing:
            index = keras.layers.Hashing(num_bins=BUCKETS)             # the fix: no table
        else:
            index = keras.layers.StringLookup(vocabulary=vocab)        # a new table per session
        ids = index(events)
        score = scorer(tf.reduce_mean(embed(ids), axis=0, keepdims=True))
        total += float(score[0, 0])
        monitor.sample(step)
    return total


def leaky(monitor, steps):
    _score_sessions(monitor, steps, hashing=False)


def fixed(monitor, steps):
    _score_sessions(monitor, steps, hashing=True)
