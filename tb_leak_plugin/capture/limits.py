"""The memory limit in force for this process, and what is left under it.

A training job in a container is killed when its cgroup reaches the
container's limit, long before the host runs out of memory; a job started
under ``ulimit -v`` fails its allocations at ``RLIMIT_AS``. Projecting time
to out-of-memory against the host's available memory is wrong there by
orders of magnitude. :func:`memory_left` looks at every limit that applies:

- cgroup v2: ``memory.max`` of this process's cgroup and of every ancestor
  up to the mount point (``max`` means none); left = limit - usage, where
  usage is ``memory.current`` less the ``inactive_file`` page cache that the
  kernel reclaims before it kills (``memory.stat``), as Kubernetes counts it;
- cgroup v1: ``memory.limit_in_bytes`` / ``memory.usage_in_bytes`` (less
  ``total_inactive_file``) the same way; the huge values that mean "no limit"
  (anything from 2**60 on, or past the host's memory) are ignored;
- ``RLIMIT_AS`` (left = limit - the process's virtual size) and
  ``RLIMIT_DATA`` (left = limit - its data size, from ``/proc/self/statm``
  through psutil);
- the host's available memory (``MemAvailable``) otherwise.

The smallest "left" wins. Files are read defensively: a file missing,
unreadable or holding garbage is ignored, and nothing here raises.

Cost: the cgroup paths and limits are looked up once (and again every
``REFRESH_S`` seconds, so a resized container is seen); each call re-reads
only the usage of the cgroup levels that have a limit, the two rlimits (a
system call each) with the usage from the memory info the caller already
has, and ``MemAvailable`` (``memory.stat``, for the page cache, at most
once a second). Measured on a 2-core Linux VM (Python 3.11), with the
caller's memory info: about 14 µs a call without a cgroup limit, about 21 µs
with a cgroup v2 limit (fake tree) and 27 µs in a real cgroup v1 memory group
with a limit (see tests/test_memory_limits.py), well under the 100 µs budget
of a cheap probe; the ``psutil.virtual_memory()`` the probe called before
cost about 49 µs.
"""

from __future__ import annotations

import os
import resource
import time

from tb_leak_plugin.metadata import limit_detail, parse_limit_detail  # noqa: F401 (re-exported)

#: Seconds between re-discoveries of the cgroup paths and limits.
REFRESH_S = 60.0
#: Seconds between reads of a cgroup's page cache (``memory.stat``).
STAT_S = 1.0

# cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (~2**63 rounded down
# to a page); anything this large is no limit.
_NO_LIMIT = 1 << 60

CGROUP_V2 = "cgroup v2 memory.max"
CGROUP_V1 = "cgroup v1 memory.limit_in_bytes"
RLIMIT_AS = "RLIMIT_AS"
RLIMIT_DATA = "RLIMIT_DATA"
HOST = "host memory available"


def _read(path: str, limit: int = 65536) -> bytes | None:
    try:
        with open(path, "rb", buffering=0) as file:
            return file.read(limit)
    except (OSError, ValueError):
        return None


def _number(raw: bytes | None) -> int | None:
    """A non-negative integer file (``memory.max``), or None for ``max``,
    garbage, negative or huge values."""
    if raw is None:
        return None
    text = raw.strip()
    if not text.isdigit() or len(text) > 20:
        return None
    value = int(text)
    return value if value < _NO_LIMIT else None


def _stat_field(raw: bytes | None, key: bytes) -> int:
    """One ``name value`` line of a ``memory.stat`` (0 where absent or garbage)."""
    if not raw:
        return 0
    if raw.startswith(key + b" "):
        start = 0
    else:
        start = raw.find(b"\n" + key + b" ")
        if start < 0:
            return 0
        start += 1
    end = raw.find(b"\n", start)
    value = raw[start + len(key) + 1:end if end >= 0 else len(raw)].strip()
    return int(value) if value.isdigit() and len(value) <= 20 else 0


