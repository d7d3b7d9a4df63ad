"""The Leak tab reads a local logdir's event files itself, as the CLI does.

So its report is there before TensorBoard's loader has parsed the logdir,
equals ``tb-leak analyze``'s, and files of other tools are never parsed.
Real event files, TensorBoard's real data provider and WSGI application.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

from tb_leak_plugin.metadata import SeriesInfo  # noqa: E402
from tb_leak_plugin.plugin import leak_plugin as plugin_lib  # noqa: E402
from tb_leak_plugin.reporting import logdir as analyze  # noqa: E402
from tb_leak_plugin.summary import EventWriter  # noqa: E402

PREFIX = "/data/plugin/leak"
RSS = SeriesInfo("process", "rss_bytes", "bytes")


def _write_ours(run_dir: str, steps: range, per_step: float) -> None:
    writer = EventWriter(run_dir, flush_secs=1e9)
    for step in steps:
        writer.write(step, [(RSS, 300e6 + per_step * step)], wall_time=1.7e9 + step)
    writer.close()


def _write_theirs(run_dir: str, steps: range) -> str:
    """An event file of another tool, with a scalar the user tagged ``leak``."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(run_dir)
    for step in steps:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="leak", simple_value=float(step)),
                                             summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))])
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary))
    writer.close()
    return writer.get_logdir()


def _client(logdir: str, provider, **kwargs):
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    plugin = plugin_lib.LeakPlugin(base_plugin.TBContext(logdir=logdir, data_provider=provider),
                                   revalidate_secs=0, **kwargs)
    return Client(application.TensorBoardWSGI([plugin], data_provider=provider)), plugin


def _get_json(client, path, **params):
    response = client.get(PREFIX + path, query_string=params)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def _unloaded_provider(logdir: str):
    """TensorBoard's Python data provider before its loader has read anything."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"leak": 10})
    multiplexer.AddRunsFromDirectory(logdir)
    return data_provider.MultiplexerDataProvider(multiplexer, logdir)


@pytest.fixture()
def logdir(tmp_path):
    root = tmp_path / "logs"
    _write_ours(str(root / "leaky"), range(400), per_step=256 * 1024)
    _write_ours(str(root / "clean"), range(400), per_step=0.0)
    _write_theirs(str(root / "other"), range(50))
    return str(root)


def test_the_report_is_there_before_tensorboard_has_loaded_the_logdir(logdir):
    client, _ = _client(logdir, _unloaded_provider(logdir))
    rows = {row["run"]: row for row in _get_json(client, "/runs")["runs"]}
    assert set(rows) == {"leaky", "clean"}, "another tool's run (with a 'leak' scalar) is not listed"
    cli = {run["run"]: run for run in analyze.analyze_logdir(logdir).to_dict()["runs"]}
    for run in ("leaky", "clean"):
        tab = _get_json(client, "/report", run=run)
        assert tab["verdict"] == cli[run]["verdict"] == rows[run]["verdict"]
        assert tab["series"] == cli[run]["series"]
    assert rows["leaky"]["verdict"] == "leak"
    timeline = _get_json(client, "/timeline", run="leaky", tag=RSS.tag)
    assert timeline["points"], timeline


def test_runs_are_found_and_refreshed_as_files_appear_and_grow(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    client, plugin = _client(str(root), _unloaded_provider(str(root)))
    assert _get_json(client, "/runs")["runs"] == []
    other = _write_theirs(str(root / "other"), range(20))
    assert _get_json(client, "/runs")["runs"] == []
    _write_ours(str(root / "job"), range(0, 100), per_step=0.0)
    first = _get_json(client, "/report", run="job")
    _write_ours(str(root / "job"), range(100, 300), per_step=0.0)  # a second file: the job went on
    second = _get_json(client, "/report", run="job")
    assert second["samples"] > first["samples"]
    # Files of other tools are scanned once, then only what was appended.
    (path,) = [os.path.join(other, n) for n in os.listdir(other)]
    scanned = plugin._cache._scanned[path]
    assert scanned[1] == os.path.getsize(path) and scanned[2] is False


def test_a_fifo_named_like_an_event_file_never_blocks_the_listing(logdir):
    fifo = os.path.join(logdir, "leaky", "events.out.tfevents.fifo")
    os.mkfifo(fifo)
    client, _ = _client(logdir, _unloaded_provider(logdir))
    out = []
    thread = threading.Thread(target=lambda: out.append(_get_json(client, "/runs")), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "listing blocked on a FIFO"
    assert {row["run"] for row in out[0]["runs"]} == {"leaky", "clean"}


def test_a_truncated_or_corrupt_file_keeps_what_was_read(logdir):
    run_dir = os.path.join(logdir, "leaky")
    (name,) = os.listdir(run_dir)
    path = os.path.join(run_dir, name)
    with open(path, "r+b") as handle:
        handle.seek(os.path.getsize(path) // 2)
        handle.write(b"\xff" * 64)
    client, _ = _client(logdir, _unloaded_provider(logdir))
    report = _get_json(client, "/report", run="leaky")
    cli = {run["run"]: run for run in analyze.analyze_logdir(logdir).to_dict()["runs"]}["leaky"]
    assert report["series"] == cli["series"] and 0 < report["samples"] < 400
    assert any("corrupt record" in warning for warning in report["warnings"]), report["warnings"]


def test_the_tab_answers_with_short_thread_switches_and_puts_the_interval_back(logdir):
    """Next to TensorBoard's Python loader every GIL take-back of the reader
    waits a switch interval: the tab's routes run at
    READING_SWITCH_INTERVAL_S, and the interval found is restored after them,
    also when several routes overlap or one fails."""
    from tb_leak_plugin.plugin import cache

    seen = []

    def builder(run_data, with_traces=False):
        seen.append(sys.getswitchinterval())
        return analyze.report_for_run(run_data, with_traces=with_traces)

    before = sys.getswitchinterval()
    client, _ = _client(logdir, _unloaded_provider(logdir), report_builder=builder)
    _get_json(client, "/runs")
    assert seen and all(abs(s - cache.READING_SWITCH_INTERVAL_S) < 1e-9 for s in seen), seen
    assert sys.getswitchinterval() == before
    assert client.get(PREFIX + "/report", query_string={"run": "../nope"}).status_code == 404
    assert sys.getswitchinterval() == before
    # Overlapping readers: the first to leave does not restore it under the second.
    with cache.short_switches:
        with cache.short_switches:
            pass
        assert abs(sys.getswitchinterval() - cache.READING_SWITCH_INTERVAL_S) < 1e-9
    assert sys.getswitchinterval() == before
    # An interval someone set meanwhile is theirs: not overwritten.
    try:
        with cache.short_switches:
            sys.setswitchinterval(0.002)
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)
