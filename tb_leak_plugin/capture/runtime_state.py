"""Runtime state of Keras and TensorFlow that grows without a Python type growing.

A Keras model built in every step of a loop leaks native memory (about 36 KiB
per variable, 145 KiB a step for two ``Dense`` layers) while no Python type
grows and the eager context's function library stays the same size. The cause
is a chain of names: every layer built without ``name=`` gets a fresh name
from Keras' counters (``dense_17``), so its variables get fresh names
(``sequential_8/dense_17/kernel``), and the name goes into the ``debug_name``
attribute of the variable's ``VarHandleOp``. TensorFlow's eager runtime
caches one kernel per distinct set of attributes, so every new name adds a
cache entry that nothing ever evicts. ``keras.backend.clear_session()`` resets
the counters (names repeat, the cache hits) and clears the kernel cache.

The kernel cache cannot be read from Python; the names Keras has handed out
since the last ``clear_session()`` can, and grow in step with it. This module
counts them, plus the other runtime state such loops grow:

* ``keras_auto_names`` (subject ``keras``): the sum of Keras 3's name
  counters, i.e. the objects (layers, models, symbolic tensors) named
  automatically since the last ``clear_session()``; ``tf_keras`` for Keras 2
  (``tf_keras`` or ``keras`` 2.x), whose counters are kept per graph.
* ``keras_global_state`` (subject ``keras``): items in the containers that
  Keras 3 keeps in its global state (deferred variables, tensor attributes,
  scope stacks, custom-object scopes), the name counters aside.
* ``custom_gradients`` (subject ``tensorflow``): gradient functions that
  ``tf.custom_gradient`` registered in TensorFlow's global gradient registry.
  Each trace of a function that uses one in graph mode registers another,
  which keeps the traced graph and its functions alive for good: a Keras
  model compiled and trained per step registers two per step (the
  optimizer's gradient all-reduce) and leaks ~3 MB a step, which
  ``clear_session()`` does not release.
* ``graph_collection_items`` (subject ``default_graph``): items in the
  ``tf.compat.v1`` default graph's collections (variables, update ops,
  summaries, ...), which TF1-style code grows when it builds per step.
* ``py_funcs`` (subject ``tensorflow``): Python callables alive in
  TensorFlow's py-function registry (``script_ops._py_funcs``). Every
  ``Dataset.from_generator``, ``tf.py_function`` or ``tf.numpy_function``
  call registers one, and the graph or function that uses it keeps it: a
  pipeline rebuilt every step grows it by one a step. The census sees the
  same leak as weak references (``KeyedRef``) only at heap walks, a handful
  in a short run; this count is read at every cheap sample.

The eager context's function library is counted by the ``tf_graph`` probe
(``tf_graph/eager_context/functions``) and not again here.

Like every probe: nothing is imported (a library the program has not imported
is reported as nothing), no reference to a user object outlives ``sample()``,
a counter that fails is skipped, and the series are a fixed handful. Keras 3
keeps its global state per thread, so the counts are those of the thread that
samples (the training loop's, for ``Monitor.sample``). A sample costs ~6-13 us
with TensorFlow and Keras loaded (the first ~0.1 ms: it reads all ~600
registered gradients once; later ones read only the keys added since).
"""

from __future__ import annotations

import collections
import sys

from tb_leak_plugin.capture import probes as probes_lib
from tb_leak_plugin.capture.probes import Probe, Sample
from tb_leak_plugin.metadata import SeriesInfo

GROUP = "runtime"

KERAS_AUTO_NAMES = SeriesInfo(GROUP, "keras_auto_names", "count", "keras")
KERAS_GLOBAL_STATE = SeriesInfo(GROUP, "keras_global_state", "count", "keras")
TF_KERAS_AUTO_NAMES = SeriesInfo(GROUP, "keras_auto_names", "count", "tf_keras")
CUSTOM_GRADIENTS = SeriesInfo(GROUP, "custom_gradients", "count", "tensorflow")
GRAPH_COLLECTION_ITEMS = SeriesInfo(GROUP, "graph_collection_items", "count", "default_graph")
PY_FUNCS = SeriesInfo(GROUP, "py_funcs", "count", "tensorflow")

