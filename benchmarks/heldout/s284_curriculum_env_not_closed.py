"""A ``tf.function`` policy is trained on a curriculum of simulated maps through an environment wrapper written like mamba's ``EnvCurriculum`` before the fix in issue #12: every few episodes ``_reset`` replaces ``self.env`` with ``self._start_next()`` without closing the previous environment, whose simulator state lives in native memory that only ``close()`` releases, so every curriculum stage leaves ~1.5 MiB behind in the C heap (TensorFlow ``tf.function``; native memory only, no Python object grows; grows in steps, once every 100 steps).

Source: jbr-ai-labs/mamba issue #12 "Problem of memory leaking" (closed):
"The occupied system memory keeps growing throughout the training phase."
Reply: "The environment is wrapped with the EnvCurriculum wrapper, which
creates a new environment every given number of episodes in the
_start_next function. The problem is that it does not properly close the
previous instantiation of the environment; in fact, I had multiple SC2
processes active, and the memory kept growing. The solution could be to
add a ``self.env.close()`` right before ``self.env = self._start_next()``
in the _reset function". Maintainer: "Great catch, updated the code with
the proposed fix". Fix used here (that commit's): ``_reset`` closes the
old environment before starting the next, so each stage's simulator state
is allocated and released (allocator churn, no growth).
Summary: the simulator is a stand-in for an external engine: on creation
it ``malloc``s and fills a 1.5 MiB state block (map grid and unit tables)
and only ``close()`` frees it (no ``__del__``, as with a simulator
process). The task is a multi-agent point-reaching map with 8 agents
whose layout changes per stage; episodes are 25 steps, a new map every 4
episodes. The shared policy is a Keras 6-64-2 network acting through a
``tf.function`` and updated with a ``tf.function`` advantage-weighted
regression step every step.

Here: 8,000 steps (80 stages). The fixed wrapper closes the old environment.
"""
import collections
import ctypes
import ctypes.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/jbr-ai-labs/mamba/issues/12"
SLICE = "holdout24"
STEPS = 8000
EPISODE = 25
EPISODES_PER_STAGE = 4
AGENTS = 8
STATE_BYTES = 1536 * 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class SimEnv:
    """An environment backed by an external simulator; close() releases its state."""

    def __init__(self, stage, rng):
        self.stage = stage
        self._state = _libc.malloc(STATE_BYTES)
        _libc.memset(self._state, stage & 0xFF, STATE_BYTES)
        self.goals = rng.uniform(-1, 1, (AGENTS, 2))
        self.rng = rng
        self.pos = None
        self.t = 0

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, (AGENTS, 2))
        self.t = 0
        return self._obs()

    def _obs(self):
        return np.concatenate([self.pos, self.goals - self.pos, np.full((AGENTS, 2), self.t / EPISODE)], 1)

    def step(self, actions):
        self.pos = np.clip(self.pos + 0.1 * np.clip(actions, -1, 1), -1.5, 1.5)
        self.t += 1
        reward = -np.linalg.norm(self.goals - self.pos, axis=1)
        return self._obs(), reward, self.t >= EPISODE

    def close(self):
        if self._state:
            _libc.free(self._state)
            self._state = None


class EnvCurriculum:
    def __init__(self, rng, close_old):
        self.rng = rng
        self.close_old = close_old
        self.stage = 0
        self.episodes = 0
        self.env = self._start_next()

    def _start_next(self):
        self.stage += 1
        return SimEnv(self.stage, self.rng)

    def reset(self):
        self.episodes += 1
        if self.episodes % EPISODES_PER_STAGE == 0:
            if self.close_old:
                self.env.close()                          # the fix (mamba #12)
            self.env = self._start_next()
        return self.env.reset()

    def step(self, actions):
        return self.env.step(actions)


def _run(monitor, steps, close_old):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    policy = keras.Sequential([keras.Input((6,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def act(obs):
        return policy(obs)

    @tf.function
    def update(obs, target, weight):
        with tf.GradientTape() as tape:
            err = tf.reduce_sum(tf.square(policy(obs, training=True) - target), axis=1)
            loss = tf.reduce_mean(weight * err)
        opt.apply_gradients(zip(tape.gradient(loss, policy.trainable_variables), policy.trainable_variables))
        return loss

    env = EnvCurriculum(rng, close_old)
    obs = env.reset()
    returns = collections.deque(maxlen=100)
    ep_ret = 0.0
    for step in range(steps):
        mean = act(tf.constant(obs, tf.float32)).numpy()
        actions = mean + 0.3 * rng.standard_normal(mean.shape)
        nxt, reward, done = env.step(actions)
        adv = (reward - reward.mean()) / (reward.std() + 1e-6)
        update(tf.constant(obs, tf.float32), tf.constant(actions, tf.float32),
               tf.constant(np.exp(np.clip(adv, -2, 2)), tf.float32))
        ep_ret += float(reward.mean())
        obs = nxt
        if done:
            returns.append(ep_ret)
            ep_ret = 0.0
            obs = env.reset()
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, close_old=False)


def fixed(monitor, steps):
    _run(monitor, steps, close_old=True)
