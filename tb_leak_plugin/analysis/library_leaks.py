"""Known leaks of TensorFlow and Keras themselves, reported apart.

Some growth is kept alive by the library, not by the program: a registry,
a cache or global state that the library fills each time the program calls
it in a certain way, and that the program cannot reach to empty. The fix is
then a workaround (call it differently, reset the library's state), not a
line that stops keeping a reference. LeakCanary reports such "library
leaks" apart from the application's own; so does tb-leak.

Each entry of :data:`CATALOGUE` says what the library keeps, in which
versions it is known, the public reports, and the workaround. A culprit is
matched by the hint its kind and name already gave it (`analysis.hints`),
by its name, or by a hop of its leak trace (a path through the library's
registry). A culprit a probe found growing inside a library registry is
told where (``holder``), as a leak trace would. Pure lookups.
"""

from __future__ import annotations

import dataclasses
import re

from tb_leak_plugin.metadata import hop_text


@dataclasses.dataclass(frozen=True)
class LibraryLeak:
    key: str
    title: str
    library: str
    versions: str
    #: What the library keeps, and why the program cannot free it itself.
    what: str
    workaround: str
    issues: tuple
    hints: frozenset = frozenset()
    names: str | None = None   # regex on the culprit's name
    hops: str | None = None    # regex on any hop of the culprit's leak traces
    #: Where the library keeps what grows, as typed hops, when a probe reads
    #: it there (the culprit then needs no trace to name its holder).
    holder: tuple = ()

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "library": self.library, "versions": self.versions,
                "what": self.what, "workaround": self.workaround, "issues": list(self.issues)}


CATALOGUE = (
    LibraryLeak(
        key="py_function_registry",
        title="TensorFlow's py-function registry (Dataset.from_generator, tf.py_function, tf.numpy_function)",
        library="TensorFlow",
        versions="TensorFlow 1.x and 2.0 to 2.21",
        what="Every call of tf.data.Dataset.from_generator, tf.py_function or tf.numpy_function registers "
             "the Python callable in TensorFlow's global FuncRegistry (script_ops._py_funcs), with the "
             "generator's state, and the graph or function that uses it keeps it there.",
        workaround="Build the dataset or the wrapped function once, outside the loop, and reuse it; in an "
                   "eager loop call the Python function directly instead of through tf.py_function.",
        issues=("https://github.com/tensorflow/tensorflow/issues/35084",
                "https://github.com/tensorflow/tensorflow/issues/35010",
                "https://github.com/tensorflow/tensorflow/issues/37653",
                "https://github.com/tensorflow/tensorflow/issues/57690"),
        hints=frozenset({"py_function_registry"}),
        names=r"(^|\.)(KeyedRef|_GeneratorState|FuncRegistry)$",
        hops=r"script_ops\._py_funcs|FuncRegistry\._funcs|_GeneratorState",
    ),
    LibraryLeak(
        key="keras_global_state",
        title="Keras's global state and automatic names (models built in a loop)",
        library="Keras",
        versions="Keras 2 and 3 on TensorFlow 2.x",
        what="Each model or layer built in the loop takes a new automatic name (dense_17) and a place in "
             "Keras's global state; each new variable name makes TensorFlow's eager runtime cache another "
             "kernel, for the life of the process.",
        workaround="Build the model once and reuse it (model.set_weights to reset it); for throwaway models "
                   "call keras.backend.clear_session() after each.",
        issues=("https://github.com/keras-team/keras/issues/2102",
                "https://github.com/tensorflow/tensorflow/issues/30324",
                "https://github.com/keras-team/keras/issues/9345"),
        hints=frozenset({"keras_names"}),
    ),
    LibraryLeak(
        key="retracing",
        title="tf.function's trace cache (retracing on new Python values or shapes)",
        library="TensorFlow",
        versions="TensorFlow 2.0 to 2.21",
        what="A tf.function keeps every concrete function it traced, and the eager context keeps their "
             "graphs: a call with a new Python number, a new Python object or a new shape traces again, "
             "and nothing evicts the old traces.",
        workaround="Pass tensors instead of Python numbers (tf.constant(x), or a tf.Variable for values that "
                   "change), give an input_signature or reduce_retracing=True for varying shapes, and "
                   "define the tf.function once, outside the loop.",
        issues=("https://github.com/tensorflow/tensorflow/issues/124972",
                "https://github.com/tensorflow/tensorflow/issues/26311",
                "https://github.com/tensorflow/tensorflow/issues/38561"),
        hints=frozenset({"retracing"}),
    ),
    LibraryLeak(
        key="gradient_registry",
        title="TensorFlow's gradient registry (a train step traced again every step)",
        library="TensorFlow",
        versions="TensorFlow 2.x",
        what="Every trace of a function using tf.custom_gradient (a Keras optimizer step among them) "
             "registers a gradient function in a global registry that keeps the traced graph alive; "
             "clear_session() does not release it.",
        workaround="Build and compile the model once and define the train-step tf.function once, so that "
                   "it is traced once.",
        issues=("https://github.com/tensorflow/tensorflow/issues/61791",
                "https://github.com/keras-team/keras/issues/17458"),
        hints=frozenset({"custom_gradients"}),
        holder=({"kind": "global", "name": "tensorflow.python.framework.ops._gradient_registry"},
                {"kind": "attribute", "owner": "Registry", "name": "_registry"},
                {"kind": "key", "name": "CustomGradient-*", "key_type": "str"}),
    ),
    LibraryLeak(
        key="default_session_stack",
        title="TensorFlow's default-session stack (an InteractiveSession per step)",
        library="TensorFlow",
        versions="TensorFlow 1.x, and tf.compat.v1 in 2.x",
        what="An InteractiveSession (or any session whose as_default() context is entered and never "
             "exited) pushes itself on TensorFlow's default-session stack, which keeps it, its runtime and "
             "its own copy of the variables alive until close() pops it: dropping the program's reference "
             "frees nothing.",
        workaround="Open one session around the loop (`with tf.compat.v1.Session() as sess:`), or call "
                   "close() on each InteractiveSession before opening the next.",
        issues=("https://github.com/tensorflow/tensorflow/issues/13202",),
        hops=r"_default_session_stack",
    ),
    LibraryLeak(
        key="v1_default_graph",
        title="The tf.compat.v1 default graph (ops created inside the loop)",
        library="TensorFlow",
        versions="TensorFlow 1.x, and tf.compat.v1 in 2.x",
        what="Every op created while a graph is the default stays in it, with its constants, for as long "
             "as the graph lives: calling tf.* functions inside a Session loop adds ops at every step.",
        workaround="Build every op once before the loop and only sess.run inside it; call graph.finalize() "
                   "after building so that adding an op raises; or build each throwaway graph under "
                   "`with tf.Graph().as_default():` and drop it.",
        issues=("https://github.com/tensorflow/tensorflow/issues/700",
                "https://github.com/tensorflow/tensorflow/issues/7127"),
        names=r"in the default graph",
    ),
)

