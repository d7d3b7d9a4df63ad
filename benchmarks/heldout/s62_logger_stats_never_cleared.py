"""A training logger appends every step's stats to per-key lists and only ever reads their last few entries (``tf.function`` learner).

Source: oxwhirl/pymarl#73 "Fix memory leak" ("In Logger, the stats should be
cleared periodically to avoid accumulating unnecessary logs in the memory";
pymarl's ``Logger.log_stat`` does ``self.stats[key].append((t, value))``
and ``print_recent_stats`` averages only the last 5 entries of each key, so
every ``(t, value)`` pair logged since the start stays in memory). Fix from
the PR: clear the stats once they have been printed, keeping the recent
window.
Summary: a multi-agent Q-learning learner logs its loss, gradient norm, TD
error, target and per-agent Q-value means at every training step, and
prints the recent averages every 100 steps. The logger's ``stats`` dict of
lists grows by 16 small tuples a step for the whole run.

Here: a 32-128-128-(8 agents x 5 actions) Q-network and its target
network, a TD step in a ``tf.function`` on 64 random transitions, 16 stats
a step converted with ``float()``. A small, slow leak (~1.5 KiB a step);
the fixed twin's lists fill for 100 steps and are cut back to the last 5
entries (a sawtooth). The ``(t, value)`` tuples hold only numbers, so the
garbage collector untracks them: ``gc.get_objects()`` does not grow.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc, fresh
process, TF 2.21 / Keras 3.15 / Python 3.11): leaky +8.1 MiB RSS from 20 %
of the run to the end (~1.5 KiB per step; tracemalloc +1.4 KiB a step,
gc-tracked objects flat), fixed +0.0 MiB (tracemalloc flat, sawtooth);
~4 ms a step.
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/oxwhirl/pymarl/pull/73"
SLICE = "holdout5"
STEPS = 7000
AGENTS = 8
ACTIONS = 5
BATCH = 64
LOG_INTERVAL = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "float", "list"],
              "holder_any": ["stats", "Logger"]},
    "fixed": {"verdict_not": "leak"},
}


class Logger:
    def __init__(self, clear_after_print):
        self.clear_after_print = clear_after_print
        self.stats = collections.defaultdict(lambda: [])
        self.lines = 0

    def log_stat(self, key, value, t):
        self.stats[key].append((t, value))

    def print_recent_stats(self):
        items = []
        for k, v in sorted(self.stats.items()):
            window = 5 if k != "epsilon" else 1
            items.append("{}: {:.4f}".format(k, np.mean([x[1] for x in v[-window:]])))
        self.lines += len(" | ".join(items)) > 0
        if self.clear_after_print:                    # the fix: keep only the recent window
            for k in self.stats:
                self.stats[k] = self.stats[k][-5:]


def _q_net():
    return keras.Sequential([
        keras.Input(shape=(32,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(AGENTS * ACTIONS),
        keras.layers.Reshape((AGENTS, ACTIONS)),
    ])


def _train(monitor, steps, clear_after_print):
    keras.utils.set_random_seed(0)
    q, target = _q_net(), _q_net()
    target.set_weights(q.get_weights())
    opt = keras.optimizers.Adam(5e-4)

    @tf.function
    def learner_step(obs, actions, rewards, next_obs):
        next_q = tf.reduce_max(target(next_obs), axis=-1)
        targets = rewards + 0.99 * next_q
        with tf.GradientTape() as tape:
            q_all = q(obs)
            taken = tf.reduce_sum(q_all * tf.one_hot(actions, ACTIONS), axis=-1)
            td = taken - tf.stop_gradient(targets)
            loss = tf.reduce_mean(td ** 2)
        grads = tape.gradient(loss, q.trainable_variables)
        opt.apply_gradients(zip(grads, q.trainable_variables))
        return loss, tf.linalg.global_norm(grads), tf.reduce_mean(tf.abs(td)), \
            tf.reduce_mean(targets), tf.reduce_mean(taken, axis=0)

    logger = Logger(clear_after_print)
    rng = np.random.default_rng(0)
    for step in range(steps):
        obs = rng.standard_normal((BATCH, 32)).astype(np.float32)
        next_obs = obs + 0.1 * rng.standard_normal((BATCH, 32)).astype(np.float32)
        actions = rng.integers(0, ACTIONS, size=(BATCH, AGENTS))
        rewards = rng.standard_normal((BATCH, AGENTS)).astype(np.float32)
        loss, gnorm, td_abs, tmean, q_agents = learner_step(obs, actions, rewards, next_obs)
        t = step * BATCH
        logger.log_stat("loss", float(loss), t)
        logger.log_stat("grad_norm", float(gnorm), t)
        logger.log_stat("td_error_abs", float(td_abs), t)
        logger.log_stat("target_mean", float(tmean), t)
        for a, qa in enumerate(q_agents.numpy()):
            logger.log_stat("q_taken_mean_agent%d" % a, float(qa), t)
        logger.log_stat("epsilon", max(0.05, 1.0 - step / 2000), t)
        logger.log_stat("episode", float(step // 50), t)
        logger.log_stat("learning_rate", 5e-4, t)
        logger.log_stat("buffer_size", float(min(5000, (step + 1) * BATCH)), t)
        if (step + 1) % LOG_INTERVAL == 0:
            logger.print_recent_stats()
            target.set_weights(q.get_weights())
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, clear_after_print=False)


def fixed(monitor, steps):
    _train(monitor, steps, clear_after_print=True)
