"""What a culprit usually means in TensorFlow, and the usual fix.

Pure lookups: a culprit (kind + name) -> a hint class and its text. Kept in
one table so the CLI, JSON and the Leak tab say the same thing.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Hint:
    """A short explanation of a leak pattern and its usual fix."""

    key: str
    title: str
    text: str
    fix: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


HINTS = {
    "tensors_kept": Hint(
        "tensors_kept",
        "Tensors kept alive from Python",
        "Live eager tensors (or the allocator memory behind them) grow with the step count: a Python "
        "list, dict or attribute keeps every step's output or loss, e.g. `losses.append(loss)`.",
        "Keep plain numbers (`float(loss)` or `loss.numpy()`), aggregate with `tf.keras.metrics.Mean`, "
        "or keep a bounded window (`collections.deque(maxlen=...)`).",
    ),
    "arrays_kept": Hint(
        "arrays_kept",
        "numpy arrays accumulating",
        "Live numpy arrays grow with the step count: a container keeps each step's batch, prediction "
        "or gradient as an array.",
        "Keep summaries (means, counts) instead of arrays, write them out and drop them, or bound the "
        "container.",
    ),
    "buffer_views_kept": Hint(
        "buffer_views_kept",
        "views of buffers accumulating (numpy arrays made from tensors)",
        "Live memoryview objects grow with the step count. Each numpy array made from a TensorFlow "
        "tensor (`np.asarray(t)`, `t.numpy()`, a model's output converted to numpy) holds a view of "
        "the tensor's buffer, so a container that keeps those arrays keeps the tensors' memory; "
        "without TensorFlow, slices of bytes or arrays kept through `memoryview`.",
        "Keep summaries of the arrays (scores, means) or only the latest, copy the slice you need "
        "(`np.array(view)`), or bound the container.",
    ),
    "retracing": Hint(
        "retracing",
        "tf.function retraced again and again",
        "Each call with a new Python scalar, a new shape or a new Python object creates another "
        "concrete function (a new graph) that stays in memory.",
        "Pass tensors instead of Python numbers (`tf.constant(lr)`), fix shapes with "
        "`input_signature=[tf.TensorSpec(...)]` or `reduce_retracing=True`, and define the tf.function "
        "once, outside the loop.",
    ),
    "function_per_step": Hint(
        "function_per_step",
        "tf.function objects created inside the loop",
        "New tf.function objects are created and kept alive every step; each holds its traced graphs.",
        "Decorate the function once at module or object level and call that one object every step.",
    ),
    "keras_objects": Hint(
        "keras_objects",
        "Keras models or layers created in the loop",
        "Models, layers or their variables accumulate: a model or layer is built inside the loop, and "
        "Keras' global state (names, graph) keeps every one alive.",
        "Build the model once outside the loop; for throwaway models call "
        "`tf.keras.backend.clear_session()` after each.",
    ),
    "keras_names": Hint(
        "keras_names",
        "Keras models or layers built, and named afresh, every step",
        "Keras' automatic names (`dense_17`, `sequential_8`) grow with the step count: a model or layer is "
        "built inside the loop. Each new variable name makes TensorFlow's eager runtime cache another kernel "
        "(about 36 KiB per variable) for the life of the process, so memory grows while no Python object does.",
        "Build the model once, outside the loop, and reuse it (restore its first weights with "
        "`model.set_weights(...)` if each step needs a fresh model); for throwaway models call "
        "`keras.backend.clear_session()` after each, which resets the names and empties the cache.",
    ),
    "custom_gradients": Hint(
        "custom_gradients",
        "A train step traced again every step",
        "TensorFlow's global gradient registry grows with the step count: a function that uses "
        "`tf.custom_gradient`, such as a Keras optimizer step (`compile` + `fit`/`train_on_batch` on a new "
        "model, or a new `tf.function` around `optimizer.apply`), is traced again each step. Every trace "
        "registers a gradient function that keeps the traced graph alive for good, and `clear_session()` "
        "does not release it.",
        "Build and compile the model once and define the train-step `tf.function` once, outside the loop, "
        "so that it is traced once.",
    ),
    "data_pipeline": Hint(
        "data_pipeline",
        "tf.data pipeline rebuilt inside the loop",
        "tf.data datasets or iterators accumulate: a pipeline (or `iter(dataset)`) is rebuilt every "
        "step, each with its own buffers and threads.",
        "Build the dataset and its iterator once, before the loop, and draw batches with `next(it)` "
        "or a `for` loop over the dataset.",
    ),
    "python_container": Hint(
        "python_container",
        "An unbounded Python container",
        "Plain Python objects (dicts, lists, tuples, strings) grow with the step count: a cache or "
        "history keyed by step that is never trimmed.",
        "Bound it (`functools.lru_cache(maxsize=...)`, `collections.deque(maxlen=...)`) or clear it "
        "at the end of each epoch.",
    ),
    "objects_generic": Hint(
        "objects_generic",
        "Objects of one type accumulate",
        "Instances of a type grow with the step count: something keeps a reference to each one.",
        "Find the holder with `gc.get_referrers(obj)` on a recent instance (or objgraph's "
        "`show_backrefs`) and drop or bound that reference.",
    ),
    "op_retains": Hint(
        "op_retains",
        "An op's outputs are never freed",
        "In the profiler trace this op allocates memory in most steps that is still held when the "
        "trace ends: its outputs are kept alive, usually by a Python reference, a growing "
        "`tf.Variable`/`TensorArray`, or a collection of per-step results.",
        "Find where the op's result is stored (its name and shape point at the line) and keep a "
        "number or a bounded window instead.",
    ),
    "allocator_only": Hint(
        "allocator_only",
        "TensorFlow memory grows while Python objects do not",
        "The TensorFlow allocator's bytes in use grow but no Python-side type does: tensors are held "
        "inside TensorFlow (a growing variable or TensorArray, a tf.data buffer, constants of "
        "retained graphs).",
        "Record a profiler window (`Monitor(..., profile_steps=(a, b))`) to see which op's memory is "
        "retained.",
    ),
    "native_memory": Hint(
        "native_memory",
        "Process memory grows outside the Python heap and TensorFlow's allocators",
        "RSS grows while neither the Python objects nor TensorFlow's allocators do. In TensorFlow this "
        "is most often runtime state left by objects built inside the loop: Keras models or layers "
        "(their variables, names and functions), tf.functions, datasets; or TensorFlow's scalar "
        "cache, which keeps every distinct Python number converted to a tensor for good (about "
        "0.6 KiB each: `tf.constant(lr)` of a new float, `v.assign(x)`, `tf.summary.scalar(..., "
        "step=step)` with a Python int, every step). Otherwise: native memory of a C extension, or "
        "fragmentation of the C allocator.",
        "Build models, layers and tf.functions once, outside the loop; if throwaway models are needed, "
        "call `keras.backend.clear_session()` after each. Pass numbers that change every step as "
        "numpy values (`np.float32(lr)`, `np.int64(step)`) or keep them in a `tf.Variable`. For "
        "native libraries try jemalloc or tcmalloc via `LD_PRELOAD`.",
    ),
    "graph_grows": Hint(
        "graph_grows",
        "The TensorFlow graph grows every step",
        "Operations are added to a graph inside the loop (tf.compat.v1 code that builds `tf.add`, "
        "`tf.constant` or an optimizer step per iteration, or a loop under `tf.Graph().as_default()`), "
        "or a new tf.function is defined per step. Every op stays in the graph, with its constants, "
        "for as long as the graph lives; a new Session per step holds its own copy of the runtime.",
        "Build the graph (ops, optimizer, tf.function) once before the loop and only `sess.run` it "
        "inside; call `graph.finalize()` after building, so that adding an op raises at once. Close "
        "sessions (`with tf.compat.v1.Session() as sess:`).",
    ),
    "sessions_kept": Hint(
        "sessions_kept",
        "TensorFlow sessions pile up",
        "A `tf.compat.v1.Session` (or `InteractiveSession`) is opened per step or per evaluation and "
        "never closed: each holds its own runtime state and a copy of the variables, and an "
        "InteractiveSession stays on TensorFlow's default-session stack even when the program drops it.",
        "Open one session around the loop (`with tf.compat.v1.Session() as sess:`), or call "
        "`sess.close()` when done with each.",
    ),
    "census_too_short": Hint(
        "census_too_short",
        "Memory grows; the run is too short to say what grows",
        "Process or allocator memory grows, but the object census (live objects, tensors, arrays) "
        "ran too few times in this run to tell which of them grow with it.",
        "Run longer (a heap walk costs ~0.1-0.4 s on a TensorFlow heap, so the default budget takes "
        "a few per run of seconds), or sample more densely with `Monitor(overhead_budget=0.05)`.",
    ),
    "py_function_registry": Hint(
        "py_function_registry",
        "A pipeline that wraps Python code is rebuilt inside the loop",
        "Python functions, closures and the weak references of TensorFlow's py-function registry "
        "accumulate: `tf.data.Dataset.from_generator`, `tf.py_function` or `tf.numpy_function` is "
        "called again each step, and every call registers another Python callback that stays alive.",
        "Build the dataset (and its iterator) once, before the loop, and draw batches with `next(it)`; "
        "create `tf.py_function` wrappers once.",
    ),
    "uncollectable": Hint(
        "uncollectable",
        "Uncollectable reference cycles",
        "The garbage collector finds cycles it cannot free (objects left in `gc.garbage`).",
        "Break the cycles (weak references, explicit `close()`), and inspect `gc.garbage` with "
        "`gc.set_debug(gc.DEBUG_SAVEALL)`.",
    ),
}

_KERAS = re.compile(r"^(keras|tf_keras|tensorflow\.python\.keras)\.|\bKerasVariable\b|\b(Sequential|Functional)\b")
_DATA = re.compile(r"^tensorflow\.python\.data\.|Dataset(V[12])?\b|\bOwnedIterator\b|Iterator(V2)?$")
_FUNCTION = re.compile(r"polymorphic_function\.Function$|ConcreteFunction$|AtomicFunction$")
_EAGER = re.compile(r"EagerTensor$|\bResourceVariable$")
_SESSION = re.compile(r"\.client\.session\.\w*Session$|(^|\.)(Interactive)?Session$")
_GRAPH = re.compile(r"\.framework\.ops\.Graph$")
_CONTAINERS = {
    "builtins.dict", "builtins.list", "builtins.tuple", "builtins.str", "builtins.set",
    "builtins.bytes", "builtins.float", "builtins.int", "collections.OrderedDict",
    "collections.deque", "builtins.cell",
}


# Libraries' list, dict and set subclasses that hold an object's state (Keras
# tracks a layer's sublayers, variables and losses in them; TensorFlow's
# trackable wrappers): containers, ranked as the built-in ones are, after the
# record that holds them (a model built per episode grows seven of them a
# layer, and they outnumbered the layers and variables that leak).
_LIBRARY_CONTAINERS = re.compile(
    r"^(keras\.src\.utils\.tracking\.Tracked(List|Dict|Set)"
    r"|tensorflow\.python\.trackable\.data_structures\.(ListWrapper|_DictWrapper|_TupleWrapper|List|Mapping))$")


def hint_for_type(type_name: str) -> Hint:
    """The hint for a growing live-object type, by its qualified name."""
    if _LIBRARY_CONTAINERS.match(type_name):
        return HINTS["python_container"]
    if type_name == "weakref.KeyedRef":
        # Weak values of a WeakValueDictionary: TensorFlow's py-function
        # registry (FuncRegistry) holds one per registered callback.
        return HINTS["py_function_registry"]
    if _EAGER.search(type_name):
        return HINTS["tensors_kept"]
    if _SESSION.search(type_name):
        return HINTS["sessions_kept"]
    if _GRAPH.search(type_name):
        return HINTS["graph_grows"]
    if type_name.startswith("numpy."):
        return HINTS["arrays_kept"]
    if type_name in ("builtins.memoryview", "builtins.managedbuffer"):
        return HINTS["buffer_views_kept"]
    if _FUNCTION.search(type_name):
        return HINTS["function_per_step"]
    if _KERAS.search(type_name):
        return HINTS["keras_objects"]
    if _DATA.search(type_name):
        return HINTS["data_pipeline"]
    if type_name in _CONTAINERS:
        return HINTS["python_container"]
    return HINTS["objects_generic"]


def hint_for_series(tag_group: str, measure: str) -> Hint | None:
    """The hint for a leaking series that is itself the clue (tensors, traces)."""
    if tag_group == "tensors" and measure.startswith("eager"):
        return HINTS["tensors_kept"]
    if tag_group == "tensors" and measure.startswith("numpy"):
        return HINTS["arrays_kept"]
    if tag_group == "tf_function" and measure == "traces":
        return HINTS["retracing"]
    if tag_group == "tf_function" and measure == "instances":
        return HINTS["function_per_step"]
    if tag_group == "gc" and measure in ("uncollectable", "garbage"):
        return HINTS["uncollectable"]
    if tag_group == "runtime":
        key = {"keras_auto_names": "keras_names", "custom_gradients": "custom_gradients",
               "keras_global_state": "keras_objects", "graph_collection_items": "graph_grows",
               "py_funcs": "py_function_registry"}.get(measure)
        return HINTS[key] if key else None
    return None
