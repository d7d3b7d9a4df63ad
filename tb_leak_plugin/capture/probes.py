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
import ctypes
import gc
import itertools
import json
import operator
import sys
import time
import tracemalloc
import types
import weakref

import numpy as np
import psutil

from tb_leak_plugin.capture import limits
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

    def announce(self, census: "Census") -> None:
        """Before a shared census is sampled: say which types' instances this
        probe will ask for (``census.want``), so one pass serves every probe."""

    def sample(self, objects=None) -> Sample:  # pragma: no cover - interface
        raise NotImplementedError


class ProcessProbe(Probe):
    """Resident set size of this process, its anonymous part, and memory still
    available to it.

    RSS includes file-backed pages (TensorFlow's shared libraries alone are
    ~300 MiB) that the host may evict or page back in at any time; a leak
    grows the anonymous part, ``rss - shared`` from the same reading (Linux),
    which is what the verdict judges.

    ``available_bytes`` is what is left under the limit that leaves least: the
    container's cgroup limit, ``RLIMIT_AS``/``RLIMIT_DATA``, or the host's
    available memory (see ``capture/limits.py``); the series' ``detail`` names
    that limit and its size (``{"limit": ..., "limit_bytes": ...}``), which
    the time-to-out-of-memory projection reports.
    """

    name = "process"

    def __init__(self):
        self._process = psutil.Process()
        self._available_infos: dict[tuple, SeriesInfo] = {}

    def _available_info(self, name: str, limit_bytes: float) -> SeriesInfo:
        key = (name, limit_bytes)
        info = self._available_infos.get(key)
        if info is None:
            if len(self._available_infos) > 64:
                self._available_infos.clear()
            info = self._available_infos[key] = SeriesInfo(
                "process", "available_bytes", "bytes", detail=limits.limit_detail(name, limit_bytes))
        return info

    def sample(self, objects=None) -> Sample:
        info = self._process.memory_info()
        sample = [(SeriesInfo("process", "rss_bytes", "bytes"), float(info.rss))]
        left = limits.memory_left(info)
        if left is not None:
            available, limit_name, limit_bytes = left
            sample.append((self._available_info(limit_name, limit_bytes), float(available)))
        shared = getattr(info, "shared", None)
        if shared is not None:
            sample.append((SeriesInfo("process", "rss_anon_bytes", "bytes"), float(max(info.rss - shared, 0))))
        return sample


