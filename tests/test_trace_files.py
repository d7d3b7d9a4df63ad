"""Profiler trace files on disk: sessions and hosts of a run, bad and oversize
files, remote-style reading through gfile, and the report's fields.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tb_leak_plugin.reporting import traces

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xspace_builder import leaky_trace_bytes, write_trace  # noqa: E402


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
    assert os.path.relpath(path, run) in big.error and str(len(data)) in big.error
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


def test_sessions_are_named_relative_to_the_run(tmp_path):
    """Reports (and so the Leak tab's ``ops`` route) never carry server paths."""
    run = str(tmp_path / "run")
    write_trace(run, "s", "good", leaky_trace_bytes())
    write_trace(run, "s", "bad", b"garbage")
    report = traces.analyze_run_traces(run)
    assert [s.path for s in report.sessions] == [
        "plugins/profile/s/bad.xplane.pb", "plugins/profile/s/good.xplane.pb"]
    bad = report.sessions[0]
    assert bad.error.startswith("plugins/profile/s/bad.xplane.pb: not a readable profiler trace")
    assert str(tmp_path) not in json.dumps(report.to_dict())
