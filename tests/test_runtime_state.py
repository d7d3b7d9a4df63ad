"""The runtime-state probe on real Keras loops: a model built per step grows
Keras' automatic names (and native memory) while its clear_session() twin
stays bounded; a train step traced per step grows TensorFlow's custom-gradient
registry while one traced once does not; no TensorFlow, nothing reported; no
reference kept; a broken counter skipped; well under a millisecond a sample.
"""

import gc
import os
import subprocess
import sys
import time
import types
import weakref

import pytest

from tb_leak_plugin.capture import runtime_state
from tb_leak_plugin.capture.probes import MallocProbe, ProbeUnavailable
from tb_leak_plugin.capture.runtime_state import RuntimeStateProbe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = "leak/runtime/keras/keras_auto_names"
GRADIENTS = "leak/runtime/tensorflow/custom_gradients"
COLLECTIONS = "leak/runtime/default_graph/graph_collection_items"
PY_FUNCS = "leak/runtime/tensorflow/py_funcs"
STEPS = 100


def _values(probe) -> dict:
    return {info.tag: value for info, value in probe.sample()}


@pytest.fixture(scope="module")
def keras():
    pytest.importorskip("tensorflow")
    return pytest.importorskip("keras")


def _malloc():
    try:
        probe = MallocProbe()
    except ProbeUnavailable:
        return None
    return lambda: probe.sample()[0][1]


def _model_per_step(keras, steps, clear_every=None):
    """Build and call a small model every step (clear_session() every
    ``clear_every`` steps, if given); the probe's name count after each step,
    and the C allocator's bytes before and after (None without mallinfo2)."""
    import numpy as np

    probe = RuntimeStateProbe()
    malloc = _malloc()
    batch = np.random.default_rng(0).random((32, 20), dtype=np.float32)
    keras.backend.clear_session()
    names = []
    start = None
    for step in range(steps):
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64), keras.layers.Dense(10)])
        model(batch)
        del model
        if clear_every and (step + 1) % clear_every == 0:
            keras.backend.clear_session(free_memory=False)
        names.append(_values(probe)[NAMES])
        if step == 9:  # after warm-up: caches that fill once are full
            gc.collect()
            start = malloc() if malloc else None
    gc.collect()
    end = malloc() if malloc else None
    keras.backend.clear_session()
    return names, (None if start is None else (end - start) / (steps - 10))