class _MallInfo2(ctypes.Structure):
    # glibc's struct mallinfo2 (2.33+): ten size_t fields.
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _load_mallinfo2():
    """glibc's ``mallinfo2`` through ctypes, or None where it does not exist
    (macOS, musl, glibc before 2.33). ``mallinfo`` (no 2) is never used: its
    int fields wrap at 2 GiB."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        function = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return function


class MallocProbe(Probe):
    """Bytes the C allocator has handed out and not got back (glibc
    ``mallinfo2``: ``uordblks + hblkhd``, every arena, threads' included).

    Exact where RSS is step-shaped: freed pages the allocator keeps, page
    granularity and file-backed pages do not move it. About a microsecond a
    call. Where ``mallinfo2`` does not exist the probe reports nothing (the
    monitor logs that once).
    """

    name = "malloc"

    def __init__(self):
        self._mallinfo2 = _load_mallinfo2()
        if self._mallinfo2 is None:
            raise ProbeUnavailable("the C allocator has no mallinfo2 here (glibc 2.33+ on Linux)")

    def sample(self, objects=None) -> Sample:
        info = self._mallinfo2()
        return [(SeriesInfo("process", "malloc_bytes", "bytes"), float(info.uordblks + info.hblkhd))]


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
        self._in_use: dict[str, SeriesInfo] = {}

    def _in_use_info(self, tf, device: str) -> SeriesInfo:
        """The ``bytes_in_use`` series of ``device``; on an accelerator its
        ``detail`` names the device's memory limit (looked up once), against
        which the analysis projects time to out-of-memory."""
        info = self._in_use.get(device)
        if info is None:
            limit = limits.device_memory_limit(tf, device) if not device.startswith("CPU") else None
            detail = limits.limit_detail(f"{device} memory", limit) if limit else ""
            info = self._in_use[device] = SeriesInfo("tf", "bytes_in_use", "bytes", device, detail=detail)
        return info

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
            sample.append((self._in_use_info(tf, device), float(info["current"])))
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
    drops them. Filtering runs in C (``map``, numpy), which keeps the walk
    near 100 ms per million tracked objects. Probes announce the types whose
    instances they need (:meth:`want`) and the sets of types they will
    select (:meth:`want_group`) before any of them asks (:meth:`instances_of`,
    :meth:`where_type_in`), so that one pass over the objects serves all.
    """

    def __init__(self, objects: list, local_hops: list | None = None):
        self.objects = objects
        #: ``(hop, value)`` of the running functions' locals, read before the
        #: objects were listed (see collect_objects); None: not read.
        self.local_hops = local_hops
        self._kinds: list | None = None
        #: The last census of a run (Monitor.close()): every probe measures fully.
        self.final = False
        #: Seconds of the walks' budget still free at this walk (None: no
        #: budget): an optional part dearer than that (the numpy scan) waits.
        self.spare_s: float | None = None
        #: Seconds the numpy scan took at this walk (0: it did not run).
        self.numpy_s = 0.0
        #: The step and wall time of the sample this walk belongs to (set by
        #: the Monitor; None when a probe is called on its own).
        self.step: int | None = None
        self.wall_time: float | None = None
        self._unhashable = False
        self._by_type: collections.Counter | None = None
        self._wanted: set = set()
        self._selected: dict | None = None
        # frozenset of types -> the objects of those types (None: announced,
        # not selected yet); one pass selects every announced set at once.
        self._groups: dict = {}

    def kinds(self) -> list:
        """``type(obj)`` of every object, in order (one pass, shared by every filter)."""
        if self._kinds is None:
            self._kinds = list(map(type, self.objects))
        return self._kinds

    def want_group(self, kinds) -> None:
        """Announce a set of types that a probe will pass to :meth:`where_type_in`."""
        kinds = frozenset(kinds)
        if kinds not in self._groups:
            self._groups[kinds] = None

    def where_type_in(self, kinds) -> list:
        """Objects whose exact type is in ``kinds`` (in heap order). The
        first selection also selects every announced set (one pass)."""
        kinds = frozenset(kinds)
        found = self._groups.get(kinds)
        if found is None:
            pending = [group for group, chosen in self._groups.items() if chosen is None and group != kinds]
            for group, chosen in zip([kinds] + pending, self._select_groups([kinds] + pending)):
                self._groups[group] = chosen
            found = self._groups[kinds]
        return found

    def _select_groups(self, groups: list) -> list:
        """The objects of each set of types in ``groups``, in one pass."""
        objects = self.objects
        self.by_type()  # finds out whether every type can be hashed
        if self._unhashable or len(groups) > 62:
            return [self._select_one(group) for group in groups]
        codes: dict = {}
        for bit, group in enumerate(groups):
            for kind in group:
                codes[kind] = codes.get(kind, 0) | (1 << bit)
        marks = np.fromiter(map(codes.get, self.kinds(), itertools.repeat(0)), np.int64, len(objects))
        out = []
        for bit in range(len(groups)):
            out.append(_pick(objects, np.flatnonzero(marks & (1 << bit))))
        return out

    def _select_one(self, kinds: frozenset) -> list:
        if self._unhashable:
            # Some type among the objects cannot be hashed: match by id.
            ids = frozenset(map(id, kinds))
            return list(itertools.compress(self.objects, map(ids.__contains__, map(id, self.kinds()))))
        return list(itertools.compress(self.objects, map(kinds.__contains__, self.kinds())))

    def by_type(self) -> collections.Counter:
        """Live count per type object (computed once per census)."""
        if self._by_type is None:
            try:
                self._by_type = collections.Counter(self.kinds())
            except Exception:
                # A metaclass that defines __eq__ without __hash__ makes its
                # classes unhashable (and one whose __hash__ raises, anything
                # else): count by the type's id, then leave out the types
                # that cannot be keys (they cannot be named stably).
                self._unhashable = True
                self._by_type = _count_by_type_id(self.objects)
        return self._by_type

    def want(self, *kinds: type) -> None:
        """Announce types whose instances a probe will ask for in this census."""
        if self._selected is None:
            self._wanted.update(kind for kind in kinds if self.by_type().get(kind))

    def instances_of(self, *kinds: type) -> list:
        """Objects whose exact type is one of ``kinds`` (no subclasses).

        The first call selects every announced type in one pass; later calls
        for announced types cost nothing; others take a pass of their own.
        """
        counts = self.by_type()
        present = [kind for kind in kinds if counts.get(kind)]
        if not present:
            return []
        if self._selected is None:
            self._selected = self._select(self._wanted | set(present))
        missing = [kind for kind in present if kind not in self._selected]
        if missing:
            self._selected.update(self._select(set(missing)))
        out = []
        for kind in present:
            out.extend(self._selected.get(kind, ()))
        return out

    def _select(self, kinds: set) -> dict:
        chosen = self.where_type_in(frozenset(kinds))
        buckets: dict = {kind: [] for kind in kinds}
        for obj in chosen:
            buckets[type(obj)].append(obj)
        return buckets

    def release(self) -> None:
        self.objects = []
        self.local_hops = None
        self._kinds = None
        self._by_type = None
        self._selected = None
        self._wanted = set()
        self._groups = {}

    def lists(self) -> list:
        """The lists (and the dicts of lists) this census holds: a leak trace
        must not name them as holders."""
        lists = [self.objects] + ([self.local_hops] if self.local_hops is not None else [])
        if self._selected:
            lists.extend(self._selected.values())
            lists.append(self._selected)
        chosen = [found for found in self._groups.values() if found is not None]
        if chosen:
            lists.extend(chosen)
            lists.append(self._groups)
        return lists


def _pick(objects: list, indices) -> list:
    """``[objects[i] for i in indices]``, in C."""
    if len(indices) == 0:
        return []
    if len(indices) == 1:
        return [objects[int(indices[0])]]
    return list(operator.itemgetter(*indices.tolist())(objects))


def _count_by_type_id(objects) -> collections.Counter:
    by_id = collections.Counter(map(id, map(type, objects)))
    kinds = {}
    for obj in objects:
        kind = type(obj)
        if id(kind) not in kinds:
            kinds[id(kind)] = kind
            if len(kinds) == len(by_id):
                break
    counts = collections.Counter()
    for key, count in by_id.items():
        kind = kinds[key]
        try:
            hash(kind)
        except Exception:
            continue
        counts[kind] += count
    return counts


def collect_objects(read_locals: bool = False) -> Census:
    """A census over every object the garbage collector tracks; with
    ``read_locals``, also the running functions' locals (which the collector
    does not list; see ``referrers.running_locals``). Release it promptly.

    The locals are read first: reading them fills a snapshot dict cached on
    each frame (before Python 3.13), whose entries are taken out again only
    while nothing else holds it, and a list of every tracked object would."""
    local_hops = None
    if read_locals:
        from tb_leak_plugin.capture import referrers

        local_hops = referrers.running_locals()
    return Census(gc.get_objects(), local_hops)


def _as_census(objects) -> Census:
    if objects is None:
        return collect_objects()
    if isinstance(objects, Census):
        return objects
    return Census(list(objects))


def type_name(kind: type) -> str:
    """Qualified name of a type, e.g. ``builtins.dict``; ``?`` for parts a
    hostile class does not give as plain strings."""
    # Read from type's own slots (a metaclass's properties never run), and
    # a str subclass may override formatting: take a plain copy.
    try:
        module = _TYPE_MODULE.__get__(kind, type)
        module = str.__str__(module) if issubclass(type(module), str) and module else "?"
    except Exception:
        module = "?"
    try:
        qualname = _TYPE_QUALNAME.__get__(kind, type)
        if not issubclass(type(qualname), str):
            qualname = _TYPE_NAME.__get__(kind, type)
        qualname = str.__str__(qualname) if issubclass(type(qualname), str) else "?"
    except Exception:
        qualname = "?"
    return module + "." + qualname


_TYPE_MODULE, _TYPE_QUALNAME, _TYPE_NAME = (type.__dict__[name] for name in ("__module__", "__qualname__", "__name__"))
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]


