"""A tool-using RL agent rebuilds its tool list at the start of every episode, and each rebuild wraps every tool's entrypoint in a fresh argument-validating wrapper around the previous wrapper, so the wrapper chain (and the signature and validators each layer builds) grows by one layer per tool and episode, and every tool call walks the whole chain (eager policy, ``tf.function`` update).

Source: agno-agi/agno#3727 "[Bug] Growing chain of wrappers around tools
leads to max recursion limit error" ("Tools are wrapped with a
``pydantic.validate_call_decorator.validate_call`` for arguments
validation. The logic aiming to prevent wrapping an already wrapped tool
does not work as intended, resulting in the tool having N ``validate_call``
wrappers around the original tool function at the N-th run of the agent.
In long-running applications this leads to recursion stacks growing
indefinitely"; "``Function.process_entrypoint`` method updates
``Function.entrypoint`` with the wrapped version of its previous value"),
and huggingface/accelerate#1516 (the same shape, ``ConvertOutputsToFp32``
wrappers stacked on ``model.forward``: "I encounter the following issue
... at around the 740th epoch of training: ``RecursionError: maximum
recursion depth exceeded``"). Fix, what the agno report asks for (do not
wrap an already wrapped tool): wrap the original function, kept aside
once, so a rebuild replaces the wrapper instead of stacking a new one on
it.
Summary: an agent picks one of four environment tools (``probe``,
``move``, ``grasp``, ``release``) with a small Keras policy run eagerly;
``determine_tools()`` runs at the start of each 16-step episode and calls
``Function.process_entrypoint()`` on every tool, which replaces
``entrypoint`` by ``validate_call(entrypoint)``. Each layer builds an
``inspect.Signature``, resolves the type hints and a validator closure per
parameter (~6 KiB a tool with its wrapper), and each call binds and checks
the arguments once per layer before reaching the tool, so memory grows by
every episode and a step gets slower as the chain deepens (the run stays
below the recursion limit: 250 episodes).

Here: 32-dimensional observations, a 32-64-4 Keras policy called eagerly
and updated with a REINFORCE ``tf.function`` step at each episode end
(~3.5 ms a step at first, ~8 ms by the end). The fixed twin keeps
``Function._raw`` and wraps it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +70
gc-tracked objects an episode (327,976 / 331,617 / 341,959 at 20 % / 40 %
/ end) and +4.6 MiB RSS from 20 % to the end (560.6 / 562.9 / 565.2 MiB;
~23 KiB an episode, ~1.4 KiB a step), the step time growing from ~3.5 ms
to ~8 ms (24.0 s for 4,000 steps); fixed objects flat (324,448 / 324,450 /
324,450), 560.2 / 562.0 / 562.7 MiB, ~3.4 ms a step (13.8 s); both with
another job on the machine.
"""
import functools
import inspect
import os
import re
import typing

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/agno-agi/agno/issues/3727"
SLICE = "holdout9"
STEPS = 4000            # 250 episodes of 16 steps
EPISODE = 16
OBS = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["function", "cell", "dict", "Signature", "Parameter",
                                                 "validate_call", "tuple"],
              "holder_any": ["entrypoint", "Function", "__wrapped__", "tools"]},
    "fixed": {"verdict_not": "leak"},
}

_NAME = re.compile(r"^[a-z_]{1,32}$")


def validate_call(fn):
    """Validate arguments against ``fn``'s annotations before calling it (pydantic-like)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    validators = {}
    for name, param in sig.parameters.items():
        kind = hints.get(name, object)
        if kind is float:
            validators[name] = lambda v, n=name: float(v)
        elif kind is int:
            validators[name] = lambda v, n=name: int(v)
        elif kind is str:
            validators[name] = lambda v, n=name, rx=re.compile(_NAME.pattern): v if rx.match(v) else str(v)
        elif kind is np.ndarray:
            validators[name] = lambda v, n=name: np.asarray(v, np.float32)
        else:
            validators[name] = lambda v, n=name: v
    schema = {"name": fn.__name__, "params": [(n, str(hints.get(n, "Any")), p.default is p.empty)
                                              for n, p in sig.parameters.items()], "doc": fn.__doc__ or ""}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            bound.arguments[name] = validators[name](value)
        return fn(*bound.args, **bound.kwargs)

    wrapper.__validate_schema__ = schema
    return wrapper


class Function:
    def __init__(self, name, entrypoint, keep_original):
        self.name = name
        self.entrypoint = entrypoint
        self._raw = entrypoint if keep_original else None

    def process_entrypoint(self):
        if self._raw is not None:
            self.entrypoint = validate_call(self._raw)          # the fix: wrap the original every time
        else:
            self.entrypoint = validate_call(self.entrypoint)    # the bug: wraps the previous wrapper


def probe(obs: np.ndarray, axis: int, label: str) -> float:
    """Read one coordinate of the observation."""
    return float(obs[axis % OBS])


def move(obs: np.ndarray, dx: float, dy: float) -> float:
    """Move the gripper; reward for moving towards the target."""
    return float(-abs(obs[0] + dx) - abs(obs[1] + dy))


def grasp(obs: np.ndarray, force: float) -> float:
    """Close the gripper."""
    return float(obs[2] > 0) * force


def release(obs: np.ndarray, height: float, mode: str) -> float:
    """Open the gripper at a height."""
    return float(obs[3] < height)


def _train(monitor, steps, keep_original):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    tools = [Function(f.__name__, f, keep_original) for f in (probe, move, grasp, release)]
    policy = keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(64, activation="tanh"),
                               keras.layers.Dense(len(tools))])
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function
    def update(obs, actions, returns):
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(policy(obs))
            chosen = tf.gather(logp, actions, batch_dims=1)
            loss = -tf.reduce_mean(chosen * (returns - tf.reduce_mean(returns)))
        grads = tape.gradient(loss, policy.trainable_variables)
        optimizer.apply_gradients(zip(grads, policy.trainable_variables))
        return loss

    def determine_tools():
        for fn in tools:
            fn.process_entrypoint()

    ep_obs, ep_act, ep_rew = [], [], []
    for step in range(steps):
        if step % EPISODE == 0:
            if ep_obs:
                update(np.stack(ep_obs), np.asarray(ep_act, np.int32), np.asarray(ep_rew, np.float32))
                ep_obs, ep_act, ep_rew = [], [], []
            determine_tools()                                   # each run re-processes the tools
        obs = rng.normal(size=OBS).astype(np.float32)
        logits = policy(obs[None], training=False)[0].numpy()
        a = int(np.argmax(logits + rng.gumbel(size=len(tools))))
        tool = tools[a]
        if tool.name == "probe":
            r = tool.entrypoint(obs, axis=int(rng.integers(OBS)), label="probe_x")
        elif tool.name == "move":
            r = tool.entrypoint(obs, dx=float(rng.normal()), dy=float(rng.normal()))
        elif tool.name == "grasp":
            r = tool.entrypoint(obs, force=1.0)
        else:
            r = tool.entrypoint(obs, height=0.5, mode="soft")
        ep_obs.append(obs)
        ep_act.append(a)
        ep_rew.append(r)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, keep_original=False)


def fixed(monitor, steps):
    _train(monitor, steps, keep_original=True)
