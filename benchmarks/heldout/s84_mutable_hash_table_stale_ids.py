"""A ``MutableHashTable`` maps streaming session ids to recycled embedding slots, but ids whose slot was recycled are never removed, so the table grows by every session ever seen (``tf.function`` step; native memory).

Source: tensorflow/tensorflow#11080 "Feature Request: delete key in
MutableHashTable" ("A 'delete' method in contrib.lookup.MutableHashTable
would be useful when there are too many <key, value> pairs and we can only
handle the recent ones"; the reporter restarted the session to get the
memory back). ``MutableHashTable.remove(keys)`` exists now. Fix: when a
slot is recycled, ``remove()`` the id that owned it.
Summary: a streaming click-through model gives each session an embedding
row from a fixed pool of 4,096 slots, assigned round-robin, so only the
recent sessions have a row. The id -> slot map is a
``tf.lookup.experimental.MutableHashTable``. Slots are recycled, but the
ids that owned them stay in the table, which grows by every new session id
for the whole run. Nothing in Python grows: the table lives in the TF
runtime.

Here: 128 events a step, 112 of them from sessions never seen before, a
16-d session embedding plus 16 context features into a logistic model
trained in a ``tf.function``. The fixed twin keeps the owner of each slot
in a ``tf.Variable`` and removes it when the slot is reused.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +21.3
MiB RSS from 20 % of the run to the end (~4.5 KiB per step, in steps as
the table rehashes) with gc object counts flat, fixed +0.1 MiB; ~3.1 ms a
step (19 s; ~27 s under the runner).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/11080"
SLICE = "holdout7"
STEPS = 6000
BATCH = 128
NEW_PER_STEP = 112
SLOTS = 4096
DIM = 16
CONTEXT = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "MutableHashTable", "lookup"]},
    "fixed": {"verdict_not": "leak"},
}


class SessionSlots:
    def __init__(self, remove_stale):
        self.remove_stale = remove_stale
        self.id_to_slot = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1)
        self.slot_owner = tf.Variable(tf.fill([SLOTS], tf.constant(-1, tf.int64)))
        self.next_slot = tf.Variable(tf.constant(0, tf.int64))

    def lookup(self, ids):
        """Slot of each id; new ids take the next slots round-robin (runs inside the tf.function)."""
        uniq, _ = tf.unique(ids)
        found = tf.reshape(self.id_to_slot.lookup(uniq), [-1])
        new_ids = tf.boolean_mask(uniq, found < 0)
        n_new = tf.size(new_ids, out_type=tf.int64)
        slots = (self.next_slot + tf.range(n_new, dtype=tf.int64)) % SLOTS
        self.next_slot.assign((self.next_slot + n_new) % SLOTS)
        if self.remove_stale:                                  # the fix: forget the slot's previous owner
            old = tf.gather(self.slot_owner, slots)
            self.id_to_slot.remove(tf.boolean_mask(old, old >= 0))
        self.slot_owner.scatter_nd_update(tf.expand_dims(slots, 1), new_ids)
        self.id_to_slot.insert(new_ids, slots)
        return tf.reshape(self.id_to_slot.lookup(ids), [-1])


def _train(monitor, steps, remove_stale):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    slots = SessionSlots(remove_stale)
    emb = tf.Variable(tf.random.normal([SLOTS, DIM], stddev=0.05))
    w = tf.Variable(tf.zeros([DIM + CONTEXT, 1]))
    opt_lr = 0.05

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, CONTEXT], tf.float32),
                                  tf.TensorSpec([None, 1], tf.float32)])
    def train_step(ids, ctx, y):
        slot_ids = slots.lookup(ids)
        with tf.GradientTape() as tape:
            feats = tf.concat([tf.gather(emb, slot_ids), ctx], axis=1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=feats @ w))
        g_emb, g_w = tape.gradient(loss, [emb, w])
        emb.assign_sub(opt_lr * tf.convert_to_tensor(g_emb))
        w.assign_sub(opt_lr * g_w)
        return loss

    next_session = 0
    recent = np.zeros(0, dtype=np.int64)
    for step in range(steps):
        fresh = np.arange(next_session, next_session + NEW_PER_STEP, dtype=np.int64)
        next_session += NEW_PER_STEP
        pool = np.concatenate([recent, fresh])
        ids = np.concatenate([fresh, rng.choice(pool, BATCH - NEW_PER_STEP)])
        recent = pool[-2048:]
        ctx = rng.standard_normal((BATCH, CONTEXT)).astype(np.float32)
        y = (ctx[:, :1] + 0.1 * (ids[:, None] % 7) > 0.3).astype(np.float32)
        train_step(ids, ctx, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, remove_stale=False)


def fixed(monitor, steps):
    _train(monitor, steps, remove_stale=True)