_OWN_PREFIX = __name__.partition(".")[0] + "."


def count_types(objects) -> dict[str, int]:
    """Live count per qualified type name over ``objects`` (a list or Census).
    Types defined in tb-leak's own package are left out: they are the
    monitor's, not the program's."""
    counts: dict[str, int] = {}
    # Merge by name: distinct classes may share one (classes made in a loop).
    for kind, count in _as_census(objects).by_type().items():
        name = type_name(kind)
        if name.startswith(_OWN_PREFIX):
            continue
        counts[name] = counts.get(name, 0) + count
    return counts


class ObjectCensusProbe(Probe):
    """Live objects by type: a bounded, stable set of types per run.

    The first census picks the ``top_k`` commonest types; each later census
    adds the ``top_k`` types that grew most since the first census, until
    ``max_types`` types are followed. A type once followed is written at
    every census (0 when none are left), so its series never has holes.
    A type followed from a later census carries its counts at the first
    census and the one before (in the series' plugin data, as a container's
    earlier lengths): a leak named at the second walk has its baseline.
    Also writes the total number of gc-tracked objects.
    """

    name = "objects"
    needs_objects = True

    def __init__(self, top_k: int = 20, max_types: int = 64):
        self.top_k = top_k
        self.max_types = max_types
        self._baseline: dict[str, int] | None = None
        self._baseline_at: tuple = (None, None)
        self._previous: dict[str, int] | None = None
        self._previous_at: tuple = (None, None)
        self._followed: list[str] = []
        self._infos: dict[str, SeriesInfo] = {}

    def sample(self, objects=None) -> Sample:
        census = _as_census(objects)
        counts = count_types(census)
        at = (getattr(census, "step", None), getattr(census, "wall_time", None))
        if self._baseline is None:
            self._baseline, self._baseline_at = counts, at
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
                for name in ranked[: min(self.top_k, room)]:
                    self._followed.append(name)
                    self._infos[name] = self._info_with_earlier(name)
        sample = [(self._infos.get(name) or SeriesInfo("objects", "live_count", "count", name),
                   float(counts.get(name, 0))) for name in self._followed]
        sample.append((SeriesInfo("gc", "tracked_objects", "count"), float(len(census.objects))))
        self._previous, self._previous_at = counts, at
        return sample

    def _info_with_earlier(self, name: str) -> SeriesInfo:
        points = []
        for counts, (step, wall) in ((self._baseline, self._baseline_at), (self._previous, self._previous_at)):
            if counts is None or step is None or (points and points[-1][0] == int(step)):
                continue
            points.append([int(step), round(float(wall or 0.0), 3), int(counts.get(name, 0))])
        if not points:
            return SeriesInfo("objects", "live_count", "count", name)
        return SeriesInfo("objects", "live_count", "count", name,
                          detail=json.dumps({"format": 1, "before": points}, separators=(",", ":")))