_BY_KEY = {entry.key: entry for entry in CATALOGUE}


def _paths(culprit) -> list:
    details = culprit.details if isinstance(getattr(culprit, "details", None), dict) else {}
    out = []
    for entry in details.get("held_by") or ():
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, (list, tuple)):
            out.append([str(hop) for hop in path])
    return out


def match(culprit) -> LibraryLeak | None:
    """The known library leak a culprit is, or None when it is the program's own."""
    for entry in CATALOGUE:
        if culprit.hint in entry.hints:
            return entry
        if entry.names and re.search(entry.names, str(culprit.name)):
            return entry
        if entry.hops and any(re.search(entry.hops, hop) for path in _paths(culprit) for hop in path):
            return entry
    return None


def label(culprits) -> list:
    """Mark each culprit that is a known library leak (``details['library_leak']``)
    and return the distinct entries matched, in culprit order."""
    seen: dict = {}
    for culprit in culprits:
        entry = match(culprit)
        if entry is None:
            continue
        if not isinstance(culprit.details, dict):
            culprit.details = {}
        culprit.details["library_leak"] = entry.key
        if entry.holder and not culprit.details.get("held_by"):
            # The probe that found the growth read it there: the holder is measured, not traced.
            hops = [dict(hop) for hop in entry.holder]
            culprit.details["held_by"] = [{"path": [hop_text(hop) for hop in hops], "hops": hops,
                                           "sampled": 0, "instances": None, "source": "probe"}]
        seen.setdefault(entry.key, entry)
    return list(seen.values())


def entry(key: str) -> LibraryLeak | None:
    return _BY_KEY.get(key)
