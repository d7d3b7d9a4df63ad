"""The trace analysis on hand-built XSpace traces: which ops keep memory, steps,
allocator coverage notes and tf.function retracing.

No TensorFlow here (see test_profiler_capture.py for real recordings). GPU
planes cannot be recorded on this machine, so they are built by hand with
the event and stat names TensorFlow uses on GPU (``/device:GPU:0``,
allocator ``GPU_0_bfc``).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tb_leak_plugin.analysis import trace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xspace_builder import PS_PER_STEP, add_plane, analyze, at, leaky_loop, new_space, op_named  # noqa: E402


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
