"""How much memory one trace may take while it is decoded and analysed.

A trace's cost is set by its structure, not its size: an empty XPlane is two
bytes in the file and kilobytes decoded, an empty event two bytes and dozens
decoded. So instead of trusting the file size, the decoder and the analysis
charge a :class:`MemoryBudget` for every element before (or, for bounded
batches, right after) they allocate what it costs, and release what they
free. A charge past the limit raises :class:`XPlaneMemoryLimitError` naming
the element counts and the limit.

The limit on charges is ``ratio`` times the file (default 4; the file's own
bytes count while it is decoded) plus ``SMALL_FILE_BYTES`` for the constant
structures of small files. Working arrays of bounded size (a stretch of a
line searched at a time, a block of events, a chunk of stats, a batch of
texts) are not charged: they stay under ``WORKING_SPACE_BYTES``. So the peak
memory of decoding and analysing any file stays under

    4 x file size + SMALL_FILE_BYTES + WORKING_SPACE_BYTES  (4x + 16 MiB)

whatever it holds. The per-element costs below are upper bounds measured
with tracemalloc and peak RSS on crafted files of each kind (empty planes,
lines and events, tiny memory events, distinct texts, metadata entries);
``tests/test_trace_memory_bounds.py`` checks the bound.
"""

from __future__ import annotations

from tb_leak_plugin.units import format_bytes
from tb_leak_plugin.xplane.schema import XPlaneMemoryLimitError

DEFAULT_MEMORY_RATIO = 4.0
SMALL_FILE_BYTES = 4 << 20  # charged on top of ratio x file: small files' constant structures
WORKING_SPACE_BYTES = 12 << 20  # never charged: bounded working arrays

# Bytes per element, at most (see the module docstring).
PLANE_BYTES = 4096  # an XPlane: its header message, columns, dicts, per-plane analysis
LINE_BYTES = 1536  # an XLine: its header, name and (empty) arrays
METADATA_FIELD_BYTES = 256  # an event / stat metadata entry or other plane field, plus 3x its bytes
LINE_EVENT_BYTES = 36  # an event found in a line: its span and first id (14 bytes) as its line grows
LINE_EVENT_KEPT_BYTES = 16  # ... once the line is read, until the events are selected
SELECTED_EVENT_BYTES = 96  # an event chosen for decoding: its span and fields while decoded
STAT_SPAN_BYTES = 48  # a stat span while its block of events is scanned (working)
KEPT_STAT_BYTES = 31  # a decoded stat, and the copy made when its columns are joined
DECODED_STAT_BYTES = 22  # ... once joined
DECODED_EVENT_BYTES = 28  # an event's columns in the decoded plane
STRING_BYTES = 256  # a distinct text value, decoded and through the analysis' tables (plus 4x its length)
ANALYSED_EVENT_BYTES = 176  # a decoded event through the trace analysis (memory events, steps)
ANALYSED_STAT_BYTES = 8  # a decoded stat through the trace analysis (its index, values read)
OP_RESULT_BYTES = 512  # an op that kept memory: its OpRetention, labels and reason


class MemoryBudget:
    """Memory a trace may take: charged and released element by element.

    ``limit_bytes`` is ``ratio`` x the file plus ``SMALL_FILE_BYTES``;
    ``used_bytes`` starts at the file's size (its bytes are held while it is
    decoded), ``peak_bytes`` is the most charged at once, and ``counts``
    keeps how many of each element were charged, for the error message.
    """

    def __init__(self, file_bytes: int, ratio: float = DEFAULT_MEMORY_RATIO):
        self.file_bytes = int(file_bytes)
        self.ratio = float(ratio)
        self.limit_bytes = int(self.ratio * self.file_bytes) + SMALL_FILE_BYTES
        self.used_bytes = self.file_bytes
        self.peak_bytes = self.used_bytes
        self.counts: dict[str, int] = {}

    @classmethod
    def unlimited(cls, file_bytes: int = 0) -> "MemoryBudget":
        """A budget that only counts (for callers that bound memory themselves)."""
        budget = cls(file_bytes)
        budget.limit_bytes = 1 << 62
        return budget

    def charge(self, what: str, count: int, each_bytes: int) -> None:
        """Charge ``count`` elements of ``what`` at ``each_bytes``.

        Raises:
          XPlaneMemoryLimitError: the total charged would pass the limit.
        """
        if count <= 0:
            return
        self.counts[what] = self.counts.get(what, 0) + int(count)
        self.used_bytes += int(count) * int(each_bytes)
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)
        if self.used_bytes > self.limit_bytes:
            raise XPlaneMemoryLimitError(self._message())

    def release(self, count: int, each_bytes: int) -> None:
        """Give back what ``count`` elements at ``each_bytes`` held."""
        self.used_bytes -= int(count) * int(each_bytes)

    def _message(self) -> str:
        counted = ", ".join(f"{n} {what}" for what, n in self.counts.items())
        return (
            f"decoding and analysing this trace would take more memory than allowed: its structure "
            f"({counted}) needs over {format_bytes(self.used_bytes)}, and the limit is "
            f"{self.ratio:g}x the file's {format_bytes(self.file_bytes)} plus "
            f"{format_bytes(SMALL_FILE_BYTES)} ({format_bytes(self.limit_bytes)}). "
            "Real traces are far below this: the file may be crafted or corrupt. To analyse "
            "it anyway, raise the limit (memory_ratio= of analyze_trace_file or "
            "analyze_run_traces)."
        )
