"""Probes: what one sample measures.

Each probe returns a list of ``(SeriesInfo, value)`` pairs. Cheap probes
(process, Python heap, TensorFlow allocator, gc) read a few counters; the
census probes (live objects by type, live tensors, tf.function traces) walk
the objects the garbage collector tracks, so the monitor runs them less
often, within its overhead budget.

No probe imports TensorFlow: the TensorFlow probes work only when the
program has imported it already, and report nothing otherwise. No probe
keeps references to user objects between samples: census state is keyed by
type *names*, never by types or instances.
"""

from __future__ import annotations

import collections
import gc
import itertools
import operator
import sys
import tracemalloc
import types
import weakref

import psutil

from tb_leak_plugin.metadata import SeriesInfo

Sample = list[tuple[SeriesInfo, float]]


class ProbeUnavailable(Exception):
    """The probe cannot measure anything in this process (e.g. no TensorFlow)."""


def _tf():
    return sys.modules.get("tensorflow")


class Probe:
    """Base class. ``name`` identifies the probe in options and logs."""

    name = "probe"
    #: Census probes need the list of gc-tracked objects passed to sample().
    needs_objects = False

    def sample(self, objects=None) -> Sample:  # pragma: no cover - interface
        raise NotImplementedError


class ProcessProbe(Probe):
    """Resident set size of this process and memory still available to the system."""

    name = "process"

    def __init__(self):
        self._process = psutil.Process()

    def sample(self, objects=None) -> Sample:
        rss = self._process.memory_info().rss
        available = psutil.virtual_memory().available
        return [
            (SeriesInfo("process", "rss_bytes", "bytes"), float(rss)),
            (SeriesInfo("process", "available_bytes", "bytes"), float(available)),
        ]


class ProcessUSSProbe(Probe):
    """Unique set size (memory freed if the process exited). Reads
    /proc/<pid>/smaps, which costs milliseconds on big processes, so it is
    scheduled like a census probe."""

    name = "uss"

    def __init__(self):
        self._process = psutil.Process()

    def sample(self, objects=None) -> Sample:
        uss = self._process.memory_full_info().uss
        return [(SeriesInfo("process", "uss_bytes", "bytes"), float(uss))]


class PythonHeapProbe(Probe):
    """Python's allocated memory blocks, and tracemalloc's traced bytes when
    the user is running tracemalloc (we never start it: it slows code 2-4x)."""

    name = "python"

    def sample(self, objects=None) -> Sample:
        sample = [(SeriesInfo("python", "allocated_blocks", "blocks"), float(sys.getallocatedblocks()))]
        if tracemalloc.is_tracing():
            current, _peak = tracemalloc.get_traced_memory()
            sample.append((SeriesInfo("python", "tracemalloc_bytes", "bytes"), float(current)))
        return sample


class TFAllocatorProbe(Probe):
    """Bytes in use and peak of TensorFlow's allocator on every logical device.

    A device whose allocator keeps no statistics (CPU with oneDNN off raises
    ValueError) is dropped after one log line, through ``on_skip``.
    """

    name = "tf"

    def __init__(self, on_skip=None):
        self._devices: list[str] | None = None
        self._on_skip = on_skip or (lambda message: None)

    def _list_devices(self, tf) -> list[str]:
        names = []
        for device in tf.config.list_logical_devices():
            name = device.name.rsplit("device:", 1)[-1]
            if device.device_type in ("CPU", "GPU", "TPU"):
                names.append(name)
        return names

    def sample(self, objects=None) -> Sample:
        tf = _tf()
        if tf is None or not hasattr(tf, "config"):
            return []  # TensorFlow not (yet) imported by the program
        if self._devices is None:
            self._devices = self._list_devices(tf)
        sample: Sample = []
        for device in list(self._devices):
            try:
                info = tf.config.experimental.get_memory_info(device)
            except (ValueError, RuntimeError) as error:
                self._devices.remove(device)
                self._on_skip(f"TensorFlow allocator on {device} keeps no statistics ({error}); skipped")
                continue
            sample.append((SeriesInfo("tf", "bytes_in_use", "bytes", device), float(info["current"])))
            sample.append((SeriesInfo("tf", "peak_bytes", "bytes", device), float(info["peak"])))
        return sample


class GCProbe(Probe):
    """Garbage-collector activity: collections per generation (cumulative)
    and objects found uncollectable (cumulative)."""

    name = "gc"

    def sample(self, objects=None) -> Sample:
        stats = gc.get_stats()
        sample = [
            (SeriesInfo("gc", f"collections_gen{generation}", "collections"), float(entry["collections"]))
            for generation, entry in enumerate(stats)
        ]
        sample.append(
            (SeriesInfo("gc", "uncollectable", "count"), float(sum(entry["uncollectable"] for entry in stats)))
        )
        sample.append((SeriesInfo("gc", "garbage", "count"), float(len(gc.garbage))))
        return sample