#: Every series the probe may report, in the order it reports them.
SERIES = (KERAS_AUTO_NAMES, KERAS_GLOBAL_STATE, TF_KERAS_AUTO_NAMES, CUSTOM_GRADIENTS, GRAPH_COLLECTION_ITEMS,
          PY_FUNCS)

# Keras 3: a threading.local whose attributes are the global state;
# clear_session() replaces it, so it is looked up at every sample.
_KERAS_GLOBAL_STATE_MODULE = "keras.src.backend.common.global_state"
_KERAS_NAME_COUNTERS = "object_name_uids"
# Keras 2 keeps its name counters per graph in a module-level
# WeakKeyDictionary {graph: {prefix: count}}, under one of these modules.
_KERAS2_BACKENDS = ("tf_keras.src.backend", "keras.src.backend", "keras.backend",
                    "tensorflow.python.keras.backend")
_KERAS2_NAME_COUNTERS = "PER_GRAPH_OBJECT_NAME_UIDS"
_TF_LEGACY_KERAS_BACKEND = "tensorflow.python.keras.backend"
_TF_OPS_MODULE = "tensorflow.python.framework.ops"
_TF_SCRIPT_OPS_MODULE = "tensorflow.python.ops.script_ops"
_CUSTOM_GRADIENT_PREFIX = "CustomGradient-"  # tf.custom_gradient's registered names
_CONTAINERS = (dict, list, set, frozenset, tuple, collections.deque)


def _sum_counts(counters) -> int:
    """Sum of a {name: int} mapping's values; non-int values are ignored."""
    total = 0
    for value in list(counters.values()):
        if type(value) is int:
            total += value
    return total


def _keras_state():
    """Keras 3's global-state object of this thread, or None without Keras 3."""
    module = sys.modules.get(_KERAS_GLOBAL_STATE_MODULE)
    if module is None:
        return None
    return getattr(module, "GLOBAL_STATE_TRACKER", None)


def keras_auto_names() -> int | None:
    """Objects Keras 3 has named automatically since the last clear_session()."""
    state = _keras_state()
    if state is None:
        return None
    counters = getattr(state, _KERAS_NAME_COUNTERS, None)
    if counters is None:
        return 0  # cleared, nothing named since
    return _sum_counts(counters)


def keras_global_state() -> int | None:
    """Items in the containers of Keras 3's global state, name counters aside."""
    state = _keras_state()
    if state is None:
        return None
    attributes = getattr(state, "__dict__", None)
    if attributes is None:
        return None
    total = 0
    for key, value in list(attributes.items()):
        if key != _KERAS_NAME_COUNTERS and isinstance(value, _CONTAINERS):
            total += len(value)
    return total


def tf_keras_auto_names() -> int | None:
    """Objects Keras 2 has named automatically, over all graphs; None where
    no Keras 2 is in use (TensorFlow's own legacy copy, which importing
    TensorFlow loads, counts only once it has named something)."""
    seen: list = []
    used = False
    total = 0
    for name in _KERAS2_BACKENDS:
        module = sys.modules.get(name)
        per_graph = getattr(module, _KERAS2_NAME_COUNTERS, None) if module is not None else None
        if per_graph is None or any(per_graph is other for other in seen):
            continue  # not loaded, or the same backend under another name
        seen.append(per_graph)
        if not len(per_graph):
            used = used or name != _TF_LEGACY_KERAS_BACKEND
            continue
        used = True
        for counters in list(per_graph.values()):
            total += _sum_counts(counters)
    return total if used else None


