"""A spiking-network parameter sweep builds a new ensemble object per trial; the ensemble's parameters are class-level descriptors that store each instance's value in a ``WeakKeyIDDictionary`` whose keys (the instances) are weak but whose values live in a plain dict keyed by ``id(instance)`` and are never removed, so every finished trial's encoder matrix and gains stay in the descriptors for good (numpy, no TensorFlow; a burst per trial).

Source: nengo/nengo#1089 "Memory leak in parameter system": "the assigned
parameters are stored in a ``WeakKeyIDDictionary``. Note that the
``Params`` class is not instantiated per object instance, but for each
parameter ... Thus, the ``Params`` instance including the
``WeakKeyIDDictionary`` lives usually for the whole runtime of the
script", and in its implementation "``_keyrefs`` is a
``WeakValueDictionary`` ... ``_keyvalues`` however is a normal dict", so
values outlive their keys ("@ikajic however is running more than one
simulation and is experiencing severe memory leaks"). Fix used here (the
one the issue calls for): the value entry is deleted when the key dies
(a ``weakref.finalize`` on the instance drops ``_keyvalues[id]``).
Summary: each trial draws encoders and gains for 300 rate neurons in 16
dimensions, fits decoders by regularized least squares and runs 100
decoding steps on 128 drifting signals (one step a ``monitor.sample``).

Here: 480 trials of 100 steps (48,000 steps); per trial a 300 x 16
float64 encoder matrix (37.5 KiB), gains and biases. The fixed twin
removes each instance's values when it is collected.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
43.9 / 47.4 / 51.2 / 55.1 / 58.5 MiB RSS at 20 / 40 / 60 / 80 % / end
(~31 KiB a trial: most trials' arrays stay; a new ensemble that happens
to get a dead one's id overwrites its entry) with gc objects flat
(23,805 -> 23,809: arrays are not tracked by the collector), 7.6 s for
48,000 steps; fixed 41.0 / 39.6 / 39.9 / 41.0 / 39.6 MiB (no trend)
with objects flat (23,822 -> 23,826), 7.2 s.
"""
import collections
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/nengo/nengo/issues/1089"
SLICE = "holdout14"
STEPS = 48000
STEPS_PER_TRIAL = 100
POINTS = 128
NEURONS = 300
DIMS = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "dict"],
              "holder_any": ["_keyvalues", "WeakKeyIDDictionary", "Parameter", "encoders"]},
    "fixed": {"verdict_not": "leak"},
}


class WeakKeyIDDictionary:
    """Maps objects (by id) to values; the keys are held weakly."""

    def __init__(self, cleanup_values):
        self._keyrefs = weakref.WeakValueDictionary()
        self._keyvalues = {}                              # the leak: a plain dict keyed by id(key)
        self.cleanup_values = cleanup_values

    def __setitem__(self, key, value):
        k = id(key)
        if self.cleanup_values and k not in self._keyrefs:
            weakref.finalize(key, self._keyvalues.pop, k, None)   # the fix: drop the value with its key
        self._keyrefs[k] = key
        self._keyvalues[k] = value

    def __getitem__(self, key):
        return self._keyvalues[id(key)]


class Parameter:
    cleanup_values = False

    def __init__(self, name):
        self.name = name
        self.data = None

    def _table(self):
        if self.data is None:
            self.data = WeakKeyIDDictionary(self.cleanup_values)
        return self.data

    def __get__(self, instance, owner):
        return self if instance is None else self._table()[instance]

    def __set__(self, instance, value):
        self._table()[instance] = value


class Ensemble:
    encoders = Parameter("encoders")
    gain = Parameter("gain")
    bias = Parameter("bias")

    def __init__(self, rng):
        enc = rng.standard_normal((NEURONS, DIMS))
        self.encoders = enc / np.linalg.norm(enc, axis=1, keepdims=True)
        self.gain = rng.uniform(0.5, 2.0, NEURONS)
        self.bias = rng.uniform(-1.0, 1.0, NEURONS)

    def rates(self, x):
        return np.maximum(0.0, (x @ self.encoders.T) * self.gain + self.bias)


def _sweep(monitor, steps, cleanup_values):
    for p in (Ensemble.encoders, Ensemble.gain, Ensemble.bias):
        p.cleanup_values = cleanup_values
        p.data = None
    rng = np.random.default_rng(0)
    eval_x = rng.standard_normal((200, DIMS))
    errors = []
    trial_logs = collections.deque(maxlen=50)            # the last 50 trials' probe logs
    ens = None
    for step in range(steps):
        if step % STEPS_PER_TRIAL == 0:
            probes = [{"t": k, "tag": "probe-%d" % k} for k in range(int(rng.integers(5, 60)))]
            ens = Ensemble(rng)                           # a new ensemble per trial
            trial_logs.append({"trial": step // STEPS_PER_TRIAL, "probes": probes, "decoded": []})
            a = ens.rates(eval_x)
            decoders = np.linalg.solve(a.T @ a + 0.1 * np.eye(NEURONS), a.T @ eval_x)
            signal = rng.standard_normal((POINTS, DIMS)) * 0.3
        signal = 0.95 * signal + 0.05 * rng.standard_normal((POINTS, DIMS))
        errors.append(float(np.mean((ens.rates(signal) @ decoders - signal) ** 2)))
        trial_logs[-1]["decoded"].append(errors[-1])
        if len(errors) > 1000:
            del errors[:500]
        monitor.sample(step)


def leaky(monitor, steps):
    _sweep(monitor, steps, cleanup_values=False)


def fixed(monitor, steps):
    _sweep(monitor, steps, cleanup_values=True)
