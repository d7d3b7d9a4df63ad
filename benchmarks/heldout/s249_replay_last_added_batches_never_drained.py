"""A DQN learner (``tf.function`` update and action selection) stores every rollout fragment in a multi-agent replay buffer of ``SimpleReplayBuffer`` slots; like RLlib's buffer before pull request #22678, ``add_batch`` also appends each copied fragment to ``last_added_batches[policy_id]``, a list that only the mix-in replay variant ever drains, so every fragment the learner has seen stays alive there after its slot in the ring has been overwritten (TensorFlow ``tf.function`` + numpy rollouts; grows every step, ~10 KiB a step: one 32-transition fragment of float32 observations, next observations, actions, rewards and dones; the ring itself fills in the first 15 % and then holds in both variants).

Source: ray-project/ray pull request #22678 "[RLlib] Fix a memeory leak in
SimpleReplyBuffer" (merged): "This bug seems to completely kill sampling
throughput"; from the review: "they are completely not used as far as I can
tell. ``last_added_batches`` is only useful for MixInMultiAgentReplayBuffer."
and "Oh no, how did this leak ever get in there? ... Thanks so much for
finding this". Fix used here (the PR's): ``add_batch`` no longer appends to
``last_added_batches``.
Summary: the buffer is a stand-in with RLlib's shape at the time
(``MultiAgentReplayBuffer`` with ``collections.defaultdict`` of
``SimpleReplayBuffer(num_slots=capacity)``, ``add_batch`` that copies the
batch "so the replay buffer doesn't pin plasma memory" and splits it per
policy, ``replay`` that samples slots). The environment is a numpy
stand-in: a 32-dimensional drifting state, 4 actions that push it, reward
for staying near a moving target, 32 parallel env copies stepped per
fragment. The Q network is a Keras 32-128-4 MLP with a target copy synced
every 250 steps; each step collects one fragment with epsilon-greedy
actions from a ``tf.function`` and trains on 64 transitions sampled from
the ring (1,800 slots).

Here: 12,000 steps. The fixed buffer does not keep ``last_added_batches``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 578.6 / 602.8 /
627.0 / 651.2 / 675.1 MiB RSS at 20 / 40 / 60 / 80 % / end (555.6 MiB at the
first step; ~10 KiB a step: one copied 32-transition fragment a step in
``last_added_batches``) with gc objects 326,117 at the first step, then
328,285 / 330,685 / 333,085 / 335,485 / 337,885 at the same marks (one
``SampleBatch`` dict a step; its arrays are not tracked), 35.9 s for 12,000
steps (~3.0 ms a step); fixed 572.8 / 575.3 / 575.3 / 575.3 / 575.3 MiB (the
1,800-slot ring fills by 15 % and then recycles its slots) with objects
327,684 / 327,686 / 327,688 / 327,690 / 327,692, 37.3 s. 42-45 s a variant
in its process, imports included.
"""
import collections
import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/ray-project/ray/pull/22678"
SLICE = "holdout21"
STEPS = 12000
OBS = 32
ACTIONS = 4
ENVS = 32
SLOTS = 1800
TRAIN_BATCH = 64
GAMMA = 0.97
SYNC_EVERY = 250
DEFAULT_POLICY_ID = "default_policy"
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "SampleBatch"],
              "holder_any": ["last_added_batches", "MultiAgentReplayBuffer", "replay_buffer"]},
    "fixed": {"verdict_not": "leak"},
}


class SampleBatch(dict):
    @property
    def count(self):
        return len(self["rewards"])

    def copy(self):
        return SampleBatch({k: np.array(v, copy=True) for k, v in self.items()})


class MultiAgentBatch:
    def __init__(self, policy_batches, env_steps):
        self.policy_batches = policy_batches
        self.count = env_steps

    def copy(self):
        return MultiAgentBatch({k: v.copy() for k, v in self.policy_batches.items()}, self.count)


