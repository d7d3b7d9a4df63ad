"""Trace analysis on hand-built XSpace messages, and trace files on disk.

No TensorFlow here (see test_trace_capture.py for real recordings). GPU
planes cannot be recorded on this machine, so they are built by hand with
the event and stat names TensorFlow uses on GPU (``/device:GPU:0``,
allocator ``GPU_0_bfc``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tb_leak_plugin.eventfile.records import encode_varint
from tb_leak_plugin.reporting import traces
from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.decode import decode_space
from tb_leak_plugin.analysis import trace

PS_PER_STEP = 1_000_000_000  # 1 ms per step


# -- building traces -----------------------------------------------------------------


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


# -- retention ---------------------------------------------------------------------------


def test_op_that_keeps_every_step_is_flagged_and_churn_is_not():
    space = new_space()
    plane = add_plane(space)
    plane.markers(10)
    leaky_loop(plane, steps=10)
    result = analyze(space)
    assert result.step_source == "markers" and result.steps == 10
    assert [o.op for o in result.suspicious] == ["leaky/MatMul"]
    leak = result.suspicious[0]
    assert leak.allocations == 10 and leak.frees == 0
    assert leak.retained_bytes == 10 * 262144 and leak.retained_allocations == 10
    assert leak.steps_retained == 10 and leak.steps_total == 10
    assert leak.retained_bytes_per_step == pytest.approx(262144)
    assert (leak.region_type, leak.shape, leak.data_type, leak.allocator) == (
        "output", "[256,256]", "float32", "bfc_cpu")
    assert "leak" in leak.reason
    assert op_named(result, "scratch/Add") is None  # allocated and freed: no retention
    assert result.unmatched_frees == 0
    assert result.allocators == ["bfc_cpu"]


def test_loop_that_frees_its_outputs_flags_nothing():
    space = new_space()
    plane = add_plane(space)
    plane.markers(10)
    leaky_loop(plane, steps=10, keep=False)
    result = analyze(space)
    assert result.suspicious == [] and result.ops == []


@pytest.mark.parametrize("where", ["first", "last"])
def test_one_off_retention_is_not_a_leak(where):
    space = new_space()
    plane = add_plane(space)
    plane.markers(12)
    leaky_loop(plane, steps=12, first_step_only=where == "first", last_step_only=where == "last")
    result = analyze(space)
    assert result.suspicious == []
    (op,) = result.ops
    assert op.steps_retained == 1 and not op.suspicious
    assert ("first traced step" if where == "first" else "last traced step") in op.reason


def test_retention_in_a_few_steps_is_not_a_leak():
    space = new_space()
    plane = add_plane(space)
    plane.markers(20)
    for k in range(20):
        addr = 0x100000 + k * 0x100000
        plane.alloc(at(k), addr, 1024)
        if k not in (3, 9, 15):  # kept in 3 of 20 steps: under half
            plane.free(at(k, 0.9), addr, 1024)
    result = analyze(space)
    assert result.suspicious == []
    assert result.ops[0].steps_retained == 3


def test_cache_that_fills_then_stops_is_not_a_leak():
    space = new_space()
    plane = add_plane(space)
    plane.markers(20)
    for k in range(20):
        addr = 0x100000 + k * 0x100000
        plane.alloc(at(k), addr, 1024, op="cache/Insert")
        if k >= 12:  # the cache is full from step 12 on: new entries are dropped
            plane.free(at(k, 0.9), addr, 1024)
    result = analyze(space)
    (op,) = result.ops
    assert op.steps_retained == 12 and not op.suspicious
    assert "growth stopped" in op.reason


def test_allocations_before_the_first_marker_are_not_per_step_retention():
    space = new_space()
    plane = add_plane(space)
    plane.markers(10, first=5)
    for i in range(30):  # setup before the window, never freed
        plane.alloc(-PS_PER_STEP + i * 1000, 0x9000000 + i * 4096, 4096, op="setup/Variable")
    result = analyze(space)
    (op,) = result.ops
    assert op.steps_retained == 0 and not op.suspicious
    assert "before the first traced step" in op.reason


def test_address_reuse_unmatched_frees_and_never_freed():
    space = new_space()
    plane = add_plane(space)
    plane.markers(4)
    # The same address is handed out, freed and handed out again.
    plane.alloc(at(0, 0.1), 0xA000, 100, op="reuse")
    plane.free(at(0, 0.2), 0xA000, 100)
    plane.alloc(at(1, 0.1), 0xA000, 100, op="reuse")
    plane.free(at(1, 0.2), 0xA000, 100)
    plane.alloc(at(2, 0.1), 0xA000, 300, op="reuse_kept")  # never freed
    # Frees of memory allocated before the trace started.
    plane.free(at(0, 0.5), 0xB000, 64)
    plane.free(at(3, 0.5), 0xC000, 64)
    # A free and a new allocation at the same address and the same time.
    plane.alloc(at(3, 0.1), 0xD000, 8, op="same_time")
    plane.free(at(3, 0.6), 0xD000, 8)
    plane.alloc(at(3, 0.6), 0xD000, 8, op="same_time_kept")
    result = analyze(space)
    assert result.unmatched_frees == 2
    assert op_named(result, "reuse") is None
    kept = op_named(result, "reuse_kept")
    assert kept.retained_bytes == 300 and kept.allocations == 1
    assert op_named(result, "same_time") is None
    assert op_named(result, "same_time_kept").retained_bytes == 8


def test_same_address_on_two_allocators_or_planes_is_not_paired():
    space = new_space()
    host = add_plane(space)
    gpu = add_plane(space, "/device:GPU:0")
    host.markers(3)
    host.alloc(at(0), 0xA000, 10, op="host_kept", allocator="cpu")
    host.free(at(1), 0xA000, 10, allocator="other")  # a different allocator's block
    gpu.alloc(at(0), 0xA000, 20, op="gpu_kept", allocator="cpu", line="gpu_line")
    result = analyze(space)
    assert op_named(result, "host_kept").retained_bytes == 10
    assert op_named(result, "gpu_kept").retained_bytes == 20
    assert result.unmatched_frees == 1


def test_address_reused_without_a_traced_free_counts_as_freed():
    events = trace.MemoryEvents(
        plane=np.zeros(3, np.int32),
        time_ps=np.array([1, 2, 3]),
        is_allocation=np.array([True, True, False]),
        address=np.array([5, 5, 5]),
        bytes=np.array([10, 20, 20]),
        allocator_code=np.zeros(3, np.int32),
        op_code=np.zeros(3, np.int32),
        region_code=np.zeros(3, np.int32),
        shape_code=np.zeros(3, np.int32),
        dtype_code=np.zeros(3, np.int32),
        labels=["x"],
    )
    pairing = trace.pair_allocations(events)
    assert pairing.freed.tolist() == [True, True]
    assert pairing.implicit_frees == 1 and pairing.unmatched_frees == 0


def test_missing_stats_default_to_unknown():
    space = new_space()
    plane = add_plane(space)
    plane.markers(6)
    for k in range(6):
        # Only the address and size: no op, region, shape, dtype or allocator.
        plane.event("tf_Compute/1", "MemoryAllocation", at(k), addr=0x1000 + k, requested_bytes=64)
    plane.event("tf_Compute/1", "MemoryAllocation", at(5), requested_bytes=8)  # not even addr
    plane.event("tf_Compute/1", "MemoryDeallocation", at(5, 0.9))  # nothing at all
    result = analyze(space)
    assert "2 memory events had no address" in result.coverage_note
    leak = result.suspicious[0]
    assert (leak.op, leak.region_type, leak.shape, leak.data_type, leak.allocator) == (
        "unknown",) * 5
    assert leak.retained_bytes == 6 * 64
    assert result.allocators == ["unknown"]


KINDS = ["int64", "uint64", "double", "str", "bytes", "ref"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_stat_value_kind_is_read(kind):
    numeric = {"addr", "allocation_bytes", "requested_bytes", "data_type", "step_num"}
    text = {"tf_op", "region_type", "shape", "allocator_name"}
    kinds = {name: kind for name in numeric | text}
    if kind in ("int64", "uint64", "double"):
        kinds.update({name: "str" for name in text})  # texts cannot be numbers
    space = new_space()
    plane = add_plane(space, kinds=kinds)
    plane.markers(8)
    if kind in ("str", "bytes", "ref"):
        # Numbers spelled as text; ref values are the *names* of stat metadata.
        for k in range(8):
            plane.event("tf_Compute/1", "MemoryAllocation", at(k), addr=str(4096 * (k + 1)),
                        allocation_bytes="2048", tf_op="keep/Op", region_type="output",
                        shape="[512]", data_type="1", allocator_name="bfc")
    else:
        for k in range(8):
            plane.event("tf_Compute/1", "MemoryAllocation", at(k), addr=4096 * (k + 1),
                        allocation_bytes=2048, tf_op="keep/Op", region_type="output",
                        shape="[512]", data_type=1, allocator_name="bfc")
    result = analyze(space)
    assert result.steps == 8
    (leak,) = result.suspicious
    assert (leak.op, leak.region_type, leak.shape, leak.allocator) == (
        "keep/Op", "output", "[512]", "bfc")
    assert leak.data_type == "float32"
    assert leak.retained_bytes == 8 * 2048 and leak.steps_retained == 8


@pytest.mark.parametrize(
    "value, expected",
    [(5, 5), ((1 << 64) - 1, -1), ("42", 42), (" 0x10 ", 16), ("1.0", 1), (b"7", 7),
     ("nope", None), (float("nan"), None), (1e30, None), (-(1 << 63), -(1 << 63)), (1 << 64, None)],
)
def test_stat_values_as_int64(value, expected):
    assert xplane._as_int(value) == expected


def test_uint64_addresses_above_2_63_pair():
    space = new_space()
    plane = add_plane(space, kinds={"addr": "uint64"})
    plane.markers(2)
    plane.alloc(at(0), (1 << 64) - 4096, 10, op="high")
    plane.free(at(1), (1 << 64) - 4096, 10)
    assert analyze(space).ops == []


def test_stats_on_event_metadata_apply_to_every_event():
    space = new_space()
    plane = add_plane(space)
    plane.event_id("MemoryAllocation", allocator_name="from_metadata", region_type="persist")
    plane.markers(5)
    for k in range(5):
        plane.event("tf_Compute/1", "MemoryAllocation", at(k), addr=0x1000 * (k + 1),
                    allocation_bytes=100, tf_op="meta/Op")
    # An event stat overrides the metadata stat.
    plane.event("tf_Compute/1", "MemoryAllocation", at(4), addr=0x99000, allocation_bytes=7,
                tf_op="meta/Other", allocator_name="from_event")
    result = analyze(space)
    leak = op_named(result, "meta/Op")
    assert leak.allocator == "from_metadata" and leak.region_type == "persist" and leak.suspicious
    assert op_named(result, "meta/Other").allocator == "from_event"


def test_gpu_plane_is_analysed_like_the_host():
    """GPU memory events use the same names and stats; built by hand (no GPU here)."""
    space = new_space()
    host = add_plane(space)
    gpu = add_plane(space, "/device:GPU:0")
    host.markers(10)
    for k in range(10):
        addr = 0x7F0000000000 + k * 0x100000
        gpu.alloc(at(k, 0.2), addr, 1 << 20, op="model/dense/BiasAdd", allocator="GPU_0_bfc",
                  line="Stream #12")
        gpu.alloc(at(k, 0.3), addr + 0x80000, 4096, op="model/relu", allocator="GPU_0_bfc",
                  region="temp", line="Stream #12")
        gpu.free(at(k, 0.4), addr + 0x80000, 4096, allocator="GPU_0_bfc", line="Stream #12")
    result = analyze(space)
    assert "GPU_0_bfc" in result.allocators
    (leak,) = result.suspicious
    assert leak.op == "model/dense/BiasAdd" and leak.allocator == "GPU_0_bfc"
    assert leak.retained_bytes_per_step == pytest.approx(1 << 20)
    assert result.planes == ["/host:CPU", "/device:GPU:0"]


def test_without_markers_time_is_split_into_pseudo_steps():
    space = new_space()
    plane = add_plane(space)
    leaky_loop(plane, steps=40)
    result = analyze(space)
    assert result.step_source == "pseudo" and result.steps == trace.PSEUDO_STEPS
    assert "No step markers" in result.step_note
    assert [o.op for o in result.suspicious] == ["leaky/MatMul"]


def test_markers_on_several_threads_merge_by_step_number():
    space = new_space()
    plane = add_plane(space)
    plane.markers(6, line="python")
    plane.markers(6, line="worker")
    leaky_loop(plane, steps=6)
    result = analyze(space)
    assert result.steps == 6 and result.suspicious[0].steps_retained == 6


def test_steps_index_of():
    steps = trace.Steps(np.array([1, 2, 3]), np.array([10, 20, 30]), np.array([19, 29, 39]),
                        "markers")
    got = steps.index_of(np.array([5, 10, 19, 20, 25, 39, 40]))
    assert got.tolist() == [trace.BEFORE_STEPS, 0, 0, 1, 1, 2, trace.AFTER_STEPS]


# -- coverage ----------------------------------------------------------------------------


def test_trace_without_memory_events_says_so():
    space = new_space()
    plane = add_plane(space)
    plane.markers(5)
    result = analyze(space)
    assert result.memory_events == 0 and result.ops == []
    assert "no memory events" in result.coverage_note
    assert "TF_ENABLE_ONEDNN_OPTS=0 TF_CPU_ALLOCATOR_USE_BFC=1" in result.coverage_note


def test_onednn_allocator_note_says_small_allocations_are_invisible():
    space = new_space()
    plane = add_plane(space)
    plane.markers(5)
    leaky_loop(plane, steps=5, churn=False, allocator="mklcpu")
    note = analyze(space).coverage_note
    assert "mklcpu" in note and "256 KiB" in note and "invisible" in note
    assert "TF_ENABLE_ONEDNN_OPTS=0 TF_CPU_ALLOCATOR_USE_BFC=1" in note


def test_bfc_allocator_note_claims_full_coverage():
    space = new_space()
    plane = add_plane(space)
    leaky_loop(plane, steps=3, allocator="bfc_cpu_allocator_for_gpu")
    assert "Every allocation" in analyze(space).coverage_note


# -- retracing ---------------------------------------------------------------------------


def function_calls(plane, steps, traced_steps, name="train_step", with_call_stat=True):
    count = 1
    for k in range(steps):
        traced = k in traced_steps
        count += traced
        stats = dict(tracing_count=count)
        if with_call_stat:
            stats["tf_function_call"] = "traced-nonXla" if traced else "notTraced-nonXla"
        plane.event("python", name, at(k, 0.05), PS_PER_STEP // 2, **stats)
        if traced:
            plane.event("python", "tf.function-graph_building", at(k, 0.06), 1000)
        plane.event("python", f"EagerLocalExecute: __inference_{name}_{100 + count}",
                    at(k, 0.3), 1000)


def test_function_traced_every_step_is_retracing():
    space = new_space()
    plane = add_plane(space)
    plane.markers(8)
    function_calls(plane, 8, traced_steps=set(range(8)))
    (item,) = analyze(space).retracing
    assert item["function"] == "train_step" and item["growing"]
    assert item["tracing_steps"] == 8 and item["traces"] == 8 and item["calls"] == 8
    assert item["tracing_count_last"] - item["tracing_count_first"] == 7
    assert "reduce_retracing" in item["reason"]


def test_tracing_count_alone_is_evidence():
    space = new_space()
    plane = add_plane(space)
    plane.markers(8)
    function_calls(plane, 8, traced_steps={2, 4, 6}, with_call_stat=False)
    (item,) = analyze(space).retracing
    assert item["growing"] and item["tracing_steps"] == 3


def test_warm_up_tracing_is_not_retracing():
    space = new_space()
    plane = add_plane(space)
    plane.markers(8)
    function_calls(plane, 8, traced_steps={0})
    (item,) = analyze(space).retracing
    assert not item["growing"] and item["tracing_steps"] == 1


def test_function_never_traced_in_window_is_not_listed():
    space = new_space()
    plane = add_plane(space)
    plane.markers(8)
    function_calls(plane, 8, traced_steps=set())
    assert analyze(space).retracing == []


# -- the decoder ---------------------------------------------------------------------------


def reference_events(data: bytes):
    """(plane, line, metadata id, time, duration, stats) per event, via protobuf."""
    space = xplane.XSpace.FromString(data)
    stamps = [line.timestamp_ns for plane in space.planes for line in plane.lines]
    base = min(stamps) if stamps else 0
    out = []
    for p, plane in enumerate(space.planes):
        for li, line in enumerate(plane.lines):
            for e in line.events:
                stats = []
                for s in e.stats:
                    kind = s.WhichOneof("value")
                    if kind is not None:
                        value = getattr(s, kind)
                        if kind == "double_value":
                            value = repr(value)  # nan == nan
                        elif kind == "bytes_value":  # texts are kept as UTF-8
                            value = value.decode("utf-8", "replace")
                        stats.append((s.metadata_id, kind, value))
                out.append((p, li, e.metadata_id, (line.timestamp_ns - base) * 1000 + e.offset_ps,
                            e.duration_ps, stats))
    return out


def decoded_events(data: bytes):
    decoded = decode_space(data, select_names=lambda name: True)
    names = {2: "double_value", 3: "uint64_value", 4: "int64_value", 5: "str_value",
             6: "bytes_value", 7: "ref_value"}
    out = []
    for p, plane in enumerate(decoded.planes):
        by_event = {}
        for ev, sid, kind, raw, code in zip(plane.stat_event.tolist(), plane.stat_id.tolist(),
                                            plane.stat_kind.tolist(), plane.stat_raw.tolist(),
                                            plane.stat_string.tolist()):
            if kind == xplane.KIND_INT64:
                value = raw - (1 << 64) if raw >= 1 << 63 else raw
            elif kind == xplane.KIND_DOUBLE:
                value = repr(float(np.array([raw], np.uint64).view(np.float64)[0]))
            elif kind in (xplane.KIND_STR, xplane.KIND_BYTES):
                value = plane.strings[code]
            else:
                value = raw
            by_event.setdefault(ev, []).append((sid, names[kind], value))
        for i in range(len(plane)):
            out.append((p, int(plane.line[i]), int(plane.metadata_id[i]), int(plane.start_ps[i]),
                        int(plane.duration_ps[i]), by_event.get(i, [])))
    return out


def odd_space():
    """Every awkward encoding the decoder must survive."""
    space = new_space()
    plane = add_plane(space)
    for i in range(200):  # ids >= 128 need two-byte varints
        plane.stat_id(f"filler_{i}")
    e = plane.event("a", "first", 0, 5, int64_value_stat=-5)  # offset 0: field 2 absent
    e.stats.add(metadata_id=plane.stat_id("big"), uint64_value=(1 << 64) - 1)
    e.stats.add(metadata_id=plane.stat_id("neg"), int64_value=-(1 << 63))
    e.stats.add(metadata_id=plane.stat_id("dbl"), double_value=-0.0)
    e.stats.add(metadata_id=plane.stat_id("nan"), double_value=float("nan"))
    e.stats.add(metadata_id=plane.stat_id("long"), str_value="x" * 300)  # two-byte length
    e.stats.add(metadata_id=plane.stat_id("empty"), str_value="")
    e.stats.add(metadata_id=plane.stat_id("raw"), bytes_value=b"\x00\xff\x22")
    e.stats.add(metadata_id=plane.stat_id("unicode"), str_value="µs → 🙂")
    e.stats.add(metadata_id=0, int64_value=3)  # stat metadata id 0
    e.stats.add(metadata_id=plane.stat_id("novalue"))  # no value at all
    plane.message.event_metadata[0].name = "zero"  # event metadata id 0
    zero = plane.line("a").events.add(metadata_id=0, offset_ps=7)
    zero.stats.add(metadata_id=plane.stat_id("z"), ref_value=plane.stat_id("long"))
    big_event = plane.event("b", "big", 1 << 40, 1 << 41)
    for i in range(40):
        big_event.stats.add(metadata_id=plane.stat_id(f"s{i}"), int64_value=i * 1000003)
    plane.line("b").events.add()  # an empty event
    plane.line("empty line")
    add_plane(space, "/device:GPU:0").event("s", "gpu", 3, 4, x=1.5)
    add_plane(space, "no lines")
    return space


def test_decoder_matches_protobuf_on_awkward_encodings():
    data = odd_space().SerializeToString()
    assert decoded_events(data) == reference_events(data)


def test_decoder_matches_protobuf_when_fields_are_out_of_order():
    space = odd_space()
    data = bytearray()
    # Re-serialize each line with header fields after and between the events.
    for plane in space.planes:
        p = bytearray()
        meta = xplane.XPlane()
        meta.CopyFrom(plane)
        del meta.lines[:]
        p += meta.SerializeToString()
        for line in plane.lines:
            l = bytearray()
            events = [e.SerializeToString() for e in line.events]
            half = len(events) // 2
            for e in events[:half]:
                l += b"\x22" + encode_varint(len(e)) + e
            header = xplane.XLine(id=line.id, name=line.name, timestamp_ns=line.timestamp_ns,
                                  duration_ps=99)
            l += header.SerializeToString()
            for e in events[half:]:
                l += b"\x22" + encode_varint(len(e)) + e
            p += b"\x1a" + encode_varint(len(l)) + l
        data += b"\x0a" + encode_varint(len(p)) + p
    data = bytes(data)
    assert decoded_events(data) == reference_events(data)


def _reversed_event_bytes(event) -> bytes:
    """An XEvent with its fields in reverse order (legal, if unusual)."""
    out = bytearray()
    for stat in reversed(event.stats):
        body = stat.SerializeToString()
        out += b"\x22" + encode_varint(len(body)) + body
    out += b"\x18" + encode_varint(event.duration_ps)
    out += b"\x10" + encode_varint(event.offset_ps)
    out += b"\x08" + encode_varint(event.metadata_id)
    return bytes(out)


def test_analysis_survives_unusual_encodings():
    """Two-byte ids, long events, fields out of order: same result as the usual layout."""
    def build(reorder):
        space = new_space()
        plane = add_plane(space)
        for i in range(300):  # push the ids used below past one byte
            plane.stat_id(f"pad_{i}")
            plane.event_id(f"pad_event_{i}")
        plane.markers(8)
        for k in range(8):
            event = plane.alloc(at(k), 0x1000 * (k + 1), 4096, op="o" * 150)  # > 127 bytes
            plane.alloc(at(k, 0.6), 0x900000 + k, 64, op="churn")
            plane.free(at(k, 0.7), 0x900000 + k, 64)
            if reorder and k % 2:
                line = plane.line("tf_Compute/1")
                raw = _reversed_event_bytes(event)
                del line.events[-3]
                line.MergeFromString(b"\x22" + encode_varint(len(raw)) + raw)
        return space.SerializeToString()

    usual, unusual = build(False), build(True)
    assert usual != unusual
    for data in (usual, unusual):
        result = trace.analyze_space(data)
        (leak,) = result.suspicious
        assert leak.op == "o" * 150 and leak.steps_retained == 8
        assert leak.retained_bytes == 8 * 4096 and result.unmatched_frees == 0
        assert op_named(result, "churn") is None


def test_decoder_selects_by_name_and_by_sampled_stats():
    space = new_space()
    plane = add_plane(space)
    plane.markers(3, line="python")
    plane.event("python", "noise", 5)
    plane.event("python", "MemoryAllocation", 6, addr=1)
    decoded = decode_space(space.SerializeToString(),
                                  select_names=lambda n: n == "MemoryAllocation",
                                  select_stats={"step_num"})
    names = sorted(set(decoded.planes[0].names().tolist()))
    assert names == ["MemoryAllocation", "train"]
    assert decoded.planes[0].total_events == 5


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00\x00", b"hello world, not a trace", bytes(range(256)) * 4,
     b"\x0a\xff\xff\xff\x0f" + b"x" * 10],
)
def test_decoder_rejects_garbage_with_a_clear_error(data):
    with pytest.raises(xplane.XPlaneDecodeError):
        trace.analyze_space(data)


def test_decoder_rejects_every_truncation_cleanly():
    space = new_space()
    plane = add_plane(space)
    plane.markers(3)
    leaky_loop(plane, steps=3)
    data = space.SerializeToString()
    for cut in range(1, len(data), 7):
        try:
            trace.analyze_space(data[:cut])
        except xplane.XPlaneDecodeError:
            pass  # the only acceptable failure


# -- trace files on disk --------------------------------------------------------------------


def write_trace(run_dir, session, host, data: bytes):
    directory = os.path.join(run_dir, "plugins", "profile", session)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{host}.xplane.pb")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def leaky_trace_bytes(steps=6, op="leaky/MatMul"):
    space = new_space()
    plane = add_plane(space)
    plane.markers(steps)
    leaky_loop(plane, steps=steps, op=op)
    return space.SerializeToString()


def test_run_with_sessions_hosts_and_bad_files(tmp_path):
    run = str(tmp_path / "run")
    good = leaky_trace_bytes()
    write_trace(run, "2026_01_01_00_00_00", "host_a", good)
    write_trace(run, "2026_01_01_00_00_00", "host_b", leaky_trace_bytes(op="other/Op"))
    write_trace(run, "2026_01_02_00_00_00", "host_a", good[: len(good) // 2])  # truncated
    write_trace(run, "2026_01_02_00_00_00", "host_b", b"")  # empty
    write_trace(run, "2026_01_03_00_00_00", "host_a", os.urandom(4096))  # garbage
    write_trace(run, "2026_01_03_00_00_00", "host_b", good)
    report = traces.analyze_run_traces(run)
    got = {(s.session[-11:-9], s.host): s for s in report.sessions}
    assert len(report.sessions) == 6
    assert got[("01", "host_a")].error is None and got[("01", "host_b")].error is None
    assert got[("03", "host_b")].error is None
    truncated, empty, garbage = got[("02", "host_a")], got[("02", "host_b")], got[("03", "host_a")]
    assert "host_a.xplane.pb" in truncated.error and "truncated" in truncated.error
    assert "empty" in empty.error and "host_b.xplane.pb" in empty.error
    assert "not a readable profiler trace" in garbage.error
    assert len(report.errors) == 3
    merged = report.suspicious_ops()
    assert [o.op for o in merged] == ["leaky/MatMul", "other/Op"]
    assert merged[0].steps_total == 12 and merged[0].retained_bytes == 2 * 6 * 262144
    assert "leaked in 2 traces" in merged[0].reason
    json.dumps(report.to_dict())  # JSON-ready


def test_oversize_file_is_refused_before_reading(tmp_path):
    run = str(tmp_path / "run")
    data = leaky_trace_bytes()
    path = write_trace(run, "s1", "big", data)
    write_trace(run, "s2", "small", leaky_trace_bytes(steps=3))
    report = traces.analyze_run_traces(run, max_bytes=len(data) - 1)
    big, small = report.sessions
    assert path in big.error and str(len(data)) in big.error
    assert str(len(data) - 1) in big.error and "max_bytes" in big.error
    assert small.error is None and small.steps == 3


def test_remote_style_reading_through_gfile(tmp_path, monkeypatch):
    """The gfile path (used for gs:// and s3://) reads the same bytes."""
    run = str(tmp_path / "run")
    data = leaky_trace_bytes()
    path = write_trace(run, "s", "h", data)
    monkeypatch.setattr(traces, "READ_CHUNK_BYTES", 1000)
    monkeypatch.setattr(traces, "_is_remote", lambda p: True)
    assert bytes(traces.read_trace_file(path)) == data
    with pytest.raises(traces.TraceError, match="limit"):
        traces._read_all(path, 10, max_bytes=len(data) - 1)


def test_run_without_traces_and_missing_run(tmp_path):
    assert traces.analyze_run_traces(str(tmp_path)).sessions == []
    with pytest.raises(traces.TraceError):
        traces.analyze_run_traces(str(tmp_path / "nope"))


def test_session_report_fields(tmp_path):
    run = str(tmp_path / "run")
    write_trace(run, "s", "h", leaky_trace_bytes())
    (session,) = traces.analyze_run_traces(run).sessions
    assert (session.session, session.host) == ("s", "h")
    assert session.steps == 6 and session.step_source == "markers"
    assert session.memory_events == 18 and session.unmatched_frees == 0
    assert session.allocators == ["bfc_cpu"] and session.coverage_note
    assert [o.op for o in session.suspicious] == ["leaky/MatMul"]
    assert set(session.to_dict()) >= {
        "session", "host", "path", "error", "steps", "allocators", "memory_events",
        "coverage_note", "ops", "suspicious", "retracing", "unmatched_frees"}


def test_modules_do_not_import_tensorflow():
    code = textwrap.dedent(
        """
        import sys
        import tb_leak_plugin.reporting.traces, tb_leak_plugin.xplane.schema, tb_leak_plugin.capture.profiling
        import tb_leak_plugin.analysis.trace
        assert "tensorflow" not in sys.modules, "TensorFlow was imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- the profiler window, with a stand-in for TensorFlow -----------------------------------------


class FakeTensorFlow:
    """Records the profiler calls ProfilerWindow makes."""

    def __init__(self, fail_start=False):
        self.calls = []
        fake = self

        class Trace:
            def __init__(self, name, **kwargs):
                self.args = (name, kwargs)

            def __enter__(self):
                fake.calls.append(("open", self.args[1]["step_num"]))

            def __exit__(self, *exc):
                fake.calls.append(("close", self.args[1]["step_num"]))

        class Experimental:
            @staticmethod
            def start(logdir):
                if fail_start:
                    raise RuntimeError("another profiler is running")
                fake.calls.append(("start", logdir))

            @staticmethod
            def stop():
                fake.calls.append(("stop",))

        Experimental.Trace = Trace

        class Profiler:
            experimental = Experimental

        self.profiler = Profiler


def test_profiler_window_step_semantics(monkeypatch):
    from tb_leak_plugin.capture.profiling import ProfilerWindow

    fake = FakeTensorFlow()
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    window = ProfilerWindow("/logs", start_step=2, stop_step=5)
    for step in range(8):
        window.on_step_end(step)
    assert fake.calls == [
        ("start", "/logs"), ("open", 3), ("close", 3), ("open", 4), ("close", 4), ("open", 5),
        ("close", 5), ("stop",),
    ]
    assert window.state == "done" and window.steps_recorded == 3


def test_profiler_window_close_early_and_late_start(monkeypatch):
    from tb_leak_plugin.capture.profiling import ProfilerWindow

    fake = FakeTensorFlow()
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    window = ProfilerWindow("/logs", 0, 100)
    window.on_step_end(10)  # the first step seen is already inside the window
    window.on_step_end(11)
    window.close()
    window.close()
    assert fake.calls == [("start", "/logs"), ("open", 11), ("close", 11), ("open", 12),
                          ("close", 12), ("stop",)]
    past = ProfilerWindow("/logs", 0, 5)
    past.on_step_end(9)
    assert past.state == "done"


def test_profiler_window_never_raises(monkeypatch, caplog):
    from tb_leak_plugin.capture.profiling import ProfilerWindow

    monkeypatch.setitem(sys.modules, "tensorflow", FakeTensorFlow(fail_start=True))
    window = ProfilerWindow("/logs", 0, 3)
    with caplog.at_level("WARNING"):
        for step in range(5):
            window.on_step_end(step)
    assert window.state == "failed" and "another profiler" in window.error
    assert len([r for r in caplog.records if "tb-leak" in r.getMessage()]) == 1

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    window = ProfilerWindow("/logs", 0, 3)
    window.on_step_end(0)
    assert window.state == "failed" and "not imported" in window.error
    assert ProfilerWindow("/logs", 5, 5).state == "failed"
