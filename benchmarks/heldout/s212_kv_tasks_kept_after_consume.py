"""A language-model training loop samples a continuation after every update with a KV cache whose blocks are offloaded to host memory once the context outgrows the device budget; offloads and reloads go through a FlexKV-style ``KVTaskManager`` that files every transfer as a ``KVTask`` in ``tasks``, an expiring dict with a 30-minute TTL, and nothing pops a task when its result is consumed, so every finished transfer, with the host copy of its KV block, stays for half an hour, i.e. for the whole run; offloading only starts when the curriculum doubles the sampled length at 40 % of the run (eager TensorFlow + ``tf.function``; late onset, then ~40 KiB a step).

Source: taco-project/FlexKV pull request #129 "[bugfix] Release task
resources": "FlexKV's ``KVTaskManager.tasks`` (ExpiringDict, TTL=30min)
retains completed KVTask objects long after they are consumed. Each KVTask
holds ~16 Python objects. This causes python GC pause time to grow. This
PR fix: pop tasks from ExpiringDict when consumed (``_wait_impl``) or
cancelled (``_cancel_task``)". Fix used here (the PR's): ``wait()`` pops the
task it returns.
Summary: a one-layer attention language model (vocabulary 64, width 64,
context 16) trained by teacher forcing with Adam in a ``tf.function`` on
batches of 16 sequences from a noisy periodic grammar; after each update 4
continuations are sampled eagerly, 8 tokens at first and 16 from 40 % of
the run, with a KV cache in blocks of 4 tokens and a device budget of two
blocks; offloaded blocks go to a host cache (freed when the sample ends)
and are reloaded at the start of each 4-token window that needs them.

Here: 1,000 steps, longer samples (and offloading) from step 400. The
fixed manager pops a task when ``wait()`` hands it back.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
and object counts from separate runs): leaky 571.0 / 571.5 / 582.1 / 589.0
/ 596.0 MiB RSS at 20 / 40 / 60 / 80 % / end (flat until step 400, then
~42 KiB a step: three finished ``KVTask`` objects a sample batch, with the
host copies of their KV blocks and the reloaded device tensors, in
``KVTaskManager.tasks``) with gc objects 326,833 / 326,833 / 329,233 /
331,633 / 334,033 at the same marks (12 a step after the onset), 22.1 s
for 1,000 steps (~22 ms a step); fixed 570.8 / 570.9 / 575.2 / 575.3 /
575.5 MiB (a step of 4.3 MiB at the switch to longer samples, then 0.3 MiB
over the last 600 steps; a 2,400-step run crept 0.4 MiB over its last
1,400 steps, the allocator settling) with objects 326,833 at every mark,
20.3 s.
"""
import collections
import itertools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/taco-project/FlexKV/pull/129"
SLICE = "holdout18"
STEPS = 1000
ONSET = 0.4
VOCAB = 64
WIDTH = 64
CONTEXT = 16
BATCH = 16
SAMPLES = 4
BLOCK = 4
SAMPLE_LEN = 8
DEVICE_BLOCKS = 2
TTL_SECONDS = 30 * 60
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["KVTask", "ndarray", "numpy", "ExpiringDict", "dict"],
              "holder_any": ["tasks", "KVTaskManager", "ExpiringDict"]},
    "fixed": {"verdict_not": "leak"},
}


class ExpiringDict(collections.OrderedDict):
    """Entries expire ``ttl`` seconds after insertion (checked on insertion)."""

    def __init__(self, ttl):
        super().__init__()
        self.ttl = ttl

    def __setitem__(self, key, value):
        now = time.monotonic()
        while self and next(iter(self.values()))[0] < now:
            self.popitem(last=False)
        super().__setitem__(key, (now + self.ttl, value))

    def get_task(self, key):
        return super().__getitem__(key)[1]


class KVTask:
    def __init__(self, task_id, kind, block_id, k, v):
        self.task_id = task_id
        self.kind = kind
        self.block_id = block_id
        self.status = "PENDING"
        self.submit_time = time.monotonic()
        self.finish_time = None
        self.src, self.dst = ("gpu", "cpu") if kind == "offload" else ("cpu", "gpu")
        self.k_host = k                                      # host copies of the block
        self.v_host = v
        self.callbacks = []
        self.result = None


