"""Peak memory of a trace's analysis is bounded by the file's size, whatever
the file holds: crafted files of empty planes, empty lines, empty events or
tiny memory events are refused with an error naming the file and the limit,
and files that are analysed stay under the limit too.

Each file is analysed in a fresh subprocess that measures its peak memory
twice: peak RSS growth (everything, the protobuf runtime included) and
tracemalloc's peak (Python objects and numpy arrays).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tb_leak_plugin.eventfile.records import encode_varint
from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.budget import (
    DEFAULT_MEMORY_RATIO, SMALL_FILE_BYTES, WORKING_SPACE_BYTES, MemoryBudget,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
ALLOWANCE = SMALL_FILE_BYTES + WORKING_SPACE_BYTES  # 16 MiB on top of ratio x file

# -- crafted files ----------------------------------------------------------------------------


def field(number: int, body: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return encode_varint((number << 3) | 2) + encode_varint(len(body)) + body


def plane_header() -> bytes:
    plane = xplane.XPlane(id=1, name="/host:CPU")
    for mid, name in ((1, "MemoryAllocation"), (2, "MemoryDeallocation"), (3, "Op")):
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
    for sid, name in ((1, "addr"), (2, "allocation_bytes"), (3, "tf_op")):
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = name
    return plane.SerializeToString()


def empty_planes(size: int) -> bytes:
    return b"\x0a\x00" * (size // 2)


def empty_lines(size: int) -> bytes:
    return field(1, b"\x1a\x00" * (size // 2))


def empty_events(size: int) -> bytes:
    return field(1, field(3, b"\x08\x01" + b"\x22\x00" * (size // 2)))


def tiny_memory_events(count: int) -> bytes:
    """Allocations (address and size) and frees (address), ~21 bytes each."""
    events = []
    for k in range(count):
        stats = field(4, b"\x08\x01\x18" + encode_varint(0x100000 + (k // 2) * 64))
        if k % 2 == 0:
            stats += field(4, b"\x08\x02\x18" + encode_varint(256))
        kind = b"\x01" if k % 2 == 0 else b"\x02"
        events.append(field(4, b"\x08" + kind + b"\x10" + encode_varint(1000 * k) + stats))
    return field(1, plane_header() + field(3, b"\x08\x01\x18\xe8\x07" + b"".join(events)))


def tiny_op_events(count: int) -> bytes:
    """Events of a kind the analysis skips, one stat each, 12 bytes each."""
    event = field(4, b"\x08\x03\x10\x05" + field(4, b"\x08\x03\x18\x07"))
    return field(1, plane_header() + field(3, b"\x08\x01\x18\xe8\x07" + event * count))


# -- measuring --------------------------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    sys.path.insert(0, {root!r})
    from tb_leak_plugin.reporting import traces

    def high_water():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

    def current():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()

    run_dir, ratio = sys.argv[1], float(sys.argv[2])
    traces.analyze_run_traces(run_dir, memory_ratio=ratio)  # imports, caches: not counted
    base = max(current(), high_water())
    report = traces.analyze_run_traces(run_dir, memory_ratio=ratio)
    rss_growth = high_water() - base
    tracemalloc.start()
    traces.analyze_run_traces(run_dir, memory_ratio=ratio)
    traced = tracemalloc.get_traced_memory()[1]
    print(json.dumps(dict(rss_growth=rss_growth, traced=traced,
                          sessions=[s.to_dict() for s in report.sessions])))
    """
)


def analyse_in_subprocess(run_dir, ratio=DEFAULT_MEMORY_RATIO) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE.format(root=ROOT), str(run_dir), str(ratio)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_run(tmp_path, data: bytes, name="crafted"):
    directory = tmp_path / "run" / "plugins" / "profile" / "session"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.xplane.pb").write_bytes(data)
    return tmp_path / "run"


def peak(measured: dict) -> int:
    return max(measured["rss_growth"], measured["traced"])


