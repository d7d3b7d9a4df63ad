"""The Leak tab's report cache: one report per (experiment, run).

A local logdir is read as the CLI reads it: the runs are found by walking
the logdir, and a run's series are read from its event files by
:func:`tb_leak_plugin.eventfile.reader.load_run` (every point up to its
bound, memory bounded), never from TensorBoard's in-memory copy. So the tab
and ``tb-leak analyze`` give the same report on the same files, the report
is there as soon as the files can be read (not when TensorBoard's loader
has parsed every event), and TensorBoard keeps only a small sample of the
leak series. A run's files are first scanned (once, then only what was
appended) for tb-leak's plugin metadata, so runs of other tools are never
parsed. A remote logdir (``s3://...``), or a TensorBoard with no logdir, is
read through TensorBoard's data provider instead.

Reports are cached per (experiment, run) and rebuilt when the run's data
changes: the size and mtime of its event files (or, through the provider,
its series' last step and wall time), and the size and mtime of its
profiler trace files. What is listed is re-checked at most every
``revalidate_secs`` (TensorBoard reloads the logdir every 5 s by default).

Profiler traces are read only from runs the data provider lists whose real
path stays inside the logdir (:meth:`ReportCache.run_directory`), and the
report the routes serve names files relative to the run directory, never by
their absolute path on the server. On a remote logdir (``s3://...``) a run's
directory is the logdir joined with the run's name (no links there), and one
listing of the logdir per revalidation says which runs have traces.

A restarted job is read as TensorBoard's data server reads it: a point at
step ``s`` drops every point of the same series read before it at step
``s`` or later (:func:`latest_attempt`). The Rust data server has done that
already; the Python multiplexer hands points over in file order, so the
same rule gives the same series under either ``--load_fast`` setting. A
restart writes a new event file, and for that the CLI's reader drops the
same points (``eventfile.reader.not_orphaned``); steps that go back
*within* one file are dropped here as the data server drops them, while the
CLI keeps the last write of each step.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sys
import threading
import time

import numpy as np
from tensorboard import errors

from tb_leak_plugin import metadata
from tb_leak_plugin.eventfile import reader, remote
from tb_leak_plugin.plugin.views import Points, relative_paths

logger = logging.getLogger("tb_leak_plugin")

PLUGIN_NAME = metadata.PLUGIN_NAME

# read_scalars(downsample=...) asks for at most this many points: all of them.
READ_ALL_POINTS = 2**31 - 1
REVALIDATE_SECS = 5.0
MAX_EXPERIMENTS = 8
# What tb-leak's plugin metadata looks like inside an event record:
# PluginData.plugin_name "leak" (field 1) followed by its content (field 2).
# A Summary.Value whose tag is "leak" is followed by another field, so a
# user's own "leak" scalar does not match.
# Python's thread switch interval while the tab answers. The reader and the
# analysis are numpy calls that let go of the GIL and must take it back;
# with TensorBoard's Python loader reading events in another thread (itself
# taking and dropping the GIL per record), each take-back waits for the
# switch interval (5 ms by default). Building the report of one 224 MB run
# took 1.2 s alone and 23-27 s next to that loader; 3-4 s at 10 us (1e-4:
# still 23 s). Only TensorBoard's process is affected, and only while one of
# the tab's routes runs (benchmarks/bench_long_runs.py).
READING_SWITCH_INTERVAL_S = 1e-5
_OUR_METADATA = b"\x0a\x04" + metadata.PLUGIN_NAME.encode() + b"\x12"
_SCAN_CHUNK_BYTES = 8 << 20


@dataclasses.dataclass
class RunEntry:
    """One run's data and report, valid while its fingerprint holds."""

    fingerprint: tuple
    report: dict
    points: dict  # tag -> Points
    series_reports: dict  # tag -> series dict of the report


@dataclasses.dataclass
class Listing:
    """What the data provider lists for one experiment, at one time."""

    at: float
    known_runs: frozenset
    series: dict  # run -> {tag: ScalarTimeSeries} (provider) or event file paths (local)
    run_dirs: dict  # run -> safe local directory or None
    fingerprints: dict  # run -> tuple
    paths: dict = dataclasses.field(default_factory=dict)  # run -> directory its event files are in (local)


class _Experiment:
    def __init__(self):
        self.lock = threading.Lock()
        self.listing: Listing | None = None
        self.entries: dict[str, RunEntry] = {}
        self.build_locks: dict[str, threading.Lock] = {}


