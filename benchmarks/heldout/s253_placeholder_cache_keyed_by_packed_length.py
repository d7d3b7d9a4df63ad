"""A sequence classifier trains on packed variable-length batches (THD layout: all tokens of a batch in one ``[total_tokens, ...]`` tensor); before each ``tf.function`` step a kernel wrapper fetches a float32 "denominator" placeholder buffer from a module-level cache keyed by the exact shape, as cuDNN frontend's ``_get_fwd_denom_placeholder`` did before review on pull request #370, and since the packed token count changes with nearly every batch, almost every step allocates a new buffer that the cache keeps for good (TensorFlow ``tf.function`` with a varlen ``input_signature``; grows almost every step, ~12 KiB a step, slowing a little as token counts start to repeat: one ``EagerTensor`` per new count).

Source: NVIDIA/cudnn-frontend pull request #370 "DSA: Add FP8/MXFP8 and
compressed Top-K indexer paths" (merged), review finding on
``_get_fwd_denom_placeholder``: "Unbounded growth of
``_denom_placeholder_cache`` on the THD path. The cache key includes the
full shape, and the varlen caller passes ``(total_q,)`` ..., which changes
with nearly every batch in a serving workload. Each new ``total_q``
permanently retains a ``total_q * 4`` byte device allocation that is never
freed nor reused. Consider caching a single max-sized 1-D buffer per device
and slicing it, or bounding the cache." Fix used here (the module's later
code: "Return a shaped view backed by a stable power-of-two capacity
bucket"): the key is ``(device, rank, capacity)`` with ``capacity`` the
next power of two of the element count, and the caller gets a view of the
bucket's first ``numel`` elements.
Summary: each batch packs 8 sequences of 4-1,024 tokens (32 features a
token, one of 6 labels a sequence) with their segment ids. The model embeds
tokens with a 32-64 dense layer, pools each sequence by softmax attention
whose per-token normalizer starts from the placeholder (the kernel's
denominator output slot) and accumulates ``unsorted_segment_sum`` of the
exponentiated scores, and classifies the pooled vectors with a 64-6 layer;
Adam, one ``tf.function`` step a batch, ``input_signature`` with ``None``
token dimensions so the step is traced once.

Here: 4,000 steps. The fixed helper buckets the cache by power-of-two
capacity (three or four buckets are used).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 600.6 / 613.1 /
620.1 / 631.2 / 637.7 MiB RSS at 20 / 40 / 60 / 80 % / end (566.2 MiB at the
first step; the first fifth mixes TF's allocator warm-up for the varying
token counts with the cache, after that ~12 KiB a step: one float32 buffer
of 500-8,000 elements for each count not seen before) with gc objects
327,196 at the first step, then 328,290 / 329,347 / 330,215 / 329,755 /
330,228 at the same marks (one ``EagerTensor`` per new count, fewer as
counts repeat), 50.1 s for 4,000 steps (~12.5 ms a step); fixed 580.0 /
582.9 / 583.1 / 581.3 / 583.1 MiB (the same allocator warm-up, then flat;
three or four buckets, of 1,024 to 8,192 elements) with objects 327,206 /
327,206 / 327,208 / 327,210 / 327,212, 48.2 s. 56-58 s a variant in its
process, imports included.
"""
import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/NVIDIA/cudnn-frontend/pull/370"
SLICE = "holdout21"
STEPS = 4000
SEQS = 8
MIN_LEN, MAX_LEN = 4, 1024
TOKEN_FEATURES = 32
HIDDEN = 64
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "tensorflow"],
              "holder_any": ["_denom_placeholder_cache", "placeholder", "cache"]},
    "fixed": {"verdict_not": "leak"},
}

_denom_placeholder_cache = {}
_denom_placeholder_cache_lock = threading.Lock()
_BUCKETED = [False]


def _get_fwd_denom_placeholder(shape, device="/CPU:0"):
    numel = 1
    for dim in shape:
        numel *= int(dim)
    if _BUCKETED[0]:                                         # power-of-two capacity buckets
        capacity = 1 << (max(1, numel) - 1).bit_length()
        key = (device, len(shape), capacity)
    else:
        key = (device, tuple(shape))                         # before the review on #370
        capacity = numel
    with _denom_placeholder_cache_lock:
        cached = _denom_placeholder_cache.get(key)
        if cached is None:
            with tf.device(device):
                cached = tf.zeros([capacity], dtype=tf.float32)
            _denom_placeholder_cache[key] = cached
    return tf.reshape(cached[:numel], shape)


def _run(monitor, steps, bucketed):
    _BUCKETED[0] = bucketed
    _denom_placeholder_cache.clear()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    prototypes = rng.standard_normal((CLASSES, TOKEN_FEATURES)).astype(np.float32)
    embed = keras.layers.Dense(HIDDEN, activation="relu")
    score = keras.layers.Dense(1)
    classify = keras.layers.Dense(CLASSES)
    embed.build((None, TOKEN_FEATURES))
    score.build((None, HIDDEN))
    classify.build((None, HIDDEN))
    params = embed.trainable_variables + score.trainable_variables + classify.trainable_variables
    opt = keras.optimizers.Adam(1e-3)

    @tf.function(input_signature=[tf.TensorSpec([None, TOKEN_FEATURES], tf.float32),
                                  tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32),
                                  tf.TensorSpec([SEQS], tf.int32)])
    def train_step(tokens, segments, denom_buf, labels):
        with tf.GradientTape() as tape:
            h = embed(tokens)
            s = tf.squeeze(score(h), 1)
            s = s - tf.gather(tf.math.unsorted_segment_max(s, segments, SEQS), segments)
            e = tf.exp(s)
            denom = denom_buf + tf.gather(tf.math.unsorted_segment_sum(e, segments, SEQS), segments)
            pooled = tf.math.unsorted_segment_sum((e / denom)[:, None] * h, segments, SEQS)
            logits = classify(pooled)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    for step in range(steps):
        lengths = rng.integers(MIN_LEN, MAX_LEN + 1, SEQS)
        labels = rng.integers(0, CLASSES, SEQS)
        total = int(lengths.sum())
        segments = np.repeat(np.arange(SEQS, dtype=np.int32), lengths)
        tokens = (prototypes[labels][segments] * 0.3
                  + rng.standard_normal((total, TOKEN_FEATURES)).astype(np.float32))
        denom_buf = _get_fwd_denom_placeholder((total,))
        train_step(tf.constant(tokens), tf.constant(segments), denom_buf, tf.constant(labels.astype(np.int32)))
        monitor.sample(step)
    _denom_placeholder_cache.clear()


def leaky(monitor, steps):
    _run(monitor, steps, bucketed=False)


def fixed(monitor, steps):
    _run(monitor, steps, bucketed=True)
