"""A ``tf.function`` policy is trained against a simulator driven through a pexpect-style spawn: after every step the trainer calls ``sim.expect("EPISODE DONE", timeout=0)`` to see whether the episode ended, but the simulator (since an update) prints ``episode done`` in lower case, so the pattern never matches; as in pexpect's ``expect_loop``, every read is appended to the spawn's input buffer and only a match consumes it, so the whole simulator transcript accumulates in one ``BytesIO`` buffer (TensorFlow ``tf.function``; ~2 KiB a step inside a single growing buffer, no new Python object; steps of ~6-12 ms, a numpy physics rollout each, the leaky one slower as the whole buffer is searched).

Source: pexpect/pexpect issue #388 "expect_loop could eat all memory?":
"the expect_loop function is doing essentially a ``while
timeout_not_reached: spawn.buffer += spawn.read_nonblocking(...)``
operation ... Without upper limit." Maintainer (takluyver): "it will stop
adding to the buffer when a pattern you're looking for matches. So if a lot
of data comes without matching the pattern, then yes, it can fill up your
memory. But pexpect is often used to find a pattern and then see what came
before that, so we can't easily discard that data." Fix used here (the
thread's usage answer): the trainer expects a pattern that does match every
step, the simulator's prompt, alongside the episode marker
(``expect([EPISODE_DONE, PROMPT])``), so each step's output is consumed.
Summary: the spawn is a stand-in with pexpect's buffer handling (``_buffer``
a ``BytesIO``, ``expect`` reads what is available, appends it, searches the
buffer with ``re`` and, on a match, keeps only what follows the match; on
``TIMEOUT`` everything stays). The simulator is a numpy point-mass task
(1,024 parallel rollouts of 60 substeps a step) that prints a state line, a
reward line, a line for every 64th rollout and its prompt; the policy is a Keras 8-64-2 network trained by
REINFORCE-style regression on the rollout returns.

Here: 3,000 steps. The fixed trainer expects the prompt as well.
"""
import collections
import io
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/pexpect/pexpect/issues/388"
SLICE = "holdout23"
STEPS = 3000
ROLLOUTS = 1024
SUBSTEPS = 60
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["BytesIO", "bytes", "native", "malloc", "heap", "unexplained"],
              "holder_any": ["_buffer", "SimSpawn", "spawn"]},
    "fixed": {"verdict_not": "leak"},
}

EPISODE_DONE = re.compile(rb"EPISODE DONE")
PROMPT = re.compile(rb"sim> ")


class TIMEOUT(Exception):
    pass


class SimSpawn:
    """pexpect.spawn-like reader over a simulator's output."""

    def __init__(self):
        self._buffer = io.BytesIO()
        self._pending = []
        self.before = b""
        self.after = b""

    def feed(self, data):                              # what the child printed since the last read
        self._pending.append(data)

    def read_nonblocking(self):
        data = b"".join(self._pending)
        self._pending.clear()
        return data

    def expect(self, patterns, timeout=0):
        if not isinstance(patterns, list):
            patterns = [patterns]
        self._buffer.seek(0, io.SEEK_END)
        self._buffer.write(self.read_nonblocking())
        data = self._buffer.getvalue()
        best = None
        for index, pattern in enumerate(patterns):
            m = pattern.search(data)
            if m and (best is None or m.start() < best[1].start()):
                best = (index, m)
        if best is None:
            raise TIMEOUT("no pattern matched")          # the buffer keeps everything read so far
        index, m = best
        self.before, self.after = data[:m.start()], data[m.start():m.end()]
        self._buffer = io.BytesIO()
        self._buffer.write(data[m.end():])
        return index


def _simulate(rng, actions):
    pos = rng.uniform(-1, 1, (ROLLOUTS, 2))
    vel = np.zeros((ROLLOUTS, 2))
    ret = np.zeros(ROLLOUTS)
    for _ in range(SUBSTEPS):
        vel = 0.95 * vel + 0.05 * actions + 0.01 * rng.standard_normal((ROLLOUTS, 2))
        pos = pos + 0.1 * vel
        ret -= np.linalg.norm(pos, axis=1) * 0.025
    return pos, vel, ret


def _run(monitor, steps, expect_prompt):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    policy = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def act(obs):
        return policy(obs)

    @tf.function
    def update(obs, target, weight):
        with tf.GradientTape() as tape:
            err = tf.reduce_sum(tf.square(policy(obs, training=True) - target), axis=1)
            loss = tf.reduce_mean(weight * err)
        grads = tape.gradient(loss, policy.trainable_variables)
        opt.apply_gradients(zip(grads, policy.trainable_variables))
        return loss

    sim = SimSpawn()
    returns = collections.deque(maxlen=100)
    episodes = 0
    obs = rng.standard_normal((ROLLOUTS, 8)).astype(np.float32)
    for step in range(steps):
        actions = act(tf.constant(obs)).numpy().astype(np.float64) + 0.3 * rng.standard_normal((ROLLOUTS, 2))
        pos, vel, ret = _simulate(rng, actions)
        adv = (ret - ret.mean()) / (ret.std() + 1e-6)
        update(tf.constant(obs), tf.constant(actions, tf.float32), tf.constant(np.exp(adv) / np.e, tf.float32))
        returns.append(float(ret.mean()))
        obs = np.concatenate([pos, vel, pos * vel, np.sign(pos)], axis=1).astype(np.float32)
        text = ("[sim] t=%06d mean_pos=(%+.4f,%+.4f) mean_vel=(%+.4f,%+.4f) spread=%.5f\n"
                "[sim] reward mean=%+.5f min=%+.5f max=%+.5f p50=%+.5f rollouts=%d substeps=%d\n"
                % (step, pos[:, 0].mean(), pos[:, 1].mean(), vel[:, 0].mean(), vel[:, 1].mean(), pos.std(),
                   ret.mean(), ret.min(), ret.max(), np.median(ret), ROLLOUTS, SUBSTEPS))
        text += "[sim] contacts=" + ",".join("%d" % c for c in (np.abs(pos) > 1.0).sum(0)) + \
                " energy=%.6f kinetic=%.6f potential=%.6f\n" % (float((vel ** 2).sum()), float((vel ** 2).sum() / 2),
                                                               float((pos ** 2).sum() / 2))
        text += "".join("[sim] rollout %04d pos=(%+.5f,%+.5f) vel=(%+.5f,%+.5f) return=%+.5f\n"
                        % (k, pos[k, 0], pos[k, 1], vel[k, 0], vel[k, 1], ret[k]) for k in range(0, ROLLOUTS, 64))
        if step % 200 == 199:
            text += "[sim] episode done after 200 steps, resetting\n"
            episodes += 1
        sim.feed(text.encode() + b"sim> ")
        try:
            if expect_prompt:
                sim.expect([EPISODE_DONE, PROMPT], timeout=0)
            else:
                sim.expect(EPISODE_DONE, timeout=0)
        except TIMEOUT:
            pass
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, expect_prompt=False)


def fixed(monitor, steps):
    _run(monitor, steps, expect_prompt=True)
