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
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import os
import sys
import time
import types

# Hops shown in a path at most; longer chains are cut in the middle.
MAX_HOPS = 12
# Objects followed per level of the search (the frontier): wide levels
# (an object many things refer to) are cut to this many.
MAX_FRONTIER = 96
# Longest chain searched.
MAX_DEPTH = 24
# Entries of one dict or attributes of one object looked at to name a hop.
_MAX_SCAN = 200_000

_PACKAGE = __name__.partition(".")[0]
_SNAPSHOT_LOCALS = sys.version_info < (3, 13)  # f_locals is a cached dict, not a proxy


@dataclasses.dataclass
class HeldBy:
    """One path signature: the hops from the root to the direct holder, and
    how many of the traced instances hang under it."""

    path: list[str]
    instances: int
    signature: tuple = ()

    def to_dict(self) -> dict:
        return {"path": list(self.path), "instances": int(self.instances)}


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

    def to_dict(self) -> dict:
        return {"held_by": [h.to_dict() for h in self.held_by], "traced": self.traced, "found": self.found,
                "seconds": round(self.seconds, 4), "complete": self.complete}


def _short(text: str, limit: int = 48) -> str:
    text = str.__str__(text) if isinstance(text, str) else "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_label(obj) -> str:
    kind = type(obj)
    try:
        module = kind.__module__
        name = kind.__qualname__
    except Exception:
        return "?"
    if not isinstance(name, str):
        return "?"
    if module in ("builtins", None) or not isinstance(module, str):
        return _short(name)
    return _short(name)


def _key_label(key) -> str:
    """A dict key as shown in a path: strings as they are, other keys by type
    (a dict keyed by step is one path, whatever the step)."""
    if isinstance(key, str):
        return repr(_short(key, 40))
    return _short(type(key).__name__)


_CO_OPTIMIZED = 0x1  # a function's frame: its locals live in the frame, not in a dict
_ATOMIC = (type(None), bool, int, float, complex, str, bytes)


class _Roots:
    """What counts as a root, looked up once per trace: module namespaces,
    and the local variables of every running function in every thread (the
    collector does not see those: a running frame does not list its locals
    to it, so ``gc.get_referrers`` never returns a running frame)."""

    def __init__(self):
        self.module_dicts: dict[int, str] = {}
        for name, module in list(sys.modules.items()):
            try:
                namespace = object.__getattribute__(module, "__dict__")
            except Exception:
                continue
            if type(namespace) is dict:
                self.module_dicts.setdefault(id(namespace), str(name))
        # id(value) -> (label of the local variable, value), for every
        # running function's locals (innermost frames first).
        self.locals: dict[int, tuple[str, object]] = {}
        try:
            current = list(sys._current_frames().values())
        except Exception:
            current = []
        for frame in current:
            while frame is not None:
                if not _is_own_frame(frame) and frame.f_code.co_flags & _CO_OPTIMIZED:
                    what, where = _frame_place(frame)
                    for name, value in _read_locals(frame):
                        if type(value) not in _ATOMIC:
                            self.locals.setdefault(id(value), (f"{what} `{name}` ({where})", value))
                frame = frame.f_back
        current = None

    def release(self):
        self.locals.clear()


def _is_own_frame(frame) -> bool:
    try:
        name = frame.f_globals.get("__name__", "")
    except Exception:
        return False
    return isinstance(name, str) and (name == _PACKAGE or name.startswith(_PACKAGE + "."))


def _frame_place(frame) -> tuple[str, str]:
    code = frame.f_code
    try:
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    except Exception:
        where = "?"
    return f"{_short(code.co_name)}() local", where


def _read_locals(frame) -> list:
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
        return [(str(name), value) for name, value in list(snapshot.items())[:_MAX_SCAN]]
    except Exception:
        return []
    finally:
        # References: the frame's, `snapshot`, getrefcount's argument.
        if _SNAPSHOT_LOCALS and type(snapshot) is dict and frame.f_code.co_flags & _CO_OPTIMIZED \
                and sys.getrefcount(snapshot) <= 3:
            snapshot.clear()
        snapshot = None


def _frame_local_name(frame, child) -> str | None:
    """The name of a (finished or suspended) frame's local bound to ``child``."""
    for name, value in _read_locals(frame):
        if value is child:
            return name
    return None


def _instance_attribute(holder, child) -> str | None:
    try:
        namespace = object.__getattribute__(holder, "__dict__")
    except Exception:
        namespace = None
    if isinstance(namespace, dict):
        for name, value in list(namespace.items())[:_MAX_SCAN]:
            if value is child:
                return _short(str(name)) if isinstance(name, str) else None
    for kind in type(holder).__mro__:
        slots = kind.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for slot in slots if isinstance(slots, (tuple, list)) else ():
            try:
                if isinstance(slot, str) and object.__getattribute__(holder, slot) is child:
                    return _short(slot)
            except Exception:
                continue
    return None


