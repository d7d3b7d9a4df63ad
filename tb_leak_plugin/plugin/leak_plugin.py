"""The Leak tab: TensorBoard plugin routes over one report per run.

A local logdir's series are read from its event files by the CLI's own
reader (so the tab and ``tb-leak analyze`` report the same thing, whatever
``--load_fast`` says and however far TensorBoard's loader has got, and
TensorBoard need not hold every point); a remote logdir's, or those of a
TensorBoard with no logdir, through TensorBoard's data provider (the
Python multiplexer and the Rust data server alike), turned into the same
``RunData``. Every route is a view of the report
:func:`tb_leak_plugin.reporting.logdir.report_for_run` builds, never a second
analysis. Profiler traces are read from run directories under the logdir
(local, or ``<logdir>/<run>`` on an object store such as ``s3://``),
and only from runs whose real path stays inside it;
no answer names a file by its absolute path on the server. A restarted job's
orphaned points are dropped as the CLI drops them (through the provider:
as TensorBoard's data server does, the same under either ``--load_fast``).

Reports are cached per (experiment, run) by
:class:`tb_leak_plugin.plugin.cache.ReportCache`; the JSON each route returns
is shaped by the pure functions of :mod:`tb_leak_plugin.plugin.views`.

Routes (under ``/data/plugin/leak/``; JSON shapes in ``http_api.md``):
``runs``, ``report``, ``timeline``, ``objects``, ``ops``, ``compare``, and
the frontend's files from a fixed whitelist.
"""

from __future__ import annotations

import functools
import logging
import os
import time

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_leak_plugin import metadata
from tb_leak_plugin.analysis import compare as compare_lib
from tb_leak_plugin.plugin import jobs_view, views
from tb_leak_plugin.plugin.cache import REVALIDATE_SECS, ReportCache, RunEntry, short_switches
from tb_leak_plugin.plugin.views import SPARKLINE_POINTS

__all__ = [
    "DEFAULT_SAMPLES_PER_TAG", "LIMIT_TIMELINE_POINTS", "LOCAL_SAMPLES_PER_TAG", "MAX_COMPARE_RUNS", "MAX_TIMELINE_POINTS",
    "MIN_TIMELINE_POINTS", "PLUGIN_NAME", "REVALIDATE_SECS", "SPARKLINE_POINTS", "STATIC_FILES",
    "LeakPlugin", "LeakPluginLoader", "frontend_directory",
]

logger = logging.getLogger("tb_leak_plugin")

PLUGIN_NAME = metadata.PLUGIN_NAME

# Points TensorBoard keeps per leak series unless --samples_per_plugin says
# otherwise (a reservoir: an even random sample of the series, always with
# its latest point; the multiplexer and the Rust data server alike). The tab
# reads a local logdir's files itself (every point, as the CLI does), so this
# sample is what it analyses only on a remote logdir. A verdict on a random
# 10 points, TensorBoard's default for unknown plugins, would be worthless;
# keeping all of them (0) let an old 3-day run of 10 series x 520,000 points
# take 2-3 GB of TensorBoard's memory. The Monitor writes about
# 16*sqrt(seconds) points a series (8,100 in 3 days): every point of a run of
# up to about 4 days is kept, and a longer or older run is analysed on 10,000
# random points a series, about 10 in each of the <= 1,024 blocks the trend
# analysis reduces a series to (its verdicts do not change:
# tests/test_long_runs.py, benchmarks/bench_long_runs.py).
DEFAULT_SAMPLES_PER_TAG = 10_000
# ... and on a local --logdir, where the tab never reads TensorBoard's copy,
# the one point a reservoir must keep (0 would mean every point). TensorBoard
# still lists the run's tags and the tab; its copy of an old 520,000-point
# run then costs it nothing (50-60 MB at 10,000: benchmarks/bench_long_runs.py).
LOCAL_SAMPLES_PER_TAG = 1

# Timeline points sent to the browser (after min/max-per-bucket downsampling).
MAX_TIMELINE_POINTS = 2000
MIN_TIMELINE_POINTS = 16
LIMIT_TIMELINE_POINTS = 20000
MAX_COMPARE_RUNS = 12

# The frontend, served from this whitelist only: name -> content type.
STATIC_FILES = {
    "index.js": "text/javascript",
    "model.js": "text/javascript",
    "views.js": "text/javascript",
    "chart.js": "text/javascript",
    "format.js": "text/javascript",
    "jobs.js": "text/javascript",
    "style.css": "text/css",
}


