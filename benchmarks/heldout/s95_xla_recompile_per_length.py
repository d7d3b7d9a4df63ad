"""A ``jit_compile=True`` train step gets batches padded to their longest sequence once sequence-length warm-up ends (after 30 % of the run), and XLA compiles and keeps a new executable for every new length (``tf.function``; native memory; late onset).

Source: tensorflow/tensorflow#81896 "XLA recompilation every time when
shape changed on GPU" (a ``tf.function(input_signature=[...None...],
jit_compile=True)``: one trace, but "out = foo(x, y, z)  # Compile" for
every new ``[2, None]`` length; the maintainers: "This issue occurs because
XLA optimizes the computation graph based on input shapes"), and, for the
memory side, ml-explore/mlx#4464 (a compile cache with "no eviction: one
... trace retained per distinct input shape, hits the ... cap on
variable-length training"; the maintainer: "calling a compiled function
with inputs of different shapes ... means you are re-compiling the
function every time"). Fix, the usual one for XLA: give the compiled step
static shapes, padding every batch to a fixed length (the mask keeps the
loss the same).
Summary: a small token model is trained with a ``tf.function`` whose
``input_signature`` has ``None`` for the batch and time axes and
``jit_compile=True``. For the first 30 % of the run sequence-length
warm-up truncates every sequence to 32 tokens, so one executable serves.
Then the loader pads each batch to its longest sequence while the length
cap grows with a curriculum, so almost every few steps bring a length XLA
has not seen: it compiles (~0.5-1 s on 2 cores) and caches one more executable in
the TensorFlow runtime. No Python object grows: the trace is the same and
the executables live in native memory.

Here: batches of 16 sequences over a 64-token vocabulary, a 32-d
embedding, one tanh layer and a softmax output; after warm-up the cap
grows from 32 to 56 tokens. The fixed twin pads every post-warm-up batch
to 56 tokens (two executables for the run).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +10.6
MiB RSS from 20 % to 40 % of the run (the onset is at 30 %) and +22.5 MiB
from 40 % to the end (~1 MiB per new length, ~24 lengths) with gc objects
flat (316,869), ~3 ms a step plus ~1 s per compile on 2 cores with another
job on the machine (35 s); fixed +3.3 MiB from 20 % to 40 % (its second
executable, at the switch) and +1.0 MiB after, ~3 ms a step (9.5 s).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/81896"
SLICE = "holdout8"
STEPS = 3000
WARMUP = 0.3               # fraction of the run with sequences truncated to WARM_LEN
WARM_LEN = 32
MAX_LEN = 56
BATCH = 16
VOCAB = 64
DIM = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "xla", "compil"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, static_length):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    emb = tf.Variable(tf.random.normal([VOCAB, DIM], stddev=0.1))
    w = tf.Variable(tf.random.normal([DIM, DIM], stddev=0.1))
    out = tf.Variable(tf.random.normal([DIM, VOCAB], stddev=0.1))
    params = [emb, w, out]

    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                                    tf.TensorSpec([None, None], tf.float32)])
    def train_step(tokens, mask):
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.einsum("btd,de->bte", tf.gather(emb, tokens[:, :-1]), w))
            logits = tf.einsum("btd,dv->btv", h, out)
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tokens[:, 1:], logits=logits)
            m = mask[:, 1:]
            loss = tf.reduce_sum(nll * m) / tf.maximum(tf.reduce_sum(m), 1.0)
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(0.1 * tf.convert_to_tensor(g))
        return loss

    warm_steps = int(steps * WARMUP)
    for step in range(steps):
        if step < warm_steps:
            lengths = np.full(BATCH, WARM_LEN)
            pad_to = WARM_LEN
        else:
            frac = (step - warm_steps) / max(1, steps - warm_steps - 1)
            cap = int(WARM_LEN + frac * (MAX_LEN - WARM_LEN))
            lengths = rng.integers(max(8, cap // 2), cap + 1, BATCH)
            pad_to = MAX_LEN if static_length else int(lengths.max())   # the fix: one static length
        tokens = np.zeros((BATCH, pad_to), np.int32)
        mask = np.zeros((BATCH, pad_to), np.float32)
        for i, n in enumerate(lengths):
            start = rng.integers(VOCAB)
            tokens[i, :n] = (start + 3 * np.arange(n) + rng.integers(0, 2, n)) % VOCAB
            mask[i, :n] = 1.0
        train_step(tokens, mask)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, static_length=False)


def fixed(monitor, steps):
    _train(monitor, steps, static_length=True)
