"""Decoding XSpace files without TensorFlow: the columnar decoder against
protobuf's own parser on awkward and out-of-order encodings, event
selection, stat value conversion, and clean errors for garbage.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tb_leak_plugin.analysis import trace
from tb_leak_plugin.eventfile.records import encode_varint
from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.decode import decode_space

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xspace_builder import add_plane, at, leaky_loop, new_space, op_named  # noqa: E402


def reference_events(data: bytes):
    """(plane, line, metadata id, time, duration, stats) per event, via protobuf."""
    space = xplane.XSpace.FromString(data)
    stamps = [line.timestamp_ns for plane in space.planes for line in plane.lines]
    base = min(stamps) if stamps else 0
    out = []
    for p, plane in enumerate(space.planes):
        for li, line in enumerate(plane.lines):
            for e in line.events:
                stats = []
                for s in e.stats:
                    kind = s.WhichOneof("value")
                    if kind is not None:
                        value = getattr(s, kind)
                        if kind == "double_value":
                            value = repr(value)  # nan == nan
                        elif kind == "bytes_value":  # texts are kept as UTF-8
                            value = value.decode("utf-8", "replace")
                        stats.append((s.metadata_id, kind, value))
                out.append((p, li, e.metadata_id, (line.timestamp_ns - base) * 1000 + e.offset_ps,
                            e.duration_ps, stats))
    return out


def decoded_events(data: bytes):
    decoded = decode_space(data, select_names=lambda name: True)
    names = {2: "double_value", 3: "uint64_value", 4: "int64_value", 5: "str_value",
             6: "bytes_value", 7: "ref_value"}
    out = []
    for p, plane in enumerate(decoded.planes):
        by_event = {}
        for ev, sid, kind, raw, code in zip(plane.stat_event.tolist(), plane.stat_id.tolist(),
                                            plane.stat_kind.tolist(), plane.stat_raw.tolist(),
                                            plane.stat_string.tolist()):
            if kind == xplane.KIND_INT64:
                value = raw - (1 << 64) if raw >= 1 << 63 else raw
            elif kind == xplane.KIND_DOUBLE:
                value = repr(float(np.array([raw], np.uint64).view(np.float64)[0]))
            elif kind in (xplane.KIND_STR, xplane.KIND_BYTES):
                value = plane.strings[code]
            else:
                value = raw
            by_event.setdefault(ev, []).append((sid, names[kind], value))
        for i in range(len(plane)):
            out.append((p, int(plane.line[i]), int(plane.metadata_id[i]), int(plane.start_ps[i]),
                        int(plane.duration_ps[i]), by_event.get(i, [])))
    return out


def odd_space():
    """Every awkward encoding the decoder must survive."""
    space = new_space()
    plane = add_plane(space)
    for i in range(200):  # ids >= 128 need two-byte varints
        plane.stat_id(f"filler_{i}")
    e = plane.event("a", "first", 0, 5, int64_value_stat=-5)  # offset 0: field 2 absent
    e.stats.add(metadata_id=plane.stat_id("big"), uint64_value=(1 << 64) - 1)
    e.stats.add(metadata_id=plane.stat_id("neg"), int64_value=-(1 << 63))
    e.stats.add(metadata_id=plane.stat_id("dbl"), double_value=-0.0)
    e.stats.add(metadata_id=plane.stat_id("nan"), double_value=float("nan"))
    e.stats.add(metadata_id=plane.stat_id("long"), str_value="x" * 300)  # two-byte length
    e.stats.add(metadata_id=plane.stat_id("empty"), str_value="")
    e.stats.add(metadata_id=plane.stat_id("raw"), bytes_value=b"\x00\xff\x22")
    e.stats.add(metadata_id=plane.stat_id("unicode"), str_value="µs → 🙂")
    e.stats.add(metadata_id=0, int64_value=3)  # stat metadata id 0
    e.stats.add(metadata_id=plane.stat_id("novalue"))  # no value at all
    plane.message.event_metadata[0].name = "zero"  # event metadata id 0
    zero = plane.line("a").events.add(metadata_id=0, offset_ps=7)
    zero.stats.add(metadata_id=plane.stat_id("z"), ref_value=plane.stat_id("long"))
    big_event = plane.event("b", "big", 1 << 40, 1 << 41)
    for i in range(40):
        big_event.stats.add(metadata_id=plane.stat_id(f"s{i}"), int64_value=i * 1000003)
    plane.line("b").events.add()  # an empty event
    plane.line("empty line")
    add_plane(space, "/device:GPU:0").event("s", "gpu", 3, 4, x=1.5)
    add_plane(space, "no lines")
    return space


def test_decoder_matches_protobuf_on_awkward_encodings():
    data = odd_space().SerializeToString()
    assert decoded_events(data) == reference_events(data)


def test_decoder_matches_protobuf_when_fields_are_out_of_order():
    space = odd_space()
    data = bytearray()
    # Re-serialize each line with header fields after and between the events.
    for plane in space.planes:
        p = bytearray()
        meta = xplane.XPlane()
        meta.CopyFrom(plane)
        del meta.lines[:]
        p += meta.SerializeToString()
        for line in plane.lines:
            l = bytearray()
            events = [e.SerializeToString() for e in line.events]
            half = len(events) // 2
            for e in events[:half]:
                l += b"\x22" + encode_varint(len(e)) + e
            header = xplane.XLine(id=line.id, name=line.name, timestamp_ns=line.timestamp_ns,
                                  duration_ps=99)
            l += header.SerializeToString()
            for e in events[half:]:
                l += b"\x22" + encode_varint(len(e)) + e
            p += b"\x1a" + encode_varint(len(l)) + l
        data += b"\x0a" + encode_varint(len(p)) + p
    data = bytes(data)
    assert decoded_events(data) == reference_events(data)


def _reversed_event_bytes(event) -> bytes:
    """An XEvent with its fields in reverse order (legal, if unusual)."""
    out = bytearray()
    for stat in reversed(event.stats):
        body = stat.SerializeToString()
        out += b"\x22" + encode_varint(len(body)) + body
    out += b"\x18" + encode_varint(event.duration_ps)
    out += b"\x10" + encode_varint(event.offset_ps)
    out += b"\x08" + encode_varint(event.metadata_id)
    return bytes(out)


def test_analysis_survives_unusual_encodings():
    """Two-byte ids, long events, fields out of order: same result as the usual layout."""
    def build(reorder):
        space = new_space()
        plane = add_plane(space)
        for i in range(300):  # push the ids used below past one byte
            plane.stat_id(f"pad_{i}")
            plane.event_id(f"pad_event_{i}")
        plane.markers(8)
        for k in range(8):
            event = plane.alloc(at(k), 0x1000 * (k + 1), 4096, op="o" * 150)  # > 127 bytes
            plane.alloc(at(k, 0.6), 0x900000 + k, 64, op="churn")
            plane.free(at(k, 0.7), 0x900000 + k, 64)
            if reorder and k % 2:
                line = plane.line("tf_Compute/1")
                raw = _reversed_event_bytes(event)
                del line.events[-3]
                line.MergeFromString(b"\x22" + encode_varint(len(raw)) + raw)
        return space.SerializeToString()

    usual, unusual = build(False), build(True)
    assert usual != unusual
    for data in (usual, unusual):
        result = trace.analyze_space(data)
        (leak,) = result.suspicious
        assert leak.op == "o" * 150 and leak.steps_retained == 8
        assert leak.retained_bytes == 8 * 4096 and result.unmatched_frees == 0
        assert op_named(result, "churn") is None


def test_decoder_selects_by_name_and_by_sampled_stats():
    space = new_space()
    plane = add_plane(space)
    plane.markers(3, line="python")
    plane.event("python", "noise", 5)
    plane.event("python", "MemoryAllocation", 6, addr=1)
    decoded = decode_space(space.SerializeToString(),
                                  select_names=lambda n: n == "MemoryAllocation",
                                  select_stats={"step_num"})
    names = sorted(set(decoded.planes[0].names().tolist()))
    assert names == ["MemoryAllocation", "train"]
    assert decoded.planes[0].total_events == 5


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00\x00", b"hello world, not a trace", bytes(range(256)) * 4,
     b"\x0a\xff\xff\xff\x0f" + b"x" * 10],
)
def test_decoder_rejects_garbage_with_a_clear_error(data):
    with pytest.raises(xplane.XPlaneDecodeError):
        trace.analyze_space(data)


def test_decoder_rejects_every_truncation_cleanly():
    space = new_space()
    plane = add_plane(space)
    plane.markers(3)
    leaky_loop(plane, steps=3)
    data = space.SerializeToString()
    for cut in range(1, len(data), 7):
        try:
            trace.analyze_space(data[:cut])
        except xplane.XPlaneDecodeError:
            pass  # the only acceptable failure



@pytest.mark.parametrize(
    "value, expected",
    [(5, 5), ((1 << 64) - 1, -1), ("42", 42), (" 0x10 ", 16), ("1.0", 1), (b"7", 7),
     ("nope", None), (float("nan"), None), (1e30, None), (-(1 << 63), -(1 << 63)), (1 << 64, None)],
)
def test_stat_values_as_int64(value, expected):
    assert xplane._as_int(value) == expected


def test_decoder_matches_protobuf_on_runs_of_empty_events():
    """Empty events (``0x22 0x00``) come in bulk, between ordinary ones."""
    space = new_space()
    plane = add_plane(space)
    plane.message.event_metadata[0].name = "empty"  # an empty event's metadata id is 0
    for k in range(3):
        plane.event("a", "MemoryAllocation", at(k), addr=k + 1, allocation_bytes=64)
        for _ in range(1000 * k + 1):
            plane.line("a").events.add()
    data = space.SerializeToString()
    assert decoded_events(data) == reference_events(data)
    assert decode_space(data, select_names=lambda name: True).planes[0].total_events == 3006
