"""Once the active-learning queue starts feeding hard examples (after 35 % of the run), each one's serialized ``tf.train.Example`` is parsed into a single reused message object, and with the upb protobuf runtime every ``ParseFromString`` on the same message allocates into its arena, which is only freed with the message (``tf.function`` train step; native memory only; late onset).

Source: protocolbuffers/protobuf#24257 "[Python] Potential memory leak"
(``obj = schema_pb2.SomeObj()`` then ``for _ in range(10_000_000):
obj.ParseFromString(b"...")``: "Until the ``obj`` is deleted, the memory
grew uncontrollably"; on the protobuf list "it was explained to me, that
the behaviour is intended and expected. But it is still kind of
counterintuitive to see that ``Unpack`` and ``ParseFromString`` actually
allocate more and more memory"), a continuation of
protocolbuffers/protobuf#10088 and #19674 ("Memory leaks-ish in Python
with upb backend"; gone with ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``).
Fix, the one the thread points to: do not reuse one message for a stream
of parses; parse each record into a fresh message
(``tf.train.Example.FromString(raw)``), whose arena goes with it.
Summary: a classifier is trained with a ``tf.function`` step on batches of
``tf.train.Example`` records decoded by ``tf.io.parse_example``. After 35 %
of the run an active-learning queue also hands over four hard examples a
step; for these the trainer reads the annotator, source URI and confidence
in Python to weight them, using one ``tf.train.Example()`` kept on the
reader (``self._meta_msg``) "to avoid allocating a message per record".
With protobuf's default upb backend each ``ParseFromString`` into that
message allocates the new contents in the message's arena and nothing is
returned until the message itself is freed: ~1.3 KiB of native memory per
hard example, no Python object created or kept.

Here: 64 float features, a label, a 16-float box list, two strings and a
confidence per record (~480 serialized bytes); a 64-128-10 Keras MLP
trained with a ``tf.function`` step on 16 regular plus 4 hard examples
(~2 ms a step). The fixed twin uses ``tf.train.Example.FromString``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / protobuf 7 (upb) / Python 3.11; a do-nothing
``monitor.sample``): leaky +4.4 MiB RSS from 20 % to 40 % of the run (the
onset is at 35 %) and +17.9 MiB from 40 % to the end (~5.1 KiB a step,
~1.3 KiB a hard example; 556.6 / 561.0 / 578.9 MiB at 20 % / 40 % / end)
with gc objects flat after the onset (322,652 / 324,351 / 324,351), fixed
556.3 / 558.8 / 558.9 MiB (the retrace for the larger batch at the onset,
then flat), same objects; ~2.5 ms a step (15-16 s for 6,000 steps, with
another job on the machine).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/protocolbuffers/protobuf/issues/24257"
SLICE = "holdout9"
STEPS = 6000
HARD_START = 0.35       # the active-learning queue starts after this fraction of the run
BATCH = 16
HARD = 4
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "protobuf", "upb", "Example", "message"],
              "holder_any": ["_meta_msg", "HardExampleReader", "Example"]},
    "fixed": {"verdict_not": "leak"},
}

FEATURE_SPEC = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}


def _record(rng, centers, i, hard):
    y = int(rng.integers(CLASSES))
    x = (centers[y] + rng.normal(scale=1.5 if hard else 1.0, size=FEATURES)).astype(np.float32)
    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y])),
        "boxes": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(16).astype(np.float32))),
        "source_uri": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[b"gs://al-queue/shard-%05d/img-%08d.png" % (i // 1000, i)])),
        "annotator": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"annotator-%03d" % (i % 97)])),
        "confidence": tf.train.Feature(float_list=tf.train.FloatList(value=[float(rng.random())])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class HardExampleReader:
    def __init__(self, reuse_message):
        self.reuse_message = reuse_message
        self._meta_msg = tf.train.Example()                    # "one message, no allocation per record"

    def read(self, raw):
        if self.reuse_message:
            msg = self._meta_msg
            msg.ParseFromString(raw)                           # upb: allocates into this message's arena
        else:
            msg = tf.train.Example.FromString(raw)             # the fix: a fresh message per record
        feats = msg.features.feature
        x = np.asarray(feats["x"].float_list.value, np.float32)
        y = feats["y"].int64_list.value[0]
        weight = 1.0 + (1.0 - feats["confidence"].float_list.value[0])
        _ = feats["annotator"].bytes_list.value[0], feats["source_uri"].bytes_list.value[0]
        return x, y, weight


def _train(monitor, steps, reuse_message):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    regular = [_record(rng, centers, i, False) for i in range(1024)]
    hard_pool = [_record(rng, centers, 100000 + i, True) for i in range(1024)]
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def train_step(x, y, w):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(loss_fn(y, model(x, training=True)) * w) / tf.reduce_sum(w)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    reader = HardExampleReader(reuse_message)
    hard_start = int(steps * HARD_START)
    for step in range(steps):
        idx = rng.integers(0, len(regular), BATCH)
        parsed = tf.io.parse_example(tf.constant([regular[i] for i in idx]), FEATURE_SPEC)
        x, y = parsed["x"], tf.cast(parsed["y"], tf.int32)
        w = tf.ones([BATCH])
        if step >= hard_start:
            hx, hy, hw = zip(*(reader.read(hard_pool[i]) for i in rng.integers(0, len(hard_pool), HARD)))
            x = tf.concat([x, np.stack(hx)], 0)
            y = tf.concat([y, np.asarray(hy, np.int32)], 0)
            w = tf.concat([w, np.asarray(hw, np.float32)], 0)
        train_step(x, y, w)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reuse_message=True)


def fixed(monitor, steps):
    _train(monitor, steps, reuse_message=False)