class _CustomGradientCounter:
    """Gradient functions tf.custom_gradient registered in TensorFlow's
    gradient registry (names ``CustomGradient-<uid>``).

    The registry holds ~600 op gradients and only grows, at its end (a dict
    keeps insertion order), so a sample reads only the keys added since the
    last one; anything else (a removal) rescans it all. What is kept between
    samples is a count and one registry key (a str)."""

    def __init__(self):
        self._length = -1
        self._last_key = None
        self._count = 0

    def __call__(self) -> int | None:
        ops = sys.modules.get(_TF_OPS_MODULE)
        registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None) if ops is not None else None
        if not isinstance(registry, dict):
            return None
        length = len(registry)
        if length != self._length or (length and next(reversed(registry)) != self._last_key):
            try:
                self._update(registry, length)
            except RuntimeError:  # another thread registered meanwhile
                self._rescan(list(registry))
        return self._count

    def _update(self, registry: dict, length: int) -> None:
        added = length - self._length
        if self._length < 0 or added <= 0:
            self._rescan(list(registry))
            return
        new_keys = []
        for key in reversed(registry):
            if key == self._last_key:
                break
            new_keys.append(key)
            if len(new_keys) > added:  # the old last key is gone: rescan
                self._rescan(list(registry))
                return
        if len(new_keys) != added:
            self._rescan(list(registry))
            return
        self._count += _count_custom(new_keys)
        self._length = length
        self._last_key = new_keys[0] if new_keys else self._last_key

    def _rescan(self, keys: list) -> None:
        self._count = _count_custom(keys)
        self._length = len(keys)
        self._last_key = keys[-1] if keys else None


def _count_custom(keys) -> int:
    prefix = _CUSTOM_GRADIENT_PREFIX
    return sum(1 for key in keys if type(key) is str and key.startswith(prefix))


def graph_collection_items() -> int | None:
    """Items in the collections of this thread's default graph (tf.compat.v1);
    0 while no default graph exists (none is created)."""
    ops = sys.modules.get(_TF_OPS_MODULE)
    graphs = getattr(ops, "_default_graph_stack", None) if ops is not None else None
    if graphs is None:
        return None
    stack = getattr(graphs, "stack", None)
    graph = stack[-1] if stack else getattr(graphs, "_global_default_graph", None)
    if graph is None:
        return 0
    collections_ = getattr(graph, "_collections", None)
    if not isinstance(collections_, dict):
        return None
    return sum(len(items) for items in list(collections_.values()) if isinstance(items, _CONTAINERS))




def py_funcs() -> int | None:
    """Callables alive in TensorFlow's py-function registry (a
    WeakValueDictionary: an entry goes when nothing uses its callable)."""
    module = sys.modules.get(_TF_SCRIPT_OPS_MODULE)
    registry = getattr(module, "_py_funcs", None) if module is not None else None
    funcs = getattr(registry, "_funcs", None) if registry is not None else None
    if funcs is None or not hasattr(funcs, "__len__"):
        return None
    return int(len(funcs))


class RuntimeStateProbe(Probe):
    """Counts of Keras' and TensorFlow's runtime state that per-step model
    building grows (see the module docstring): one series per counter, only
    for the libraries the program has imported."""

    name = "runtime_state"
    needs_objects = False

    def __init__(self):
        self._counters = (
            (KERAS_AUTO_NAMES, keras_auto_names),
            (KERAS_GLOBAL_STATE, keras_global_state),
            (TF_KERAS_AUTO_NAMES, tf_keras_auto_names),
            (CUSTOM_GRADIENTS, _CustomGradientCounter()),
            (GRAPH_COLLECTION_ITEMS, graph_collection_items),
            (PY_FUNCS, py_funcs),
        )

    def sample(self, objects=None) -> Sample:
        sample: Sample = []
        for info, counter in self._counters:
            try:
                value = counter()
            except Exception:  # a library changed its internals: skip this counter
                continue
            if value is not None:
                sample.append((info, float(value)))
        return sample


probes_lib.EXTRA_FACTORIES["runtime_state"] = RuntimeStateProbe