def _dict_key(mapping: dict, child) -> str | None:
    for key, value in list(mapping.items())[:_MAX_SCAN]:
        if value is child:
            return _key_label(key)
        if key is child:
            return "key"
    return None


def _hop(holder, child, roots: _Roots) -> tuple[str, bool]:
    """(label of the hop from ``holder`` to ``child``, whether ``holder`` is a root)."""
    holder_id = id(holder)
    if holder_id in roots.module_dicts:
        key = _dict_key(holder, child)
        module = roots.module_dicts[holder_id]
        name = key[1:-1] if key and key.startswith("'") else (key or "?")
        return f"global `{module}.{name}`", True
    if type(holder) is types.FrameType:
        # A frame the collector lists is not running: a traceback's, or a
        # suspended generator's, keeping its locals alive.
        what, where = _frame_place(holder)
        name = _frame_local_name(holder, child)
        return f"frame of finished {what} `{name or '?'}` ({where})", False
    if isinstance(holder, type):
        key = None
        try:
            key = _dict_key(holder.__dict__, child)
        except Exception:
            pass
        if key is None:
            # The class's own namespace dict, or something only the type's C
            # slots hold: no attribute to name.
            return f"namespace of class `{_short(getattr(holder, '__qualname__', '?'))}`", True
        name = key[1:-1] if key.startswith("'") else key
        return f"class attribute `{_short(getattr(holder, '__qualname__', '?'))}.{name}`", True
    kind = type(holder)
    if kind is dict:
        key = _dict_key(holder, child)
        return f"dict[{key}]" if key and key != "key" else "dict (key)", False
    if kind in (list, tuple, set, frozenset, collections.deque):
        return kind.__name__, False
    if kind is types.CellType:
        return "cell", False
    if kind is types.FunctionType:
        return f"function `{_short(holder.__qualname__)}`", False
    if isinstance(holder, (types.GeneratorType, types.CoroutineType)):
        frame = getattr(holder, "gi_frame", None) or getattr(holder, "cr_frame", None)
        name = _frame_local_name(frame, child) if frame is not None else None
        return f"generator `{_short(holder.__qualname__)}` local `{name or '?'}`", False
    attribute = _instance_attribute(holder, child)
    label = _type_label(holder)
    return (f"{label}.{attribute}" if attribute else label), False


def _collapse(hops: list[str], nodes: list) -> list[str]:
    """Merge an instance's ``__dict__`` hop into the instance (``Owner.attr``),
    and a closure's cell into its function."""
    out: list[str] = []
    index = 0
    while index < len(hops):
        hop = hops[index]
        node = nodes[index]
        nxt = hops[index + 1] if index + 1 < len(hops) else None
        if nxt is not None and nxt.startswith("dict[") and type(nodes[index + 1]) is dict \
                and _owns_dict(node, nodes[index + 1]):
            key = nxt[len("dict["):-1]
            out.append(f"{_type_label(node)}.{key[1:-1] if key.startswith(chr(39)) else key}")
            index += 2
            continue
        if hop.startswith("function `") and nxt in ("tuple",) and index + 2 < len(hops) \
                and hops[index + 2] == "cell":
            cell = nodes[index + 2]
            var = _closure_name(node, cell)
            out.append(f"closure of `{hop[len('function `'):-1]}` `{var or '?'}`")
            index += 3
            continue
        out.append(hop)
        index += 1
    return out


def _owns_dict(owner, mapping) -> bool:
    try:
        return object.__getattribute__(owner, "__dict__") is mapping
    except Exception:
        return False


def _closure_name(function, cell) -> str | None:
    try:
        for name, item in zip(function.__code__.co_freevars, function.__closure__ or ()):
            if item is cell:
                return name
    except Exception:
        pass
    return None


def trace(targets, *, time_cap_s: float = 0.25, exclude=(), suffixes=None, max_depth: int = MAX_DEPTH) -> TraceResult:
    """Shortest reference paths from a root to each of ``targets``.

    ``exclude``: objects never counted as holders (the caller's own lists).
    ``suffixes``: optional per-target hops appended after the target (when a
    target is the tracked holder of an untracked object, e.g. ``tuple``).
    Never raises; returns what it found within ``time_cap_s``.
    """
    started = time.perf_counter()
    try:
        return _trace(list(targets), started, time_cap_s, list(exclude) + [targets], suffixes, max_depth)
    except Exception:
        return TraceResult([], len(targets), 0, time.perf_counter() - started, False)