class LiveTensorsProbe(Probe):
    """Count and bytes of live TensorFlow eager tensors and numpy arrays.

    Eager tensors are gc-tracked, so the object list finds them. numpy
    arrays are not: they are found as referents of tracked objects (lists,
    dicts, instances), which costs more, so this probe is scheduled on its
    own. Views are not counted twice: bytes are summed over arrays that own
    their data, and once per buffer over arrays made on another object's
    buffer (``np.asarray(tensor)``, ``np.frombuffer``).
    """

    name = "tensors"
    needs_objects = True

    # The numpy scan is skipped on some heap walks when it costs more than
    # this: on a TensorFlow heap it can cost as much as the rest of the walk,
    # and the object counts are worth more points. It runs at least every
    # NUMPY_MAX_SKIP + 1 walks, and always on the first and the last.
    NUMPY_SCAN_SECONDS = 0.1
    NUMPY_MAX_SKIP = 3
    # Points a series needs to be judged (analysis.trend.MIN_SAMPLES).
    NUMPY_MIN_POINTS = 4
    # The scan's cost per holder searched, before one is measured (about
    # 2 µs on a TensorFlow + Keras heap here).
    NUMPY_SECONDS_PER_HOLDER = 2e-6

    def __init__(self):
        self._eager_type = None
        # type -> whether its instances are searched for arrays. Types are
        # held weakly, so a class the program drops is not kept alive.
        self._holder_cache = weakref.WeakKeyDictionary()
        self._numpy_cost_s = 0.0
        self._numpy_skipped = 0
        self._scan: bool | None = None  # decided at announce(), for this walk
        self._numpy_points = 0

    def final_scan_s(self) -> float:
        """What the numpy scan at the last walk is foreseen to cost: 0 when
        it will not run (a dear scan that has not run often enough for its
        series to be judged gains nothing from one more point)."""
        if self._numpy_cost_s <= self.NUMPY_SCAN_SECONDS or self._numpy_points >= self.NUMPY_MIN_POINTS - 1:
            return self._numpy_cost_s
        return 0.0

    def _numpy_due(self, census: "Census") -> bool:
        spare = getattr(census, "spare_s", None)
        if census.final:
            # The last walk scans unless the point would not make the series
            # judgeable, or the run's budget has no room left for it.
            if spare is None:
                return True
            return (self._numpy_cost_s <= self.NUMPY_SCAN_SECONDS
                    or self._numpy_points >= self.NUMPY_MIN_POINTS - 1) and self._numpy_cost_s <= spare
        if self._numpy_cost_s <= self.NUMPY_SCAN_SECONDS:
            return True
        if spare is not None and self._numpy_cost_s > spare:
            return False  # the budget cannot pay for it now; the last walk scans
        wanted_skips = min(self.NUMPY_MAX_SKIP, int(self._numpy_cost_s / self.NUMPY_SCAN_SECONDS) - 1)
        return self._numpy_skipped >= wanted_skips

    def announce(self, census: "Census") -> None:
        tf = _tf()
        if tf is not None and self._eager_type is None:
            self._eager_type = _eager_tensor_type(tf)
        if self._eager_type is not None:
            census.want(self._eager_type)
        self._scan = None
        if sys.modules.get("numpy") is not None:
            holder_types = _holder_types(census, self._holder_cache)
            if self._numpy_points == 0 and self._numpy_cost_s == 0.0:
                # Before the first scan: foreseen from the number of holders,
                # so that a dear first scan waits for the budget like others.
                counts = census.by_type()
                self._numpy_cost_s = self.NUMPY_SECONDS_PER_HOLDER * sum(counts[kind] for kind in holder_types)
            self._scan = self._numpy_due(census)
            if self._scan:
                census.want_group(holder_types)
                census.want_group(_own_types())

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
        scan = getattr(self, "_scan", None)
        self._scan = None
        if numpy is not None and (scan if scan is not None else self._numpy_due(census)):
            started = time.perf_counter()
            count, total_bytes = _numpy_arrays(numpy.ndarray, census, self._holder_cache)
            self._numpy_cost_s = time.perf_counter() - started
            self._numpy_skipped = 0
            census.numpy_s = self._numpy_cost_s
            self._numpy_points += 1
            sample.append((SeriesInfo("tensors", "numpy_count", "count"), float(count)))
            sample.append((SeriesInfo("tensors", "numpy_bytes", "bytes"), float(total_bytes)))
        elif numpy is not None:
            self._numpy_skipped += 1
        return sample


