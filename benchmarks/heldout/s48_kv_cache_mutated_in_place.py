"""A stored prefix KV cache handed to generation and mutated in place, so it grows by every turn (eager).

Source: MemTensor/MemOS#2301 "The stored activation DynamicCache is mutated
in place by generation, so activation memory grows every turn" (the stored
cache object is passed straight to ``generate(past_key_values=...)``; the
cache's ``update`` appends each new key/value in place with ``torch.cat``,
so the stored prefix cache accumulates the prompt and generated tokens of
every turn and is re-used, larger, on the next one). Fix implied by the
report: hand generation a copy of the stored prefix cache (the prefix is
reused, the per-turn tokens are dropped with the copy).
Summary: an evaluation loop scores a small decoder by generating a few
tokens for many prompts that share a system prefix; the prefix's keys and
values are computed once and "reused" for speed, but because the cache
object itself is extended in place, each turn attends over (and keeps) all
previous turns' tokens.

Here: a 2-layer, 64-wide single-head decoder run eagerly, a 16-token prefix,
4 prompt tokens and 4 generated tokens per turn (8 KiB of keys and values a
turn). The number of tensors stays constant; they only get longer. The
fixed twin's cache grows within a turn and is dropped at its end (sawtooth).

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +21.9 MiB RSS from 20 % of the run to the end (~35 KiB
per turn: 8 KiB of keys and values plus the allocator churn of re-copying
ever longer tensors), fixed +0.1 MiB; ~20 ms a turn (leaky: growing to ~50 ms
with the cache).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/MemTensor/MemOS/issues/2301"
SLICE = "holdout4"
STEPS = 800             # turns
D = 64
LAYERS = 2
PREFIX = 16
PROMPT = 4
NEW_TOKENS = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "native", "KVCache"],
              "holder_any": ["prefix_cache", "keys", "values", "KVCache"]},
    "fixed": {"verdict_not": "leak"},
}


class KVCache:
    """Per-layer keys and values; ``update`` appends in place, as a dynamic cache does."""

    def __init__(self, keys=None, values=None):
        self.keys = list(keys) if keys is not None else [None] * LAYERS
        self.values = list(values) if values is not None else [None] * LAYERS

    def update(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = tf.concat([self.keys[layer], k], axis=0)
            self.values[layer] = tf.concat([self.values[layer], v], axis=0)
        return self.keys[layer], self.values[layer]

    def copy(self):
        return KVCache(self.keys, self.values)


class Decoder:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.embed = tf.constant(rng.standard_normal((256, D)).astype(np.float32) * 0.1)
        self.wq = [tf.constant(rng.standard_normal((D, D)).astype(np.float32) * 0.1) for _ in range(LAYERS)]
        self.wk = [tf.constant(rng.standard_normal((D, D)).astype(np.float32) * 0.1) for _ in range(LAYERS)]
        self.wv = [tf.constant(rng.standard_normal((D, D)).astype(np.float32) * 0.1) for _ in range(LAYERS)]
        self.out = tf.constant(rng.standard_normal((D, 256)).astype(np.float32) * 0.1)

    def forward(self, tokens, cache):
        h = tf.gather(self.embed, tokens)
        for layer in range(LAYERS):
            q = tf.matmul(h, self.wq[layer])
            k, v = cache.update(layer, tf.matmul(h, self.wk[layer]), tf.matmul(h, self.wv[layer]))
            att = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / 8.0, axis=-1)
            h = h + tf.matmul(att, v)
        return tf.matmul(h[-1:], self.out)


def _generate(model, prompt, cache):
    logits = model.forward(tf.constant(prompt), cache)
    out = []
    for _ in range(NEW_TOKENS):
        token = int(tf.argmax(logits[0]))
        out.append(token)
        logits = model.forward(tf.constant([token]), cache)
    return out


def _evaluate(monitor, steps, copy_prefix):
    model = Decoder()
    rng = np.random.default_rng(1)
    prefix_cache = KVCache()
    model.forward(tf.constant(rng.integers(0, 256, size=PREFIX)), prefix_cache)   # system prefix, once
    score = 0
    for turn in range(steps):
        prompt = rng.integers(0, 256, size=PROMPT)
        cache = prefix_cache.copy() if copy_prefix else prefix_cache
        out = _generate(model, prompt, cache)
        score += sum(out) % 7
        monitor.sample(turn)
    return score


def leaky(monitor, steps):
    _evaluate(monitor, steps, copy_prefix=False)


def fixed(monitor, steps):
    _evaluate(monitor, steps, copy_prefix=True)