def _mounts(root: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """(mount point, mount root) of the cgroup v2 hierarchy and of the v1
    memory controller, from ``/proc/self/mountinfo``; the usual places where
    it cannot be read."""
    v2 = v1 = None
    raw = _read(os.path.join(root, "proc/self/mountinfo"), 1 << 20)
    if raw:
        for line in raw.decode("utf-8", "replace").splitlines():
            left, sep, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if not sep or len(fields) < 5 or len(tail) < 1:
                continue
            kind, options = tail[0], tail[2] if len(tail) > 2 else ""
            mount_root = fields[3].replace("\\040", " ")
            point = os.path.join(root, fields[4].replace("\\040", " ").lstrip("/"))
            if kind == "cgroup2" and v2 is None:
                v2 = (point, mount_root)
            elif kind == "cgroup" and "memory" in options.split(",") and v1 is None:
                v1 = (point, mount_root)
    if v2 is None and v1 is None:
        base = os.path.join(root, "sys/fs/cgroup")
        if os.path.exists(os.path.join(base, "cgroup.controllers")):
            v2 = (base, "/")
        elif os.path.isdir(os.path.join(base, "memory")):
            v1 = (os.path.join(base, "memory"), "/")
    return v2, v1


def _own_groups(root: str) -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and v1 memory-controller path."""
    v2 = v1 = None
    raw = _read(os.path.join(root, "proc/self/cgroup"))
    if raw:
        for line in raw.decode("utf-8", "replace").splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if parts[0] == "0" and parts[1] == "":
                v2 = parts[2]
            elif "memory" in parts[1].split(","):
                v1 = parts[2]
    return v2, v1


def _levels(mount: tuple[str, str] | None, path: str | None) -> list[str]:
    """The directories from this process's cgroup up to the mount point."""
    if mount is None or path is None:
        return []
    point, mount_root = mount
    path = "/" + path.strip("/")
    mount_root = "/" + mount_root.strip("/")
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):] or "/"
    leaf = os.path.normpath(os.path.join(point, path.lstrip("/")))
    if not (leaf == point or leaf.startswith(point.rstrip("/") + "/")) or not os.path.isdir(leaf):
        # A cgroup namespace whose mount is the group itself: start there.
        leaf = point
    levels = []
    while True:
        levels.append(leaf)
        if leaf == point or len(levels) > 64:
            return levels
        parent = os.path.dirname(leaf)
        if parent == leaf:
            return levels
        leaf = parent


