#!/usr/bin/env python3
"""An independent reading of TensorBoard event files, for titan's tests.

Usage: read_tensorboard.py EVENT_FILE_OR_FOLDER

Prints one JSON line per event: {"step": .., "wall_time": .., "values": {tag: value}},
plus "file_version" on the event that carries it, and for image values
{"images": {tag: {"height", "width", "colorspace", "hex"}}} (the encoded
image's bytes in hexadecimal). A folder means every
events.out.tfevents.* file in it, in name order.

It shares nothing with titan's writer: the tensorflow.Event and Summary
message classes are built at run time from a descriptor written here from
the published field numbers (tensorflow/core/util/event.proto,
tensorflow/core/framework/summary.proto) and decoded by Debian's
python3-protobuf; the TFRecord framing is read here and both masked CRC-32Cs
of every record are checked with a CRC-32C computed here. Any mismatch or a
truncated record is an error (exit status 1) naming the file and offset.
"""

import json
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

FIELD = descriptor_pb2.FieldDescriptorProto


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _field(message, name, number, field_type, label=FIELD.LABEL_OPTIONAL, type_name=None, oneof=None):
    field = message.field.add(name=name, number=number, type=field_type, label=label)
    if type_name is not None:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _message_classes():
    """tensorflow.Event and tensorflow.Summary, only the fields titan writes (others are skipped as unknown)."""
    proto = descriptor_pb2.FileDescriptorProto(name="titan_test/event.proto", package="tensorflow", syntax="proto3")

    summary = proto.message_type.add(name="Summary")
    image = summary.nested_type.add(name="Image")
    _field(image, "height", 1, FIELD.TYPE_INT32)
    _field(image, "width", 2, FIELD.TYPE_INT32)
    _field(image, "colorspace", 3, FIELD.TYPE_INT32)
    _field(image, "encoded_image_string", 4, FIELD.TYPE_BYTES)
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    _field(value, "node_name", 7, FIELD.TYPE_STRING)
    _field(value, "tag", 1, FIELD.TYPE_STRING)
    _field(value, "simple_value", 2, FIELD.TYPE_FLOAT, oneof=0)
    _field(value, "image", 4, FIELD.TYPE_MESSAGE, type_name=".tensorflow.Summary.Image", oneof=0)
    _field(summary, "value", 1, FIELD.TYPE_MESSAGE, FIELD.LABEL_REPEATED, ".tensorflow.Summary.Value")

    event = proto.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    _field(event, "wall_time", 1, FIELD.TYPE_DOUBLE)
    _field(event, "step", 2, FIELD.TYPE_INT64)
    _field(event, "file_version", 3, FIELD.TYPE_STRING, oneof=0)
    _field(event, "summary", 5, FIELD.TYPE_MESSAGE, type_name=".tensorflow.Summary", oneof=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    make = getattr(message_factory, "GetMessageClass", None)
    if make is None:  # protobuf before 4.22 (Debian bookworm)
        factory = message_factory.MessageFactory(pool)
        make = factory.GetPrototype
    return make(pool.FindMessageTypeByName("tensorflow.Event"))


def records(path):
    """The data of each TFRecord in the file, after checking its framing."""
    with open(path, "rb") as file:
        data = file.read()
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at offset {offset}")
        length_bytes = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        if length_crc != masked_crc(length_bytes):
            raise ValueError(f"{path}: CRC mismatch in the length of the record at offset {offset}")
        start = offset + 12
        if start + length + 4 > len(data):
            raise ValueError(f"{path}: truncated record at offset {offset} ({length} bytes announced)")
        payload = data[start : start + length]
        (payload_crc,) = struct.unpack("<I", data[start + length : start + length + 4])
        if payload_crc != masked_crc(payload):
            raise ValueError(f"{path}: CRC mismatch in the data of the record at offset {offset}")
        yield payload
        offset = start + length + 4


def event_files(target):
    if os.path.isdir(target):
        names = sorted(n for n in os.listdir(target) if n.startswith("events.out.tfevents."))
        return [os.path.join(target, n) for n in names]
    return [target]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    event_class = _message_classes()
    try:
        for path in event_files(sys.argv[1]):
            for payload in records(path):
                event = event_class()
                event.ParseFromString(payload)
                line = {"step": event.step, "wall_time": event.wall_time}
                if event.HasField("file_version"):
                    line["file_version"] = event.file_version
                values = {}
                images = {}
                for value in event.summary.value:
                    if value.tag in values or value.tag in images:
                        raise ValueError(f"{path}: tag {value.tag!r} twice in the event of step {event.step}")
                    if value.HasField("image"):
                        encoded = value.image.encoded_image_string
                        images[value.tag] = {"height": value.image.height, "width": value.image.width,
                                             "colorspace": value.image.colorspace,
                                             "hex": encoded.hex()}
                        continue
                    # Exactly the float32 stored, whichever protobuf backend decoded it.
                    values[value.tag] = struct.unpack("<f", struct.pack("<f", value.simple_value))[0]
                line["values"] = values
                if images:
                    line["images"] = images
                print(json.dumps(line))
    except (ValueError, message.DecodeError) as error:
        print(f"read_tensorboard: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
