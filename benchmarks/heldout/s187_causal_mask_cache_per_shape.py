"""A small decoder-only transformer caches its causal attention masks in a module-level dict keyed by ``(lanes, q_len, kv_len)``; the ``tf.function`` training step only ever needs one of them, but the eager sampling check run every 30 steps prefills each prompt in chunks of varying size against a growing KV cache and then decodes token by token, and every chunk at a new context length mints a new ``[lanes, q_len, kv_len]`` mask that is kept for the rest of the run (TF eager + ``tf.function``; grows at every sampling check).

Source: CanReader/FastNN issue #16 "The causal mask cache grows without
bound": "Entries go in and never come out. The key includes q_len and
kv_len, both of which move around during a run: bucketed batches, the
short final batch, and worst of all incremental decoding, where a multi
token prefill at each new context length mints a brand new [lanes, q_len,
kv_len] mask"; suggested fix: "cache one upper triangular mask per
(max_len, device) and narrow the corner we need out of it". Fix used here
(the issue's): one ``[512, 512]`` additive float mask built on first use (a
one-time warm-up) and sliced to ``[pos:pos + q_len, :kv_len]`` per call.
Summary: vocabulary 64, width 32, four heads, one block, trained with Adam
on batches of 16 x 64 tokens from a random Markov source; each sampling
check prefills one prompt of 16-400 tokens in chunks of 8-48 tokens and
greedily decodes 6 more.

Here: 3,000 steps, a sampling check every 30 (100 checks). The fixed twin
slices one mask. oneDNN is switched off (``TF_ENABLE_ONEDNN_OPTS=0``, set
before TensorFlow is imported): its primitive cache would otherwise fill
with the sampling checks' matmul shapes in both twins.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21, oneDNN off; a do-nothing
``monitor.sample``): leaky 591.3 / 599.0 / 607.1 / 617.6 / 628.5 MiB RSS
at 20 / 40 / 60 / 80 % / end (~0.45 MiB a sampling check, ~10 new masks)
with gc objects 333,996 / 334,146 / 334,333 / 334,586 / 334,762, 35.4 s
for 3,000 steps (~5 ms a training step, ~70 ms a sampling check); fixed
582.8 / 585.7 / 584.9 / 585.5 / 585.8 MiB with objects 333,733 -> 333,734,
41.4 s. With oneDNN on, both twins grew by ~300 MiB over the first third
of the run (its primitive cache filling with the eager shapes) and then
levelled off.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Every eager prefill chunk has its own matmul shapes; with oneDNN on, its primitive cache (1,024 entries)
# would fill with them in both twins (~300 MiB over the first third of the run), so it is off here.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/CanReader/FastNN/issues/16"
SLICE = "holdout16"
STEPS = 3000
CHECK_EVERY = 30
VOCAB = 64
WIDTH = 32
HEADS = 4
SEQ = 64
BATCH = 16
MAX_LEN = 512
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "tuple", "dict"],
              "holder_any": ["_MASKS", "causal_mask", "dict"]},
    "fixed": {"verdict_not": "leak"},
}

_MASKS = {}
_FULL = [None]


def causal_mask_cached(lanes, q_len, kv_len):
    """The leak: one full mask per (lanes, q_len, kv_len), kept forever."""
    key = (lanes, q_len, kv_len)
    mask = _MASKS.get(key)
    if mask is None:
        with tf.init_scope():
            rows = np.arange(q_len)[:, None] + (kv_len - q_len)
            allowed = np.arange(kv_len)[None, :] <= rows
            mask = tf.constant(np.where(allowed, 0.0, -1e9).astype(np.float32) * np.ones((lanes, 1, 1), np.float32))
        _MASKS[key] = mask
    return mask


def causal_mask_sliced(lanes, q_len, kv_len):
    """The fix: one [MAX_LEN, MAX_LEN] mask, the needed corner sliced out (broadcast over lanes)."""
    if _FULL[0] is None:
        with tf.init_scope():
            _FULL[0] = tf.constant(np.where(np.tril(np.ones((MAX_LEN, MAX_LEN), bool)), 0.0, -1e9).astype(np.float32))
    pos = kv_len - q_len
    return _FULL[0][pos:pos + q_len, :kv_len]


class TinyLM(tf.Module):
    def __init__(self, mask_fn):
        super().__init__()
        init = tf.random_normal_initializer(stddev=0.08)
        self.mask_fn = mask_fn
        self.emb = tf.Variable(init((VOCAB, WIDTH)))
        self.pos = tf.Variable(init((MAX_LEN, WIDTH)))
        self.wq, self.wk, self.wv, self.wo = (tf.Variable(init((WIDTH, WIDTH))) for _ in range(4))
        self.w1 = tf.Variable(init((WIDTH, 4 * WIDTH)))
        self.w2 = tf.Variable(init((4 * WIDTH, WIDTH)))
        self.out = tf.Variable(init((WIDTH, VOCAB)))

    def _split(self, t, batch, length):
        t = tf.reshape(t, (batch, length, HEADS, WIDTH // HEADS))
        return tf.reshape(tf.transpose(t, (0, 2, 1, 3)), (batch * HEADS, length, WIDTH // HEADS))

    def __call__(self, tokens, start=0, cache=None):
        batch, length = int(tokens.shape[0]), int(tokens.shape[1])
        x = tf.gather(self.emb, tokens) + self.pos[start:start + length]
        q = self._split(x @ self.wq, batch, length)
        k = self._split(x @ self.wk, batch, length)
        v = self._split(x @ self.wv, batch, length)
        if cache is not None:
            if cache:
                k = tf.concat([cache[0], k], 1)
                v = tf.concat([cache[1], v], 1)
            cache[:] = [k, v]
        kv_len = int(k.shape[1])
        scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(WIDTH // HEADS)
        mask = self.mask_fn(batch * HEADS, length, kv_len)
        scores = scores + mask                                   # additive mask: 0 or -1e9
        att = tf.matmul(tf.nn.softmax(scores, -1), v)
        att = tf.reshape(tf.transpose(tf.reshape(att, (batch, HEADS, length, WIDTH // HEADS)), (0, 2, 1, 3)),
                         (batch, length, WIDTH))
        x = x + att @ self.wo
        x = x + tf.nn.gelu(x @ self.w1) @ self.w2
        return x @ self.out


def _markov_batches(rng):
    trans = rng.dirichlet(np.full(VOCAB, 0.1), VOCAB)
    cum = np.cumsum(trans, 1)
    while True:
        seq = np.empty((BATCH, SEQ + 1), np.int32)
        seq[:, 0] = rng.integers(0, VOCAB, BATCH)
        u = rng.random((BATCH, SEQ))
        for t in range(SEQ):
            seq[:, t + 1] = np.minimum((cum[seq[:, t]] < u[:, t:t + 1]).sum(1), VOCAB - 1)
        yield seq


def _sampling_check(model, rng):
    """Eager chunked prefill of one prompt, then greedy decoding with the KV cache."""
    length = int(rng.integers(16, 401))
    prompt = rng.integers(0, VOCAB, (1, length)).astype(np.int32)
    cache, pos = [], 0
    while pos < length:
        chunk = min(int(rng.integers(8, 49)), length - pos)
        logits = model(tf.constant(prompt[:, pos:pos + chunk]), pos, cache)
        pos += chunk
    out = []
    tok = tf.argmax(logits[:, -1], -1, output_type=tf.int32)[:, None]
    for _ in range(6):
        out.append(int(tok[0, 0]))
        logits = model(tok, pos, cache)
        pos += 1
        tok = tf.argmax(logits[:, -1], -1, output_type=tf.int32)[:, None]
    return out


def _train(monitor, steps, slice_one_mask):
    _MASKS.clear()
    _FULL[0] = None
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    model = TinyLM(causal_mask_sliced if slice_one_mask else causal_mask_cached)
    opt = tf.keras.optimizers.Adam(3e-3)
    batches = _markov_batches(rng)

    @tf.function
    def train_step(seq):
        with tf.GradientTape() as tape:
            logits = model(seq[:, :-1])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(seq[:, 1:], logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    samples = []
    for step in range(steps):
        train_step(tf.constant(next(batches)))
        if (step + 1) % CHECK_EVERY == 0:
            samples.append(_sampling_check(model, rng)[0])
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, slice_one_mask=False)


def fixed(monitor, steps):
    _train(monitor, steps, slice_one_mask=True)