def _eager_tensor_type(tf):
    """TensorFlow's EagerTensor class, looked up, never made: creating a
    tensor would add an op to the program's graph in TF1-style graph mode."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    kind = getattr(ops, "EagerTensor", None) if ops is not None else None
    if isinstance(kind, type):
        return kind
    if tf.executing_eagerly():
        try:
            return type(tf.constant(0))
        except Exception:
            return None
    return None


# Containers through which numpy arrays (not gc-tracked) are usually held.
# Tuples are not searched as holders themselves (most are a library's: type
# bases, code constants, typing arguments); the tuples found inside the
# searched holders are, like the untracked dicts found there.
_CONTAINERS = frozenset((list, dict, set, collections.deque))


_UNTRACKED_DEPTH = 3

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_NOT_HOLDERS = frozenset((type, types.FunctionType, types.MethodType, types.CodeType, types.ModuleType,
                          types.CellType, tuple, property, weakref.ReferenceType))


# Top-level packages whose own objects and module globals are not searched for
# numpy arrays: on a TensorFlow heap they hold most of the references (typing
# and inspect objects, TensorFlow's Python state), and the arrays a training
# loop leaks sit in the program's containers and objects. Containers (lists,
# dicts, ...) are always searched, whoever made them.
_LIBRARY_PACKAGES = frozenset((
    "_abc", "_collections_abc", "_frozen_importlib", "_frozen_importlib_external", "abc", "absl", "argparse",
    "ast", "asyncio", "codecs", "collections", "concurrent", "contextlib", "copy", "dataclasses", "dis", "email",
    "encodings", "enum", "flatbuffers", "functools", "gast", "google", "h5py", "http", "importlib", "inspect",
    "json", "keras", "logging", "ml_dtypes", "multiprocessing", "namex", "numpy", "opt_einsum", "optree",
    "packaging", "pathlib", "pkg_resources", "psutil", "re", "rich", "selectors", "setuptools", "six", "socket",
    "ssl", "string", "tb_leak_plugin", "tempfile", "tensorboard", "tensorflow", "termcolor", "textwrap",
    "tf_keras", "threading", "tokenize", "traceback", "typing", "typing_extensions", "unittest", "urllib",
    "urllib3", "warnings", "weakref", "werkzeug", "wrapt", "zipfile", "zipimport",
))


def _is_library(module) -> bool:
    return isinstance(module, str) and module.partition(".")[0] in _LIBRARY_PACKAGES


_CONTAINER_IDS = frozenset(map(id, _CONTAINERS))
_NOT_HOLDER_IDS = frozenset(map(id, _NOT_HOLDERS))
_TYPE_FLAGS = type.__dict__["__flags__"]


def _may_hold_arrays(kind: type) -> bool:
    # By identity and type's own slots: a metaclass's __eq__ or properties never run.
    if id(kind) in _CONTAINER_IDS or issubclass(kind, (dict, list)):
        return True
    try:
        flags = _TYPE_FLAGS.__get__(kind, type)
    except Exception:
        flags = 0
    if not flags & _HEAPTYPE or id(kind) in _NOT_HOLDER_IDS:
        return False
    try:
        return not _is_library(_TYPE_MODULE.__get__(kind, type))
    except Exception:
        return True


_library_globals_cache: tuple[int, frozenset] = (-1, frozenset())


def _library_globals() -> frozenset:
    """ids of the module dicts of library packages (see ``_LIBRARY_PACKAGES``);
    recomputed only when the set of imported modules changes size."""
    global _library_globals_cache
    modules = sys.modules
    if _library_globals_cache[0] == len(modules):
        return _library_globals_cache[1]
    ids = set()
    for name, module in list(modules.items()):
        if module is not None and _is_library(name):
            try:
                # The module's own slot: no lazy-module hook or property runs.
                namespace = _MODULE_DICT.__get__(module, types.ModuleType)
            except Exception:
                continue
            ids.add(id(namespace))
    _library_globals_cache = (len(modules), frozenset(ids))
    return _library_globals_cache[1]


_own_types_cache: tuple[int, frozenset] = (-1, frozenset())


def _own_types() -> frozenset:
    """tb-leak's own classes (those defined at the top of its imported
    modules); recomputed only when the set of imported modules changes size."""
    global _own_types_cache
    modules = sys.modules
    if _own_types_cache[0] == len(modules):
        return _own_types_cache[1]
    kinds = set()
    for name, module in list(modules.items()):
        if module is None or not (name + ".").startswith(_OWN_PREFIX):
            continue
        try:
            namespace = _MODULE_DICT.__get__(module, types.ModuleType)
            for value in list(namespace.values()):
                if isinstance(value, type) and _TYPE_MODULE.__get__(value, type) == name:
                    kinds.add(value)
        except Exception:
            continue
    _own_types_cache = (len(modules), frozenset(kinds))
    return _own_types_cache[1]


def _own_namespaces(census: Census) -> frozenset:
    """ids of the instance dicts of tb-leak's own objects in the census (a
    leak watch's arrays of object ids and marks, 1 MB at a few walks): the
    monitor's state, which the numpy scan must not count as the program's
    (it grew the numpy bytes of a run by half as much again as its leak)."""
    from tb_leak_plugin.capture import referrers

    ids = []
    for obj in census.where_type_in(_own_types()):
        try:
            namespace = referrers._instance_dict(obj)
        except Exception:
            continue
        if type(namespace) is dict:
            ids.append(id(namespace))
    return frozenset(ids)


def _split_referents(objects: list, ndarray) -> tuple[list, list]:
    """(arrays among ``objects``, tuples and untracked dicts among them to
    look inside), in one pass over their types (by id: a referent's type may
    be unhashable, a metaclass with ``__eq__`` only)."""
    kinds = np.fromiter(map(id, map(type, objects)), np.uintp, len(objects))
    arrays = _pick(objects, np.flatnonzero(kinds == id(ndarray)))
    tuples = _pick(objects, np.flatnonzero(kinds == id(tuple)))
    dicts = _pick(objects, np.flatnonzero(kinds == id(dict)))
    del kinds
    # A tracked dict is a holder of its own (or a library module's namespace).
    tuples.extend(itertools.compress(dicts, map(operator.not_, map(gc.is_tracked, dicts))))
    return arrays, tuples


def _holder_types(census: Census, cache: dict) -> frozenset:
    kinds = []
    for kind in census.by_type():
        verdict = cache.get(kind)
        if verdict is None:
            verdict = cache[kind] = _may_hold_arrays(kind)
        if verdict:
            kinds.append(kind)
    return frozenset(kinds)


def live_arrays(ndarray, census: Census, holder_cache: dict | None = None) -> list:
    """The numpy arrays the census's holders reach (containers, instances of
    classes defined in Python outside library packages, and the tuples and
    untracked dicts inside them), each once: what the numpy scan counts, as
    objects to trace from (arrays are not gc-tracked: no object list has them)."""
    seen: set[int] = set()
    out = []
    for array in _reachable_arrays(ndarray, census, holder_cache):
        if id(array) not in seen:
            seen.add(id(array))
            out.append(array)
    return out


def _reachable_arrays(ndarray, census: Census, holder_cache: dict | None = None) -> list:
    # What usually holds arrays: containers and instances of classes
    # defined in Python (their attributes), outside library packages. Not the
    # many functions, types, cells, which would only add referents to scan.
    holder_types = _holder_types(census, holder_cache if holder_cache is not None else {})
    holders = census.where_type_in(holder_types)
    # Plain dicts: their values only (keys are nearly always strings); one C
    # pass each. Everything else: one C call for all referents.
    is_dict = np.fromiter(map(operator.is_, map(type, holders), itertools.repeat(dict)), bool, len(holders))
    dicts = _pick(holders, np.flatnonzero(is_dict))
    others = _pick(holders, np.flatnonzero(~is_dict))
    del holders, is_dict
    skip = _library_globals() | _own_namespaces(census)
    dicts = list(itertools.compress(dicts, map(operator.not_, map(skip.__contains__, map(id, dicts)))))
    referents = gc.get_referents(*others)
    del others
    referents.extend(itertools.chain.from_iterable(map(dict.values, dicts)))
    del dicts
    # Arrays in tuples (`history.append((step, array))`), and in dicts that
    # hold only untracked objects (the collector untracks those), sit one or
    # two levels down: look inside the tuples and untracked dicts found.
    # (An array held only by a running function's local variable is not
    # reachable this way: the collector does not list running frames' locals,
    # and reading them at every walk would touch every clean run's frames;
    # the leak watch reads them in a run that leaks, see
    # online._growth_holding_arrays.)
    arrays, hidden = _split_referents(referents, ndarray)
    del referents
    for _level in range(_UNTRACKED_DEPTH):
        if not hidden:
            break
        found, hidden = _split_referents(gc.get_referents(*hidden), ndarray)
        arrays.extend(found)
    del hidden
    return arrays


def _numpy_arrays(ndarray, census: Census, holder_cache: dict | None = None) -> tuple[int, int]:
    arrays = _reachable_arrays(ndarray, census, holder_cache)
    seen: set[int] = set()
    count = 0
    total_bytes = 0
    # Arrays over a buffer that is not an array's (``np.asarray(tensor)``:
    # a memoryview of the tensor's buffer; ``np.frombuffer(data)``): their
    # bytes are counted once per buffer, the largest view of it standing for
    # it (views of an array are not counted: the array is, where it is held).
    foreign: dict[int, int] = {}
    for array in arrays:
        key = id(array)
        if key in seen:
            continue
        seen.add(key)
        count += 1
        base = array.base
        if base is None:
            total_bytes += array.nbytes
        elif not issubclass(type(base), ndarray):
            foreign[id(base)] = max(foreign.get(id(base), 0), array.nbytes)
    return count, total_bytes + sum(foreign.values())


class TFFunctionProbe(Probe):
    """Concrete traces per ``tf.function`` (summed over live instances with
    one name), for at most ``max_functions`` names, most traced first."""

    name = "tf_function"
    needs_objects = True

    #: Instances whose traces the cheap companion reads between walks.
    MAX_KNOWN = 256

    def __init__(self, max_functions: int = 32):
        self.max_functions = max_functions
        self._followed: list[str] = []
        #: ``(name, weakref)`` of the followed functions the last walk found.
        self.known: list = []

    def announce(self, census: "Census") -> None:
        if _tf() is not None:
            census.want(*_function_types(census))

    def sample(self, objects=None) -> Sample:
        tf = _tf()
        if tf is None:
            return []
        census = _as_census(objects)
        traces: dict[str, int] = {}
        instances: dict[str, int] = {}
        function_types = _function_types(census)
        found = []
        for function in census.instances_of(*function_types):
            try:
                count = function.experimental_get_tracing_count()
                name = getattr(function, "__name__", None) or getattr(function, "_name", None) or "<unnamed>"
            except Exception:
                continue
            traces[name] = traces.get(name, 0) + int(count)
            instances[name] = instances.get(name, 0) + 1
            found.append((name, function))
        followed = set(self._followed)
        for name in sorted(traces, key=lambda n: (-traces[n], n)):
            if len(self._followed) >= self.max_functions:
                break
            if name not in followed:
                self._followed.append(name)
        followed = set(self._followed)
        known = []
        for name, function in found:
            if name in followed and len(known) < self.MAX_KNOWN:
                try:
                    known.append((name, weakref.ref(function)))
                except TypeError:
                    pass
        self.known = known
        sample: Sample = []
        for name in self._followed:
            sample.append((SeriesInfo("tf_function", "traces", "traces", name), float(traces.get(name, 0))))
            sample.append((SeriesInfo("tf_function", "instances", "count", name), float(instances.get(name, 0))))
        return sample


class TFFunctionTracesProbe(Probe):
    """Between heap walks: the traces of the ``tf.function`` instances the
    last walk found (weak references; about 0.3 µs each), under the same
    series as :class:`TFFunctionProbe`. A trace count is exact, so its
    series then shows every step where it grows and where it stops; new
    instances join at the next walk (their names' ``instances`` series and
    the census count them meanwhile)."""

    name = "tf_function_traces"

    def __init__(self, walk_probe: TFFunctionProbe):
        self.walk_probe = walk_probe

    def sample(self, objects=None) -> Sample:
        traces: dict[str, int] = {}
        for name, ref in self.walk_probe.known:
            function = ref()
            if function is None:
                continue
            try:
                traces[name] = traces.get(name, 0) + int(function.experimental_get_tracing_count())
            except Exception:
                continue
        return [(SeriesInfo("tf_function", "traces", "traces", name), float(count))
                for name, count in traces.items()]


class TFGraphProbe(Probe):
    """Size of TensorFlow's graphs: operations in the default graph (the
    thread's ``tf.Graph().as_default()`` one, or TF1's global graph) and
    functions in the eager context's library. Both only grow when a loop
    adds ops or builds functions every step. A dictionary length each."""

    name = "tf_graph"

    def sample(self, objects=None) -> Sample:
        tf = _tf()
        if tf is None or not hasattr(tf, "compat"):
            return []
        sample: Sample = []
        graph = tf.compat.v1.get_default_graph()
        nodes = getattr(graph, "_nodes_by_id", None)
        ops = len(nodes) if nodes is not None else int(graph.version)
        sample.append((SeriesInfo("tf_graph", "ops", "ops", "default_graph"), float(ops)))
        context = sys.modules.get("tensorflow.python.eager.context")
        if context is not None and tf.executing_eagerly():
            names = context.context().list_function_names()
            sample.append((SeriesInfo("tf_graph", "functions", "functions", "eager_context"), float(len(names))))
        return sample


class TFGraphsHeldProbe(Probe):
    """Graphs the program holds (``tf.Graph`` objects, not tf.function
    graphs) and their operations, found in the heap walk."""

    name = "tf_graphs_held"
    needs_objects = True

    def __init__(self):
        self._graph_type = None

    def announce(self, census: "Census") -> None:
        kind = self._kind()
        if kind is not None:
            census.want(kind)

    def _kind(self):
        if self._graph_type is None:
            ops = sys.modules.get("tensorflow.python.framework.ops")
            self._graph_type = getattr(ops, "Graph", None) if ops is not None else None
        return self._graph_type

    def sample(self, objects=None) -> Sample:
        kind = self._kind()
        if kind is None:
            return []
        census = _as_census(objects)
        graphs = census.instances_of(kind)
        ops = 0
        for graph in graphs:
            nodes = getattr(graph, "_nodes_by_id", None)
            ops += len(nodes) if nodes is not None else 0
        count = len(graphs)
        del graphs
        return [(SeriesInfo("tf_graph", "graphs", "count", "held"), float(count)),
                (SeriesInfo("tf_graph", "ops", "ops", "held_graphs"), float(ops))]


def _function_types(census: "Census") -> list:
    """The ``tf.function`` classes among the census's types."""
    out = []
    for kind in census.by_type():
        name, module = getattr(kind, "__name__", None), getattr(kind, "__module__", None)
        if name == "Function" and isinstance(module, str) and "polymorphic_function" in module:
            out.append(kind)
    return out