class LeakPluginLoader(base_plugin.TBLoader):
    """Loads the Leak tab; bounds the points TensorBoard keeps of a leak series."""

    def fix_flags(self, flags):
        """Give ``leak`` a default in ``--samples_per_plugin`` (a user's value wins):
        ``LOCAL_SAMPLES_PER_TAG`` when the tab reads a local ``--logdir`` itself,
        ``DEFAULT_SAMPLES_PER_TAG`` when it reads TensorBoard's copy (a remote
        logdir, ``--logdir_spec``)."""
        samples = getattr(flags, "samples_per_plugin", None)
        if samples is None or samples == "":
            samples = {}
        elif isinstance(samples, str):  # not parsed yet (TensorBoard parses it to a dict)
            samples = _parse_samples_per_plugin(samples)
        if not isinstance(samples, dict):
            return
        if PLUGIN_NAME not in samples:
            samples = dict(samples)
            samples[PLUGIN_NAME] = LOCAL_SAMPLES_PER_TAG if _reads_files(flags) else DEFAULT_SAMPLES_PER_TAG
            flags.samples_per_plugin = samples

    def load(self, context):
        """The plugin, or None (logged) when its dependencies cannot be imported."""
        try:
            return LeakPlugin(context)
        except ImportError as error:
            logger.warning("tb-leak: the Leak tab is disabled, a dependency is missing: %s", error)
            return None
        except Exception as error:  # never take TensorBoard down with the tab
            logger.warning("tb-leak: the Leak tab is disabled, it failed to load: %r", error)
            return None


def _switching_often(app):
    """A route that runs with short thread switches (see
    ``cache.READING_SWITCH_INTERVAL_S``): next to TensorBoard's Python loader,
    every step of the answer that lets go of the GIL would otherwise wait
    up to 5 ms to get it back."""

    @functools.wraps(app)
    def wrapped(environ, start_response):
        with short_switches:
            return app(environ, start_response)

    return wrapped


def _reads_files(flags) -> bool:
    """Whether the tab will read this TensorBoard's logdir itself (``LeakPlugin``'s rule)."""
    logdir = getattr(flags, "logdir", None)
    return isinstance(logdir, str) and bool(logdir) and "://" not in logdir


def _parse_samples_per_plugin(text: str) -> dict:
    out = {}
    for token in text.split(","):
        if "=" in token:
            key, value = token.strip().split("=", 1)
            try:
                out[key] = int(value)
            except ValueError:
                continue
    return out


