"""Leak traces: who keeps an object alive, from a root to the object.

Given a few instances of a type that keeps growing, :func:`trace` finds for
each the shortest chain of strong references from a *root* (a module global,
a local variable of a running frame, a class attribute) and names every hop
on the way (``train() local `history` (train.py:57) → list → EagerTensor``).
Chains are grouped by their *signature* (the types and the attribute or key
names along the chain, never object ids or list positions), so a thousand
tensors appended to one list are one path with a thousand instances.

The search runs backwards, one level of referrers at a time: each level is a
single ``gc.get_referrers`` call over the whole frontier (one pass of the
collector's object lists in C), so a path of depth d costs about d passes,
whatever the number of instances followed. It stops at a hard time cap.

While it runs, the search holds the objects on its frontier; when it
returns it holds nothing (every container it made is dropped, and a frame's
locals snapshot that reading a frame's variables creates is cleared again on
CPython before 3.13, where it would otherwise keep the frame's old values
alive). It never changes what the program keeps alive and never raises.

It never runs the program's code either, so its time cap holds whatever the
heap holds: types are read with ``type(obj)`` and the type's own C slots
(never ``obj.__class__``, a metaclass's properties, ``isinstance`` on an
object whose ``__class__`` may be a property), containers are read with the
base type's C methods (``dict.items(d)``, never an override), types are
compared by identity (never ``==``), and the deadline is checked inside every
loop over the heap.

Local variables of running frames are read from the calling thread only
(before Python 3.13): reading ``frame.f_locals`` syncs a snapshot dict, and a
thread running under a trace or profile function (a debugger, a coverage
tool) copies that dict back into its fast locals when its trace function
returns (``PyFrame_LocalsToFast``); a snapshot read, or cleared, by another
thread in between would change, or unbind, that thread's variables. The
calling thread's snapshots are only cleared again when it has no trace or
profile function. An object that only another thread's running function
holds in a local is not named on those versions. From 3.13 on, ``f_locals``
is a read-only-safe proxy and every thread's locals are read.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import itertools
import os
import sys
import time
import types

from tb_leak_plugin.metadata import FAN_OUT_KINDS, ROOT_KINDS, hop_text, text_hop, wildcard  # noqa: F401

# Hops shown in a path at most; longer chains are cut in the middle.
MAX_HOPS = 12
# Objects followed per level of the search (the frontier): wide levels
# (an object many things refer to) are cut to this many.
MAX_FRONTIER = 96
# Longest chain searched.
MAX_DEPTH = 24
# Entries of one dict or attributes of one object looked at to name a hop.
_MAX_SCAN = 200_000
# Longest text of one hop in a path (a module or key name may be megabytes).
MAX_HOP_CHARS = 300
# Holders looked at between two checks of the deadline.
_CHECK_EVERY = 64

_PACKAGE = __name__.partition(".")[0]
_SNAPSHOT_LOCALS = sys.version_info < (3, 13)  # f_locals is a cached dict, not a proxy

# The type's own C slots, read without a metaclass's overrides.
_TYPE_SLOTS = {name: type.__dict__[name] for name in ("__module__", "__qualname__", "__name__", "__mro__", "__dict__")}
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]
_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _type_attr(kind, name):
    """``kind.<name>`` from ``type``'s own slot (no metaclass property runs); None on failure."""
    try:
        return _TYPE_SLOTS[name].__get__(kind, type)
    except Exception:
        return None


def _plain(text):
    """A plain ``str`` copy of ``text`` when it is a string (no override runs), else None."""
    return str.__str__(text) if issubclass(type(text), str) else None


