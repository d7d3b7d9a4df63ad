"""Helpers shared by the Leak-tab tests and benchmark (not a conftest: imported).

* :func:`leak_logdir` writes, once per pytest session, a logdir from real
  TensorFlow loops run through ``tb_leak_plugin.Monitor`` (in a subprocess,
  so the test process never imports TensorFlow itself), plus runs with
  hostile names and unreadable plugin data.
* :func:`plugin_client` loads a logdir through TensorBoard's real data
  provider and returns a ``werkzeug.test.Client`` over TensorBoard's WSGI app.
* :class:`TensorBoardProcess` runs a real ``tensorboard`` server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

XSS = "<img src=x onerror=window.__xss=1>"
LEAKY, CLEAN, LINKED, ODD = "leaky", "clean", "linked", "odd"
RSS_TAG = "leak/process/rss_bytes"
# The allocator's bytes in use grow exactly 256 KiB per step in the leaky run
# (RSS grows too, but how much the OS shows is up to the allocator).
TF_TAG = "leak/tf/CPU:0/bytes_in_use"
STEPS = 300

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
        monitor = tb_leak_plugin.Monitor(os.path.join(logdir, name), overhead_budget=1.0,
                                         profile_steps=profile, flush_secs=1)
        for step in range(steps):
            # 256 KiB per output: large enough to be traced with oneDNN on.
            y = tf.random.normal([256, 256]) @ w
            if keep:
                kept.append(y)  # the leak: every step's output stays alive
            time.sleep(0.004)  # a training step's worth of time, for the overhead budget
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
    evil_type = SeriesInfo("objects", "live_count", "count", XSS)
    dicts = SeriesInfo("objects", "live_count", "count", "builtins.dict")
    tracked = SeriesInfo("gc", "tracked_objects", "count")
    start = time.time() - 200
    writer = EventWriter(os.path.join(logdir, XSS))
    for step in range(120):
        writer.write(step, [
            (rss, 400e6 + 65536.0 * step + rng.normal(0, 20000)),
            (evil_type, 10.0 + 3 * step),
            (dicts, 5000.0 + rng.normal(0, 3)),
            (tracked, 90000.0 + 3 * step + rng.normal(0, 2)),
        ], wall_time=start + step)
    writer.close()

    # A good series and one whose plugin data no tb-leak can read.
    writer = EventWriter(os.path.join(logdir, ODD))
    for step in range(60):
        writer.write(step, [(rss, 300e6 + rng.normal(0, 5000))], wall_time=start + step)
    writer.close()
    raw = EventFileWriter(os.path.join(logdir, ODD), filename_suffix=".bad")
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
    writer = EventWriter(os.path.join(logdir, LINKED))
    for step in range(40):
        writer.write(step, [(rss, 200e6 + rng.normal(0, 5000))], wall_time=start + step)
    writer.close()
    os.symlink(os.path.join(outside, "plugins"), os.path.join(logdir, LINKED, "plugins"))


def build_logdir(root: str) -> tuple[str, str]:
    """Write the test logdir under ``root``; returns (logdir, outside_dir)."""
    logdir = os.path.join(root, "logs")
    outside = os.path.join(root, "outside")
    tmp = logdir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_repo_root() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", _TF_SCRIPT, tmp, str(STEPS)], check=True, env=env, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _write_synthetic_runs(tmp, outside)
    os.replace(tmp, logdir)
    return logdir, outside


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def leak_logdir(tmp_path_factory) -> tuple[str, str]:
    """The session's shared test logdir (built on first use): (logdir, outside_dir)."""
    root = tmp_path_factory.getbasetemp() / "leak_plugin_logdir"
    logdir = root / "logs"
    if not logdir.is_dir():
        root.mkdir(exist_ok=True)
        return build_logdir(str(root))
    return str(logdir), str(root / "outside")


def multiplexer_provider(logdir: str, samples: int = 0):
    """TensorBoard's Python data provider over ``logdir`` (loaded once)."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"leak": samples})
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, logdir)


def plugin_client(logdir: str, **plugin_kwargs):
    """(Client, plugin) over TensorBoard's WSGI app with only the Leak plugin."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_leak_plugin.plugin.leak_plugin import LeakPlugin

    provider = multiplexer_provider(logdir)
    context = base_plugin.TBContext(logdir=logdir, data_provider=provider)
    plugin_kwargs.setdefault("revalidate_secs", 0)
    plugin = LeakPlugin(context, **plugin_kwargs)
    app = application.TensorBoardWSGI([plugin], data_provider=provider)
    return Client(app), plugin


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TensorBoardProcess:
    """A real ``tensorboard`` serving ``logdir`` on 127.0.0.1 (context manager)."""

    def __init__(self, logdir: str, load_fast: bool, extra_args=()):
        self.logdir = logdir
        self.load_fast = load_fast
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.process = None
        self.log_path = None

    def __enter__(self):
        import tempfile

        handle, self.log_path = tempfile.mkstemp(prefix="tensorboard-", suffix=".log")
        os.close(handle)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", self.logdir, "--host", "127.0.0.1",
             "--port", str(self.port), f"--load_fast={'true' if self.load_fast else 'false'}",
             "--reload_interval", "5", *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        try:
            self.wait_ready()
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def wait_ready(self, timeout: float = 90.0, min_runs: int = 5, min_leak_runs: int = 2) -> None:
        """Until TensorBoard lists ``min_runs`` runs and the Leak plugin answers.

        Then waits (at most ~15 s) for ``min_leak_runs`` runs with leak series,
        and returns either way: a test then says what is missing.
        """
        deadline = time.time() + timeout
        last = None
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self.process.returncode}: {self.log()}")
            if time.time() > deadline:
                raise TimeoutError(f"tensorboard not ready after {timeout} s ({last}): {self.log()}")
            try:
                if len(self.get_json("/data/runs")) >= min_runs:
                    self.get_json("/data/plugin/leak/runs")
                    break
            except Exception as error:  # not up yet
                last = error
            time.sleep(0.3)
        settle = time.time() + 15
        while time.time() < settle:
            if len(self.get_json("/data/plugin/leak/runs").get("runs", [])) >= min_leak_runs:
                return
            time.sleep(0.5)

    def get_json(self, path: str):
        import json

        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.loads(response.read())

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def __exit__(self, *exc_info):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()
        if self.log_path and os.path.exists(self.log_path):
            os.unlink(self.log_path)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