def test_model_per_step_grows_keras_names_and_clear_session_bounds_them(keras):
    leaky, leaky_bytes = _model_per_step(keras, STEPS)
    # Every step names the model, its layers and symbolic tensors afresh
    # (8 names a step with Keras 3.15): the count rises with the step count.
    per_step = (leaky[-1] - leaky[0]) / (STEPS - 1)
    assert per_step >= 3, leaky[:5]
    assert all(later > earlier for earlier, later in zip(leaky, leaky[1:])), leaky
    if leaky_bytes is not None:
        # ...and so does native memory: a cached kernel per new variable name
        # (~145 KiB a step here), with no Python type growing.
        assert leaky_bytes > 30_000, leaky_bytes

    fixed, _ = _model_per_step(keras, STEPS, clear_every=10)
    # The twin clears every 10 steps: never more than 10 steps' worth of names.
    assert max(fixed) <= 10 * per_step, max(fixed)
    assert max(fixed[STEPS // 2:]) <= max(fixed[:STEPS // 2]), fixed
    assert fixed[-1] == 0  # cleared on the last step


def test_train_step_traced_per_step_grows_custom_gradients(keras):
    """Each trace of a Keras optimizer step registers a custom gradient (the
    gradient all-reduce) that TensorFlow's global registry keeps, with the
    traced graph, for good; a step traced once registers it once."""
    import numpy as np
    import tensorflow as tf

    probe = RuntimeStateProbe()
    rng = np.random.default_rng(0)
    x = rng.random((16, 8), dtype=np.float32)
    y = rng.random((16, 4), dtype=np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    optimizer = keras.optimizers.SGD()

    def make_step():
        @tf.function
        def train_step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return train_step

    steps = 25
    before = _values(probe)[GRADIENTS]
    for _ in range(steps):
        make_step()()  # the leak: a new tf.function, traced again, every step
    grown = _values(probe)[GRADIENTS] - before
    assert grown >= steps, grown

    train_step = make_step()
    before = _values(probe)[GRADIENTS]
    for _ in range(steps):
        train_step()
    assert _values(probe)[GRADIENTS] - before <= 2  # the one trace


def test_graph_collections_counted_in_the_default_graph(keras):
    import tensorflow as tf

    probe = RuntimeStateProbe()
    with tf.Graph().as_default():
        counts = []
        for index in range(20):
            tf.compat.v1.get_variable(f"v{index}", [3])
            counts.append(_values(probe)[COLLECTIONS])
    assert counts[-1] - counts[0] >= 19, counts
    assert _values(probe)[COLLECTIONS] < counts[-1]  # back in the eager program's graph


def test_a_pipeline_rebuilt_per_step_grows_the_py_function_registry(keras):
    """Dataset.from_generator in the loop registers a callback a step, which
    the pipeline's function keeps; one pipeline built before the loop does
    not grow the registry."""
    import numpy as np
    import tensorflow as tf

    rows = np.zeros((64, 4), np.float32)
    spec = tf.TensorSpec([4], tf.float32)

    def make():
        return tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=spec).batch(8)

    probe = RuntimeStateProbe()
    kept = []
    before = _values(probe)[PY_FUNCS]
    for _ in range(10):
        dataset = make()
        next(iter(dataset))
        kept.append(dataset)  # what a step's graph or a cache keeps alive
    grown = _values(probe)[PY_FUNCS] - before
    assert grown >= 10, grown
    iterator = iter(make().repeat())
    base = _values(probe)[PY_FUNCS]
    for _ in range(10):
        next(iterator)
    assert _values(probe)[PY_FUNCS] == base
    del kept, iterator
    gc.collect()


def test_probe_keeps_no_reference_to_models(keras):
    import numpy as np

    probe = RuntimeStateProbe()
    batch = np.zeros((2, 20), dtype=np.float32)
    refs = []
    for _ in range(5):
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(8)])
        model(batch)
        refs.append(weakref.ref(model))
        assert probe.sample()  # sampled while the model is alive
        del model
    gc.collect()
    assert all(ref() is None for ref in refs)
    keras.backend.clear_session()


def test_probe_costs_well_under_a_millisecond_on_a_tensorflow_heap(keras):
    probe = RuntimeStateProbe()
    probe.sample()
    count = 500
    start = time.perf_counter()
    for _ in range(count):
        probe.sample()
    mean = (time.perf_counter() - start) / count
    assert mean < 0.5e-3, f"{mean * 1e6:.0f} us a sample"


def test_no_tensorflow_no_series():
    script = (
        "import sys\n"
        "from tb_leak_plugin.capture.runtime_state import RuntimeStateProbe\n"
        "probe = RuntimeStateProbe()\n"
        "assert probe.sample() == [], probe.sample()\n"
        "assert not any(name.split('.')[0] in ('tensorflow', 'keras', 'tf_keras') for name in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr


def test_a_broken_counter_is_skipped(monkeypatch):
    """Library internals the probe cannot read: the counter is left out, the
    others are still reported, and nothing raises."""

    class Hostile:
        def __getattribute__(self, name):
            raise RuntimeError("no")

    monkeypatch.setitem(sys.modules, runtime_state._KERAS_GLOBAL_STATE_MODULE,
                        types.SimpleNamespace(GLOBAL_STATE_TRACKER=Hostile()))
    registry = {"MatMul": 1, "CustomGradient-1": 2, "CustomGradient-7": 3}
    graphs = types.SimpleNamespace(stack=[], _global_default_graph=None)
    monkeypatch.setitem(sys.modules, runtime_state._TF_OPS_MODULE, types.SimpleNamespace(
        _gradient_registry=types.SimpleNamespace(_registry=registry), _default_graph_stack=graphs))
    probe = RuntimeStateProbe()
    values = _values(probe)
    assert not any(tag.startswith("leak/runtime/keras/") for tag in values), values
    assert values[GRADIENTS] == 2.0 and values[COLLECTIONS] == 0.0
    registry["CustomGradient-9"] = 4  # appended: only the new key is read
    registry["Relu"] = 5
    assert _values(probe)[GRADIENTS] == 3.0
    del registry["CustomGradient-1"]  # removed: the registry is read again
    assert _values(probe)[GRADIENTS] == 2.0
