"""Read tb-leak series back out of a logdir, without TensorFlow.

Files are opened through TensorBoard's own I/O layer (its ``gfile``, which
also speaks ``s3://`` through boto3 and other schemes through fsspec; see
:mod:`tb_leak_plugin.eventfile.remote`), records are framed here with CRC
checks, and each record is decoded with TensorBoard's ``Event`` protobuf.
Every point is kept up to :data:`MAX_POINTS_PER_SERIES` a series; past
that, every ``stride``-th point read (evenly over the run, a warning says
so), so memory stays bounded. A remote logdir is listed once, whole (for S3
in one paginated listing), and each remote event file is read with one
request when it fits in a read chunk.

A half-written last record (a job still writing) ends a file quietly; a
corrupt record ends that file with a warning naming file and offset, and
everything read before it is kept. Anything named like an event file that
is not a regular file (a FIFO, a socket, a device) is skipped with a
warning, never opened; directories that cannot be listed are skipped with a
warning, and the walk is iterative, so no depth of nesting stops it.

A restarted job (resumed from a checkpoint) is read as TensorBoard reads
it: a run's event files are read in name (= creation) order, and a series'
points in a file at or after that series' first step in any *later* file
are dropped (TensorBoard's "purge orphaned data"), so the dead attempt's
steps past the checkpoint never mix with the new attempt's. Within one
file, the last point written for a repeated step wins.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import stat

import numpy as np
from tensorboard.compat.proto import event_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin import metadata
from tb_leak_plugin.eventfile import fast_decode as fast_events, remote as remote_io
from tb_leak_plugin.eventfile.records import FOOTER as _FOOTER, HAVE_FAST_CRC, HEADER as _HEADER, crc32c, masked_crc
from tb_leak_plugin.analysis.series import RunData, Series

EVENT_FILE_PATTERN = re.compile(r"tfevents")
READ_CHUNK_BYTES = 8 << 20
# A record longer than this is treated as corruption rather than allocated.
MAX_RECORD_BYTES = 256 << 20
# Points of one series held while reading: past twice this, every other one is
# let go (evenly over the run; see _Column), so memory stays bounded whatever a
# file holds. The Monitor writes about 16*sqrt(seconds) points a series (8,100
# in 3 days, 26,000 in 30), all kept; the trend analysis reduces a series to at
# most 1,024 blocks, so 32-64 points a block are left where a series is thinned.
MAX_POINTS_PER_SERIES = 1 << 15



class LogdirError(Exception):
    """The logdir cannot be read at all (missing, not a directory, no access)."""


@dataclasses.dataclass
class LogdirData:
    """Runs read from one logdir, in run-name order."""

    logdir: str
    runs: list[RunData]
    warnings: list[str] = dataclasses.field(default_factory=list)


is_remote = remote_io.is_remote


def _join(*parts: str) -> str:
    return remote_io.join(*parts) if is_remote(parts[0]) else os.path.join(*parts)


@dataclasses.dataclass
class RunLocation:
    """Where a run is: its directory and, for a remote logdir, what the
    listing already found in it (so nothing is listed twice)."""

    path: str
    #: Event file paths in name order, or None to list the directory.
    files: list[str] | None = None
    #: For a remote run: whether anything lies under ``plugins/profile``.
    has_profile: bool | None = None


def discover_runs(logdir: str, warnings: list[str] | None = None) -> dict[str, str]:
    """Return run name -> run directory for every directory holding event files.

    Run names are paths relative to ``logdir`` with ``/`` separators; the
    logdir itself is ``.``. Subdirectories that cannot be listed are skipped
    and named in ``warnings`` (when given). Raises LogdirError when
    ``logdir`` itself is not a readable directory.
    """
    return {name: location.path for name, location in locate_runs(logdir, warnings).items()}


def locate_runs(logdir: str, warnings: list[str] | None = None) -> dict[str, RunLocation]:
    """Like :func:`discover_runs`, with what a remote listing found per run."""
    if is_remote(logdir):
        return _locate_remote_runs(logdir)
    return {name: RunLocation(path) for name, path in _discover_local_runs(logdir, warnings).items()}


def _locate_remote_runs(logdir: str) -> dict[str, RunLocation]:
    try:
        tree = remote_io.list_tree(logdir)
    except FileNotFoundError:
        raise LogdirError(f"logdir {logdir!r} does not exist (nothing is stored under it)") from None
    except Exception as error:
        raise LogdirError(f"cannot read logdir {logdir!r}: {remote_io.describe_error(error)}") from None
    root = remote_io.normalize(logdir)
    profiled = set()
    marker = "/" + "/".join(_PROFILE_DIR) + "/"
    for directory in tree:
        position = (directory + "/").find(marker)
        if position >= 0:
            profiled.add(directory[:position])
    runs = {}
    for directory, names in tree.items():
        events = [name for name in names if EVENT_FILE_PATTERN.search(name)]
        if events:
            runs[_relative(root, directory)] = RunLocation(
                directory, [_join(directory, name) for name in sorted(events)], directory in profiled)
    return dict(sorted(runs.items()))


_PROFILE_DIR = ("plugins", "profile")


def _discover_local_runs(logdir: str, warnings: list[str] | None = None) -> dict[str, str]:
    try:
        exists = gfile.exists(logdir)
        is_dir = exists and gfile.isdir(logdir)
    except Exception as error:
        raise LogdirError(f"cannot read logdir {logdir!r}: {error}") from None
    if not exists:
        raise LogdirError(f"logdir {logdir!r} does not exist")
    if not is_dir:
        raise LogdirError(f"logdir {logdir!r} is not a directory")
    runs = {}
    skipped: list[str] = []
    try:
        for directory, files in _walk(logdir, skipped):
            if any(EVENT_FILE_PATTERN.search(name) for name in files):
                rel = _relative(logdir, directory)
                runs[rel] = directory
    except Exception as error:
        raise LogdirError(f"cannot list logdir {logdir!r}: {error}") from None
    if warnings is not None:
        warnings.extend(skipped)
    return dict(sorted(runs.items()))


def _walk(logdir: str, warnings: list[str]):
    """Yield (directory, file names) under ``logdir``, parents before children.

    Iterative (an explicit stack), so a logdir nested thousands of levels deep
    is walked like a shallow one. A subdirectory that cannot be listed (no
    permission, a path too long for the OS) is skipped with a warning; the
    logdir itself failing to list raises. Local directories follow symlinks
    (runs are often linked into a logdir) but visit each real directory once,
    so a link loop cannot repeat runs or walk forever.
    """
    remote = is_remote(logdir)
    seen: set = set()
    stack = [logdir]
    while stack:
        directory = stack.pop()
        try:
            if remote:
                subdirs, files = _list_remote(directory)
            else:
                identity = _identity(directory)
                if identity in seen:
                    continue
                seen.add(identity)
                subdirs, files = _list_local(directory, seen)
        except OSError as error:
            if directory == logdir:
                raise
            reason = error.strerror or type(error).__name__
            warnings.append(f"{directory}: cannot list this directory ({reason}); "
                            "skipped it and everything under it")
            continue
        yield directory, files
        stack.extend(_join(directory, name) for name in sorted(subdirs, reverse=True))


def _identity(directory: str) -> tuple[int, int]:
    info = os.stat(directory)
    return info.st_dev, info.st_ino


def _list_local(directory: str, seen: set) -> tuple[list[str], list[str]]:
    """(subdirectory names not visited yet, other names) of a local directory."""
    subdirs, files = [], []
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if not is_dir:
                files.append(entry.name)
                continue
            try:
                info = entry.stat()
            except OSError:
                subdirs.append(entry.name)  # e.g. a path too long: its visit says why
                continue
            if (info.st_dev, info.st_ino) not in seen:
                subdirs.append(entry.name)
    return subdirs, files


def _list_remote(directory: str) -> tuple[list[str], list[str]]:
    subdirs, files = [], []
    try:
        names = gfile.listdir(directory)
    except Exception as error:
        raise OSError(str(error)) from None
    for name in names:
        name = name.rstrip("/")
        (subdirs if gfile.isdir(_join(directory, name)) else files).append(name)
    return subdirs, files


def _relative(logdir: str, directory: str) -> str:
    if is_remote(logdir):
        rel = remote_io.normalize(directory)[len(remote_io.normalize(logdir)):].strip("/")
    else:
        rel = os.path.relpath(directory, logdir)
        rel = "." if rel == os.curdir else rel.replace(os.sep, "/")
    return rel or "."


def event_files(run_dir: str, warnings: list[str] | None = None) -> list[str]:
    """Event files directly inside ``run_dir``, in name (= creation) order.

    Only regular files (or links to them) count: a FIFO, socket or device
    named like an event file would block or never end a read, so it is
    skipped and named in ``warnings`` (when given).
    """
    remote = is_remote(run_dir)
    if remote:
        run_dir = remote_io.normalize(run_dir)
    # os.listdir locally: gfile cannot name files that are not UTF-8.
    listed = gfile.listdir(run_dir) if remote else os.listdir(run_dir)
    names = sorted(n for n in listed if EVENT_FILE_PATTERN.search(n))
    paths = []
    for name in names:
        path = _join(run_dir, name)
        if remote:
            if not gfile.isdir(path):
                paths.append(path)
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as error:
            if warnings is not None:
                warnings.append(f"{path}: cannot read ({error.strerror or error}); skipped it")
            continue
        if stat.S_ISREG(mode):
            paths.append(path)
        elif not stat.S_ISDIR(mode) and warnings is not None:
            warnings.append(f"{path}: not a regular file ({_file_kind(mode)}); skipped it")
    return paths


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a plain file"


def open_event_file(path: str):
    """A binary read handle. Local files are opened without blocking and
    checked to be regular (a FIFO swapped in after listing must not hang)."""
    if is_remote(path):
        return gfile.GFile(path, "rb")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"not a regular file ({_file_kind(mode)})")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_record_chunks(path: str, warnings: list[str]):
    """Yield ``(buffer, offsets, lengths)`` for the complete, CRC-valid records
    of a file, a chunk of the file at a time (bounded memory).

    ``buffer[offsets[i]:offsets[i] + lengths[i]]`` is record ``i``'s payload.
    Problems are appended to ``warnings``; reading then stops for that file.
    A truncated tail of a local file is not a problem (the writer may still
    be busy); of a remote object it is (objects are put whole), and is named.
    """
    try:
        handle = open_event_file(path)
    except Exception as error:
        warnings.append(f"{path}: cannot open: {error}; skipped it")
        return
    buffer = b""
    base = 0  # file offset of buffer[0]
    pos = 0
    eof = False
    header_size, footer_size = _HEADER.size, _FOOTER.size
    unpack_header, unpack_footer = _HEADER.unpack_from, _FOOTER.unpack_from
    # A length's CRC depends on its 8 bytes only, and a file's records come
    # in few lengths: each is checked once (the loop runs once a record).
    length_crcs: dict = {}
    with handle:
        while True:
            offsets: list[int] = []
            lengths: list[int] = []
            stop = False
            size = len(buffer)
            while size - pos >= header_size:
                length, length_crc = unpack_header(buffer, pos)
                expected = length_crcs.get(length)
                if expected is None:
                    expected = length_crcs[length] = masked_crc(buffer[pos:pos + 8])
                if expected != length_crc:
                    warnings.append(
                        f"{path}: corrupt record header at byte {base + pos}; "
                        "kept the records before it, skipped the rest of this file"
                    )
                    stop = True
                    break
                if length > MAX_RECORD_BYTES:
                    warnings.append(f"{path}: record at byte {base + pos} claims {length} bytes; "
                                    "skipped the rest of this file")
                    stop = True
                    break
                end = pos + header_size + length + footer_size
                if end > size:
                    break
                same = _same_length_run(buffer, pos, length, expected, size)
                if same:
                    offsets.extend(same)
                    lengths.extend([length] * len(same))
                    pos += len(same) * (end - pos)
                    continue
                start = pos + header_size
                if HAVE_FAST_CRC and masked_crc(buffer[start:start + length]) != unpack_footer(buffer, end - footer_size)[0]:
                    warnings.append(
                        f"{path}: corrupt record data at byte {base + pos}; "
                        "kept the records before it, skipped the rest of this file"
                    )
                    stop = True
                    break
                offsets.append(start)
                lengths.append(length)
                pos = end
            if offsets:
                yield buffer, offsets, lengths
            if eof and not stop and size > pos and is_remote(path):
                # Objects are put whole, so no writer is half-way through one:
                # a record cut short there is damage, not a write in progress.
                warnings.append(f"{path}: ends inside a record at byte {base + pos} ({size - pos} bytes "
                                "of it); kept the records before it")
            if stop or eof:
                return  # clean end, or a record cut short by a live writer
            need = 0
            if size - pos >= header_size:
                need = header_size + _HEADER.unpack_from(buffer, pos)[0] + footer_size
            buffer, base, pos, eof = _refill(handle, buffer, base, pos, path, warnings, need=need)
            if buffer is None:
                return


# Records framed at once when a file holds a run of records of one length
# (the writer's records mostly are: the same series, step after step).
_SAME_LENGTH_MIN = 16


def _same_length_run(buffer: bytes, pos: int, length: int, length_crc: int, size: int) -> list:
    """Payload offsets of the records from ``pos`` on that have ``length`` and
    valid CRCs, read as one strided run (numpy for the headers, a CRC call
    per payload); [] when too few records of that length follow. Stops
    before the first record that differs or is damaged: the record-by-record
    loop then reads or reports it."""
    stride = _HEADER.size + length + _FOOTER.size
    count = (size - pos) // stride
    if count < _SAME_LENGTH_MIN:
        return []
    heads = np.ndarray((count,), dtype="<u8", buffer=buffer, offset=pos, strides=(stride,))
    good = (heads == length) & (np.ndarray((count,), dtype="<u4", buffer=buffer, offset=pos + 8,
                                           strides=(stride,)) == length_crc)
    count = count if good.all() else int(np.argmin(good))
    if count < _SAME_LENGTH_MIN:
        return []
    starts = (pos + _HEADER.size + stride * np.arange(count, dtype=np.int64)).tolist()
    if HAVE_FAST_CRC:
        footers = np.ndarray((count,), dtype="<u4", buffer=buffer, offset=pos + _HEADER.size + length,
                             strides=(stride,))
        crcs = np.fromiter((crc32c(buffer[start:start + length]) for start in starts), np.uint32, count)
        masked = ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(0xA282EAD8)
        damaged = masked != footers
        if damaged.any():
            return starts[:int(np.argmax(damaged))]
    return starts


def iter_records(path: str, warnings: list[str]):
    """Yield the payload bytes of each complete, CRC-valid record of a file."""
    for buffer, offsets, lengths in iter_record_chunks(path, warnings):
        for offset, length in zip(offsets, lengths):
            yield buffer[offset:offset + length]


def _refill(handle, buffer, base, pos, path, warnings, need=0):
    want = max(READ_CHUNK_BYTES, need)
    try:
        chunk = handle.read(want)
    except Exception as error:
        reason = remote_io.describe_error(error) if is_remote(path) else error
        warnings.append(f"{path}: read failed at byte {base + len(buffer)}: {reason}")
        return None, base, pos, True
    rest = buffer[pos:]
    # A short read is the end of the file (as it is now): asking again would
    # cost a remote store one more request for nothing.
    return rest + chunk, base + pos, 0, len(chunk) < want


_DTYPES = {
    types_pb2.DT_FLOAT: np.float32,
    types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_HALF: np.float16,
    types_pb2.DT_INT32: np.int32,
    types_pb2.DT_INT64: np.int64,
}


def scalar_value(value) -> float | None:
    """The float held by a ``Summary.Value`` (tensor or simple_value), or None."""
    if value.HasField("tensor"):
        tensor = value.tensor
        if tensor.double_val:
            return tensor.double_val[0]
        if tensor.float_val:
            return tensor.float_val[0]
        if tensor.int64_val:
            return float(tensor.int64_val[0])
        if tensor.int_val:
            return float(tensor.int_val[0])
        if tensor.tensor_content and tensor.dtype in _DTYPES:
            dtype = np.dtype(_DTYPES[tensor.dtype])
            if len(tensor.tensor_content) < dtype.itemsize:
                return None  # malformed: fewer bytes than one element
            return float(np.frombuffer(tensor.tensor_content[:dtype.itemsize], dtype=dtype)[0])
        if tensor.half_val:
            return float(np.array(tensor.half_val[0], dtype=np.uint16).view(np.float16))
        return None
    if value.WhichOneof("value") == "simple_value":
        return value.simple_value
    return None


class _Column:
    """Points of one series as they are read: numpy blocks from the fast
    decoder and Python lists from the protobuf path, each with the global
    record number so write order survives (the last write of a step wins).

    Memory is bounded (:data:`MAX_POINTS_PER_SERIES`): once more than twice
    that many points are held, every other one is let go (by the order the
    points were read), as often as needed, so what is kept is every
    ``stride``-th point read, evenly over the whole series. The first point
    of the series in each file (restarts are read from them) and the newest
    point are always kept.
    """

    __slots__ = ("info", "blocks", "seq", "steps", "wall_times", "values", "read", "held", "stride",
                 "pins", "newest")

    def __init__(self, info):
        self.info = info
        self.blocks = []  # (ordinals, seq, steps, wall_times, values)
        self.seq = []
        self.steps = []
        self.wall_times = []
        self.values = []
        self.read = 0  # points read so far
        self.held = 0  # points held in blocks
        self.stride = 1
        self.pins = {}  # file index -> the series' first point in that file
        self.newest = None  # the point with the highest record number

    def add(self, file_index, seq, steps, wall_times, values) -> None:
        """Add a block of points (numpy arrays) read from file ``file_index``."""
        n = int(seq.shape[0])
        if n == 0:
            return
        ordinals = np.arange(self.read, self.read + n, dtype=np.int64)
        self.read += n
        first, last = int(np.argmin(seq)), int(np.argmax(seq))
        pin = self.pins.get(file_index)
        if pin is None or seq[first] < pin[0]:
            self.pins[file_index] = (int(seq[first]), int(steps[first]), float(wall_times[first]), float(values[first]))
        if self.newest is None or seq[last] > self.newest[0]:
            self.newest = (int(seq[last]), int(steps[last]), float(wall_times[last]), float(values[last]))
        if self.stride > 1:
            keep = ordinals % self.stride == 0
            ordinals, seq, steps, wall_times, values = (a[keep] for a in (ordinals, seq, steps, wall_times, values))
        self.blocks.append((ordinals, seq, steps, wall_times, values))
        self.held += int(ordinals.shape[0])
        if self.held > 2 * MAX_POINTS_PER_SERIES:
            self._thin()

    def flush(self, file_index) -> None:
        """Move the protobuf path's points into a block."""
        if self.values:
            self.add(file_index, np.asarray(self.seq, dtype=np.int64), np.asarray(self.steps, dtype=np.int64),
                     np.asarray(self.wall_times, dtype=np.float64), np.asarray(self.values, dtype=np.float64))
            self.seq, self.steps, self.wall_times, self.values = [], [], [], []

    def _thin(self) -> None:
        while self.held > 2 * MAX_POINTS_PER_SERIES:
            self.stride *= 2
            blocks, held = [], 0
            for block in self.blocks:
                keep = block[0] % self.stride == 0
                block = tuple(a[keep] for a in block)
                held += int(block[0].shape[0])
                if block[0].shape[0]:
                    blocks.append(block)
            self.blocks, self.held = blocks, held

    def to_series(self, tag: str, file_starts: np.ndarray, file_index: int) -> Series | None:
        """The series, in step order, without the points a later file
        orphaned; ``file_starts`` is each file's first record number."""
        self.flush(file_index)
        blocks = [block[1:] for block in self.blocks]
        if not blocks:
            return None
        if self.stride > 1:  # the pinned points, once each
            extra = list(self.pins.values()) + [self.newest]
            blocks.append(tuple(np.asarray(column, dtype=dtype) for column, dtype in
                                zip(zip(*extra), (np.int64, np.int64, np.float64, np.float64))))
        seq, steps, wall_times, values = (np.concatenate(part) for part in zip(*blocks))
        if self.stride > 1:
            seq, unique = np.unique(seq, return_index=True)
            steps, wall_times, values = steps[unique], wall_times[unique], values[unique]
        else:
            order = np.argsort(seq, kind="stable")
            seq, steps, wall_times, values = seq[order], steps[order], wall_times[order], values[order]
        keep = not_orphaned(steps, np.searchsorted(file_starts, seq, side="right") - 1)
        if not keep.all():
            steps, wall_times, values = steps[keep], wall_times[keep], values[keep]
        return Series.from_points(tag, self.info, steps, wall_times, values)


