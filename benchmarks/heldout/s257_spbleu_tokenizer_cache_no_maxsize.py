"""A small translation-style tagger is trained with a ``tf.function`` step and, after every step, its greedy outputs for the batch are scored with spBLEU; the SentencePiece tokenizer used by the metric is written like sacrebleu 2.3.0's ``tokenizer_spm.py``, whose ``__call__`` memoizes with ``functools.lru_cache`` but without a ``maxsize`` (``maxsize=None``), so every hypothesis line the model ever produced stays in the cache with its tokenized form (TensorFlow ``tf.function``; grows every step, ~40 KiB a step: 128 new lines (hypotheses and references), each a key string, a value string and a cache link).

Source: mjpost/sacrebleu issue #217 "lru_cache max size is not set in
tokenizer_spm.py" (closed): "For this reason, memory consumption exploded
when computing spBLEU (-tok spm) and setting SACREBLEU_DISABLE_CACHING
environment variable does not seem to work for spBLEU (-tok spm) as well."
Maintainer: "Wow, that was bad! I just fixed this and released it as 2.3.1."
Fix used here (the release's): the cache is bounded,
``lru_cache(maxsize=2**16)``; it fills in about a third of the run and then
holds (65,536 lines).
Summary: the tokenizer is a stand-in with the shape of ``TokenizerSPM``
(a loaded piece vocabulary and a ``__call__(line)`` that splits a line into
``▁``-prefixed pieces and joins them); the metric computes corpus BLEU-2
statistics from the tokenized hypotheses and references. The model is a
Keras embedding + 128-unit dense tagger over 12-token sequences of a
600-word vocabulary, trained with Adam in a ``tf.function``; references are
the targets, hypotheses the argmax outputs, detokenized into words.

Here: 3,000 steps. The fixed tokenizer's cache has ``maxsize=2**16``.
"""
import collections
import functools
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/mjpost/sacrebleu/issues/217"
SLICE = "holdout22"
STEPS = 3000
BATCH = 64
LENGTH = 12
VOCAB = 600
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "lru_cache", "_lru_cache_wrapper", "list"],
              "holder_any": ["lru_cache", "cache", "TokenizerSPM", "__call__"]},
    "fixed": {"verdict_not": "leak"},
}

_WORDS = ["w%03d%s" % (i, "abcdefghij"[i % 10] * (1 + i % 4)) for i in range(VOCAB)]


class TokenizerSPM:
    def __init__(self, maxsize):
        self.pieces = {w: ["\u2581" + w[:3], w[3:]] if len(w) > 4 else ["\u2581" + w] for w in _WORDS}
        self._call = functools.lru_cache(maxsize=maxsize)(self._tokenize)

    def _tokenize(self, line):
        out = []
        for word in line.split():
            out.extend(self.pieces.get(word, ["\u2581" + word]))
        return " ".join(out)

    def __call__(self, line):
        return self._call(line)


def _bleu2(hyps, refs):
    matches = [0, 0]
    totals = [0, 0]
    hyp_len = ref_len = 0
    for h, r in zip(hyps, refs):
        ht, rt = h.split(), r.split()
        hyp_len += len(ht)
        ref_len += len(rt)
        for n in (1, 2):
            hc = collections.Counter(tuple(ht[i:i + n]) for i in range(len(ht) - n + 1))
            rc = collections.Counter(tuple(rt[i:i + n]) for i in range(len(rt) - n + 1))
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            totals[n - 1] += max(0, len(ht) - n + 1)
    if min(matches) == 0:
        return 0.0
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / max(hyp_len, 1))
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 2)


def _run(monitor, steps, maxsize):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(VOCAB)
    tokenizer = TokenizerSPM(maxsize)
    model = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(VOCAB, 64),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(VOCAB)])
    opt = keras.optimizers.Adam(2e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    scores = collections.deque(maxlen=200)
    for step in range(steps):
        x = rng.integers(0, VOCAB, (BATCH, LENGTH)).astype(np.int32)
        y = perm[x].astype(np.int32)
        pred = train_step(x, y).numpy()
        hyps = [tokenizer(" ".join(_WORDS[t] for t in row)) for row in pred]
        refs = [tokenizer(" ".join(_WORDS[t] for t in row)) for row in y]
        scores.append(_bleu2(hyps, refs))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, maxsize=None)


def fixed(monitor, steps):
    _run(monitor, steps, maxsize=2 ** 16)