class Census:
    """One walk of the gc-tracked objects, shared by the census probes of a sample.

    Holds the objects only for the duration of one sample; ``release()``
    drops them. Filtering runs in C (``map``/``compress``), which keeps the
    walk near 100 ms per million tracked objects.
    """

    def __init__(self, objects: list):
        self.objects = objects
        self._by_type: collections.Counter | None = None

    def by_type(self) -> collections.Counter:
        """Live count per type object (computed once per census)."""
        if self._by_type is None:
            self._by_type = collections.Counter(map(type, self.objects))
        return self._by_type

    def instances_of(self, *kinds: type) -> list:
        """Objects whose exact type is one of ``kinds`` (no subclasses), in one pass."""
        wanted = frozenset(kind for kind in kinds if self.by_type().get(kind))
        if not wanted:
            return []
        return list(itertools.compress(self.objects, map(wanted.__contains__, map(type, self.objects))))

    def release(self) -> None:
        self.objects = []
        self._by_type = None


def collect_objects() -> Census:
    """A census over every object the garbage collector tracks. Release it promptly."""
    return Census(gc.get_objects())


def _as_census(objects) -> Census:
    if objects is None:
        return collect_objects()
    if isinstance(objects, Census):
        return objects
    return Census(list(objects))


def type_name(kind: type) -> str:
    """Qualified name of a type, e.g. ``builtins.dict``."""
    module = getattr(kind, "__module__", None) or "?"
    qualname = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "?")
    return f"{module}.{qualname}"


def count_types(objects) -> dict[str, int]:
    """Live count per qualified type name over ``objects`` (a list or Census)."""
    counts: dict[str, int] = {}
    # Merge by name: distinct classes may share one (classes made in a loop).
    for kind, count in _as_census(objects).by_type().items():
        name = type_name(kind)
        counts[name] = counts.get(name, 0) + count
    return counts


class ObjectCensusProbe(Probe):
    """Live objects by type: a bounded, stable set of types per run.

    The first census picks the ``top_k`` commonest types; each later census
    adds the ``top_k`` types that grew most since the first census, until
    ``max_types`` types are followed. A type once followed is written at
    every census (0 when none are left), so its series never has holes.
    Also writes the total number of gc-tracked objects.
    """

    name = "objects"
    needs_objects = True

    def __init__(self, top_k: int = 20, max_types: int = 64):
        self.top_k = top_k
        self.max_types = max_types
        self._baseline: dict[str, int] | None = None
        self._followed: list[str] = []

    def sample(self, objects=None) -> Sample:
        census = _as_census(objects)
        counts = count_types(census)
        if self._baseline is None:
            self._baseline = counts
            ranked = sorted(counts, key=lambda name: (-counts[name], name))
            self._followed = ranked[: min(self.top_k, self.max_types)]
        else:
            followed = set(self._followed)
            room = self.max_types - len(self._followed)
            if room > 0:
                baseline = self._baseline
                growth = {
                    name: count - baseline.get(name, 0)
                    for name, count in counts.items()
                    if name not in followed and count > baseline.get(name, 0)
                }
                ranked = sorted(growth, key=lambda name: (-growth[name], name))
                self._followed.extend(ranked[: min(self.top_k, room)])
        sample = [(SeriesInfo("objects", "live_count", "count", name), float(counts.get(name, 0)))
                  for name in self._followed]
        sample.append((SeriesInfo("gc", "tracked_objects", "count"), float(len(census.objects))))
        return sample


class LiveTensorsProbe(Probe):
    """Count and bytes of live TensorFlow eager tensors and numpy arrays.

    Eager tensors are gc-tracked, so the object list finds them. numpy
    arrays are not: they are found as referents of tracked objects (lists,
    dicts, instances), which costs more, so this probe is scheduled on its
    own. Views are not counted twice: bytes are summed over arrays that own
    their data.
    """

    name = "tensors"
    needs_objects = True

    def __init__(self):
        self._eager_type = None

    def sample(self, objects=None) -> Sample:
        census = _as_census(objects)
        sample: Sample = []
        tf = _tf()
        if tf is not None:
            if self._eager_type is None:
                self._eager_type = _eager_tensor_type(tf)
            if self._eager_type is not None:
                tensors = census.instances_of(self._eager_type)
                total_bytes = 0
                for tensor in tensors:
                    try:
                        total_bytes += tensor._num_elements() * tensor.dtype.size
                    except Exception:  # a tensor on a lost device, a string tensor
                        pass
                sample.append((SeriesInfo("tensors", "eager_count", "count"), float(len(tensors))))
                sample.append((SeriesInfo("tensors", "eager_bytes", "bytes"), float(total_bytes)))
                del tensors
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            count, total_bytes = _numpy_arrays(numpy.ndarray, census)
            sample.append((SeriesInfo("tensors", "numpy_count", "count"), float(count)))
            sample.append((SeriesInfo("tensors", "numpy_bytes", "bytes"), float(total_bytes)))
        return sample


def _eager_tensor_type(tf):
    try:
        return type(tf.constant(0))
    except Exception:
        return None