class ReportCache:
    """Per-experiment listings and per-run reports, read through the data provider.

    Args:
      provider: TensorBoard's data provider, or None.
      logdir_root: the logdir's real path, or None when it is not local.
      remote_logdir: the logdir when it is remote (``s3://...``), else None.
      report_builder: ``RunData -> RunReport``.
      run_data_type, series_type: ``data.RunData`` and ``data.Series``
        (imported by the caller, so this module imports cheaply).
      revalidate_secs: how long the provider's listing is trusted before it
        is read again to notice new data.
      clock: monotonic seconds.
    """

    def __init__(self, provider, logdir_root: str | None, report_builder, run_data_type, series_type,
                 *, revalidate_secs: float = REVALIDATE_SECS, clock=time.monotonic,
                 remote_logdir: str | None = None, read_files: bool = True):
        self._provider = provider
        self._read_files = read_files and logdir_root is not None
        self._scanned: dict = {}  # event file path -> (identity, bytes scanned, found)
        self._logdir_root = logdir_root
        self._remote_logdir = remote_logdir
        self._report_builder = report_builder
        self._RunData = run_data_type
        self._Series = series_type
        self._revalidate_secs = float(revalidate_secs)
        self._clock = clock
        self._lock = threading.Lock()
        self._experiments: collections.OrderedDict[str, _Experiment] = collections.OrderedDict()
        self._warned: set = set()

    def _experiment(self, experiment: str) -> _Experiment:
        with self._lock:
            state = self._experiments.get(experiment)
            if state is None:
                state = self._experiments[experiment] = _Experiment()
                while len(self._experiments) > MAX_EXPERIMENTS:
                    self._experiments.popitem(last=False)
            else:
                self._experiments.move_to_end(experiment)
            return state

    def listing(self, ctx, experiment: str) -> Listing:
        """What the provider lists for ``experiment``, re-read when older than
        ``revalidate_secs``; drops cached entries of runs no longer listed."""
        state = self._experiment(experiment)
        with state.lock:
            listing = state.listing
            now = self._clock()
            if listing is not None and now - listing.at < self._revalidate_secs:
                return listing
        if self._read_files:
            return _store(state, self._local_listing())
        if self._provider is None:
            raise errors.NotFoundError("TensorBoard has no data provider")
        known = frozenset(r.run_name for r in self._provider.list_runs(ctx, experiment_id=experiment))
        series = self._provider.list_scalars(ctx, experiment_id=experiment, plugin_name=PLUGIN_NAME)
        series = {run: dict(tags) for run, tags in series.items() if tags}
        run_dirs, fingerprints = {}, {}
        remote_stamps = self._remote_trace_stamps() if self._remote_logdir and series else None
        for run, tags in series.items():
            run_dir = self.run_directory(run, known)
            run_dirs[run] = run_dir
            if remote_stamps is not None:
                stamp = remote_stamps.get(run_dir, ())
                if run_dir is not None and run_dir not in remote_stamps:
                    run_dirs[run] = None  # no traces: nothing to read
            else:
                stamp = trace_stamp(run_dir, self._logdir_root)
            if stamp is None:  # a trace file links outside the logdir: read no traces
                run_dirs[run] = None
                stamp = ()
            fingerprints[run] = (
                tuple(sorted((tag, meta.max_step, meta.max_wall_time) for tag, meta in tags.items())),
                stamp,
            )
        return _store(state, Listing(at=self._clock(), known_runs=known, series=series, run_dirs=run_dirs,
                                     fingerprints=fingerprints))

    def _local_listing(self) -> Listing:
        """The runs of the local logdir that hold tb-leak series, found as the
        CLI finds them; a run's fingerprint is its event files' sizes and
        mtimes and its profiler files'."""
        root = self._logdir_root
        warnings: list = []
        try:
            locations = reader.locate_runs(root, warnings)
        except reader.LogdirError as error:
            self._warn_once(str(error))
            locations = {}
        for warning in warnings:
            self._warn_once(warning)
        known = frozenset(locations)
        series, run_dirs, fingerprints, paths = {}, {}, {}, {}
        live = set()
        for run, location in locations.items():
            try:
                files = reader.event_files(location.path)
            except OSError as error:
                self._warn_once(f"cannot list the event files of run {run!r}: {error.strerror or error}")
                continue
            stamps, ours = [], False
            for path in files:
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                live.add(path)
                stamps.append((os.path.basename(path), info.st_size, info.st_mtime_ns))
                ours = self._holds_ours(path, info) or ours
            if not ours:
                continue
            series[run] = tuple(files)
            paths[run] = location.path
            run_dir = self.run_directory(run, known)
            stamp = trace_stamp(run_dir, root)
            if stamp is None:  # a trace file links outside the logdir: read no traces
                run_dir, stamp = None, ()
            run_dirs[run] = run_dir
            fingerprints[run] = (tuple(stamps), stamp)
        for path in list(self._scanned):
            if path not in live:
                del self._scanned[path]
        return Listing(at=self._clock(), known_runs=known, series=series, run_dirs=run_dirs,
                       fingerprints=fingerprints, paths=paths)

    def _holds_ours(self, path: str, info) -> bool:
        """Whether the event file holds tb-leak plugin metadata; only the
        bytes appended since the last look are scanned."""
        identity = (info.st_dev, info.st_ino)
        known = self._scanned.get(path)
        start = 0
        if known is not None and known[0] == identity and known[1] <= info.st_size:
            if known[2] or known[1] == info.st_size:
                return known[2]
            start = max(0, known[1] - len(_OUR_METADATA) + 1)
        found, end = False, start
        try:
            with reader.open_event_file(path) as handle:  # never blocks on a FIFO swapped in
                handle.seek(start)
                tail = b""
                while not found:
                    chunk = handle.read(_SCAN_CHUNK_BYTES)
                    if not chunk:
                        break
                    end += len(chunk)
                    found = _OUR_METADATA in tail + chunk
                    tail = chunk[-(len(_OUR_METADATA) - 1):]
        except OSError as error:
            self._warn_once(f"cannot read {path}: {error.strerror or error}")
            return False
        self._scanned[path] = (identity, end, found)
        return found

    def run_directory(self, run: str, known_runs) -> str | None:
        """The run's local directory, or None unless it is safe to read.

        Safe means: the provider lists the run, the logdir is local, the name
        is relative without backslashes or NULs, and the real path (symlinks
        resolved) lies inside the logdir's real path.
        """
        root = self._logdir_root
        if run not in known_runs:
            return None
        if not run or "\x00" in run or "\\" in run or os.path.isabs(run) or run.startswith("~"):
            return None
        if self._remote_logdir:
            parts = run.split("/")
            if any(part in ("", "..") for part in parts) or "://" in run:
                return None
            return self._remote_logdir if run == "." else remote.join(self._remote_logdir, run)
        if root is None:
            return None
        path = os.path.realpath(os.path.join(root, run))
        return path if inside(root, path) and os.path.isdir(path) else None

    def _remote_trace_stamps(self) -> dict:
        """Run directory -> names of its profiler files, for every run of the
        remote logdir that has any (one listing); {} when it cannot be listed."""
        try:
            tree = remote.list_tree(self._remote_logdir)
        except Exception as error:
            self._warn_once(f"cannot list {self._remote_logdir} for profiler traces: {remote.describe_error(error)}")
            return {}
        marker = "/plugins/profile"
        stamps: dict = {}
        for directory, names in tree.items():
            position = (directory + "/").find(marker + "/")
            if position < 0:
                continue
            run_dir = directory[:position]
            rest = directory[position + len(marker):].strip("/")
            stamps.setdefault(run_dir, []).extend(f"{rest}/{name}" if rest else name for name in names)
        return {run_dir: tuple(sorted(names)) for run_dir, names in stamps.items()}

    def entry_for(self, ctx, experiment: str, run: str) -> RunEntry:
        """The run's current entry; NotFoundError when it has no leak series."""
        listing = self.listing(ctx, experiment)
        if run not in listing.series:
            raise errors.NotFoundError(f"no run {run!r} with tb-leak series")
        return self.entry(ctx, experiment, run, listing)

    def entry(self, ctx, experiment: str, run: str, listing: Listing) -> RunEntry:
        """The run's entry for ``listing``'s fingerprint, built at most once at a time."""
        state = self._experiment(experiment)
        fingerprint = listing.fingerprints[run]
        with state.lock:
            entry = state.entries.get(run)
            if entry is not None and entry.fingerprint == fingerprint:
                return entry
            build_lock = state.build_locks.setdefault(run, threading.Lock())
        with build_lock:  # one build per run at a time; the others wait for it
            with state.lock:
                entry = state.entries.get(run)
                if entry is not None and entry.fingerprint == fingerprint:
                    return entry
            entry = self._build_entry(ctx, experiment, run, listing)
            with state.lock:
                if run in (state.listing.series if state.listing else {}):
                    state.entries[run] = entry
            return entry

    def _build_entry(self, ctx, experiment: str, run: str, listing: Listing) -> RunEntry:
        if self._read_files:
            run_data = reader.load_run(run, listing.paths[run], list(listing.series[run]))
            run_data.path = listing.run_dirs.get(run)  # None: its traces are not read
            points = {}
            for tag, series in run_data.series.items():
                points[tag] = _finite_points(series)
            return self._finish_entry(run_data, points, listing.fingerprints[run])
        from tensorboard.data import provider as provider_lib

        tags = listing.series[run]
        data = self._provider.read_scalars(
            ctx, experiment_id=experiment, plugin_name=PLUGIN_NAME, downsample=READ_ALL_POINTS,
            run_tag_filter=provider_lib.RunTagFilter(runs=[run]),
        ).get(run, {})
        run_data = self._RunData(name=run, path=listing.run_dirs.get(run))
        points = {}
        for tag in sorted(tags):
            try:
                info = metadata.parse_plugin_metadata(tags[tag].plugin_content)
            except metadata.PluginDataError as error:
                message = f"series {tag!r} of run {run!r} skipped: {error}"
                run_data.warnings.append(message)
                self._warn_once(message)
                continue
            datums = data.get(tag) or []
            if not datums:
                continue
            n = len(datums)
            steps = np.fromiter((d.step for d in datums), dtype=np.int64, count=n)
            wall_times = np.fromiter((d.wall_time for d in datums), dtype=np.float64, count=n)
            values = np.fromiter((d.value for d in datums), dtype=np.float64, count=n)
            keep = latest_attempt(steps)
            if not keep.all():
                steps, wall_times, values = steps[keep], wall_times[keep], values[keep]
            series = self._Series.from_points(tag, info, steps, wall_times, values)
            run_data.series[tag] = series
            points[tag] = _finite_points(series)
        return self._finish_entry(run_data, points, listing.fingerprints[run])

    def _finish_entry(self, run_data, points: dict, fingerprint: tuple) -> RunEntry:
        report = self._report_builder(run_data, with_traces=run_data.path is not None).to_dict()
        report = relative_paths(report, run_data.path, self._logdir_root or self._remote_logdir)
        return RunEntry(
            fingerprint=fingerprint,
            report=report,
            points=points,
            series_reports={s["tag"]: s for s in report["series"]},
        )

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("tb-leak: %s", message)