def not_orphaned(steps: np.ndarray, file_index: np.ndarray) -> np.ndarray:
    """Which points survive a restart, as TensorBoard reads one (a bool mask).

    ``steps`` are one series' points in read order and ``file_index`` the
    event file (in name order) each came from. A point is orphaned when a
    later file's first point of the series is at its step or before it: the
    job was restarted from a checkpoint there, and what the dead attempt
    wrote past it was recomputed (or never will be). Points within one file
    are all kept (the last write of a repeated step wins later).
    """
    keep = np.ones(steps.shape[0], dtype=bool)
    if steps.size == 0 or file_index[0] == file_index[-1]:
        return keep
    starts = np.flatnonzero(np.diff(file_index)) + 1
    first = np.concatenate(([0], starts))
    first_steps = steps[first]
    # For each file, the smallest first step of any later file.
    later = np.minimum.accumulate(first_steps[::-1])[::-1]
    later = np.append(later[1:], np.iinfo(np.int64).max)
    group = np.repeat(np.arange(first.size), np.diff(np.append(first, steps.size)))
    return steps < later[group]


def load_run(name: str, run_dir: str, files: list[str] | None = None) -> RunData:
    """Read every tb-leak series of one run directory (all event files, or
    ``files`` when a listing already found them)."""
    run = RunData(name=name, path=run_dir)
    columns: dict[str, _Column] = {}
    rejected: set[str] = set()
    parse = event_pb2.Event.FromString
    if files is None:
        try:
            files = event_files(run_dir, run.warnings)
        except Exception as error:
            reason = remote_io.describe_error(error) if is_remote(run_dir) else error
            run.warnings.append(f"{run_dir}: cannot list event files: {reason}")
            files = []
    seq_base = 0
    file_starts = []
    for file_index, path in enumerate(files):
        file_starts.append(seq_base)
        for buffer, offsets, lengths in iter_record_chunks(path, run.warnings):
            offsets_array = np.asarray(offsets, dtype=np.int64)
            groups, leftover = fast_events.decode_chunk(buffer, offsets_array, np.asarray(lengths, dtype=np.int64))
            # Protobuf path first: it meets each tag's metadata.
            for index in leftover.tolist():
                start = offsets[index]
                try:
                    event = parse(buffer[start:start + lengths[index]])
                except Exception:
                    run.warnings.append(f"{path}: undecodable event record; skipped it")
                    continue
                if not event.HasField("summary"):
                    continue
                _add_event(event, seq_base + index, columns, rejected, path, run.warnings)
            for column in columns.values():
                column.flush(file_index)
            for group in groups:
                seq = group.record_indices + seq_base
                for k, tag in enumerate(group.tags):
                    column = columns.get(tag)
                    if column is None:
                        continue  # no metadata seen: not a tb-leak series
                    column.add(file_index, seq, group.steps, group.wall_times, group.values[:, k])
            seq_base += len(offsets)
    file_starts_array = np.asarray(file_starts, dtype=np.int64)
    for tag in sorted(columns):
        column = columns[tag]
        series = column.to_series(tag, file_starts_array, max(len(files) - 1, 0))
        if series is not None:
            run.series[tag] = series
        if column.stride > 1:
            run.warnings.append(
                f"series {tag!r}: {column.read:,} points; 1 in every {column.stride} analysed "
                f"({series.steps.size if series is not None else 0:,} points), so memory stays bounded "
                f"(at most {2 * MAX_POINTS_PER_SERIES:,} points a series are held while reading)")
    return run