CHEAP_PROBES = ("process", "python", "malloc", "tf", "tf_graph", "gc", "runtime_state")
CENSUS_PROBES = ("objects", "tensors", "tf_function", "tf_graphs_held", "uss")
ALL_PROBES = CHEAP_PROBES + CENSUS_PROBES


# Probes defined in modules of their own register here when imported
# (capture/runtime_state.py; the monitor imports it).
EXTRA_FACTORIES: dict = {}


def make_probes(names, on_skip=None, top_k: int = 20, max_types: int = 64) -> list[Probe]:
    """Instantiate probes by name (Probe instances pass through); unknown names raise ValueError."""
    factories = {
        "process": ProcessProbe,
        "uss": ProcessUSSProbe,
        "python": PythonHeapProbe,
        "malloc": MallocProbe,
        "tf": lambda: TFAllocatorProbe(on_skip=on_skip),
        "gc": GCProbe,
        "objects": lambda: ObjectCensusProbe(top_k=top_k, max_types=max_types),
        "tensors": LiveTensorsProbe,
        "tf_function": TFFunctionProbe,
        "tf_graph": TFGraphProbe,
        "tf_graphs_held": TFGraphsHeldProbe,
        **EXTRA_FACTORIES,
    }
    unknown = [name for name in names if not isinstance(name, Probe) and name not in factories]
    if unknown:
        raise ValueError(f"unknown probe(s) {unknown}; choose from {sorted(factories)}")
    made = []
    for name in names:
        if isinstance(name, Probe):
            made.append(name)
            continue
        try:
            probe = factories[name]()
            made.append(probe)
            if isinstance(probe, TFFunctionProbe):
                made.append(TFFunctionTracesProbe(probe))
        except ProbeUnavailable as why:
            if on_skip is not None:
                on_skip(f"probe {name!r} is not available here ({why}); skipped")
    return made
