"""ProfilerWindow, the profiler window of Monitor(profile_steps=...), with a
stand-in for TensorFlow: which steps it records, early close, late start, and
that it never raises.
"""

from __future__ import annotations

import sys


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


def test_the_monitor_records_the_window_and_closes_it_at_close(monkeypatch, tmp_path):
    # (TensorFlow's profiler is replaced by a recorder: what is under test is
    # the window's record in the run, which the analysis leaves out of memory.)
    from tb_leak_plugin.analysis.report import build_run_report
    from tb_leak_plugin.capture.monitor import Monitor
    from tb_leak_plugin.eventfile.reader import load_run

    monkeypatch.setitem(sys.modules, "tensorflow", FakeTensorFlow())
    kept = []
    monitor = Monitor(str(tmp_path / "run"), profile_steps=(10, 10**6), trace_leaks=False)
    for step in range(300):
        if step >= 50:
            kept.append(bytearray(1 << 20))  # 250 MiB kept while the window is still open
        monitor.sample(step)
    monitor.close()
    run = load_run("run", str(tmp_path / "run"))
    window = run.series["leak/profiler/recording"]
    assert window.values.tolist() == [1.0, 0.0] and int(window.steps[-1]) == 299
    report = build_run_report(run)
    assert report.verdict == "leak", report.reason
    assert any("profiler windows span" in w for w in report.warnings)