# -- the bound --------------------------------------------------------------------------------

# Before the budget these took 600x to 1600x their size (empty planes: 4 MiB
# -> several GB) and 11x (tiny memory events).
CRAFTED = {
    "empty planes": lambda: empty_planes(4 * MiB),
    "empty lines": lambda: empty_lines(4 * MiB),
    "empty events": lambda: empty_events(4 * MiB),
    "tiny memory events": lambda: tiny_memory_events(120_000),
}


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_crafted_file_is_refused_within_the_bound(tmp_path, kind):
    data = CRAFTED[kind]()
    run = write_run(tmp_path, data)
    measured = analyse_in_subprocess(run)
    (session,) = measured["sessions"]
    error = session["error"]
    assert error and error.startswith("plugins/profile/session/crafted.xplane.pb: not analysed")
    assert "more memory than allowed" in error and "4x the file" in error, error
    assert "memory_ratio" in error  # what to do about it
    bound = DEFAULT_MEMORY_RATIO * len(data) + ALLOWANCE
    assert peak(measured) <= bound, (kind, measured["rss_growth"], measured["traced"], bound)


def test_analysed_files_stay_under_the_bound(tmp_path):
    """Files that are analysed obey the same bound: 12-byte events the analysis
    skips (about 3.7x), and tiny memory events once the ratio allows them."""
    data = tiny_op_events(400_000)
    measured = analyse_in_subprocess(write_run(tmp_path / "ops", data))
    assert measured["sessions"][0]["error"] is None
    assert peak(measured) <= DEFAULT_MEMORY_RATIO * len(data) + ALLOWANCE

    data = tiny_memory_events(120_000)
    measured = analyse_in_subprocess(write_run(tmp_path / "memory", data), ratio=14)
    (session,) = measured["sessions"]
    assert session["error"] is None and session["memory_events"] == 120_000
    assert peak(measured) <= 14 * len(data) + ALLOWANCE


def test_a_refused_file_does_not_stop_the_others(tmp_path):
    from tb_leak_plugin.reporting import traces

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from xspace_builder import leaky_trace_bytes

    run = write_run(tmp_path, empty_planes(64 * 1024 + 4 * MiB), name="a_crafted")
    write_run(tmp_path, leaky_trace_bytes(), name="b_good")
    refused, good = traces.analyze_run_traces(str(run)).sessions
    assert refused.host == "a_crafted" and "not analysed" in refused.error
    assert "planes" in refused.error and "MiB" in refused.error
    assert good.error is None and [o.op for o in good.suspicious] == ["leaky/MatMul"]


# -- the budget itself ------------------------------------------------------------------------


def test_budget_charges_releases_and_names_what_ran_over():
    budget = MemoryBudget(1000, ratio=4)
    assert budget.limit_bytes == 4000 + SMALL_FILE_BYTES and budget.used_bytes == 1000
    budget.charge("planes", 2, 100)
    budget.release(2, 100)
    assert budget.used_bytes == 1000 and budget.peak_bytes == 1200
    with pytest.raises(xplane.XPlaneMemoryLimitError) as raised:
        budget.charge("events", 1 << 20, 8)
    message = str(raised.value)
    assert "2 planes" in message and "1048576 events" in message
    assert "4x the file's 1000 B" in message
    assert isinstance(raised.value, xplane.XPlaneDecodeError)  # callers that catch decode errors


def test_decoding_a_crafted_space_raises_the_limit_error():
    from tb_leak_plugin.analysis import trace

    data = empty_planes(8 * 1024)  # 4096 planes: about 16 MiB decoded
    with pytest.raises(xplane.XPlaneMemoryLimitError, match=r"\d+ planes"):
        trace.analyze_space(data)
    # A higher ratio lets the same bytes through (an empty plane is no error).
    result = trace.analyze_space(data, MemoryBudget(len(data), ratio=2000))
    assert result.memory_events == 0 and len(result.planes) == 4096
