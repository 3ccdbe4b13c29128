"""Minimal safetensors reader/writer for the PyTorch reference (Debian's
torch 1.13 has no safetensors package). Format: 8-byte little-endian header
length, JSON header, raw little-endian tensor bytes."""
import json
import struct

import torch

_DTYPES = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.uint8: "U8",
}
_FROM_NAME = {name: dtype for dtype, name in _DTYPES.items()}


def save(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous().cpu()
        if tensor.dtype == torch.float64:
            tensor = tensor.float()
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = _FROM_NAME[entry["dtype"]]
        raw = bytearray(data[base + begin:base + end])
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        tensors[name] = flat.view(dtype).reshape(entry["shape"]).clone()
    return tensors, metadata
