"""A per-episode rollout buffer declares its lists at class level "for convenience", so every episode's buffer appends to the same class-wide lists and no episode is ever freed (eager policy-gradient loop).

Source: Jake Howard, "Instance vs Static: A tale of memory leaks and OOP in
Python" (theorangeone.net, 2019): attributes assigned in a class body are
shared by all instances, and a mutable one defined "for convenience" on a
class that is instantiated per request keeps growing with every instance's
data, a memory leak for the life of the process. Fix from the post: create
mutable attributes in ``__init__`` so that each instance gets its own.
Summary: a REINFORCE loop makes a new ``RolloutBuffer()`` for each episode
and expects it to start empty. The class declares ``observations = []``,
``actions = []`` and ``rewards = []`` in its body, so ``self.observations
.append(...)`` appends to the class's lists. The update only reads the last
``T`` entries (every episode has the same length), so training behaves and
nobody notices that the lists hold every observation batch since the start.

Here: 8 parallel toy environments, 32-d float32 observations, episodes of
16 steps (one episode per training step), a 32-64-4 Keras policy
(``tf.function`` forward and update), actions sampled in numpy. The fixed
twin creates the lists in ``__init__``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +29.4
MiB RSS from 20 % of the run to the end (~25 KiB per episode, steady; gc
object counts flat: the three class lists hold untracked arrays), fixed
+0.1 MiB; ~17-21 ms an episode (25-31 s; ~40 s under the runner).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://theorangeone.net/posts/static-vars/"
SLICE = "holdout7"
STEPS = 1500           # episodes
N_ENVS = 8
OBS = 32
ACTIONS = 4
T = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "list"],
              "holder_any": ["RolloutBuffer", "observations", "rewards", "actions"]},
    "fixed": {"verdict_not": "leak"},
}


class RolloutBuffer:
    observations = []          # class attributes: shared by every buffer ever made
    actions = []
    rewards = []

    def add(self, obs, action, reward):
        self.observations.append(obs)
        self.actions.append(action)
        self.rewards.append(reward)

    def last_episode(self):
        return (np.stack(self.observations[-T:]), np.stack(self.actions[-T:]), np.stack(self.rewards[-T:]))


class InstanceRolloutBuffer(RolloutBuffer):
    def __init__(self):        # the fix: per-instance lists
        self.observations = []
        self.actions = []
        self.rewards = []


def _train(monitor, steps, buffer_cls):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    policy = keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(64, activation="tanh"),
                               keras.layers.Dense(ACTIONS)])
    opt = keras.optimizers.Adam(1e-2)

    @tf.function
    def act(obs):
        return tf.nn.softmax(policy(obs))

    @tf.function
    def update(obs, actions, returns):
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(policy(obs))
            chosen = tf.reduce_sum(logp * tf.one_hot(actions, ACTIONS), axis=-1)
            loss = -tf.reduce_mean(chosen * (returns - tf.reduce_mean(returns)))
        opt.apply_gradients(zip(tape.gradient(loss, policy.trainable_variables), policy.trainable_variables))
        return loss

    for episode in range(steps):
        buf = buffer_cls()
        for _ in range(T):
            obs = rng.standard_normal((N_ENVS, OBS)).astype(np.float32)
            probs = act(tf.constant(obs)).numpy()
            action = (probs.cumsum(axis=1) > rng.random((N_ENVS, 1))).argmax(axis=1)
            reward = (action == obs[:, :ACTIONS].argmax(axis=1)).astype(np.float32)
            buf.add(obs, action, reward)
        obs, actions, rewards = buf.last_episode()
        returns = np.cumsum(rewards[::-1], axis=0)[::-1]
        update(tf.constant(obs.reshape(-1, OBS)), tf.constant(actions.reshape(-1)),
               tf.constant(returns.reshape(-1).copy()))
        monitor.sample(episode)


def leaky(monitor, steps):
    _train(monitor, steps, RolloutBuffer)


def fixed(monitor, steps):
    _train(monitor, steps, InstanceRolloutBuffer)
