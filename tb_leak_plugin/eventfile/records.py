"""Byte-level pieces shared by the event-file writer and readers.

* The TFRecord frame: ``uint64 length``, masked CRC-32C of the length, the
  payload, masked CRC-32C of the payload.
* Protobuf varints.
* The fixed wire layout of one tb-leak ``Summary.Value`` (a float32 scalar
  tensor under a tag), which the writer emits by hand and the fast decoder
  recognises by template.
"""

from __future__ import annotations

import struct

from tensorboard.compat.proto import types_pb2

try:  # A C implementation; the pure-Python fallback is slow, so readers only check lengths.
    import google_crc32c as _crc

    def masked_crc(data: bytes) -> int:
        """TFRecord's masked CRC-32C of ``data``."""
        crc = _crc.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    HAVE_FAST_CRC = True
    crc32c = _crc.value  # unmasked CRC-32C of a bytes object
except ImportError:  # pragma: no cover - exercised only without the wheel
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as _masked

    def masked_crc(data: bytes) -> int:
        """TFRecord's masked CRC-32C of ``data``."""
        return _masked(data)

    HAVE_FAST_CRC = False
    crc32c = None

HEADER = struct.Struct("<QI")   # payload length, masked CRC of the length bytes
FOOTER = struct.Struct("<I")    # masked CRC of the payload
_LENGTH = struct.Struct("<Q")


def frame(payload: bytes) -> bytes:
    """One complete TFRecord holding ``payload``."""
    length = _LENGTH.pack(len(payload))
    return length + FOOTER.pack(masked_crc(length)) + payload + FOOTER.pack(masked_crc(payload))


def encode_varint(number: int) -> bytes:
    """Protobuf base-128 varint of a non-negative ``number``."""
    out = bytearray()
    while True:
        low = number & 0x7F
        number >>= 7
        if number:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    """Decode the varint at ``offset``: ``(value, offset after it)``.

    Raises IndexError when the data ends inside the varint.
    """
    value = shift = 0
    position = offset
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return value, position
        shift += 7


# Values are float32: TensorBoard's Rust data server (--load_fast) serves
# only DT_FLOAT scalars and silently drops DT_DOUBLE ones. float32 keeps
# 24 bits: byte counts are exact to 16 MiB and within 512 B at 4 GiB, far
# finer than any leak worth reporting; counts are exact to 16 million.
VALUE_BYTES = 4
VALUE = struct.Struct("<f")


def value_prefix(tag: str) -> bytes:
    """Wire bytes of a ``Summary.Value`` up to its 4-byte float.

    Value{tag=1, tensor=8{dtype=1: DT_FLOAT, float_val=5 packed}}; writing
    these by hand is ~10x cheaper than building protos on every sample, and
    ``tests/test_summary_format.py`` checks the bytes against protobuf's
    encoding.
    """
    encoded_tag = tag.encode("utf-8")
    tensor = b"\x08" + encode_varint(types_pb2.DT_FLOAT) + b"\x2a" + encode_varint(VALUE_BYTES)
    body = (b"\x0a" + encode_varint(len(encoded_tag)) + encoded_tag
            + b"\x42" + encode_varint(len(tensor) + VALUE_BYTES) + tensor)
    return b"\x0a" + encode_varint(len(body) + VALUE_BYTES) + body
