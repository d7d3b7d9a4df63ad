"""Vectorised decoding of the event records tb-leak's own writer produces.

The writer encodes every point after a tag's first as a fixed byte layout
(see ``records.value_prefix``): for a given set of tags, records differ only
in their wall time, step and 4-byte float values. So records of equal length are
decoded together: the first one is parsed with protobuf and turned into a
*template* (where the wall time, step and each value sit, and what every
other byte must be); the rest are stacked into a 2-D byte array, checked
byte for byte against the template, and their numbers read as array
columns. A record that does not match goes back to the caller for the
ordinary protobuf path, so correctness never depends on this shortcut.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tensorboard.compat.proto import event_pb2

from tb_leak_plugin.eventfile.records import VALUE_BYTES, read_varint as _read_varint, value_prefix as _value_prefix


@dataclasses.dataclass
class Template:
    """Byte layout of one record shape."""

    length: int
    step_offset: int      # first byte of the step varint (-1: no step field, step 0)
    step_bytes: int
    fixed_columns: np.ndarray  # byte positions whose value is fixed
    fixed_values: np.ndarray   # and those values
    tags: list[str]
    value_offsets: np.ndarray  # byte offset of each tag's float32 value


def _varint_length(payload: bytes, offset: int) -> int:
    length = 0
    while offset + length < len(payload) and payload[offset + length] & 0x80:
        length += 1
    return length + 1



def make_template(payload: bytes) -> Template | None:
    """The layout of ``payload`` if it is a plain tb-leak sample record, else None."""
    try:
        event = event_pb2.Event.FromString(payload)
    except Exception:
        return None
    if event.WhichOneof("what") != "summary" or not event.summary.value:
        return None
    if len(payload) < 10 or payload[0] != 0x09:  # wall_time, fixed64
        return None
    position = 9
    step_offset, step_bytes = -1, 0
    if payload[position] == 0x10:  # step, varint
        step_offset = position + 1
        step_bytes = _varint_length(payload, step_offset)
        position = step_offset + step_bytes
    if position >= len(payload) or payload[position] != 0x2A:  # summary, length-delimited
        return None
    summary_length, summary_offset = _read_varint(payload, position + 1)
    if summary_offset + summary_length != len(payload):
        return None
    tags = []
    value_offsets = []
    cursor = summary_offset
    for value in event.summary.value:
        prefix = _value_prefix(value.tag)
        if payload[cursor:cursor + len(prefix)] != prefix:
            return None  # metadata, another dtype, a shape: not the compact layout
        tags.append(value.tag)
        value_offsets.append(cursor + len(prefix))
        cursor += len(prefix) + VALUE_BYTES
    if cursor != len(payload):
        return None
    variable = np.zeros(len(payload), dtype=bool)
    variable[1:9] = True
    if step_offset >= 0:
        variable[step_offset:step_offset + step_bytes] = True
    for offset in value_offsets:
        variable[offset:offset + VALUE_BYTES] = True
    fixed = np.flatnonzero(~variable)
    raw = np.frombuffer(payload, dtype=np.uint8)
    return Template(
        length=len(payload), step_offset=step_offset, step_bytes=step_bytes,
        fixed_columns=fixed, fixed_values=raw[fixed].copy(), tags=tags,
        value_offsets=np.asarray(value_offsets, dtype=np.int64),
    )


@dataclasses.dataclass
class DecodedGroup:
    """Points decoded from the records of one template."""

    record_indices: np.ndarray  # position of each record in the chunk
    steps: np.ndarray
    wall_times: np.ndarray
    tags: list[str]
    values: np.ndarray          # shape (records, tags), float64


def decode_chunk(buffer: bytes, offsets: np.ndarray, lengths: np.ndarray, min_group: int = 8):
    """Decode what can be decoded by template from records of one chunk.

    Returns ``(groups, leftover)``: the decoded groups, and the indices of
    records the caller must decode itself. Groups smaller than ``min_group``
    are left over too (a template costs a protobuf parse).
    """
    groups: list[DecodedGroup] = []
    if not len(offsets):
        return groups, np.zeros(0, dtype=np.int64)
    leftover = []
    unique_lengths, inverse = np.unique(lengths, return_inverse=True)
    for group_id, length in enumerate(unique_lengths):
        members = np.flatnonzero(inverse == group_id)
        if members.size < min_group:
            leftover.append(members)
            continue
        first = int(offsets[members[0]])
        template = make_template(bytes(buffer[first:first + int(length)]))
        if template is None:
            leftover.append(members)
            continue
        size = int(length)
        starts = offsets[members]
        gaps = np.diff(starts)
        if gaps.size and gaps[0] >= size and (gaps == gaps[0]).all():
            # Evenly spaced records (a run of one length): a strided view, no copy.
            rows = np.ndarray((len(members), size), dtype=np.uint8, buffer=buffer, offset=int(starts[0]),
                              strides=(int(gaps[0]), 1))
        else:
            # One copy of the group's bytes (not an index array 8x its size).
            rows = np.frombuffer(b"".join([buffer[o:o + size] for o in starts.tolist()]),
                                 dtype=np.uint8).reshape(len(members), size)
        # XOR against the first record, masked to the fixed bytes: any
        # difference there means another layout.
        reference = np.zeros(size, dtype=np.uint8)
        reference[template.fixed_columns] = template.fixed_values
        mask = np.zeros(size, dtype=np.uint8)
        mask[template.fixed_columns] = 0xFF
        matches = ~((rows ^ reference) & mask).any(axis=1)
        if template.step_offset >= 0:
            step_block = rows[:, template.step_offset:template.step_offset + template.step_bytes].astype(np.uint64)
            continuation = step_block[:, :-1] & 0x80
            matches &= (continuation != 0).all(axis=1) & ((step_block[:, -1] & 0x80) == 0)
            shifts = (7 * np.arange(template.step_bytes)).astype(np.uint64)
            steps = ((step_block & 0x7F) << shifts).sum(axis=1).astype(np.int64)
        else:
            steps = np.zeros(len(members), dtype=np.int64)
        leftover.append(members[~matches])
        keep = np.flatnonzero(matches)
        if not keep.size:
            continue
        if keep.size != len(members):
            rows = rows[keep]
        wall_times = np.ascontiguousarray(rows[:, 1:9]).view("<f8").ravel()
        values = np.empty((keep.size, len(template.tags)), dtype=np.float64)
        for k, offset in enumerate(template.value_offsets.tolist()):
            values[:, k] = np.ascontiguousarray(rows[:, offset:offset + VALUE_BYTES]).view("<f4").ravel()
        groups.append(DecodedGroup(
            record_indices=members[keep], steps=steps[keep], wall_times=wall_times.astype(np.float64),
            tags=template.tags, values=values,
        ))
    remaining = np.concatenate(leftover) if leftover else np.zeros(0, dtype=np.int64)
    return groups, np.sort(remaining)