class LeakPlugin(base_plugin.TBPlugin):
    """Serves reports, downsampled timelines, object types and ops of leak runs.

    Args:
      context: TensorBoard's ``TBContext`` (``data_provider``, ``logdir``).
      report_builder: ``RunData -> RunReport``; default
        ``analyze.report_for_run`` (the CLI's), injectable for tests.
      revalidate_secs: how long the provider's listing is trusted before it
        is read again to notice new data.
      frontend_dir: where the frontend files are; default found by
        :func:`frontend_directory`.
      clock: monotonic seconds, injectable for tests.
      read_files: read a local logdir's event files directly (the default);
        False reads every logdir through the data provider.
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context, *, report_builder=None, revalidate_secs: float = REVALIDATE_SECS,
                 frontend_dir: str | None = None, clock=time.monotonic, read_files: bool = True):
        # Heavy imports here, not at module level: the loader must import cheaply.
        from tb_leak_plugin.reporting.logdir import report_for_run
        from tb_leak_plugin.analysis.series import RunData, Series

        self._provider = context.data_provider
        logdir = getattr(context, "logdir", None) or ""
        logdir_root = remote_logdir = None
        if logdir and "://" not in logdir:
            logdir_root = os.path.realpath(os.path.expanduser(logdir))
        elif logdir:
            from tb_leak_plugin.eventfile import remote

            remote_logdir = remote.normalize(logdir)
        self._frontend_dir = frontend_dir or frontend_directory()
        self._cache = ReportCache(
            self._provider, logdir_root, report_builder or report_for_run, RunData, Series,
            revalidate_secs=revalidate_secs, clock=clock, remote_logdir=remote_logdir, read_files=read_files,
        )

    # -- TBPlugin ---------------------------------------------------------

    def get_plugin_apps(self):
        apps = {
            "/runs": self._serve_runs,
            "/report": self._serve_report,
            "/timeline": self._serve_timeline,
            "/objects": self._serve_objects,
            "/ops": self._serve_ops,
            "/compare": self._serve_compare,
            "/difference": self._serve_difference,
            "/static/*": self._serve_static,
        }
        for name in STATIC_FILES:
            apps["/" + name] = self._serve_static
        return {route: _switching_often(app) for route, app in apps.items()}

    def is_active(self):
        """True when any run has leak series (TensorBoard also checks data_plugin_names)."""
        if self._provider is None:
            return False
        try:
            from tensorboard import context as tb_context

            plugins = self._provider.list_plugins(tb_context.RequestContext(), experiment_id="")
            return PLUGIN_NAME in (plugins or ())
        except Exception:
            return False

    def data_plugin_names(self):
        return (PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Leak")

    # -- pure implementations (raise tensorboard.errors.*) ------------------

    def runs_impl(self, ctx, experiment: str) -> dict:
        """Every run with leak series: verdict and growth, leaks first."""
        listing = self._cache.listing(ctx, experiment)
        rows = []
        for run in listing.series:
            try:
                entry = self._cache.entry(ctx, experiment, run, listing)
            except Exception as error:  # one broken run must not hide the others
                logger.warning("tb-leak: analysing run %r failed: %r", run, error)
                rows.append(views.failed_run_row(run, error))
                continue
            row = views.run_row(run, entry.report)
            row["task"] = entry.report.get("task")
            rows.append(row)
        return jobs_view.with_jobs(views.runs_listing(rows))

    def report_impl(self, ctx, experiment: str, run: str) -> dict:
        """The run's full report (``RunReport.to_dict()``)."""
        return self._cache.entry_for(ctx, experiment, run).report

    def timeline_impl(self, ctx, experiment: str, run: str, tag: str, x: str = "step",
                      max_points: int = MAX_TIMELINE_POINTS) -> dict:
        """One series downsampled for a chart, with its fitted trend overlay."""
        _check_x(x)
        entry = self._cache.entry_for(ctx, experiment, run)
        points, series = _series_of(entry, run, tag)
        return views.timeline(run, tag, points, series, x, max_points)

    def objects_impl(self, ctx, experiment: str, run: str) -> dict:
        """Live-object types of the run, growing ones first, with sparklines."""
        entry = self._cache.entry_for(ctx, experiment, run)
        return views.objects(run, entry.report, entry.series_reports, entry.points)

    def ops_impl(self, ctx, experiment: str, run: str) -> dict:
        """Ops the profiler trace shows retaining memory across steps, with coverage notes."""
        return views.ops(run, self._cache.entry_for(ctx, experiment, run).report)

    def compare_impl(self, ctx, experiment: str, runs: list, tag: str, x: str = "step",
                     max_points: int = MAX_TIMELINE_POINTS) -> dict:
        """The same series from several runs, for an overlay chart."""
        _check_x(x)
        runs = list(dict.fromkeys(r for r in runs if r))
        if not runs:
            raise errors.InvalidArgumentError("give the runs to compare: compare?runs=a,b&tag=...")
        if len(runs) > MAX_COMPARE_RUNS:
            raise errors.InvalidArgumentError(f"at most {MAX_COMPARE_RUNS} runs can be compared")
        per_run = max(MIN_TIMELINE_POINTS, max_points // len(runs))
        timelines, missing = [], []
        for run in runs:
            entry = self._cache.entry_for(ctx, experiment, run)
            if tag not in entry.points:
                missing.append(run)
                continue
            points, series = _series_of(entry, run, tag)
            timelines.append(views.timeline(run, tag, points, series, x, per_run))
        if not timelines:
            raise errors.NotFoundError(f"none of the runs has series {tag!r}")
        return views.compare(tag, x, timelines, missing)

    def difference_impl(self, ctx, experiment: str, base: str, candidate: str) -> dict:
        """The verdict on the difference in growth between two runs: the
        same function (`analysis.compare.compare_runs`) as `tb-leak compare`."""
        if base == candidate:
            raise errors.InvalidArgumentError("base and candidate must be two different runs")
        reports = [self._cache.entry_for(ctx, experiment, run).report for run in (base, candidate)]
        return compare_lib.compare_runs(*reports)

    def run_directory(self, run: str, known_runs) -> str | None:
        """The run's local directory, or None unless it is safe to read
        (see :meth:`ReportCache.run_directory`)."""
        return self._cache.run_directory(run, known_runs)

    # -- routes -------------------------------------------------------------

    @wrappers.Request.application
    def _serve_runs(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.runs_impl(ctx, experiment))

    @wrappers.Request.application
    def _serve_report(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.report_impl(ctx, experiment, _arg(request, "run")))

    @wrappers.Request.application
    def _serve_timeline(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.timeline_impl(
            ctx, experiment, _arg(request, "run"), _arg(request, "tag"),
            x=request.args.get("x", "step"), max_points=_points_arg(request),
        ))

    @wrappers.Request.application
    def _serve_objects(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.objects_impl(ctx, experiment, _arg(request, "run")))

    @wrappers.Request.application
    def _serve_ops(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.ops_impl(ctx, experiment, _arg(request, "run")))

    @wrappers.Request.application
    def _serve_compare(self, request):
        ctx, experiment = _request_context(request)
        # Repeated run= parameters carry names with commas; runs=a,b is shorthand.
        runs = request.args.getlist("run")
        for value in request.args.getlist("runs"):
            runs.extend(value.split(","))
        return _json(request, self.compare_impl(
            ctx, experiment, runs, _arg(request, "tag"), x=request.args.get("x", "step"),
            max_points=_points_arg(request),
        ))

    @wrappers.Request.application
    def _serve_difference(self, request):
        ctx, experiment = _request_context(request)
        return _json(request, self.difference_impl(ctx, experiment, _arg(request, "base"),
                                                   _arg(request, "candidate")))

    @wrappers.Request.application
    def _serve_static(self, request):
        path = request.path
        marker = f"/plugin/{PLUGIN_NAME}/"
        name = path[path.find(marker) + len(marker):] if marker in path else ""
        if name.startswith("static/"):
            name = name[len("static/"):]
        content_type = STATIC_FILES.get(name)
        if content_type is None or self._frontend_dir is None:
            raise errors.NotFoundError(f"no such file: {name!r}")
        try:
            with open(os.path.join(self._frontend_dir, name), "rb") as handle:
                body = handle.read()
        except OSError:
            raise errors.NotFoundError(f"frontend file {name!r} is missing from this installation") from None
        return http_util.Respond(request, body, content_type)


# ---------------------------------------------------------------- helpers


def frontend_directory() -> str | None:
    """Where the frontend files are: ``tb_leak_plugin/frontend`` in an installed
    wheel (found through importlib), else ``<repo>/frontend`` in a checkout."""
    try:
        import importlib.resources

        root = importlib.resources.files("tb_leak_plugin.frontend")
        candidate = os.fspath(root)
        if os.path.isfile(os.path.join(candidate, "index.js")):
            return candidate
    except (ImportError, TypeError, ValueError, AttributeError):
        pass
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(package, "frontend"), os.path.join(os.path.dirname(package), "frontend")):
        if os.path.isfile(os.path.join(candidate, "index.js")):
            return candidate
    return None


def _series_of(entry: RunEntry, run: str, tag: str):
    points = entry.points.get(tag)
    series = entry.series_reports.get(tag)
    if points is None or series is None:
        raise errors.NotFoundError(f"run {run!r} has no series {tag!r}")
    return points, series


def _check_x(x: str) -> None:
    if x not in ("step", "wall_time"):
        raise errors.InvalidArgumentError(f"x must be 'step' or 'wall_time', not {x!r}")


def _request_context(request):
    from tensorboard import plugin_util

    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def _arg(request, name: str) -> str:
    value = request.args.get(name)
    if value is None or value == "":
        raise errors.InvalidArgumentError(f"missing query parameter {name!r}")
    return value


def _points_arg(request) -> int:
    raw = request.args.get("points")
    if raw is None:
        return MAX_TIMELINE_POINTS
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgumentError(f"points must be an integer, not {raw!r}") from None
    if not MIN_TIMELINE_POINTS <= value <= LIMIT_TIMELINE_POINTS:
        raise errors.InvalidArgumentError(
            f"points must be between {MIN_TIMELINE_POINTS} and {LIMIT_TIMELINE_POINTS}")
    return value


def _json(request, body):
    return http_util.Respond(request, body, "application/json")
