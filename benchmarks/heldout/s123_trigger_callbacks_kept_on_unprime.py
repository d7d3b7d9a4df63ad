"""An eager rollout loop arms a timeout trigger for every environment step; when the step finishes in time the trigger is *unprimed*, which removes it from the scheduler's active set but leaves its callback (a closure over the step's observation and policy outputs) in the scheduler's callback table, which is only cleaned when a trigger fires (eager Keras policy; small per step).

Source: cocotb/cocotb#4128 "Fix memory leak of Python callbacks" ("This
leak occurs when a trigger is deregistered before it fires. The callback
is cleaned up if it did fire. The ``trigger._unprime`` method had to be
split up so that triggers that fired weren't attempted to be deregistered
... Fired triggers just run ``trigger._cleanup``"), and cocotb/cocotb#732
(a callback registration whose data "is never cleaned up"). Fix, from
#4128: unpriming a trigger also runs its cleanup, dropping the callback.
Summary: an actor steps a simulated environment through a
``Scheduler`` that, for each step, primes a ``Timer`` trigger with a
``lambda: on_timeout(obs, out)`` (to log and resubmit a slow step). Almost
every step completes before the deadline, so the loop calls
``timer.unprime()``; that discards the trigger from ``_active`` but the
entry in ``_callbacks`` (trigger -> closure) is only removed in
``_fire``. Each step leaves a trigger, a closure and its cells, the
step's 64-float observation and the policy's output EagerTensor.

Here: a 64-64-8 Keras policy called eagerly on one observation (~1 ms a
step); ~1 % of steps time out and fire. The fixed twin cleans up in
``unprime``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
549.7 / 555.6 / 573.2 MiB RSS at 20 % / 40 % / end (~1.9 KiB a step) and
gc objects 329,410 / 345,210 / 392,790 (+5 a step: the trigger, the
closure, its tuple of defaults, the observation and the output tensor),
fixed 545.6 / 547.3 / 548.0 MiB with objects flat (313,571); ~0.9 ms a
step (14.7 s leaky, 13.8 s fixed for 16,000 steps).
"""
import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/cocotb/cocotb/pull/4128"
SLICE = "holdout10"
STEPS = 16000
OBS = 64
ACTIONS = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Timer", "function", "cell", "EagerTensor", "Tensor", "ndarray"],
              "holder_any": ["_callbacks", "Scheduler", "scheduler"]},
    "fixed": {"verdict_not": "leak"},
}


class Timer:
    _ids = itertools.count()

    def __init__(self, deadline):
        self.deadline = deadline
        self.id = next(self._ids)

    def __hash__(self):
        return self.id


class Scheduler:
    def __init__(self, cleanup_on_unprime):
        self.cleanup_on_unprime = cleanup_on_unprime
        self._active = set()
        self._callbacks = {}
        self.fired = 0

    def prime(self, trigger, callback):
        self._active.add(trigger)
        self._callbacks[trigger] = callback

    def unprime(self, trigger):
        self._active.discard(trigger)
        if self.cleanup_on_unprime:                  # the fix (#4128): unprime cleans up too
            self._callbacks.pop(trigger, None)

    def advance(self, now):
        for trigger in [t for t in self._active if t.deadline <= now]:
            self._fire(trigger)

    def _fire(self, trigger):
        self._active.discard(trigger)
        callback = self._callbacks.pop(trigger)     # cleaned up only when fired
        self.fired += 1
        callback()


def _train(monitor, steps, cleanup_on_unprime):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    policy = keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(64, activation="tanh"),
                               keras.layers.Dense(ACTIONS)])
    scheduler = Scheduler(cleanup_on_unprime)
    timeouts = []

    def on_timeout(obs, out):
        timeouts.append(float(tf.reduce_max(out)))
        del timeouts[:-10]

    now = 0.0
    obs = rng.standard_normal(OBS).astype(np.float32)
    for step in range(steps):
        out = policy(obs[None, :], training=False)
        timer = Timer(now + 1.0)
        scheduler.prime(timer, lambda obs=obs, out=out: on_timeout(obs, out))
        action = int(tf.argmax(out[0]))
        duration = 2.0 if rng.random() < 0.01 else 0.5
        now += duration
        if duration < 1.0:
            scheduler.unprime(timer)                 # finished in time
        scheduler.advance(now)
        obs = (0.9 * obs + 0.1 * rng.standard_normal(OBS) + 0.01 * action).astype(np.float32)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, cleanup_on_unprime=False)


def fixed(monitor, steps):
    _train(monitor, steps, cleanup_on_unprime=True)