class SimpleReplayBuffer:
    def __init__(self, num_slots):
        self.num_slots = num_slots
        self.replay_batches = []
        self.replay_index = 0

    def add_batch(self, sample_batch):
        if self.num_slots > 0:
            if len(self.replay_batches) < self.num_slots:
                self.replay_batches.append(sample_batch)
            else:
                self.replay_batches[self.replay_index] = sample_batch
                self.replay_index = (self.replay_index + 1) % self.num_slots

    def replay(self):
        return random.choice(self.replay_batches)

    def __len__(self):
        return len(self.replay_batches)


class MultiAgentReplayBuffer:
    def __init__(self, capacity, keep_last_added):
        self.keep_last_added = keep_last_added
        self.replay_buffers = collections.defaultdict(lambda: SimpleReplayBuffer(num_slots=capacity))
        self.num_added = 0
        self.last_added_batches = collections.defaultdict(list)  # Last added batch(es).

    def add_batch(self, batch):
        # Make a copy so the replay buffer doesn't pin plasma memory.
        batch = batch.copy()
        self.num_added += batch.count
        for policy_id, sample_batch in batch.policy_batches.items():
            self.replay_buffers[policy_id].add_batch(sample_batch)
            if self.keep_last_added:                         # removed by ray #22678
                self.last_added_batches[policy_id].append(sample_batch)

    def replay(self, n, policy_id=DEFAULT_POLICY_ID):
        buf = self.replay_buffers[policy_id]
        parts = [buf.replay() for _ in range(max(1, n // ENVS))]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _run(monitor, steps, keep_last_added):
    keras.utils.set_random_seed(0)
    random.seed(0)
    rng = np.random.default_rng(0)
    q = keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(128, activation="relu"),
                          keras.layers.Dense(ACTIONS)])
    q_target = keras.models.clone_model(q)
    q_target.set_weights(q.get_weights())
    opt = keras.optimizers.Adam(5e-4)
    push = (rng.standard_normal((ACTIONS, OBS)) * 0.1).astype(np.float32)
    buffer = MultiAgentReplayBuffer(SLOTS, keep_last_added)

    @tf.function
    def act(obs):
        return tf.argmax(q(obs, training=False), axis=1, output_type=tf.int32)

    @tf.function
    def train(obs, actions, rewards, new_obs, dones):
        target = rewards + GAMMA * (1.0 - dones) * tf.reduce_max(q_target(new_obs, training=False), axis=1)
        with tf.GradientTape() as tape:
            qa = tf.gather(q(obs, training=True), actions, batch_dims=1)
            loss = tf.reduce_mean(tf.square(qa - tf.stop_gradient(target)))
        grads = tape.gradient(loss, q.trainable_variables)
        opt.apply_gradients(zip(grads, q.trainable_variables))
        return loss

    state = rng.standard_normal((ENVS, OBS)).astype(np.float32)
    target_pos = np.zeros(OBS, dtype=np.float32)
    for step in range(steps):
        eps = max(0.05, 1.0 - step / (0.3 * steps))
        greedy = act(tf.constant(state)).numpy()
        actions = np.where(rng.random(ENVS) < eps, rng.integers(0, ACTIONS, ENVS), greedy).astype(np.int32)
        target_pos += 0.01 * rng.standard_normal(OBS).astype(np.float32)
        new_state = (0.95 * state + push[actions] + 0.05 * rng.standard_normal((ENVS, OBS))).astype(np.float32)
        dist = np.linalg.norm(new_state - target_pos, axis=1)
        rewards = (-dist / np.sqrt(OBS)).astype(np.float32)
        dones = (dist > 12.0).astype(np.float32)
        batch = SampleBatch(obs=state, new_obs=new_state, actions=actions, rewards=rewards, dones=dones)
        buffer.add_batch(MultiAgentBatch({DEFAULT_POLICY_ID: batch}, ENVS))
        state = np.where(dones[:, None] > 0, rng.standard_normal((ENVS, OBS)), new_state).astype(np.float32)
        sample = buffer.replay(TRAIN_BATCH)
        train(sample["obs"], sample["actions"], sample["rewards"], sample["new_obs"], sample["dones"])
        if step % SYNC_EVERY == SYNC_EVERY - 1:
            q_target.set_weights(q.get_weights())
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, keep_last_added=True)


def fixed(monitor, steps):
    _run(monitor, steps, keep_last_added=False)
