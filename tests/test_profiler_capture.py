"""Trace analysis on real TensorFlow recordings made with ProfilerWindow.

Each recording runs in a subprocess: the allocator environment variables
must be set before TensorFlow starts, and a profiler session is
process-wide. The loops are small (a few dozen steps).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from tb_leak_plugin.reporting import traces
from tb_leak_plugin.xplane import schema as xplane

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow to record traces"
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 30

RECORD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    import tensorflow as tf
    from tb_leak_plugin.capture.profiling import ProfilerWindow

    def record(logdir, make_step, keep, steps={steps}):
        kept = []
        window = ProfilerWindow(logdir, start_step=2, stop_step=2 + steps)
        for step in range(steps + 5):
            out = make_step(step)
            if keep:
                kept.append(out)  # the leak: every step's output stays alive
            window.on_step_end(step)
        window.close()
        assert window.state == "done", window.error

    def matmul_step(rows, cols):
        w = tf.Variable(tf.random.normal([cols, cols]))

        @tf.function
        def step():
            return tf.random.normal([rows, cols]) @ w

        return lambda _: step()

    base = sys.argv[1]
    # 256x256 float32 = 256 KiB: large enough for the oneDNN allocator to trace.
    record(base + "/keep", matmul_step(256, 256), keep=True)
    record(base + "/nokeep", matmul_step(256, 256), keep=False)
    # 64x80 float32 = 20 KiB: below the oneDNN tracing threshold.
    record(base + "/small", matmul_step(64, 80), keep=True)
    if sys.argv[2] == "retrace":
        @tf.function
        def scaled(i):
            return tf.random.normal([8, 8]) * i
        record(base + "/retrace", lambda step: scaled(step), keep=False, steps=8)
    """
)


def _record(directory, env_extra, retrace):
    env = dict(os.environ)  # oneDNN on, as conftest.py sets it for every CPU
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    env.update(env_extra)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    script = RECORD.format(root=ROOT, steps=STEPS)
    result = subprocess.run(
        [sys.executable, "-c", script, str(directory), "retrace" if retrace else "no"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return directory


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """Recorded with TensorFlow's x86 default, oneDNN on."""
    return _record(tmp_path_factory.mktemp("default"), {}, retrace=True)


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    """Recorded with every allocation traced."""
    return _record(
        tmp_path_factory.mktemp("full"),
        {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPU_ALLOCATOR_USE_BFC": "1"},
        retrace=False,
    )


def session(run_dir):
    report = traces.analyze_run_traces(str(run_dir))
    assert len(report.sessions) == 1
    (only,) = report.sessions
    assert only.error is None, only.error
    return only


def test_kept_outputs_flag_the_producing_op(default_runs):
    result = session(default_runs / "keep")
    assert result.steps == STEPS and result.step_source == "markers"
    assert result.allocators == ["mklcpu"]
    (leak,) = result.suspicious
    assert "matmul" in leak.op.lower()
    assert leak.steps_retained >= STEPS - 1
    assert leak.retained_bytes_per_step == pytest.approx(256 * 256 * 4, rel=0.1)
    assert leak.shape == "[256,256]" and leak.data_type == "float32"
    assert "256 KiB" in result.coverage_note


def test_same_loop_without_the_list_flags_nothing(default_runs):
    result = session(default_runs / "nokeep")
    assert result.memory_events > 0
    assert result.suspicious == []
    # At most the last step's output, which the loop still holds.
    assert all(o.steps_retained <= 1 for o in result.ops)


def test_small_allocations_are_invisible_under_onednn(default_runs):
    result = session(default_runs / "small")
    assert result.suspicious == []
    note = result.coverage_note
    assert "256 KiB" in note and "TF_ENABLE_ONEDNN_OPTS=0 TF_CPU_ALLOCATOR_USE_BFC=1" in note


def test_full_coverage_sees_small_leaks_too(full_runs):
    for name, size in (("keep", 256 * 256 * 4), ("small", 64 * 80 * 4)):
        result = session(full_runs / name)
        assert result.allocators == ["bfc_cpu_allocator_for_gpu"]
        assert "Every allocation" in result.coverage_note
        (leak,) = result.suspicious
        assert "matmul" in leak.op.lower() and leak.steps_retained >= STEPS - 1
        # BFC rounds sizes up, so at least the tensor's bytes per step.
        assert leak.retained_bytes_per_step >= 0.9 * size
    assert session(full_runs / "nokeep").suspicious == []


def test_retracing_function_is_reported(default_runs):
    result = session(default_runs / "retrace")
    (item,) = [r for r in result.retracing if r["function"] == "scaled"]
    assert item["growing"] and item["tracing_steps"] >= 7
    assert item["tracing_count_last"] > item["tracing_count_first"]
    assert all(not r["growing"] for r in session(default_runs / "keep").retracing)


def test_our_messages_read_tensorflow_files(default_runs):
    """The descriptor-built classes are wire-compatible with TensorFlow's."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    (path,) = glob.glob(str(default_runs / "keep" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    with open(path, "rb") as handle:
        data = handle.read()
    ours = xplane.XSpace.FromString(data)
    theirs = xplane_pb2.XSpace.FromString(data)
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
    assert [p.name for p in ours.planes] == [p.name for p in theirs.planes]
