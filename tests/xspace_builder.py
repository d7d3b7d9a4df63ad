"""Hand-built XSpace traces for the trace tests (no TensorFlow).

``Plane`` writes events and stats with the names TensorFlow uses; stat
values are written as the ``kinds`` it is given say (int64, uint64, double,
str, bytes or ref), so the decoder sees every encoding.
"""

from __future__ import annotations

import os

from tb_leak_plugin.analysis import trace
from tb_leak_plugin.xplane import schema as xplane

PS_PER_STEP = 1_000_000_000  # 1 ms per step


class Plane:
    """Builds one XPlane; stat values are written as ``kinds`` says."""

    def __init__(self, message, kinds=None):
        self.message = message
        self.kinds = kinds or {}
        self._stat_ids: dict[str, int] = {}
        self._event_ids: dict[str, int] = {}
        self.lines: dict[str, object] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stat_ids:
            sid = len(self.message.stat_metadata) + 1
            self.message.stat_metadata[sid].id = sid
            self.message.stat_metadata[sid].name = name
            self._stat_ids[name] = sid
        return self._stat_ids[name]

    def event_id(self, name: str, **metadata_stats) -> int:
        if name not in self._event_ids:
            mid = len(self.message.event_metadata) + 1
            self.message.event_metadata[mid].id = mid
            self.message.event_metadata[mid].name = name
            for key, value in metadata_stats.items():
                self._set_stat(self.message.event_metadata[mid].stats.add(), key, value)
            self._event_ids[name] = mid
        return self._event_ids[name]

    def line(self, name: str, timestamp_ns: int = 1000):
        if name not in self.lines:
            line = self.message.lines.add()
            line.id = len(self.message.lines)
            line.name = name
            line.timestamp_ns = timestamp_ns
            self.lines[name] = line
        return self.lines[name]

    def _set_stat(self, stat, name, value):
        stat.metadata_id = self.stat_id(name)
        kind = self.kinds.get(name)
        if kind is None:
            kind = "int64" if isinstance(value, int) else "ref" if isinstance(value, str) else "double"
        if kind == "int64":
            stat.int64_value = int(value)
        elif kind == "uint64":
            stat.uint64_value = int(value) % (1 << 64)
        elif kind == "double":
            stat.double_value = float(value)
        elif kind == "str":
            stat.str_value = str(value)
        elif kind == "bytes":
            stat.bytes_value = str(value).encode()
        elif kind == "ref":  # the value is the name of another stat metadata
            stat.ref_value = self.stat_id(str(value))
        else:
            raise AssertionError(kind)

    def event(self, line_name, name, offset_ps, duration_ps=0, **stats):
        event = self.line(line_name).events.add()
        event.metadata_id = self.event_id(name)
        event.offset_ps = offset_ps
        event.duration_ps = duration_ps
        for key, value in stats.items():
            if value is not None:
                self._set_stat(event.stats.add(), key, value)
        return event

    def alloc(self, t, addr, size, op="leaky/MatMul", line="tf_Compute/1", allocator="bfc_cpu",
              region="output", shape="[256,256]", dtype=1, **extra):
        stats = dict(allocator_name=allocator, addr=addr, allocation_bytes=size,
                     requested_bytes=size, tf_op=op, region_type=region, shape=shape,
                     data_type=dtype, id=7)
        stats.update(extra)
        return self.event(line, "MemoryAllocation", t, **stats)

    def free(self, t, addr, size, line="tf_Compute/1", allocator="bfc_cpu"):
        return self.event(line, "MemoryDeallocation", t, allocator_name=allocator, addr=addr,
                          allocation_bytes=size, requested_bytes=size, data_type=0, id=0)

    def markers(self, steps, first=1, line="python"):
        for k in range(steps):
            self.event(line, "train", k * PS_PER_STEP, PS_PER_STEP - 1000,
                       step_num=first + k, _r=1)


def new_space():
    return xplane.XSpace()


def add_plane(space, name="/host:CPU", kinds=None):
    message = space.planes.add()
    message.id = len(space.planes)
    message.name = name
    return Plane(message, kinds)


def at(step, fraction=0.5):
    return int((step + fraction) * PS_PER_STEP)


def leaky_loop(plane, steps=10, keep=True, churn=True, first_step_only=False,
               last_step_only=False, size=262144, op="leaky/MatMul", **kw):
    """Each step allocates a scratch buffer (freed) and an output (kept or not)."""
    for k in range(steps):
        if churn:
            plane.alloc(at(k, 0.1), 0x1000, 4096, op="scratch/Add", region="temp", **kw)
            plane.free(at(k, 0.2), 0x1000, 4096, allocator=kw.get("allocator", "bfc_cpu"))
        keep_this = keep and not (first_step_only or last_step_only)
        keep_this |= first_step_only and k == 0
        keep_this |= last_step_only and k == steps - 1
        addr = 0x100000 + k * 0x100000
        plane.alloc(at(k, 0.3), addr, size, op=op, **kw)
        if not keep_this:
            plane.free(at(k, 0.8), addr, size, allocator=kw.get("allocator", "bfc_cpu"))


def analyze(space) -> trace.TraceAnalysis:
    return trace.analyze_space(space.SerializeToString())


def op_named(analysis, name):
    matches = [o for o in analysis.ops if o.op == name]
    return matches[0] if matches else None




def write_trace(run_dir, session, host, data: bytes):
    """Write ``data`` as ``<run_dir>/plugins/profile/<session>/<host>.xplane.pb``."""
    directory = os.path.join(run_dir, "plugins", "profile", session)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{host}.xplane.pb")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def leaky_trace_bytes(steps=6, op="leaky/MatMul"):
    """A serialized trace of a loop whose op ``op`` keeps every step's output."""
    space = new_space()
    plane = add_plane(space)
    plane.markers(steps)
    leaky_loop(plane, steps=steps, op=op)
    return space.SerializeToString()
