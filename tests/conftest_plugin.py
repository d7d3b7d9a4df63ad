"""What the Leak-tab tests share besides fixtures (imported, not a conftest).

* The names of the runs and tags of the shared test logdir, which the
  ``leak_logdir`` fixture of ``tests/conftest.py`` writes once per session
  (tests parametrize over them, so they must be importable).
* :func:`plugin_client` loads a logdir through TensorBoard's real data
  provider and returns a ``werkzeug.test.Client`` over TensorBoard's WSGI
  app (the ``plugin_client`` fixture).
* :class:`TensorBoardProcess` runs a real ``tensorboard`` server (the
  ``tensorboard_server`` fixture), and where Chromium is: benchmarks and
  scripts use these without pytest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

XSS = "<img src=x onerror=window.__xss=1>"
LEAKY, CLEAN, LINKED, ODD = "leaky", "clean", "linked", "odd"
RSS_TAG = "leak/process/rss_bytes"
# The allocator's bytes in use grow exactly 256 KiB per step in the leaky run
# (RSS grows too, but how much the OS shows is up to the allocator).
TF_TAG = "leak/tf/CPU:0/bytes_in_use"
STEPS = 600

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