class KVTaskManager:
    """Transfers between the device cache and the host cache, each filed as a ``KVTask``."""

    def __init__(self, pop_on_consume):
        self.pop_on_consume = pop_on_consume
        self.tasks = ExpiringDict(TTL_SECONDS)
        self.cpu_cache = {}                                  # (sequence, block) -> host (k, v)
        self._ids = itertools.count()

    def offload(self, seq_id, block_id, k, v):
        host = (k.numpy(), v.numpy())
        self.cpu_cache[(seq_id, block_id)] = host
        task = KVTask(next(self._ids), "offload", block_id, *host)
        task.status, task.finish_time = "DONE", time.monotonic()
        self.tasks[task.task_id] = task
        return task.task_id

    def reload(self, seq_id, block_id):
        host = self.cpu_cache[(seq_id, block_id)]
        task = KVTask(next(self._ids), "reload", block_id, *host)
        task.result = (tf.constant(host[0]), tf.constant(host[1]))
        task.status, task.finish_time = "DONE", time.monotonic()
        self.tasks[task.task_id] = task
        return task.task_id

    def wait(self, task_id):
        task = self.tasks.get_task(task_id)
        if self.pop_on_consume:                               # the fix (FlexKV#129)
            del self.tasks[task_id]
        return task

    def release(self, seq_id):
        for key in [k for k in self.cpu_cache if k[0] == seq_id]:
            del self.cpu_cache[key]


def _corpus(rng, n):
    period = rng.integers(3, 7, n)
    phase = rng.integers(0, VOCAB, n)
    t = np.arange(CONTEXT + 1)[None, :]
    seq = (phase[:, None] + (t % period[:, None]) * 5) % VOCAB
    noise = rng.random(seq.shape) < 0.05
    return np.where(noise, rng.integers(0, VOCAB, seq.shape), seq).astype(np.int32)


class TinyLM(keras.Model):
    def __init__(self):
        super().__init__()
        self.emb = keras.layers.Embedding(VOCAB, WIDTH)
        self.q = keras.layers.Dense(WIDTH, use_bias=False)
        self.k = keras.layers.Dense(WIDTH, use_bias=False)
        self.v = keras.layers.Dense(WIDTH, use_bias=False)
        self.out = keras.layers.Dense(VOCAB)

    def call(self, tokens):
        h = self.emb(tokens)
        q, k, v = self.q(h), self.k(h), self.v(h)
        n = tf.shape(tokens)[1]
        causal = tf.linalg.band_part(tf.ones((n, n)), -1, 0)
        att = tf.matmul(q, k, transpose_b=True) / WIDTH ** 0.5
        att = tf.nn.softmax(att + (1.0 - causal) * -1e9)
        return self.out(h + tf.matmul(att, v))


def _sample(model, manager, seq_id, start, length):
    """Eager sampling with a block KV cache; blocks past the device budget live in the host cache."""
    emb, wq, wk, wv, wo, bo = [tf.convert_to_tensor(w) for w in (
        model.emb.embeddings, model.q.kernel, model.k.kernel, model.v.kernel, model.out.kernel, model.out.bias)]
    blocks = []                                              # device (k, v), or None when offloaded
    window = []                                              # offloaded blocks reloaded for this window
    pending_k, pending_v = [], []
    tok = start
    for i in range(length):
        if i % BLOCK == 0:                                   # a new window: reload what is offloaded
            window = [manager.wait(manager.reload(seq_id, j)).result
                      for j, b in enumerate(blocks) if b is None]
        h = tf.gather(emb, tok)
        q, k, v = tf.matmul(h, wq), tf.matmul(h, wk), tf.matmul(h, wv)
        pending_k.append(k[:, None])
        pending_v.append(v[:, None])
        resident = [b for b in blocks if b is not None]
        K = tf.concat([b[0] for b in window] + [b[0] for b in resident] + pending_k, 1)
        V = tf.concat([b[1] for b in window] + [b[1] for b in resident] + pending_v, 1)
        att = tf.nn.softmax(tf.matmul(q[:, None], K, transpose_b=True) * WIDTH ** -0.5)
        logits = tf.matmul(h + tf.matmul(att, V)[:, 0], wo) + bo
        tok = tf.argmax(logits, axis=-1, output_type=tf.int32)
        if len(pending_k) == BLOCK:                          # the block is full
            blocks.append((tf.concat(pending_k, 1), tf.concat(pending_v, 1)))
            pending_k, pending_v = [], []
            live = [j for j, b in enumerate(blocks) if b is not None]
            if len(live) > DEVICE_BLOCKS:                    # over budget: offload the oldest
                j = live[0]
                manager.wait(manager.offload(seq_id, j, *blocks[j]))
                blocks[j] = None
    manager.release(seq_id)
    return tok


def _train(monitor, steps, pop_on_consume):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = TinyLM()
    opt = keras.optimizers.Adam(3e-3)
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(seq):
        with tf.GradientTape() as tape:
            loss = xent(seq[:, 1:], model(seq[:, :-1]))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    manager = KVTaskManager(pop_on_consume)
    onset = int(steps * ONSET)
    for step in range(steps):
        train_step(tf.constant(_corpus(rng, BATCH)))
        length = 2 * SAMPLE_LEN if step >= onset else SAMPLE_LEN
        _sample(model, manager, step, tf.constant(rng.integers(0, VOCAB, SAMPLES).astype(np.int32)), length)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, pop_on_consume=False)


def fixed(monitor, steps):
    _train(monitor, steps, pop_on_consume=True)