# Containers through which numpy arrays (not gc-tracked) are usually held.
_CONTAINERS = frozenset((list, dict, tuple, set, collections.deque))


_UNTRACKED_DEPTH = 3

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_NOT_HOLDERS = frozenset((type, types.FunctionType, types.MethodType, types.CodeType, types.ModuleType,
                          types.CellType, tuple, property, weakref.ReferenceType))


def _may_hold_arrays(kind: type) -> bool:
    if kind in _CONTAINERS or issubclass(kind, (dict, list)):
        return True
    return bool(getattr(kind, "__flags__", 0) & _HEAPTYPE) and kind not in _NOT_HOLDERS


def _untracked_containers(objects) -> list:
    candidates = list(itertools.compress(objects, map(_CONTAINERS.__contains__, map(type, objects))))
    return list(itertools.compress(candidates, map(operator.not_, map(gc.is_tracked, candidates))))


def _numpy_arrays(ndarray, census: Census) -> tuple[int, int]:
    objects = census.objects
    # What usually holds arrays: containers and instances of classes
    # defined in Python (their attributes). Not the many functions, types,
    # cells and tracked tuples, which would only add referents to scan (a
    # tuple holding an array is usually untracked, and found below through
    # its container).
    holder_types = frozenset(kind for kind in census.by_type() if _may_hold_arrays(kind))
    holders = list(itertools.compress(objects, map(holder_types.__contains__, map(type, objects))))
    # One C call for all referents of the holders.
    referents = gc.get_referents(*holders)
    del holders
    # The collector untracks tuples and dicts that hold only untracked
    # objects, so `cache[k] = (array, k)` hides the array one or two levels
    # down: look inside untracked containers found among the referents.
    # (A container held only by a running function's local variable is not
    # reachable this way: the collector does not list running frames' locals,
    # and reading f_locals would keep the user's locals alive.)
    hidden = _untracked_containers(referents)
    for _level in range(_UNTRACKED_DEPTH):
        if not hidden:
            break
        found = gc.get_referents(*hidden)
        referents.extend(found)
        hidden = _untracked_containers(found)
    del hidden
    arrays = itertools.compress(referents, map(operator.is_, map(type, referents), itertools.repeat(ndarray)))
    seen: set[int] = set()
    count = 0
    total_bytes = 0
    for array in arrays:
        key = id(array)
        if key in seen:
            continue
        seen.add(key)
        count += 1
        if array.base is None:
            total_bytes += array.nbytes
    return count, total_bytes


class TFFunctionProbe(Probe):
    """Concrete traces per ``tf.function`` (summed over live instances with
    one name), for at most ``max_functions`` names, most traced first."""

    name = "tf_function"
    needs_objects = True

    def __init__(self, max_functions: int = 32):
        self.max_functions = max_functions
        self._followed: list[str] = []

    def sample(self, objects=None) -> Sample:
        tf = _tf()
        if tf is None:
            return []
        census = _as_census(objects)
        traces: dict[str, int] = {}
        instances: dict[str, int] = {}
        function_types = [kind for kind in census.by_type()
                          if kind.__name__ == "Function" and "polymorphic_function" in kind.__module__]
        for function in census.instances_of(*function_types):
            try:
                count = function.experimental_get_tracing_count()
                name = getattr(function, "__name__", None) or getattr(function, "_name", None) or "<unnamed>"
            except Exception:
                continue
            traces[name] = traces.get(name, 0) + int(count)
            instances[name] = instances.get(name, 0) + 1
        followed = set(self._followed)
        for name in sorted(traces, key=lambda n: (-traces[n], n)):
            if len(self._followed) >= self.max_functions:
                break
            if name not in followed:
                self._followed.append(name)
        sample: Sample = []
        for name in self._followed:
            sample.append((SeriesInfo("tf_function", "traces", "traces", name), float(traces.get(name, 0))))
            sample.append((SeriesInfo("tf_function", "instances", "count", name), float(instances.get(name, 0))))
        return sample


CHEAP_PROBES = ("process", "python", "tf", "gc")
CENSUS_PROBES = ("objects", "tensors", "tf_function", "uss")
ALL_PROBES = CHEAP_PROBES + CENSUS_PROBES


def make_probes(names, on_skip=None, top_k: int = 20, max_types: int = 64) -> list[Probe]:
    """Instantiate probes by name (Probe instances pass through); unknown names raise ValueError."""
    factories = {
        "process": ProcessProbe,
        "uss": ProcessUSSProbe,
        "python": PythonHeapProbe,
        "tf": lambda: TFAllocatorProbe(on_skip=on_skip),
        "gc": GCProbe,
        "objects": lambda: ObjectCensusProbe(top_k=top_k, max_types=max_types),
        "tensors": LiveTensorsProbe,
        "tf_function": TFFunctionProbe,
    }
    unknown = [name for name in names if not isinstance(name, Probe) and name not in factories]
    if unknown:
        raise ValueError(f"unknown probe(s) {unknown}; choose from {sorted(factories)}")
    return [name if isinstance(name, Probe) else factories[name]() for name in names]
