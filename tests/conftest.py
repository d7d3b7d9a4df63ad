"""Shared test set-up: quiet TensorFlow logs, oneDNN on, a data-provider
reader, and the Leak tab's fixtures: a logdir written once per session by real
TensorFlow loops, a plugin client, a real TensorBoard server, Chromium."""

import os
import shutil
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow turns oneDNN on by default only on CPUs with AVX-512 and the
# like; elsewhere its CPU allocator keeps no statistics and the profiler
# records no memory events. The tests fix it on, so that they check the same
# probes on every CI machine (subprocesses inherit it); tests of the other
# setting pass TF_ENABLE_ONEDNN_OPTS=0 to their own subprocess.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402  (the shared logdir's run and tag names)


def read_through_data_provider(logdir):
    """Every leak series of ``logdir`` as TensorBoard's data provider serves it.

    Returns {run: {tag: (plugin_content, [(step, value), ...])}}.
    """
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard import context

    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"leak": 0})
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    ctx = context.RequestContext()
    listing = provider.list_scalars(ctx, experiment_id="", plugin_name="leak")
    out = {}
    for run, tags in listing.items():
        data = provider.read_scalars(ctx, experiment_id="", plugin_name="leak",
                                     downsample=10**9, run_tag_filter=_filter(run, list(tags)))
        out[run] = {tag: (tags[tag].plugin_content, [(d.step, d.value) for d in data[run][tag]])
                    for tag in tags}
    return out


def _filter(run, tags):
    from tensorboard.data import provider

    return provider.RunTagFilter(runs=[run], tags=tags)


@pytest.fixture
def data_provider_reader():
    return read_through_data_provider


# -- the Leak tab's shared logdir -------------------------------------------------------------


class LeakLogdir(NamedTuple):
    """The session's shared test logdir, and a folder outside it that no
    route may read (run ``linked`` links its profile folder there)."""

    path: str
    outside: str


@pytest.fixture(scope="session")
def leak_logdir(tmp_path_factory) -> LeakLogdir:
    """A logdir written once per session: real TensorFlow loops through
    ``tb_leak_plugin.Monitor`` (``leaky``, with a profiler trace, and
    ``clean``; in a subprocess, so the test process never imports TensorFlow),
    plus runs with hostile names, unreadable plugin data and a profile folder
    linked outside the logdir. Run and tag names are in ``conftest_plugin``."""
    return _build_leak_logdir(str(tmp_path_factory.mktemp("leak_plugin_logdir")))


@pytest.fixture(scope="session")
def plugin_client():
    """A factory: ``plugin_client(logdir, **plugin_kwargs)`` -> (werkzeug
    ``Client`` over TensorBoard's WSGI app with only the Leak plugin, the plugin)."""
    return cp.plugin_client


@pytest.fixture(scope="session")
def tensorboard_server():
    """A factory: ``tensorboard_server(logdir, load_fast=...)`` -> a context
    manager running a real ``tensorboard`` on 127.0.0.1 (its ``url``, ``get_json``)."""
    return cp.TensorBoardProcess


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the Chromium the browser tests drive; skips the test without it."""
    if not os.path.exists(cp.CHROMIUM):
        pytest.skip(f"Chromium not found at {cp.CHROMIUM} (apt-get install chromium)")
    return cp.CHROMIUM


# Run in a subprocess: real TensorFlow loops through the Monitor.
_TF_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tb_leak_plugin

    logdir, steps = sys.argv[1], int(sys.argv[2])

    def loop(name, keep, profile=None):
        w = tf.random.normal([256, 256])
        kept = []
        monitor = tb_leak_plugin.Monitor(os.path.join(logdir, name), profile_steps=profile, flush_secs=1)
        for step in range(steps):
            # 256 KiB per output: large enough to be traced with oneDNN on.
            y = tf.random.normal([256, 256]) @ w
            if keep:
                kept.append(y)  # the leak: every step's output stays alive
            time.sleep(0.005)  # a training step's worth of time: 600 steps make ~3.5 s of training
            monitor.sample(step)
        monitor.close()

    loop("leaky", keep=True, profile=(100, 110))
    loop("clean", keep=False)
    """
)


def _write_synthetic_runs(logdir: str, outside: str) -> None:
    """Runs written without TensorFlow: a hostile run and type name, bad plugin data,
    and a run whose profile folder links outside the logdir."""
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from tb_leak_plugin.metadata import SeriesInfo
    from tb_leak_plugin.summary import EventWriter

    rng = np.random.default_rng(7)
    rss = SeriesInfo("process", "rss_bytes", "bytes")
    evil_type = SeriesInfo("objects", "live_count", "count", cp.XSS)
    dicts = SeriesInfo("objects", "live_count", "count", "builtins.dict")
    tracked = SeriesInfo("gc", "tracked_objects", "count")
    start = time.time() - 200
    writer = EventWriter(os.path.join(logdir, cp.XSS))
    for step in range(120):
        writer.write(step, [
            (rss, 400e6 + 65536.0 * step + rng.normal(0, 20000)),
            (evil_type, 10.0 + 3 * step),
            (dicts, 5000.0 + rng.normal(0, 3)),
            (tracked, 90000.0 + 3 * step + rng.normal(0, 2)),
        ], wall_time=start + step)
    writer.close()

    # A good series and one whose plugin data no tb-leak can read.
    writer = EventWriter(os.path.join(logdir, cp.ODD))
    for step in range(60):
        writer.write(step, [(rss, 300e6 + rng.normal(0, 5000))], wall_time=start + step)
    writer.close()
    raw = EventFileWriter(os.path.join(logdir, cp.ODD), filename_suffix=".bad")
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="leak", content=b"\x12\x10ab"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )
    for step in range(20):
        event = event_pb2.Event(step=step, wall_time=start + step)
        value = event.summary.value.add(tag="leak/bogus/series", tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT, float_val=[float(step)]))
        if step == 0:
            value.metadata.CopyFrom(metadata)
        raw.add_event(event)
    raw.close()

    # Outside the logdir: a run with a "trace" that must never be read.
    os.makedirs(os.path.join(outside, "plugins", "profile", "session"), exist_ok=True)
    with open(os.path.join(outside, "plugins", "profile", "session", "host.xplane.pb"), "wb") as handle:
        handle.write(b"not for the plugin")
    with open(os.path.join(outside, "secret.txt"), "w") as handle:
        handle.write("outside the logdir")
    writer = EventWriter(os.path.join(logdir, cp.LINKED))
    for step in range(40):
        writer.write(step, [(rss, 200e6 + rng.normal(0, 5000))], wall_time=start + step)
    writer.close()
    os.symlink(os.path.join(outside, "plugins"), os.path.join(logdir, cp.LINKED, "plugins"))


def _build_leak_logdir(root: str) -> LeakLogdir:
    """Write the shared test logdir under ``root``."""
    logdir = os.path.join(root, "logs")
    outside = os.path.join(root, "outside")
    tmp = logdir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_repo_root() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", _TF_SCRIPT, tmp, str(cp.STEPS)], check=True, env=env, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _write_synthetic_runs(tmp, outside)
    os.replace(tmp, logdir)
    return LeakLogdir(logdir, outside)


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