class _ShortSwitches:
    """While any thread of the tab reads, Python switches threads every
    ``READING_SWITCH_INTERVAL_S``; the interval found is restored when the
    last one is done (unless someone else changed it meanwhile)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._readers = 0
        self._saved = self._set = None

    def __enter__(self):
        with self._lock:
            if self._readers == 0:
                self._saved = sys.getswitchinterval()
                if self._saved > READING_SWITCH_INTERVAL_S:
                    sys.setswitchinterval(READING_SWITCH_INTERVAL_S)
                self._set = sys.getswitchinterval()  # as Python stores it
            self._readers += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._saved is not None:
                if sys.getswitchinterval() == self._set:
                    sys.setswitchinterval(self._saved)
                self._saved = None
        return False


short_switches = _ShortSwitches()


def _finite_points(series) -> Points:
    """The series' finite points, sharing its arrays when every point is finite
    (an entry keeps these and the report, not the run's data)."""
    finite = np.isfinite(series.values)
    if finite.all():
        return Points(series.steps, series.wall_times, series.values)
    return Points(series.steps[finite], series.wall_times[finite], series.values[finite])


def _store(state: _Experiment, listing: Listing) -> Listing:
    """Make ``listing`` the experiment's, dropping entries of runs it no longer lists."""
    with state.lock:
        state.listing = listing
        for run in list(state.entries):
            if run not in listing.series:
                del state.entries[run]
    return listing


def latest_attempt(steps: np.ndarray) -> np.ndarray:
    """Which points of one series (in the provider's read order) a restart left
    standing, as a bool mask: a point survives when every point read after it
    has a larger step. A job resumed from a checkpoint at step ``s`` writes
    ``s`` again, and what the dead attempt wrote from ``s`` on is dropped,
    exactly as TensorBoard's data server preempts it."""
    keep = np.ones(steps.shape[0], dtype=bool)
    if steps.size > 1:
        later_min = np.minimum.accumulate(steps[::-1])[::-1]
        keep[:-1] = steps[:-1] < later_min[1:]
    return keep


def trace_stamp(run_dir: str | None, root: str | None):
    """Size and mtime of the run's profiler files, or None when any part of
    ``plugins/profile`` (the folder itself or a link in it) resolves outside ``root``."""
    if run_dir is None:
        return ()
    profile = os.path.join(run_dir, "plugins", "profile")
    if not os.path.isdir(profile):
        return ()
    if root is None or not inside(root, os.path.realpath(profile)):
        return None
    stamp = []
    for directory, subdirs, files in os.walk(profile, followlinks=False):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            if os.path.islink(path) and not inside(root, os.path.realpath(path)):
                return None
        for name in files:
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            stamp.append((os.path.relpath(path, profile), info.st_size, info.st_mtime_ns))
    return tuple(sorted(stamp))


def inside(root: str, path: str) -> bool:
    """True when ``path`` is ``root`` or lies under it (both real paths)."""
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False