def bound(text: str, limit: int = MAX_HOP_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    text = _plain(text) or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_own_type(kind) -> bool:
    """Whether ``kind`` is defined in tb-leak's own package."""
    module = _plain(_type_attr(kind, "__module__"))
    return module is not None and (module == _PACKAGE or module.startswith(_PACKAGE + "."))


def module_namespace(module):
    """A module's namespace dict, or None (read from ``module``'s own slot:
    no property of a module subclass, nor of a non-module in sys.modules, runs)."""
    if not issubclass(type(module), types.ModuleType):
        return None
    try:
        namespace = _MODULE_DICT.__get__(module, types.ModuleType)
    except Exception:
        return None
    return namespace if type(namespace) is dict else None


def modules() -> list:
    """``(name, module)`` of ``sys.modules``, read with dict's own methods."""
    table = sys.modules
    try:
        return list(dict.items(table)) if issubclass(type(table), dict) else []
    except Exception:
        return []


def _instance_dict(obj):
    """An instance's ``__dict__`` through the type machinery's own descriptor
    (None where a class defines ``__dict__`` itself, or there is none)."""
    mro = _type_attr(type(obj), "__mro__")
    if type(mro) is not tuple:
        return None
    for kind in mro:
        namespace = _type_attr(kind, "__dict__")
        try:
            desc = namespace.get("__dict__") if namespace is not None else None
        except Exception:
            return None
        if desc is None:
            continue
        if type(desc) is not types.GetSetDescriptorType:
            return None
        try:
            found = desc.__get__(obj, type(obj))
        except Exception:
            return None
        return found if issubclass(type(found), dict) else None  # (read with dict's own methods)
    return None


@dataclasses.dataclass
class HeldBy:
    """One path signature: the hops from the root to the direct holder, and
    how many of the traced instances hang under it."""

    path: list[str]
    instances: int
    signature: tuple = ()
    #: The typed hops (see ``hop_text``) the path's text is rendered from.
    hops: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": list(self.path), "hops": [dict(h) for h in self.hops], "instances": int(self.instances)}


@dataclasses.dataclass
class TraceResult:
    """Paths found for ``traced`` instances, grouped by signature, most first."""

    held_by: list[HeldBy]
    traced: int
    found: int
    seconds: float
    complete: bool  # False when the time cap or the depth cut the search short
    levels: int = 0
    #: Paths (signatures) that pass through an object of tb-leak's own.
    own: frozenset = frozenset()
    #: Each distinct target's signature, in the order given (None: not reached
    #: from a root): one trace of several containers tells each its path.
    signatures: tuple = ()

    def to_dict(self) -> dict:
        return {"held_by": [h.to_dict() for h in self.held_by], "traced": self.traced, "found": self.found,
                "seconds": round(self.seconds, 4), "complete": self.complete}


def _short(text: str, limit: int = 48) -> str:
    text = _plain(text)
    if text is None:
        return "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_name(kind) -> str:
    return _short(_type_attr(kind, "__qualname__"))


def _type_label(obj) -> str:
    return _type_name(type(obj))


def _key_hop(key) -> dict:
    """The hop into a dict through ``key``: a string key as it is, any other
    by its type (a dict keyed by step is one path, whatever the step)."""
    if issubclass(type(key), str):
        return {"kind": "key", "name": _short(key, 40), "key_type": "str"}
    return {"kind": "key", "name": _short(_type_attr(type(key), "__name__")), "key_type": "other"}


_CO_OPTIMIZED = 0x1  # a function's frame: its locals live in the frame, not in a dict

# Registries of libraries that keep what a program makes per step, as a module
# and a chain of attributes to the container: TensorFlow's py-function
# registry (every Dataset.from_generator, tf.py_function, tf.numpy_function).
LIBRARY_REGISTRIES = (
    ("tensorflow.python.ops.script_ops", ("_py_funcs", "_funcs", "data")),
)


def _registry(module_name: str, chain: tuple):
    """(the container, the hops to it) of a known registry whose module is
    loaded, or None. Read through namespaces only (no property or
    ``__getattr__`` of the library runs)."""
    table = sys.modules
    try:
        module = dict.get(table, module_name) if issubclass(type(table), dict) else None
    except Exception:
        return None
    namespace = module_namespace(module) if module is not None else None
    if namespace is None or not chain:
        return None
    try:
        obj = dict.get(namespace, chain[0])
        hops = [{"kind": "global", "name": f"{module_name}.{chain[0]}"}]
        for name in chain[1:]:
            attributes = _instance_dict(obj)
            if attributes is None:
                return None
            owner = _type_label(obj)
            obj = dict.get(attributes, name)
            hops.append({"kind": "attribute", "owner": owner, "name": name})
    except Exception:
        return None
    return (obj, hops) if type(obj) is dict else None
_ATOMIC = (type(None), bool, int, float, complex, str, bytes)
_ATOMIC_IDS = frozenset(map(id, _ATOMIC))  # compared by identity: a metaclass's __eq__ never runs


class _Roots:
    """What counts as a root, looked up once per trace: module namespaces,
    and the local variables of every running function in every thread (the
    collector does not see those: a running frame does not list its locals
    to it, so ``gc.get_referrers`` never returns a running frame)."""

    def __init__(self, local_hops=None):
        self.module_dicts: dict[int, str] = {}
        for name, module in modules():
            namespace = module_namespace(module)
            if namespace is not None:
                self.module_dicts.setdefault(id(namespace), _plain(name) or "?")
        # id(value) -> (hop of the local variable, value), for every
        # running function's locals (innermost frames first): as read
        # before a census listed the objects (``local_hops``), or now.
        self.locals: dict[int, tuple[dict, object]] = {}
        for hop, value in (running_locals() if local_hops is None else local_hops):
            if id(type(value)) not in _ATOMIC_IDS:
                self.locals.setdefault(id(value), (hop, value))
        # The interpreter's signal handlers: roots no Python object refers to
        # (a handler that chains to the one it replaced keeps every one before).
        for hop, value in _signal_handlers():
            self.locals.setdefault(id(value), (hop, value))
        # What tb-leak's own running functions hold in their locals (a sample
        # being recorded): no Python object the collector lists refers to it
        # either, but it is not held outside Python.
        self.own_values: set[int] = _own_frame_values()

        # id(container) -> the hops from its module global to it, for the
        # registries of libraries known to keep what a program makes per
        # step (see LIBRARY_REGISTRIES): a root, so that what they hold is
        # named in one level of the search instead of four.
        self.registries: dict[int, list] = {}
        for module_name, chain in LIBRARY_REGISTRIES:
            found = _registry(module_name, chain)
            if found is not None:
                self.registries.setdefault(id(found[0]), found[1])

    def release(self):
        self.locals.clear()


def _own_frame_values() -> set:
    """Ids of the values tb-leak's own running functions hold in their
    locals, on the calling thread (their snapshots emptied again)."""
    out: set = set()
    try:
        frame = sys._getframe(2)  # from the caller of the caller (_Roots): not its loop's last value
    except Exception:
        return out
    clear = sys.gettrace() is None and sys.getprofile() is None
    while frame is not None:
        if _is_own_frame(frame) and frame.f_code.co_flags & _CO_OPTIMIZED:
            out.update(id(value) for _name, value in _read_locals(frame, clear))
        frame = frame.f_back
    return out


def _signal_handlers() -> list:
    """``(hop, handler)`` of the Python functions installed as signal
    handlers, read with the C module's ``_signal.getsignal`` (``signal``'s
    wrapper hashes the handler, which may run the program's code)."""
    try:
        table = sys.modules
        low = dict.get(table, "_signal") if issubclass(type(table), dict) else None
        named = dict.get(table, "signal") if issubclass(type(table), dict) else None
    except Exception:
        return []
    if low is None or type(low) is not types.ModuleType:
        return []
    try:
        numbers = sorted(int(n) for n in low.valid_signals())
        getsignal = low.getsignal
    except Exception:
        return []
    out = []
    for number in numbers:
        try:
            handler = getsignal(number)
        except Exception:
            continue
        if handler is None or id(type(handler)) in _ATOMIC_IDS or type(handler) is types.BuiltinFunctionType \
                or issubclass(type(handler), int):
            continue  # SIG_DFL, SIG_IGN, Python's own KeyboardInterrupt handler
        try:
            name = named.Signals(number).name if type(named) is types.ModuleType else str(number)
        except Exception:
            name = str(number)
        out.append(({"kind": "registry", "name": f"signal handler of {_plain(name) or number}"}, handler))
    return out


def _running_frames() -> list:
    """``(innermost frame, whether its snapshots may be cleared)`` of the
    threads whose locals are read: before 3.13 the calling thread's only, and
    cleared only when it has no trace or profile function (see the module's
    docstring); from 3.13 on every thread's (a proxy: nothing to clear)."""
    if not _SNAPSHOT_LOCALS:
        try:
            return [(frame, False) for frame in sys._current_frames().values()]
        except Exception:
            return []
    traced = sys.gettrace() is not None or sys.getprofile() is not None
    return [(sys._getframe(0), not traced)]


def running_locals() -> list:
    """``(hop, value)`` of the local variables of the running functions
    whose locals are read (see `_running_frames`), innermost frames first,
    the package's own frames aside: what a program holds only in a local (an
    array a loop re-binds to a bigger one each step) is not reachable from
    any object the collector lists, and a local is a root of a leak trace.
    Read them before listing the objects (``probes.collect_objects``): a
    list of every tracked object would hold the frames' snapshot dicts,
    which are then not emptied again. The caller drops the list when done."""
    out = []
    for frame, clear in _running_frames():
        while frame is not None:
            if not _is_own_frame(frame) and frame.f_code.co_flags & _CO_OPTIMIZED:
                function, where = _frame_place(frame)
                for name, value in _read_locals(frame, clear):
                    out.append(({"kind": "local", "owner": function, "name": name, "where": where}, value))
            frame = frame.f_back
    return out


def _is_own_frame(frame) -> bool:
    try:
        namespace = frame.f_globals
        name = dict.get(namespace, "__name__", "") if issubclass(type(namespace), dict) else ""
    except Exception:
        return False
    name = _plain(name)
    return name is not None and (name == _PACKAGE or name.startswith(_PACKAGE + "."))


def _frame_place(frame) -> tuple[str, str]:
    code = frame.f_code
    try:
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    except Exception:
        where = "?"
    return _short(code.co_name), where


def _read_locals(frame, clear: bool = True) -> list:
    """``(name, value)`` of a function frame's local variables, leaving no
    reference behind: on CPython before 3.13, ``f_locals`` of a function
    frame is a snapshot dict cached on the frame, which would hold the values
    it copied (and keep a value alive after the function rebinds the name).
    A snapshot nobody else holds is emptied again; one the program holds
    (it called ``locals()`` and kept the dict) is left as it is."""
    try:
        snapshot = frame.f_locals
    except Exception:
        return []
    try:
        if type(snapshot) is not dict:
            return []
        return [(_plain(name) or "?", value) for name, value in itertools.islice(dict.items(snapshot), _MAX_SCAN)]
    except Exception:
        return []
    finally:
        # References: the frame's, `snapshot`, getrefcount's argument.
        if clear and _SNAPSHOT_LOCALS and type(snapshot) is dict and frame.f_code.co_flags & _CO_OPTIMIZED \
                and sys.getrefcount(snapshot) <= 3:
            # Only the function's own variables: a name that exec() stored
            # lives in this dict alone, and the program reads it back with
            # locals().
            code = frame.f_code
            for name in code.co_varnames + code.co_cellvars + code.co_freevars:
                dict.pop(snapshot, name, None)
        snapshot = None


def _frame_local_name(frame, child) -> str | None:
    """The name of a (finished or suspended) frame's local bound to ``child``."""
    for name, value in _read_locals(frame):
        if value is child:
            return name
    return None


_FOUND_KEY = object()  # the child is a key of the mapping, not a value
_ROOT = "root"  # a module namespace or class holds the node: named once the chains are known


class _Namer:
    """Names the hops of the chains found: each container is read once, in
    one pass from its newest entry back (a leak's newest instances are found
    first), for all the children it must name, bounded by ``_MAX_SCAN``
    entries and the trace's deadline; it keeps ids and labels, never the
    program's objects."""

    def __init__(self, roots, deadline: float):
        self.roots = roots
        self.deadline = deadline
        self.wanted: dict[int, set] = {}      # id(holder) -> ids of the children to name
        self._found: dict[int, tuple] = {}    # id(mapping) -> ({id(child): label}, fallback)

    def want(self, holder, child) -> None:
        self.wanted.setdefault(id(holder), set()).add(id(child))

    def key(self, mapping, child, owner=None):
        """(hop into ``child`` through its key in ``mapping``, found):
        ``_FOUND_KEY`` when ``child`` is a key; when not found within the
        bounds, a key hop naming the type of the keys seen (``int``) or ``?``."""
        entry = self._found.get(id(mapping))
        if entry is None or id(child) not in entry[2]:
            # Every child asked for through the mapping or through its owner
            # (an instance and its __dict__) is looked for in the same pass.
            wanted = self.wanted.get(id(mapping), set()) | {id(child)}
            if owner is not None:
                wanted |= self.wanted.get(id(owner), set())
            if entry is not None:
                wanted |= entry[2]
            entry = self._found[id(mapping)] = self._scan(mapping, wanted) + (wanted,)
        labels, fallback, _wanted = entry
        if id(child) in labels:
            return labels[id(child)], True
        return fallback, False

    def _scan(self, mapping, wanted: set) -> tuple:
        labels: dict = {}
        kinds: dict = {}
        try:
            if issubclass(type(mapping), dict):
                items = dict.items(mapping)
            elif type(mapping) is types.MappingProxyType:
                items = mapping.items()  # a class's namespace: a plain dict underneath
            else:
                return labels, "?"
            try:
                entries = reversed(items)
            except TypeError:
                entries = iter(items)
            count = 0
            for key, value in entries:
                count += 1
                if len(kinds) < 2:
                    kinds.setdefault(id(type(key)), type(key))
                if id(value) in wanted and id(value) not in labels:
                    labels[id(value)] = _key_hop(key)
                elif id(key) in wanted and id(key) not in labels:
                    labels[id(key)] = _FOUND_KEY
                if len(labels) >= len(wanted):
                    break
                if count % 1024 == 0 and (count >= _MAX_SCAN or time.perf_counter() > self.deadline):
                    break
        except Exception:
            pass  # changed by another thread while read: what was found stands
        fallback = {"kind": "key", "name": "?", "key_type": "other"}
        if len(kinds) == 1:
            fallback = {"kind": "key", "name": _short(_type_attr(next(iter(kinds.values())), "__name__")),
                        "key_type": "other"}
        kinds.clear()
        return labels, fallback


def _attribute_name(hop) -> str | None:
    """The name of a string key: an attribute's name in an instance's or a class's namespace."""
    if isinstance(hop, dict) and hop.get("key_type") == "str":
        return hop.get("name")
    return None


def _instance_attribute(holder, child, namer) -> str | None:
    namespace = _instance_dict(holder)
    if namespace is not None:
        label, found = namer.key(namespace, child, holder)
        name = _attribute_name(label) if found else None
        if name is not None:
            return name
    mro = _type_attr(type(holder), "__mro__")
    for kind in mro if type(mro) is tuple else ():
        namespace = _type_attr(kind, "__dict__")
        try:
            members = [d for d in itertools.islice(namespace.values(), 4096)
                       if type(d) is types.MemberDescriptorType] if namespace is not None else []
        except Exception:
            continue
        for member in members:
            try:
                if member.__get__(holder, type(holder)) is child:
                    return _short(member.__name__)
            except Exception:
                continue
    return None


_SEQUENCES = (list, tuple, set, frozenset, collections.deque)


def _hop(holder, child, namer) -> tuple[dict, bool]:
    """(the hop from ``holder`` to ``child``, whether ``holder`` is a root)."""
    roots = namer.roots
    holder_id = id(holder)
    kind = type(holder)
    if holder_id in roots.registries:
        label, found = namer.key(holder, child)
        last = dict(label) if found and label is not _FOUND_KEY else {"kind": "dict_key"}
        return [*roots.registries[holder_id], last], True
    if holder_id in roots.module_dicts:
        label, found = namer.key(holder, child)
        module = roots.module_dicts[holder_id]
        name = (_attribute_name(label) or label.get("name")) if found and label is not _FOUND_KEY else "?"
        return {"kind": "global", "name": f"{_short(module, 120)}.{name}"}, True
    if kind is types.FrameType:
        # A frame the collector lists is not running: a traceback's, or a
        # suspended generator's, keeping its locals alive.
        function, where = _frame_place(holder)
        name = _frame_local_name(holder, child)
        return {"kind": "frame_local", "owner": function, "name": name or "?", "where": where}, False
    if issubclass(kind, type):
        qualname = _type_name(holder)
        namespace = _type_attr(holder, "__dict__")
        label, found = namer.key(namespace, child, holder) if namespace is not None else (None, False)
        name = _attribute_name(label) if found else None
        if name is None:
            # The class's own namespace dict, or something only the type's C
            # slots hold: no attribute to name.
            return {"kind": "class_namespace", "owner": qualname}, True
        return {"kind": "class_attribute", "owner": qualname, "name": name}, True
    if kind is dict:
        label, found = namer.key(holder, child)
        if found and label is _FOUND_KEY:
            return {"kind": "dict_key"}, False
        return dict(label), False
    for sequence in _SEQUENCES:
        if kind is sequence:
            return {"kind": "item", "owner": sequence.__name__}, False
    if kind is types.CellType:
        return {"kind": "cell"}, False
    if kind is types.FunctionType:
        return {"kind": "function", "owner": _short(holder.__qualname__, 96)}, False
    if kind is types.MethodType:
        # A bound method: which method, and whether it holds its object or its function.
        try:
            function, bound_to = holder.__func__, holder.__self__
            name = _plain(_type_attr(type(function), "__qualname__") if type(function) is not types.FunctionType
                          else function.__qualname__) or "?"
        except Exception:
            function, bound_to, name = None, None, "?"
        slot = "__self__" if child is bound_to else "__func__" if child is function else None
        function = bound_to = None
        name = ".".join(name.split(".")[-2:])  # Class.method: a nested function's <locals> left out
        return {"kind": "attribute", "owner": f"method `{_short(name, 80)}`", "name": slot or "?"}, False
    if kind is types.GeneratorType or kind is types.CoroutineType:
        running = holder.gi_running if kind is types.GeneratorType else holder.cr_running
        # A running generator's frame is another thread's (or ours): not read.
        frame = None if running else (holder.gi_frame if kind is types.GeneratorType else holder.cr_frame)
        name = _frame_local_name(frame, child) if frame is not None else None
        return {"kind": "generator_local", "owner": _short(holder.__qualname__), "name": name or "?"}, False
    attribute = _instance_attribute(holder, child, namer)
    label = _type_label(holder)
    if attribute:
        return {"kind": "attribute", "owner": label, "name": attribute}, False
    return {"kind": "object", "owner": label}, False


def _collapse(hops: list[dict], nodes: list) -> list[dict]:
    """Merge an instance's ``__dict__`` hop into the instance (``Owner.attr``),
    and a closure's cell into its function."""
    out: list[dict] = []
    index = 0
    while index < len(hops):
        hop = hops[index]
        node = nodes[index]
        nxt = hops[index + 1] if index + 1 < len(hops) else None
        if nxt is not None and nxt.get("kind") == "key" and type(nodes[index + 1]) is dict \
                and _owns_dict(node, nodes[index + 1]):
            out.append({"kind": "attribute", "owner": _type_label(node), "name": nxt.get("name")})
            index += 2
            continue
        if hop.get("kind") == "function" and nxt is not None and nxt.get("kind") == "item" \
                and nxt.get("owner") == "tuple" and index + 2 < len(hops) and hops[index + 2].get("kind") == "cell":
            var = _closure_name(node, nodes[index + 2])
            out.append({"kind": "closure", "owner": hop.get("owner"), "name": var or "?"})
            index += 3
            continue
        out.append(hop)
        index += 1
    return out


def _owns_dict(owner, mapping) -> bool:
    return _instance_dict(owner) is mapping


def _closure_name(function, cell) -> str | None:
    try:
        for name, item in zip(function.__code__.co_freevars, function.__closure__ or ()):
            if item is cell:
                return _plain(name)
    except Exception:
        pass
    return None


def trace(targets, *, time_cap_s: float = 0.25, exclude=(), suffixes=None, max_depth: int = MAX_DEPTH,
          local_hops=None, fresh=None, containers: bool = False, passes: int = 0,
          max_cap_s: float | None = None) -> TraceResult:
    """Shortest reference paths from a root to each of ``targets``.

    ``exclude``: objects never counted as holders (the caller's own lists).
    ``suffixes``: optional per-target hops appended after the target (when a
    target is the tracked holder of an untracked object, e.g. ``tuple``).
    ``local_hops``: the running functions' locals as ``running_locals``
    read them before a census listed the objects (default: read now).
    ``fresh``: the objects made since a baseline (the caller's list; see
    `_through_fresh`): the search first climbs through them in memory, so
    a chain of new objects of any length (a wrapper wrapping the last one,
    a future holding a condition holding a lock) costs no pass of the heap.
    ``containers``: the targets are containers that accumulate what leaks
    (not what leaks themselves). Objects of tb-leak's own types are never holders. Never raises; returns
    what it found within ``time_cap_s`` (the search takes up to 80% of it,
    naming the hops the rest).
    ``passes``, ``max_cap_s``: the cap is at least ``passes`` passes of the
    heap, as long as the search's first pass took, and at most ``max_cap_s``
    (a cap in seconds alone buys fewer levels the larger the heap: a path
    from a module global to a list's item is five passes, 0.2-0.45 s on a
    TensorFlow heap of 300,000 objects; see WatchPolicy.trace_passes).
    """
    started = time.perf_counter()
    try:
        return _trace(list(targets), started, time_cap_s, list(exclude) + [targets], suffixes, max_depth,
                      local_hops, fresh, containers, passes, max_cap_s)
    except Exception:
        return TraceResult([], len(targets), 0, time.perf_counter() - started, False)


def _trace(targets, started, time_cap_s, exclude, suffixes, max_depth, local_hops=None, fresh=None,
           containers=False, passes=0, max_cap_s=None) -> TraceResult:
    search_deadline = started + 0.8 * time_cap_s
    deadline = started + time_cap_s
    roots = _Roots(local_hops)
    # Everything this function creates that refers to the objects followed
    # is never a holder.
    own = {id(x) for x in exclude}
    own.add(id(targets))
    nodes: dict[int, object] = {}
    parent: dict[int, list] = {}   # id(child) -> ids of its holders, in the order found
    rooted: dict[int, str] = {}    # id(node) -> label of the root holding it
    # id(node) -> a ``native`` root hop: no object the collector lists refers
    # to the node (the interpreter or C code holds it). Used only where no
    # chain reaches a root the collector sees.
    orphans: dict[int, dict] = {}
    own_kinds: dict[int, bool] = {}  # id(type) -> whether tb-leak defines it
    root_holders: dict[int, object] = {}  # id(node) -> the module namespace or class holding it
    own.update((id(nodes), id(parent), id(rooted), id(roots.locals), id(root_holders), id(orphans)))
    for target in targets:
        nodes[id(target)] = target
    target_ids = list(nodes)
    # One of the caller's own lists among the targets (a census samples
    # every list) is not followed: nothing of the program holds it.
    frontier = [node for node in nodes.values() if id(node) not in own]
    complete = True
    levels = 0
    namer = _Namer(roots, deadline)
    try:
        if fresh:
            own.add(id(fresh))
            frontier = _through_fresh(frontier, fresh, nodes, parent, rooted, root_holders, roots, own, own_kinds,
                                      started + 0.55 * time_cap_s)
        frontier = _down_from_locals(frontier, nodes, parent, rooted, roots, own, own_kinds,
                                     min(time.perf_counter() + 0.15 * time_cap_s, search_deadline),
                                     _leaking_kinds(targets, containers))
        while frontier:
            # A running function's local variable is the shortest root.
            for node in frontier:
                local = roots.locals.get(id(node))
                if local is not None and local[1] is node:
                    rooted[id(node)] = local[0]
            frontier = [x for x in frontier if id(x) not in rooted]
            if not frontier or all(_root_of(t, parent, rooted) is not None for t in target_ids):
                break
            if levels >= max_depth or time.perf_counter() > search_deadline:
                complete = False
                break
            levels += 1
            own.add(id(frontier))
            wanted = {id(x) for x in frontier}
            args = tuple(frontier)
            own.add(id(args))
            passed = time.perf_counter()
            referrers = gc.get_referrers(*args)
            own.add(id(referrers))
            if levels == 1 and passes and max_cap_s is not None and max_cap_s > time_cap_s:
                # What the levels cost on this heap: ``passes`` of them, within max_cap_s.
                time_cap_s = min(max_cap_s, max(time_cap_s, passed - started + passes * (time.perf_counter() - passed)))
                search_deadline = started + 0.8 * time_cap_s
                deadline = namer.deadline = started + time_cap_s
            next_frontier = []
            own.add(id(next_frontier))
            held: set = set()  # ids of the frontier's nodes some object holds
            own.add(id(held))
            cut = False
            truncated = False  # the level's holders were not all looked at
            # Roots first (module namespaces, classes): an object both a root
            # and a container hold gets the root (the shorter path).
            for roots_pass in (True, False):
                for index, holder in enumerate(referrers):
                    # The pass over the heap that found these holders is paid
                    # for: they are read up to the whole cap (a level is not
                    # started after 80% of it), not thrown away at 80%.
                    if index % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
                        cut = True
                        break
                    holder_id = id(holder)
                    if holder_id in own:
                        continue
                    if holder_id in wanted:
                        if roots_pass:
                            _note_held(holder, wanted, held)
                        continue
                    kind = type(holder)
                    is_root = holder_id in roots.module_dicts or holder_id in roots.registries \
                        or issubclass(kind, type)
                    if is_root is not roots_pass:
                        continue
                    if not _may_hold(holder, kind, is_root, nodes, own_kinds):
                        _note_held(holder, wanted, held)  # held, by something never named
                        continue
                    try:
                        children = [c for c in gc.get_referents(holder) if id(c) in wanted]
                    except Exception:
                        continue
                    held.update(id(c) for c in children)
                    children = [c for c in children if id(c) not in rooted]
                    if not children:
                        continue
                    for child in children:
                        if is_root:
                            rooted[id(child)] = _ROOT  # named once the chains are known
                            root_holders[id(child)] = holder
                        else:
                            # Every holder is followed (the first may lead nowhere,
                            # e.g. a cell of a finished closure); the shortest wins.
                            holders_of = parent.setdefault(id(child), [])
                            if len(holders_of) < 8 and holder_id not in holders_of:
                                holders_of.append(holder_id)
                    children = None
                    if not is_root and holder_id not in nodes:
                        nodes[holder_id] = holder
                        next_frontier.append(holder)
                        if len(next_frontier) >= MAX_FRONTIER:
                            # More holders of this level would never be followed.
                            complete = False
                            truncated = True
                            break
                if cut or truncated:
                    break
            if not cut and not truncated:
                for node in frontier:
                    # (What tb-leak's own running functions hold is held by them.)
                    if id(node) not in held and id(node) not in rooted and id(node) not in roots.own_values:
                        orphans[id(node)] = {"kind": "native", "owner": _type_label(node)}
            held = None
            referrers = args = holder = None
            frontier = next_frontier
            next_frontier = None
            if cut:
                complete = False
                break
        groups: dict[tuple, int] = {}
        own_paths: set = set()
        found = 0
        chains = []
        either = collections.ChainMap(rooted, orphans)
        for index, target_id in enumerate(target_ids):
            chain = _chain(target_id, parent, rooted)
            if chain is None and orphans:
                chain = _chain(target_id, parent, either)
            if chain is not None:
                chains.append((index, chain))
                ids = chain[1]
                for holder_id, child_id in zip(ids, ids[1:]):
                    namer.want(nodes[holder_id], nodes[child_id])
                if chain[0] is _ROOT:
                    namer.want(root_holders[ids[0]], nodes[ids[0]])
        per_target: list = [None] * len(target_ids)
        concrete: dict[tuple, dict] = {}  # signature -> {position: set of concrete key names}
        repeats: dict[tuple, list] = {}  # (signature, position) -> [fewest, most] repeats of a chain
        first_hops: dict[tuple, list] = {}
        # A chain through the same holders as one named already (a leak's
        # instances in one container) costs nothing more: past the cap it is
        # counted with that one, not dropped (the cap may pass while the
        # first is named, reading the container once for all of them).
        named: dict[tuple, tuple] = {}
        for index, (root, ids) in chains:
            through = None
            if len(ids) > 1:  # held by a container the chain names, not by the root itself
                through = (id(root_holders[ids[0]]) if root is _ROOT else id(root), tuple(ids[:-1]),
                           tuple(map(str, suffixes[index])) if suffixes is not None and suffixes[index] else ())
            if found and time.perf_counter() > deadline:
                signature = named.get(through) if through is not None else None
                if signature is None:
                    complete = False  # naming long chains ran past the cap: the rest unnamed
                    break
                found += 1
                per_target[index] = signature
                groups[signature] += 1
                continue
            if root is _ROOT:
                # A module namespace, a class or a known registry holds the
                # chain's first object.
                root = _hop(root_holders[ids[0]], nodes[ids[0]], namer)[0]
            prefix = root[1:] if isinstance(root, list) else []
            root = root[0] if isinstance(root, list) else root
            found += 1
            chain_nodes = [nodes[i] for i in ids]
            ours = any(_is_own_object(node) for node in chain_nodes[:-1]) or (
                root.get("kind") == "global" and _is_own_module_name(root.get("name")))
            if len(chain_nodes) > 2 * _NAMED_END:
                # A chain of thousands (each wrapper holding the last): its
                # two ends are named, the middle counted.
                head, tail = chain_nodes[:_NAMED_END], chain_nodes[-_NAMED_END:]
                middle = len(chain_nodes) - 2 * _NAMED_END + 1
                path = [root] + prefix + _fold(_collapse(_hops_along(head, namer), head[:-1])) \
                    + [{"kind": "elided", "name": str(middle)}] \
                    + _fold(_collapse(_hops_along(tail, namer), tail[:-1]))
            else:
                path = [root] + prefix + _fold(_collapse(_hops_along(chain_nodes, namer), chain_nodes[:-1]))
            if root.get("kind") == "class_namespace" and len(path) > 1 and path[1].get("kind") == "key" \
                    and path[1].get("key_type") == "str":
                # type -> its namespace dict -> value: one class attribute.
                path = [{"kind": "class_attribute", "owner": root.get("owner"), "name": path[1].get("name")}] \
                    + path[2:]
            chain_nodes = None
            if suffixes is not None and suffixes[index]:
                path = path + [text_hop(hop) if not isinstance(hop, dict) else hop for hop in suffixes[index]]
            path = cut_hops(path)
            # Grouped by signature: string keys with their digits as wildcards.
            signature = tuple(hop_text(wildcard(hop)) for hop in path)
            per_target[index] = signature
            groups[signature] = groups.get(signature, 0) + 1
            if through is not None:
                named.setdefault(through, signature)
            keys = concrete.setdefault(signature, {})
            for position, hop in enumerate(path):
                if (hop.get("kind") == "key" and hop.get("key_type") == "str") or hop.get("kind") == "global":
                    names = keys.setdefault(position, set())
                    if len(names) < 4096:
                        names.add(hop.get("name"))
                elif hop.get("kind") == "repeat":
                    counts = repeats.setdefault((signature, position), [hop["count"], hop["count"]])
                    counts[0], counts[1] = min(counts[0], hop["count"]), max(counts[1], hop["count"])
            first_hops.setdefault(signature, path)
            if ours:
                own_paths.add(signature)
        held_by = []
        for sig, count in groups.items():
            hops = list(first_hops[sig])
            for position, names in concrete[sig].items():
                if len(names) > 1:
                    hops[position] = {**wildcard(hops[position]), "keys": len(names),
                                      **({"first": hops[position].get("name")}
                                         if hops[position].get("kind") == "global" else {})}
            for position, hop in enumerate(hops):
                if hop.get("kind") == "repeat":
                    low, high = repeats.get((sig, position), (hop["count"], hop["count"]))
                    hops[position] = {**hop, "count": high, "min_count": low}
            held_by.append(HeldBy(path=[hop_text(h) for h in hops], instances=count, signature=sig, hops=hops))
        held_by.sort(key=lambda h: (-h.instances, len(h.path)))
        if found < len(target_ids):
            complete = False
        return TraceResult(held_by, len(target_ids), found, time.perf_counter() - started, complete, levels,
                           frozenset(own_paths), tuple(per_target))
    finally:
        nodes.clear()
        root_holders.clear()
        orphans.clear()
        roots.release()
        frontier = None


# Objects of a chain climbed in memory at most (see _through_fresh).
MAX_CLIMBED = 50_000
# A container with more referents than this is read a slice at a time.
_LARGE = 65_536


def _through_fresh(frontier, fresh, nodes, parent, rooted, root_holders, roots, own, own_kinds, deadline) -> list:
    """Climbs from ``frontier`` through the holders that are among ``fresh``
    (objects made since a baseline), with one ``gc.get_referents`` per fresh
    object instead of one pass of the heap per level; fills ``parent`` and
    ``nodes`` on the way and returns the topmost objects reached (those no
    fresh object holds: an old container, a root or the interpreter holds
    them), for the search of the heap to go on from. A leak's objects are
    new and what accumulates them is old, so the heap passes left are the
    few from the accumulation point to a root. Past ``deadline`` it gives
    up and returns ``frontier`` as it was."""
    wanted = {id(x) for x in fresh}
    wanted.update(id(x) for x in frontier)
    own.add(id(wanted))
    up: dict[int, list] = {}     # id(child) -> ids of its fresh holders
    by_id: dict[int, object] = {}
    own.update((id(up), id(by_id)))
    try:
        for index, holder in enumerate(fresh):
            if index % 512 == 0 and time.perf_counter() > deadline:
                return frontier
            holder_id = id(holder)
            if holder_id in own:
                continue
            kind = type(holder)
            is_root = holder_id in roots.module_dicts or holder_id in roots.registries or issubclass(kind, type)
            if not _may_hold(holder, kind, is_root, nodes, own_kinds):
                continue
            try:
                referents = gc.get_referents(holder)
            except Exception:
                continue
            if len(referents) > _LARGE:
                # A large container: its hits found in C, a slice at a time,
                # the deadline checked between slices.
                hits = set()
                for start in range(0, len(referents), _LARGE):
                    if time.perf_counter() > deadline:
                        return frontier
                    hits.update(wanted.intersection(map(id, referents[start:start + _LARGE])))
                hits.discard(holder_id)
                for child_id in hits:
                    holders = up.setdefault(child_id, [])
                    if len(holders) < 8:
                        holders.append(holder_id)
                        by_id[holder_id] = holder
                hits = None
            else:
                for child in referents:
                    child_id = id(child)
                    if child_id in wanted and child_id != holder_id:
                        holders = up.setdefault(child_id, [])
                        if len(holders) < 8:
                            holders.append(holder_id)
                            by_id[holder_id] = holder
            referents = None
        holder = None
        tops = []
        queue = list(frontier)
        own.add(id(queue))
        seen = {id(x) for x in queue}
        for node in queue:
            node_id = id(node)
            local = roots.locals.get(node_id)
            if local is not None and local[1] is node:
                rooted[node_id] = local[0]
                continue
            holders = up.get(node_id)
            if not holders:
                tops.append(node)
                continue
            chain = []
            for holder_id in holders:
                holder = by_id[holder_id]
                if holder_id in roots.module_dicts or holder_id in roots.registries or issubclass(type(holder), type):
                    rooted[node_id] = _ROOT
                    root_holders[node_id] = holder
                    chain = None
                    break
                chain.append(holder_id)
            holder = None
            if chain is None:
                continue
            parent[node_id] = chain
            for holder_id in chain:
                if holder_id not in seen and len(seen) < MAX_CLIMBED:
                    seen.add(holder_id)
                    nodes[holder_id] = by_id[holder_id]
                    queue.append(by_id[holder_id])
        # The tops nearest the targets first (found first), then the other
        # objects climbed through, nearest first: in a cycle of new objects
        # (a node and its child pointing back) every one has a new holder,
        # and what holds the cycle is found from any of them.
        chosen = {id(x) for x in tops}
        rest = [node for node in queue if id(node) not in chosen and id(node) not in rooted]
        queue = None
        return (tops + rest)[:MAX_FRONTIER]
    finally:
        up.clear()
        by_id.clear()
        wanted.clear()


# References the search down from the running functions' locals reads at most
# (see _down_from_locals), how many of them it follows, and how far down:
# about 10 ms. A container larger than _LARGE is not read at all.
MAX_DOWN = 20_000
MAX_DOWN_READ = 200_000
DOWN_DEPTH = 6
_SMALL = 1_024
_SIZED = (list, tuple, dict, set, frozenset, collections.deque)


def _items(holder) -> int:
    """How many items a built-in container (or a subclass) holds, read with
    the built-in type's own ``__len__`` (0 for anything else)."""
    kind = type(holder)
    for base in _SIZED:
        if issubclass(kind, base):
            try:
                return base.__len__(holder)
            except Exception:
                return 0
    return 0


def _last_items(holder, count: int = 8) -> list:
    """Up to ``count`` of the newest items of a built-in container (values
    of a mapping), read with the built-in type's own methods (no code of
    the program runs); [] for anything else."""
    try:
        kind = type(holder)
        if issubclass(kind, (list, collections.deque)):
            base = list if issubclass(kind, list) else collections.deque
            size = base.__len__(holder)
            return [base.__getitem__(holder, i) for i in range(max(0, size - count), size)]
        if issubclass(kind, dict):
            return list(itertools.islice(reversed(dict.values(holder)), count))
        if issubclass(kind, (set, frozenset)):
            base = set if issubclass(kind, set) else frozenset
            return list(itertools.islice(base.__iter__(holder), count))
    except Exception:
        pass
    return []


def _leaking_kinds(targets, containers: bool = False) -> set:
    """Ids of the classes that leak, for the targets of a trace: a target's
    own class where it is the program's or a library's (not a built-in,
    whose instances are also the program's structure), or, where the
    targets are containers that accumulate (``containers``), the classes
    of their newest items. See _down_from_locals."""
    kinds = set()
    for target in targets:
        for obj in (_last_items(target) if containers else [target]):
            kind = type(obj)
            # From type's own slot: a metaclass's ``__module__`` property is
            # the program's code, never run inside a sample.
            if _plain(_type_attr(kind, "__module__")) != "builtins":
                kinds.add(id(kind))
    return kinds


def _down_from_locals(frontier, nodes, parent, rooted, roots, own, own_kinds, deadline, leaking=frozenset()) -> list:
    """Looks for the frontier's objects among what the running functions'
    locals reach in at most ``DOWN_DEPTH`` references, breadth first (one
    ``gc.get_referents`` per object read, at most ``MAX_DOWN_READ``
    references read and ``MAX_DOWN`` objects followed; a container of more
    than ``_LARGE`` items is not read: the search of the heap finds what it
    holds): the roots' side of the search, as a heap analyser walks from
    its GC roots. A leak's new objects climbed in memory (see
    _through_fresh) end at the old container that accumulates them, and a
    training function's local often holds that container through an
    attribute or two (``accum._buckets``); from below, each of those hops
    costs a pass of the heap (tens of milliseconds on a TensorFlow heap,
    where a trace within the budget of a short run was cut after three).
    Module namespaces, classes and frames are not entered: they reach
    everything, and the search of the heap names their holds as roots. A
    frontier object that is a local itself is rooted there (a local is the
    shortest root). An object of a class that leaks (``leaking``: the
    targets' own classes, or those of the items a container target
    accumulates) is not gone through: what leaks is not what holds
    the container it is kept in, though it may refer back to it (an
    InteractiveSession made this step reaches TensorFlow's default-session
    stack that keeps every session, through its own context manager; the
    stack's holder is the global, and a local holding the newest session
    would hide it). Fills ``nodes``, ``parent`` and ``rooted`` for each
    object found and returns the frontier without them; past ``deadline``
    it returns what it found."""
    for node in frontier:
        local = roots.locals.get(id(node))
        if local is not None and local[1] is node:
            rooted[id(node)] = local[0]
    # (An object the climb reached through a fresh holder is not looked for.)
    wanted = {id(x) for x in frontier if id(x) not in rooted and id(x) not in parent}
    if not wanted or not roots.locals:
        return [node for node in frontier if id(node) not in rooted]
    came: dict[int, int | None] = {}  # id(object) -> id(its holder on the way down); None: a local
    by_id: dict[int, object] = {}
    level = []
    own.update((id(came), id(by_id), id(level), id(wanted)))
    found = []
    read = read_large = 0
    try:
        for key, (_hop_, value) in roots.locals.items():
            if key in own or key in roots.own_values or key in rooted:
                continue
            came[key] = None
            by_id[key] = value
            level.append(value)
        for _depth in range(DOWN_DEPTH):
            below = []
            own.add(id(below))
            # The small holders of a level first (an object's attributes, a
            # dict of a few buckets), the containers of many items after:
            # the references read are bounded, and a local's rows of numbers
            # must not spend them before the attribute that holds the leak.
            small, large = [], []
            own.update((id(small), id(large)))
            for holder in level:
                kind = type(holder)
                if id(kind) in _ATOMIC_IDS or id(holder) in roots.module_dicts or issubclass(kind, type) \
                        or kind is types.ModuleType or kind is types.FrameType or id(kind) in leaking:
                    continue
                count = _items(holder)
                if count <= _SMALL:
                    small.append(holder)
                elif count <= _LARGE:
                    large.append(holder)
            level = small + large
            first_large = len(small)
            small = large = None
            for index, holder in enumerate(level):
                if read > MAX_DOWN_READ or time.perf_counter() > deadline:
                    break
                if index >= first_large and read_large > MAX_DOWN_READ // 2:
                    break  # half the references are kept for the small holders further down
                holder_id = id(holder)
                if not _may_hold(holder, type(holder), False, nodes, own_kinds):
                    continue
                try:
                    referents = gc.get_referents(holder)
                except Exception:
                    continue
                read += len(referents) + 1
                if index >= first_large:
                    read_large += len(referents)
                for child in referents:
                    child_id = id(child)
                    if child_id in came or child_id in own or child_id == holder_id:
                        continue
                    if child_id in wanted:
                        came[child_id] = holder_id
                        found.append(child_id)
                    elif len(came) < MAX_DOWN:
                        came[child_id] = holder_id
                        by_id[child_id] = child
                        below.append(child)
                referents = None
            holder = None
            level = below
            below = None
            if not level or len(found) == len(wanted):
                break
        level = None
        linked, added = set(), set()
        for child_id in found:
            # The chain down, from the local to the object found: it joins the
            # holders found so far only at that object, or at one this search
            # linked (an object on it that the climb already reached would
            # make a cycle of holders).
            chain = []
            holder_id = came[child_id]
            while holder_id is not None:
                chain.append(holder_id)
                holder_id = came[holder_id]
            if any(i not in added and (i in nodes or i in parent or i in rooted) for i in chain):
                continue
            below_id = child_id
            for above_id in chain:
                parent[below_id] = [above_id]
                if above_id in added:
                    break  # linked to its local already
                nodes[above_id] = by_id[above_id]
                added.add(above_id)
                below_id = above_id
            else:
                rooted[chain[-1]] = roots.locals[chain[-1]][0]
            linked.add(child_id)
        return [node for node in frontier if id(node) not in linked and id(node) not in rooted]
    finally:
        came.clear()
        by_id.clear()
        wanted.clear()


# A chain longer than twice this is named at its two ends only.
_NAMED_END = 256


def _hops_along(chain_nodes: list, namer) -> list:
    return [_hop(chain_nodes[i], chain_nodes[i + 1], namer)[0] for i in range(len(chain_nodes) - 1)]


def _note_held(holder, wanted: set, held: set) -> None:
    """Notes which of the ``wanted`` nodes ``holder`` refers to."""
    try:
        held.update(id(c) for c in gc.get_referents(holder) if id(c) in wanted)
    except Exception:
        pass


# A chain of the same hops at most this long is folded into one ``repeat`` hop.
_REPEAT_UNIT = 3


def _fold(hops: list[dict]) -> list[dict]:
    """Runs of the same hops (a unit of one to three, twice or more in a
    row) as one ``repeat`` hop with its count: a wrapper that wraps the one
    before, a handler that chains to the one it replaced. Every instance
    along such a chain has a path of its own length; folded, they share one
    signature (``(closure of `wrapper` `fn`) × n``)."""
    texts = [hop_text(wildcard(hop)) for hop in hops]
    out: list[dict] = []
    index = 0
    while index < len(hops):
        folded = None
        for size in range(1, _REPEAT_UNIT + 1):
            unit = texts[index:index + size]
            if len(unit) < size:
                break
            count = 1
            while texts[index + count * size:index + (count + 1) * size] == unit:
                count += 1
            if count >= 2:
                folded = ({"kind": "repeat", "name": " → ".join(unit), "count": count}, count * size)
                break
        if folded is None:
            out.append(hops[index])
            index += 1
        else:
            out.append(folded[0])
            index += folded[1]
    return out


def _may_hold(holder, kind, is_root, nodes, own_kinds) -> bool:
    """Whether ``holder`` may be named as a holder: not a frame or an object
    of tb-leak's own, not a traced class rooting itself, not a class's own
    ``__dict__`` / ``__weakref__`` descriptor pointing back at its class."""
    if is_root and id(holder) in nodes:
        return False  # a class being traced is not its own root
    if kind is types.FrameType:
        return not _is_own_frame(holder)
    if kind is types.GetSetDescriptorType or kind is types.MemberDescriptorType:
        try:
            return id(holder.__objclass__) not in nodes
        except Exception:
            return False
    own = own_kinds.get(id(kind))
    if own is None:
        own = own_kinds[id(kind)] = is_own_type(kind)
    return not own


def _is_own_object(obj) -> bool:
    return is_own_type(type(obj))


def _root_of(target_id, parent, rooted):
    chain = _chain(target_id, parent, rooted)
    return chain[0] if chain is not None else None


def _chain(target_id, parent, rooted):
    """(root label, [ids from the root's child down to the target]): the
    shortest chain through the holders found, breadth first."""
    if target_id in rooted:
        return rooted[target_id], [target_id]
    came_from = {target_id: None}
    queue = [target_id]
    for node in queue:
        if len(came_from) > 50_000:
            return None
        for holder in parent.get(node, ()):
            if holder in came_from:
                continue
            came_from[holder] = node
            if holder in rooted:
                ids = [holder]
                while came_from[ids[-1]] is not None:
                    ids.append(came_from[ids[-1]])
                return rooted[holder], ids
            queue.append(holder)
    return None


def cut_hops(path: list) -> list:
    """At most ``MAX_HOPS`` hops: a longer path keeps its first and last
    hops around one ``elided`` hop."""
    if len(path) <= MAX_HOPS:
        return list(path)
    keep = MAX_HOPS // 2
    return list(path[:keep]) + [{"kind": "elided", "name": str(len(path) - 2 * keep + 1)}] + list(path[-(keep - 1):])


def _cut(path: list[str]) -> list[str]:
    """``cut_hops`` for a path of text hops."""
    return [hop_text(h) for h in cut_hops([text_hop(h) if not isinstance(h, dict) else h for h in path])]


def _is_own_module_name(name) -> bool:
    name = _plain(name) or ""
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


def describe(held: HeldBy, target_label: str | None = None, of: int | None = None) -> str:
    """One line: ``root → hop → ... → Type   (n of m)``."""
    path = list(held.path) + ([target_label] if target_label else [])
    text = " → ".join(path)
    if of:
        text += f"   ({held.instances} of {of})"
    return text
