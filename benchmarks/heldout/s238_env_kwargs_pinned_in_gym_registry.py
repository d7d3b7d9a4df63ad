"""A ``tf.function`` behaviour-cloning loop evaluates its policy every 150 steps in a freshly built simulation environment; the environment builder registers each build with the process-global gym registry and, like IsaacLab-Arena after #960, spreads the build's ``env_kwargs`` into the registered spec's kwargs; those kwargs carry the variation recorder, whose ``bind_env()`` keeps a reference to the constructed environment, so every evaluation environment (its observation buffers and its observation space's bound arrays) stays reachable from the registry after ``close()`` (tf.function; grows in bursts, one environment per evaluation, ~0.4 MiB each).

Source: isaac-sim/IsaacLab-Arena pull request #1031 "Fix memory leak.":
"#960 introduced a change to pass the env_kwargs to the gym registry.
Because our kwargs contain a variation recorder which in turn carry a
reference to the live env, this caused a GPU memory leak that the live envs
build up as multiple are built over, for example, a testing run." The note
the PR adds in ``arena_env_builder.py``: "Do not spread env_kwargs into the
registry kwargs. env_kwargs carries the VariationRecorder, whose bind_env()
holds a reference to the constructed env ... The Gym registry is
process-global and never cleared, so pinning it there retains every
registered env's GPU memory until process exit". Fix used here (the PR's):
the registered spec's kwargs hold only ``env_cfg_entry_point``; the
``env_kwargs`` go to ``make()`` for that build only.
Summary: a stand-in gym registry (a module-level ``registry`` dict of
``EnvSpec`` with ``register``/``make``) and a small pick-and-place
environment in numpy: a 96x96x3 float32 camera observation with a ``Box``
space (``low``, ``high``, ``bounded_below``, ``bounded_above`` arrays, as
gymnasium keeps them), a 32-d state and an ``obs_buf`` dict. Training is a
``tf.function`` Adam step of a 32-128-128-8 policy on batches of 64
demonstration pairs; every 150 steps the builder builds
``Arena-<task>-eval-<n>`` for one of four tasks (the four task configs are
shared), rolls the policy out for 30 environment steps with a fresh
``VariationRecorder`` (lighting and object-mass samples per episode) and
closes the environment. Each registration also leaves its small
``EnvSpec`` in the registry, in both variants (~0.5 KiB per evaluation).

Here: 12,000 steps (80 evaluations). The fixed builder registers only
``env_cfg_entry_point`` and passes ``env_kwargs`` to ``make()``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 568.6 / 574.6 /
580.6 / 586.6 / 592.5 MiB RSS at 20 / 40 / 60 / 80 % / end (561.5 MiB at
the first step; ~0.37 MiB an evaluation, 16 evaluations between marks: the
environment's camera buffer, its space's four bound arrays, its state and
the recorder) with gc objects 325,094 at the first step, then 325,979 /
326,235 / 326,491 / 326,747 / 327,004 at the same marks (16 an evaluation;
the arrays themselves are not tracked), 10.2 s for 12,000 steps (~0.85 ms a
step, evaluations included); fixed 566.2 / 566.6 / 566.6 / 566.6 / 566.7
MiB with objects 325,744 / 325,779 / 325,810 / 325,843 / 325,876 (two per
evaluation: the spec left in the registry), 9.0 s. 13-14 s a variant in its
process, imports included.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/isaac-sim/IsaacLab-Arena/pull/1031"
SLICE = "holdout20"
STEPS = 12000
BATCH = 64
STATE = 32
ACTIONS = 8
EVAL_EVERY = 150
EVAL_STEPS = 30
CAMERA = (96, 96, 3)
TASKS = ("pick_cube", "place_mug", "open_drawer", "stack_blocks")
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "ArenaEnv", "Box"],
              "holder_any": ["registry", "EnvSpec", "kwargs", "VariationRecorder", "variation_recorder"]},
    "fixed": {"verdict_not": "leak"},
}


class EnvSpec:
    def __init__(self, id, entry_point, kwargs):
        self.id, self.entry_point, self.kwargs = id, entry_point, kwargs


registry = {}                                                # process-global, never cleared


def register(id, entry_point, kwargs):
    registry[id] = EnvSpec(id, entry_point, kwargs)


def make(id, **kwargs):
    spec = registry[id]
    return spec.entry_point(**dict(spec.kwargs, **kwargs))


class Box:
    def __init__(self, low, high, shape):
        self.low = np.full(shape, low, dtype=np.float32)
        self.high = np.full(shape, high, dtype=np.float32)
        self.bounded_below = np.isfinite(self.low)
        self.bounded_above = np.isfinite(self.high)
        self.shape = shape


class TaskCfg:
    def __init__(self, name, seed):
        self.name = name
        self.goal = np.random.default_rng(seed).standard_normal(STATE).astype(np.float32)


class VariationRecorder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.samples = {"lighting": [], "object_mass": []}
        self.env = None

    def bind_env(self, env):
        self.env = env                                       # holds the constructed env

    def reset_env(self):
        lighting, mass = float(self.rng.uniform(0.3, 1.0)), float(self.rng.uniform(0.05, 0.4))
        self.samples["lighting"].append(lighting)
        self.samples["object_mass"].append(mass)
        return self.env.reset(lighting=lighting, mass=mass)


class ArenaEnv:
    def __init__(self, env_cfg_entry_point, variation_recorder=None, seed=0):
        self.cfg = env_cfg_entry_point
        self.rng = np.random.default_rng(seed)
        self.observation_space = Box(0.0, 1.0, CAMERA)
        self.obs_buf = {"camera": np.zeros(CAMERA, dtype=np.float32), "state": np.zeros(STATE, dtype=np.float32)}
        if variation_recorder is not None:
            variation_recorder.bind_env(self)                # the recorder drives the env's resets
        self.lighting, self.mass = 1.0, 0.1

    def reset(self, lighting=1.0, mass=0.1):
        self.lighting, self.mass = lighting, mass
        self.obs_buf["state"][:] = self.rng.standard_normal(STATE).astype(np.float32)
        return self._observe()

    def _observe(self):
        cam = self.obs_buf["camera"]
        cam[:] = self.lighting * 0.5
        k = int(abs(self.obs_buf["state"][0]) * 10) % 80
        cam[k:k + 16, k:k + 16, :] = 1.0 - self.mass
        return self.obs_buf

    def step(self, action):
        state = self.obs_buf["state"]
        state += 0.05 * (self.cfg.goal - state) + 0.01 * np.resize(action, STATE)
        reward = -float(np.linalg.norm(self.cfg.goal - state))
        return self._observe(), reward

    def close(self):
        self.closed = True


class ArenaEnvBuilder:
    def __init__(self, spread_kwargs):
        self.spread_kwargs = spread_kwargs
        self.cfgs = {t: TaskCfg(t, i) for i, t in enumerate(TASKS)}
        self.builds = 0

    def make_registered(self, task, env_kwargs):
        env_id = f"Arena-{task}-eval-{self.builds}"
        self.builds += 1
        kwargs = {"env_cfg_entry_point": self.cfgs[task]}
        if self.spread_kwargs:                               # #960; removed by #1031
            kwargs.update(env_kwargs)
            register(env_id, ArenaEnv, kwargs)
            return make(env_id)
        register(env_id, ArenaEnv, kwargs)
        return make(env_id, **env_kwargs)


def _train(monitor, steps, spread_kwargs):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    demo_w = rng.standard_normal((STATE, ACTIONS)).astype(np.float32) / np.sqrt(STATE)
    demo_x = rng.standard_normal((8192, STATE)).astype(np.float32)
    demo_y = np.tanh(demo_x @ demo_w).astype(np.float32)
    policy = keras.Sequential([keras.Input((STATE,)), keras.layers.Dense(128, activation="relu"),
                               keras.layers.Dense(128, activation="relu"), keras.layers.Dense(ACTIONS)])
    opt = keras.optimizers.Adam(1e-3)
    builder = ArenaEnvBuilder(spread_kwargs)
    returns = []

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(policy(x, training=True) - y))
        grads = tape.gradient(loss, policy.trainable_variables)
        opt.apply_gradients(zip(grads, policy.trainable_variables))
        return loss

    @tf.function
    def act(state):
        return policy(state[None], training=False)[0]

    for step in range(steps):
        i = (step * BATCH) % 8192
        train_step(demo_x[i:i + BATCH], demo_y[i:i + BATCH])
        if step % EVAL_EVERY == EVAL_EVERY - 1:
            n = step // EVAL_EVERY
            recorder = VariationRecorder(n)
            env = builder.make_registered(TASKS[n % len(TASKS)], {"variation_recorder": recorder, "seed": n})
            obs = recorder.reset_env()
            total = 0.0
            for _ in range(EVAL_STEPS):
                obs, reward = env.step(act(tf.constant(obs["state"])).numpy())
                total += reward
            env.close()
            returns.append(total)
            del env, obs, recorder
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, spread_kwargs=True)


def fixed(monitor, steps):
    _train(monitor, steps, spread_kwargs=False)