class MemoryLimits:
    """Finds the limits once, then measures what is left under them.

    ``root``: the file-system root the ``/proc`` and ``/sys/fs/cgroup`` files
    are read under (tests point it at a fake tree). ``host_available`` and
    ``host_total``: callables for the host's memory (default: psutil).
    """

    def __init__(self, root: str = "/", *, host=None, rlimits=True, refresh_s: float = REFRESH_S):
        self.root = root
        self._host = host
        self._use_rlimits = rlimits
        self._refresh_s = refresh_s
        self._found_at = -float("inf")
        # (name, limit bytes, usage file, stat file, inactive key) per limited level
        self._cgroups: list[tuple[str, int, str, str, bytes]] = []
        self._rlimits = [(name, getattr(resource, name)) for name in (RLIMIT_AS, RLIMIT_DATA)
                         if rlimits and hasattr(resource, name)]
        self._host_total: int | None = None
        self._stats: dict[str, tuple[float, int]] = {}

    # ------------------------------------------------------------ discovery

    def _discover(self) -> None:
        cgroups = []
        try:
            v2_mount, v1_mount = _mounts(self.root)
            v2_path, v1_path = _own_groups(self.root)
            for level in _levels(v2_mount, v2_path):
                limit = _number(_read(os.path.join(level, "memory.max")))
                if limit is not None:
                    cgroups.append((CGROUP_V2, limit, os.path.join(level, "memory.current"),
                                    os.path.join(level, "memory.stat"), b"inactive_file"))
            host_total = self._total()
            for level in _levels(v1_mount, v1_path):
                limit = _number(_read(os.path.join(level, "memory.limit_in_bytes")))
                if limit is not None and (host_total is None or limit < host_total):
                    cgroups.append((CGROUP_V1, limit, os.path.join(level, "memory.usage_in_bytes"),
                                    os.path.join(level, "memory.stat"), b"total_inactive_file"))
        except Exception:
            cgroups = []
        self._cgroups = cgroups
        self._stats = {}

    def _total(self) -> int | None:
        if self._host_total is None:
            try:
                import psutil

                self._host_total = int(psutil.virtual_memory().total)
            except Exception:
                self._host_total = None
        return self._host_total

    def _available(self) -> float | None:
        if self._host is not None:
            try:
                value = self._host()
                return None if value is None else float(value)
            except Exception:
                return None
        raw = _read("/proc/meminfo", 4096)
        if raw:
            at = raw.find(b"MemAvailable:")
            if at >= 0:
                end = raw.find(b"\n", at)
                parts = raw[at + 13:end if end >= 0 else len(raw)].split()
                if parts and parts[0].isdigit():
                    return float(int(parts[0]) * 1024)
        try:
            import psutil

            return float(psutil.virtual_memory().available)
        except Exception:
            return None

    # ------------------------------------------------------------ sampling

    def left(self, memory_info=None) -> tuple[float, str, float] | None:
        """``(bytes left, limit name, limit bytes)`` under the limit that
        leaves least, or None where nothing can be measured.

        ``memory_info``: this process's ``psutil`` memory info, if the caller
        has read it (for the rlimits; read here otherwise). Never raises."""
        try:
            return self._left(memory_info)
        except Exception:
            return None

    def _inactive_file(self, now: float, stat_file: str, key: bytes) -> int:
        """The reclaimable page cache of one cgroup level: ``memory.stat`` is
        long (v1: ~40 lines), so it is read at most every ``STAT_S`` seconds."""
        cached = self._stats.get(stat_file)
        if cached is None or now - cached[0] >= STAT_S:
            cached = self._stats[stat_file] = (now, _stat_field(_read(stat_file), key))
        return cached[1]

    def _left(self, memory_info):
        now = time.monotonic()
        if now - self._found_at >= self._refresh_s:
            self._found_at = now
            self._discover()
        best = None
        for name, limit, usage_file, stat_file, inactive_key in self._cgroups:
            usage = _number(_read(usage_file, 64))
            if usage is None:
                continue
            usage -= min(self._inactive_file(now, stat_file, inactive_key), usage)
            left = float(limit - usage)
            if best is None or left < best[0]:
                best = (max(left, 0.0), name, float(limit))
        for name, which in self._rlimits:
            # A system call each (~0.3 µs): a limit set while the job runs counts.
            limit, _hard = resource.getrlimit(which)
            if limit == resource.RLIM_INFINITY or not 0 < limit < _NO_LIMIT:
                continue
            if memory_info is None:
                import psutil

                memory_info = psutil.Process().memory_info()
            used = memory_info.vms if name == RLIMIT_AS else getattr(memory_info, "data", None)
            if used is None:
                continue
            left = float(limit - used)
            if best is None or left < best[0]:
                best = (max(left, 0.0), name, float(limit))
        available = self._available()
        if available is not None and (best is None or available < best[0]):
            total = self._total()
            best = (available, HOST, float(total) if total is not None else float("nan"))
        return best


_DEFAULT: MemoryLimits | None = None


def memory_left(memory_info=None) -> tuple[float, str, float] | None:
    """``(bytes left, limit name, limit bytes)`` for this process, from one
    shared :class:`MemoryLimits` (see the module docstring); None where
    nothing can be measured. Never raises."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MemoryLimits()
    return _DEFAULT.left(memory_info)


# ---------------------------------------------------------------- devices


def device_memory_limit(tf, device: str) -> int | None:
    """Bytes of memory TensorFlow may use on ``device`` (``"GPU:0"``), or None.

    In order: the allocator's ``bytes_limit`` where
    ``tf.config.experimental.get_memory_info`` reports it (newer builds), the
    ``memory_limit`` (MiB) of the device's logical-device configuration, and
    the device's total memory from NVML (``pynvml``) for a GPU. Never raises.
    """
    try:
        info = tf.config.experimental.get_memory_info(device)
        for key in ("bytes_limit", "limit"):
            value = info.get(key) if isinstance(info, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return int(value)
    except Exception:
        pass
    kind, _, index = device.partition(":")
    try:
        position = int(index or 0)
    except ValueError:
        return None
    try:
        # Logical devices in order: each physical device's virtual devices
        # (with their memory_limit, MiB), or the device whole (limit unknown).
        logical = []
        for physical in tf.config.list_physical_devices(kind):
            configs = tf.config.get_logical_device_configuration(physical) or [None]
            logical += [getattr(config, "memory_limit", None) for config in configs]
        if position < len(logical):
            limit = logical[position]
            if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
                return int(limit) * (1 << 20)
    except Exception:
        pass
    if kind == "GPU":
        try:
            import pynvml

            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            nvml_index = int(visible[position]) if position < len(visible) and visible[position].strip().isdigit() \
                else position
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:
            return None
    return None