def _add_event(event, seq, columns, rejected, path, warnings) -> None:
    step = event.step
    wall_time = event.wall_time
    for value in event.summary.value:
        tag = value.tag
        column = columns.get(tag)
        if column is None:
            if tag in rejected:
                continue
            column = _new_column(value, tag, path, rejected, warnings)
            if column is None:
                continue
            columns[tag] = column
        elif value.HasField("metadata") and column.info.detail:
            _update_limit(column, value)
        number = scalar_value(value)
        if number is None:
            continue
        column.seq.append(seq)
        column.steps.append(step)
        column.wall_times.append(wall_time)
        column.values.append(number)


def _update_limit(column, value) -> None:
    """A series measured against a memory limit whose limit changed while the
    job ran (a limit names itself in ``detail``): the newest limit is the one
    its last points are measured against."""
    plugin_data = value.metadata.plugin_data
    if plugin_data.plugin_name != metadata.PLUGIN_NAME or b'"limit"' not in plugin_data.content:
        return
    try:
        info = metadata.parse_plugin_metadata(plugin_data.content)
    except metadata.PluginDataError:
        return
    old = column.info
    if (info.group, info.measure, info.unit, info.subject) == (old.group, old.measure, old.unit, old.subject) \
            and metadata.parse_limit_detail(info.detail) is not None and type(info) is type(old):
        column.info = info