def _trace(targets, started, time_cap_s, exclude, suffixes, max_depth) -> TraceResult:
    roots = _Roots()
    # Everything this function creates that refers to the objects followed
    # is never a holder.
    own = {id(x) for x in exclude}
    own.add(id(targets))
    nodes: dict[int, object] = {}
    parent: dict[int, list] = {}   # id(child) -> ids of its holders, in the order found
    rooted: dict[int, str] = {}    # id(node) -> label of the root holding it
    own.update((id(nodes), id(parent), id(rooted), id(roots.locals)))
    for target in targets:
        nodes[id(target)] = target
    target_ids = list(nodes)
    frontier = list(nodes.values())
    complete = True
    levels = 0
    try:
        while frontier:
            # A running function's local variable is the shortest root.
            for node in frontier:
                local = roots.locals.get(id(node))
                if local is not None and local[1] is node:
                    rooted[id(node)] = local[0]
            frontier = [x for x in frontier if id(x) not in rooted]
            if not frontier or all(_root_of(t, parent, rooted) is not None for t in target_ids):
                break
            if levels >= max_depth or time.perf_counter() - started > time_cap_s:
                complete = False
                break
            levels += 1
            own.add(id(frontier))
            wanted = {id(x) for x in frontier}
            args = tuple(frontier)
            own.add(id(args))
            referrers = gc.get_referrers(*args)
            own.add(id(referrers))
            # Roots first: an object both a root and a container hold gets
            # the root (the shorter path).
            referrers.sort(key=lambda r: not (id(r) in roots.module_dicts or isinstance(r, type)))
            next_frontier = []
            own.add(id(next_frontier))
            for holder in referrers:
                holder_id = id(holder)
                if holder_id in own or holder_id in wanted:
                    continue
                if type(holder) is types.FrameType and _is_own_frame(holder):
                    continue
                children = [c for c in gc.get_referents(holder) if id(c) in wanted and id(c) not in rooted]
                if not children:
                    continue
                is_root = holder_id in roots.module_dicts or isinstance(holder, type)
                for child in children:
                    if is_root:
                        rooted[id(child)] = _hop(holder, child, roots)[0]
                    else:
                        # Every holder is followed (the first may lead nowhere,
                        # e.g. a cell of a finished closure); the shortest wins.
                        holders_of = parent.setdefault(id(child), [])
                        if len(holders_of) < 8 and holder_id not in holders_of:
                            holders_of.append(holder_id)
                children = None
                if not is_root and holder_id not in nodes:
                    nodes[holder_id] = holder
                    if len(next_frontier) < MAX_FRONTIER:
                        next_frontier.append(holder)
                    else:
                        complete = False
            referrers = args = None
            frontier = next_frontier
            next_frontier = None
        groups: dict[tuple, int] = {}
        own_paths: set = set()
        found = 0
        for index, target_id in enumerate(target_ids):
            chain = _chain(target_id, parent, rooted)
            if chain is None:
                continue
            found += 1
            root_label, ids = chain
            chain_nodes = [nodes[i] for i in ids]
            ours = any(_is_own_object(node) for node in chain_nodes[:-1]) or root_label.startswith(
                ("global `" + _PACKAGE + ".", "global `" + _PACKAGE + "`"))
            hops = [_hop(chain_nodes[i], chain_nodes[i + 1], roots)[0] for i in range(len(chain_nodes) - 1)]
            path = [root_label] + _collapse(hops, chain_nodes[:-1])
            if root_label.startswith("namespace of class `") and len(path) > 1 and path[1].startswith("dict['"):
                # type -> its namespace dict -> value: one class attribute.
                path = ["class attribute `" + root_label[len("namespace of class `"):-1] + "."
                        + path[1][len("dict['"):-2] + "`"] + path[2:]
            chain_nodes = None
            if suffixes is not None and suffixes[index]:
                path = path + list(suffixes[index])
            signature = tuple(_cut(path))
            groups[signature] = groups.get(signature, 0) + 1
            if ours:
                own_paths.add(signature)
        held_by = [HeldBy(path=list(sig), instances=count, signature=sig) for sig, count in groups.items()]
        held_by.sort(key=lambda h: (-h.instances, len(h.path)))
        if found < len(target_ids):
            complete = False
        return TraceResult(held_by, len(target_ids), found, time.perf_counter() - started, complete, levels,
                           frozenset(own_paths))
    finally:
        nodes.clear()
        roots.release()
        frontier = None


def _is_own_object(obj) -> bool:
    try:
        module = type(obj).__module__
    except Exception:
        return False
    return isinstance(module, str) and (module == _PACKAGE or module.startswith(_PACKAGE + "."))


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


def _cut(path: list[str]) -> list[str]:
    if len(path) <= MAX_HOPS:
        return path
    keep = MAX_HOPS // 2
    return path[:keep] + [f"… {len(path) - 2 * keep + 1} hops …"] + path[-(keep - 1):]


def describe(held: HeldBy, target_label: str | None = None, of: int | None = None) -> str:
    """One line: ``root → hop → ... → Type   (n of m)``."""
    path = list(held.path) + ([target_label] if target_label else [])
    text = " → ".join(path)
    if of:
        text += f"   ({held.instances} of {of})"
    return text
