"""A streaming ``tf.data`` pipeline builds speaker-homogeneous batches with ``group_by_window`` keyed by the speaker id; a third of the utterances come from speakers who appear only once, their windows never fill, and ``tf.data`` keeps every such partial window inside the iterator, so native memory grows every step while no Python object does (``tf.function`` step over an endless stream; native memory only).

Source: tremor-rs/tremor-runtime#849 "More run away memory for windows
and group by" ("Size-based grouped windows do not evict empty groups
... In a streaming context, where groups are likely to change ... this
will lead to unbounded memory growth"; "We keep the groups around
forever unless ``eviction_period`` is set") and siddhi-io/siddhi#1696
("we maintain a bucket for each distinct group produced by the 'group
by' clause, in memory ... When the number of distinct groups is not
finite, memory consumption will not be finite as well"). ``tf.data``'s
``group_by_window`` behaves the same way: a key's window is emitted only
when it holds ``window_size`` elements (or at the end of the input,
which an endless stream never reaches). Fix, as in those threads: bound
the number of groups (here the speaker id is hashed into 16 buckets).
Summary: a keyword classifier is trained on a generated stream of
utterance features (24 frames x 16 mel bins). 70 % of the utterances
come from eight frequent speakers; the rest each come from a new speaker
id. The pipeline groups by speaker so that each batch has one speaker
(for per-speaker normalisation) and batches windows of 16. Every step
consumes ~23 utterances, ~7 of which go into a window that will never
be emitted.

Here: 24 x 16 float32 features, a Keras 384-64-4 MLP, a
``tf.function`` train step on each emitted batch. The fixed twin keys on
``speaker % 16``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
592.2 / 623.9 / 720.1 MiB RSS at 20 % / 40 % / end (~32 KiB a step) with
gc objects flat (324,951); fixed 561.2 / 561.3 / 561.7 MiB (16 bucket
windows that fill and empty), objects flat (324,966); ~3.9 ms a step
leaky (20.5 s for 5,000 steps), ~3.2 ms fixed (16.5 s).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tremor-rs/tremor-runtime/issues/849"
SLICE = "holdout11"
STEPS = 5000
FRAMES = 24
MELS = 16
WINDOW = 16
FREQUENT = 8
RARE_FRACTION = 0.3
BUCKETS = 16
KEYWORDS = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "group_by_window", "dataset"]},
    "fixed": {"verdict_not": "leak"},
}


def _utterances():
    rng = np.random.default_rng(0)
    protos = rng.normal(size=(KEYWORDS, FRAMES, MELS)).astype(np.float32)
    new_speaker = 1000
    while True:
        if rng.random() < RARE_FRACTION:
            speaker, new_speaker = new_speaker, new_speaker + 1
        else:
            speaker = int(rng.integers(0, FREQUENT))
        word = int(rng.integers(0, KEYWORDS))
        feats = protos[word] + 0.8 * rng.standard_normal((FRAMES, MELS), dtype=np.float32)
        yield feats, np.int64(speaker), np.int32(word)


def _dataset(bounded_keys):
    ds = tf.data.Dataset.from_generator(
        _utterances,
        output_signature=(tf.TensorSpec([FRAMES, MELS], tf.float32), tf.TensorSpec([], tf.int64),
                          tf.TensorSpec([], tf.int32)))
    if bounded_keys:
        key = lambda x, spk, y: spk % BUCKETS            # the fix: a bounded number of groups
    else:
        key = lambda x, spk, y: spk                      # the leak: a group per speaker, ever
    return ds.group_by_window(key, lambda k, w: w.batch(WINDOW), window_size=WINDOW)


def _train(monitor, steps, bounded_keys):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FRAMES, MELS)), keras.layers.Flatten(),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(KEYWORDS)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        # per-speaker normalisation: the reason for speaker-homogeneous batches
        x = (x - tf.reduce_mean(x, [0, 1], keepdims=True)) / (tf.math.reduce_std(x, [0, 1], keepdims=True) + 1e-5)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    it = iter(_dataset(bounded_keys))
    for step in range(steps):
        x, _, y = next(it)
        train_step(x, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded_keys=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded_keys=True)
