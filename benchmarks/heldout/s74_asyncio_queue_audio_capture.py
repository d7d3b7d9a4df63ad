"""An audio-capture callback feeds an unbounded ``asyncio.Queue`` faster than the async training consumer takes chunks out (eager STFT features + ``tf.function`` step).

Source: m96-chan/ProcTap#46 "Performance: Unbounded queue growth can lead
to memory issues" ("The queue is created without a maxsize, meaning it can
grow indefinitely if the async consumer is slow to process data ... Memory
can grow unboundedly in long-running capture sessions"). Fix from the
issue: a ``maxsize`` on the queue (here with drop-oldest when full, as
capture code usually does).
Summary: an online keyword-spotting model trains on live audio. The capture
side pushes three 4,096-sample chunks (as eager tensors) per tick into an
``asyncio.Queue()``; the consumer coroutine computes log-spectrogram features
for two chunks per tick and trains on them. One chunk a tick is left
behind, and the queue keeps them all.

Here: 16 kHz float32 chunks of 4,096 samples (16 KiB), ``tf.signal.stft``
features, a 2-layer dense classifier. The fixed twin's ``Queue(maxsize=32)``
is full after ~32 ticks; it then drops the oldest chunk.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +50 MiB RSS from 20 % of the run to the end of a 3,000-step run
(~21 KiB per step: one 16 KiB chunk tensor and +2 gc-tracked objects a
step, steady), fixed +0.1 MiB (gc objects flat once the queue is full);
~33-39 ms a step with another job running, so STEPS was cut to 1,500.
"""
import asyncio
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/m96-chan/ProcTap/issues/46"
SLICE = "holdout6"
STEPS = 1500
CHUNK = 4096
CAPTURED_PER_TICK = 3
CONSUMED_PER_TICK = 2
MAXSIZE = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "deque"],
              "holder_any": ["queue", "Queue", "_queue"]},
    "fixed": {"verdict_not": "leak"},
}


def _features(chunk):
    spec = tf.abs(tf.signal.stft(chunk, frame_length=256, frame_step=128))
    return tf.reduce_mean(tf.math.log(spec + 1e-6), axis=0)        # 129 log-magnitudes


async def _run(monitor, steps, bounded):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((129,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    q = asyncio.Queue(maxsize=MAXSIZE if bounded else 0)
    rng = np.random.default_rng(0)
    t = np.arange(CHUNK, dtype=np.float32) / 16000.0

    def on_audio(label):                      # the capture callback
        tone = np.sin(2 * np.pi * (440.0 + 400.0 * label) * t) if label else 0.0
        chunk = tf.constant((0.3 * tone + 0.1 * rng.standard_normal(CHUNK)).astype(np.float32))
        if bounded and q.full():
            q.get_nowait()                    # drop the oldest chunk
        q.put_nowait((chunk, label))

    for step in range(steps):
        for _ in range(CAPTURED_PER_TICK):
            on_audio(int(rng.integers(0, 2)))
        feats, labels = [], []
        for _ in range(CONSUMED_PER_TICK):
            chunk, label = await q.get()
            feats.append(_features(chunk))
            labels.append(label)
        train_step(tf.stack(feats), tf.constant(labels))
        monitor.sample(step)


def leaky(monitor, steps):
    asyncio.run(_run(monitor, steps, bounded=False))


def fixed(monitor, steps):
    asyncio.run(_run(monitor, steps, bounded=True))