def _new_column(value, tag, path, rejected, warnings):
    plugin_data = value.metadata.plugin_data
    if plugin_data.plugin_name != metadata.PLUGIN_NAME:
        # Not ours (or metadata only on a first event we did not see).
        rejected.add(tag)
        return None
    try:
        info = metadata.parse_plugin_metadata(plugin_data.content)
    except metadata.PluginDataError as error:
        warnings.append(f"{path}: series {tag!r} skipped: {error}")
        rejected.add(tag)
        return None
    return _Column(info)


def load_logdir(logdir: str, run_filter: str | None = None) -> LogdirData:
    """Read every run of ``logdir`` whose name matches ``run_filter`` (a regex).

    Raises LogdirError when the logdir cannot be read; problems inside runs
    become warnings on those runs.
    """
    pattern = re.compile(run_filter) if run_filter else None
    runs = []
    warnings: list[str] = []
    for name, location in locate_runs(logdir, warnings).items():
        if pattern is not None and not pattern.search(name):
            continue
        runs.append(load_run(name, location.path, location.files))
    return LogdirData(logdir=logdir, runs=runs, warnings=warnings)


def group_runs(runs: list[RunData]) -> dict[str, list[str]]:
    """Group runs by parent directory (e.g. the workers of one job)."""
    return group_names([run.name for run in runs])


def group_names(names: list[str]) -> dict[str, list[str]]:
    """Group run names by parent directory (e.g. the workers of one job).

    Returns parent -> sorted run names, only for parents with two or more runs.
    """
    groups = collections.defaultdict(list)
    for name in names:
        parent = name.rsplit("/", 1)[0] if "/" in name else "."
        groups[parent].append(name)
    return {parent: sorted(members) for parent, members in groups.items() if len(members) > 1}
