"""PyTorch Distributed Checkpoint (DCP) folders, written and read as PyTorch does.

The PyTorch on the test machines (Debian's 1.13) has no
torch.distributed.checkpoint, so this script defines stand-ins for the classes
DCP pickles into `.metadata`, under PyTorch's exact module paths and with the
fields of torch/distributed/checkpoint/metadata.py and filesystem.py (read at
pytorch/pytorch commits 57ba4129 and b639d82d, 2025; PyTorch 2.x). Registered
in sys.modules, they make pickle write and read the same bytes DCP would.
Tensor items go through this machine's real torch.save / torch.load, as
FileSystemWriter / FileSystemReader do (one torch.save archive per chunk at
(offset, length) of a `__<rank>_<n>.distcp` file).

  dcp_reference.py read DIR OUT.safetensors
      reads DIR as FileSystemReader + a full-tensor load would: every tensor
      item assembled from its chunks, written to OUT; the non-tensor items'
      values are printed as JSON lines ("bytes <key> <repr>").
  dcp_reference.py write DIR IN.safetensors RANKS [--torchtitan]
      writes IN's tensors as a DCP folder saved by RANKS ranks, each tensor
      split along dim 0 as FSDP shards it; --torchtitan adds the non-tensor
      items TorchTitan saves beside the model (train_state, lr_scheduler,
      dataloader) as BytesStorageMetadata.
  dcp_reference.py hostile DIR KIND
      writes a .metadata titan must refuse (KIND: os_system, unknown_global,
      truncated, traversal).
  dcp_reference.py mismatch DIR OUT KIND
      writes DIR's items again (one rank) with one thing titan must refuse
      when it restores the training state (KIND: drop_moment, moment_shape,
      sgd_state, model_only, schedule_position).
  dcp_reference.py resave DIR OUT RANKS
      loads DIR's training state as TorchTitan (v0.2.2) does, into real
      PyTorch objects: an AdamW over the model's parameters, its state and
      param_groups set from get_optimizer_state_dict's flattened keys
      (optimizer.state.<fqn>.exp_avg, optimizer.param_groups.<fqn>.lr, ...;
      torch/distributed/checkpoint/state_dict.py), a LambdaLR from
      lr_scheduler.<attribute>, train_state.step / .ntokens_seen. Like DCP's
      load, every key those objects' state dicts ask for must be in DIR. Then
      saves their state dicts again, flattened as DCP flattens a state dict
      (_traverse.py: dicts nest with '.', lists of plain values are one
      item), over RANKS ranks with the model and the other items carried over
      as a resharding tool would (TorchTitan's own loader state is
      dataloader.dp_rank_<n>; titan's items ride along).
"""

import dataclasses
import enum
import functools
import io
import os
import pathlib
import pickle
import sys
import types
import uuid
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def _module(name):
    module = types.ModuleType(name)
    sys.modules[name] = module
    return module


_dcp = _module("torch.distributed.checkpoint")
_metadata = _module("torch.distributed.checkpoint.metadata")
_filesystem = _module("torch.distributed.checkpoint.filesystem")
_dcp.metadata = _metadata
_dcp.filesystem = _filesystem


def _place(module, cls):
    cls.__module__ = module.__name__
    setattr(module, cls.__name__, cls)
    return cls


@dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


@dataclass
class TensorProperties:
    dtype: torch.dtype = field(default_factory=torch.get_default_dtype)
    layout: torch.layout = field(default=torch.strided)
    requires_grad: bool = False
    memory_format: torch.memory_format = field(default=torch.contiguous_format)
    pin_memory: bool = False

    # As PyTorch's: torch.memory_format cannot be pickled, so its encoding is.
    def __getstate__(self):
        assert self.memory_format == torch.contiguous_format
        return (self.dtype, self.layout, self.requires_grad, _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT,
                self.pin_memory)

    def __setstate__(self, state):
        self.dtype, self.layout, self.requires_grad, encoding, self.pin_memory = state
        assert encoding == _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, encoding
        self.memory_format = torch.contiguous_format


@dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: List[ChunkStorageMetadata]


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: List[str] = field(default_factory=list)


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[torch.Size] = None
    index: Optional[int] = field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Optional[Any] = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


for _cls in (ChunkStorageMetadata, _MEM_FORMAT_ENCODING, TensorProperties, TensorStorageMetadata,
             BytesStorageMetadata, StorageMeta, Metadata, MetadataIndex):
    _place(_metadata, _cls)
_place(_filesystem, _StorageInfo)


def load_items(folder, print_objects=False):
    """Every item of a DCP folder as a load of all its keys gives it: tensors
    whole (assembled from their chunks), the other items torch.load-ed."""
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        metadata = pickle.load(f)
    assert isinstance(metadata, Metadata), type(metadata)
    items = {}
    for fqn, item in metadata.state_dict_metadata.items():
        if isinstance(item, BytesStorageMetadata):
            info = metadata.storage_data[MetadataIndex(fqn)]
            with open(os.path.join(folder, info.relative_path), "rb") as f:
                f.seek(info.offset)
                value = torch.load(io.BytesIO(f.read(info.length)))
            if print_objects:
                print("bytes", fqn, repr(value))
            items[fqn] = value
            continue
        assert isinstance(item, TensorStorageMetadata), type(item)
        assert isinstance(item.size, torch.Size) and item.properties.layout == torch.strided
        whole = torch.zeros(item.size, dtype=item.properties.dtype)
        for chunk in item.chunks:
            info = metadata.storage_data[MetadataIndex(fqn, chunk.offsets)]
            with open(os.path.join(folder, info.relative_path), "rb") as f:
                f.seek(info.offset)
                data = f.read(info.length)
            assert len(data) == info.length
            piece = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            assert piece.shape == chunk.sizes, (fqn, piece.shape, chunk.sizes)
            assert piece.dtype == item.properties.dtype
            view = whole
            for dim, (start, size) in enumerate(zip(chunk.offsets, chunk.sizes)):
                view = view.narrow(dim, start, size)
            view.copy_(piece)
        items[fqn] = whole
    return metadata, items


def read(folder, output):
    metadata, items = load_items(folder, print_objects=True)
    print("version", metadata.version)
    safetensors_io.save(output, {k: v for k, v in items.items() if isinstance(v, torch.Tensor)})


def write(folder, tensors, ranks, extras):
    os.makedirs(folder, exist_ok=True)
    state_dict_metadata, storage_data, planner_data = {}, {}, {}
    streams = [open(os.path.join(folder, f"__{rank}_0.distcp"), "wb") for rank in range(ranks)]
    # BYTE_IO items first, then tensors, as _write_files_from_queue orders a file.
    for index, (key, value) in enumerate(extras.items()):
        stream = streams[index % ranks]
        buffer = io.BytesIO()
        torch.save(value, buffer)
        offset = stream.tell()
        stream.write(buffer.getbuffer())
        state_dict_metadata[key] = BytesStorageMetadata()
        storage_data[MetadataIndex(key)] = _StorageInfo(f"__{index % ranks}_0.distcp", offset,
                                                        stream.tell() - offset)
        planner_data[key] = tuple(key.split(".", 1))
    for fqn, tensor in tensors.items():
        chunks = []
        rows = tensor.shape[0] if tensor.dim() > 0 else 1
        per_rank = -(-rows // ranks)  # FSDP's torch.chunk sizes
        for rank in range(ranks):
            start = min(rank * per_rank, rows)
            size = min(per_rank, rows - start)
            if tensor.dim() == 0:
                if rank > 0:
                    continue
                piece, offsets = tensor, torch.Size([])
            else:
                if size == 0:
                    continue
                piece = tensor.narrow(0, start, size).clone()
                offsets = torch.Size([start] + [0] * (tensor.dim() - 1))
            chunk = ChunkStorageMetadata(offsets=offsets, sizes=piece.shape)
            stream = streams[rank]
            offset = stream.tell()
            torch.save(piece, stream)
            storage_data[MetadataIndex(fqn, offsets, len(chunks))] = _StorageInfo(
                f"__{rank}_0.distcp", offset, stream.tell() - offset)
            chunks.append(chunk)
        state_dict_metadata[fqn] = TensorStorageMetadata(
            properties=TensorProperties(dtype=tensor.dtype), size=tensor.shape, chunks=chunks)
        planner_data[fqn] = tuple(fqn.split(".", 1)) if fqn.startswith("optimizer.") else (fqn,)
    for stream in streams:
        stream.close()
    metadata = Metadata(state_dict_metadata=state_dict_metadata, planner_data=planner_data,
                        storage_data=storage_data,
                        storage_meta=StorageMeta(checkpoint_id=pathlib.Path(folder), save_id=str(uuid.uuid4())),
                        version="1.0.0")
    with open(os.path.join(folder, ".metadata.tmp"), "wb") as f:
        pickle.dump(metadata, f)
    os.rename(os.path.join(folder, ".metadata.tmp"), os.path.join(folder, ".metadata"))


# TorchTitan's Stateful objects beside the model (components/checkpoint.py).
_STATEFUL = ("optimizer.", "lr_scheduler.", "dataloader.", "train_state.")


def dcp_flatten(state_dict):
    """flatten_state_dict of torch/distributed/checkpoint/_nested_dict.py with
    traverse_state_dict's rules: mappings nest ('.'-joined keys), a list is
    one item unless it holds tensors or mappings, a tuple is one item."""
    flat = {}

    def is_terminal(value):
        if isinstance(value, dict):
            return False
        if isinstance(value, list):
            for entry in value:
                if isinstance(entry, (dict, list)) and not is_terminal(entry):
                    return False
                if isinstance(entry, torch.Tensor):
                    return False
        return True

    def visit(path, value):
        if isinstance(value, dict):
            for k, v in value.items():
                visit(path + (str(k),), v)
        elif is_terminal(value):
            key = ".".join(str(p) for p in path)
            assert key not in flat, f"duplicated flatten key {key}"
            flat[key] = value
        else:
            for i, v in enumerate(value):
                visit(path + (i,), v)

    for key, value in state_dict.items():
        visit((str(key),), value)
    return flat


def flat_optimizer_state_dict(optimizer, names):
    """get_optimizer_state_dict(..., flatten_optimizer_state_dict=True) of an
    optimizer over parameters named `names` (in order)."""
    osd = optimizer.state_dict()
    flat = {}
    for pid, state in osd["state"].items():
        for k, v in state.items():
            flat[f"state.{names[pid]}.{k}"] = v
    for group in osd["param_groups"]:
        for pid in group["params"]:
            for k, v in group.items():
                if k != "params":
                    flat[f"param_groups.{names[pid]}.{k}"] = v
    return flat


def load_flat_optimizer_state_dict(optimizer, names, flat):
    """set_optimizer_state_dict of flattened keys (_unflatten_optim_state_dict:
    a group takes its first parameter's hyper-parameters), then load_state_dict."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    state, groups = {}, []
    for group in optimizer.param_groups:
        pids = [index[id(p)] for p in group["params"]]
        for pid, p in zip(pids, group["params"]):
            state[pid] = {k: flat[f"state.{names[pid]}.{k}"] for k in optimizer.state[p]}
        loaded = {k: flat[f"param_groups.{names[pids[0]]}.{k}"] for k in group if k != "params"}
        loaded["params"] = pids
        groups.append(loaded)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def resave(folder, output, ranks):
    _, items = load_items(folder)
    names = [k for k, v in items.items() if isinstance(v, torch.Tensor) and not k.startswith(_STATEFUL)]
    trainable = [n for n in names if f"optimizer.state.{n}.exp_avg" in items]
    assert trainable, "no optimizer state in " + folder
    first = trainable[0]
    group = {k: items[f"optimizer.param_groups.{first}.{k}"] for k in ("lr", "betas", "eps", "weight_decay")}
    params = [torch.nn.Parameter(torch.zeros_like(items[f"optimizer.state.{n}.exp_avg"])) for n in trainable]
    optimizer = torch.optim.AdamW(params, lr=group["lr"], betas=tuple(group["betas"]), eps=group["eps"],
                                  weight_decay=group["weight_decay"], foreach=False)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(lambda step: 1.0))
    # get_optimizer_state_dict first materialises the state (_init_optim_state: a step of zero gradients at lr 0).
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, lrs):
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    # The keys TorchTitan's state dict asks for (dataloader excluded: its own is dataloader.dp_rank_<n>).
    wanted = dcp_flatten({"optimizer": flat_optimizer_state_dict(optimizer, trainable),
                          "lr_scheduler": scheduler.state_dict(),
                          "train_state": {"step": 0, "ntokens_seen": 0}})
    missing = [k for k in wanted if k not in items]
    assert not missing, f"Missing key in checkpoint state_dict: {missing}"
    prefix = "optimizer."
    load_flat_optimizer_state_dict(optimizer, trainable,
                                   {k[len(prefix):]: items[k] for k in wanted if k.startswith(prefix)})
    scheduler_state = scheduler.state_dict()
    for key in wanted:
        if key.startswith("lr_scheduler."):
            scheduler_state[key[len("lr_scheduler."):]] = items[key]
    scheduler.load_state_dict(scheduler_state)
    for n, p in zip(trainable, params):
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[p][k], items[f"optimizer.state.{n}.{k}"]), (n, k)
    saved = dcp_flatten({"optimizer": flat_optimizer_state_dict(optimizer, trainable),
                         "lr_scheduler": scheduler.state_dict(),
                         "train_state": {"step": items["train_state.step"],
                                         "ntokens_seen": items["train_state.ntokens_seen"]}})
    # The model, and what no TorchTitan object owns (titan's items, a loader's state), carried over.
    for key, value in items.items():
        if not key.startswith(_STATEFUL) or key.startswith("dataloader.") or key == "train_state.titan_state":
            saved[key] = value
    tensors = {k: v for k, v in saved.items() if isinstance(v, torch.Tensor)}
    extras = {k: v for k, v in saved.items() if not isinstance(v, torch.Tensor)}
    write(output, tensors, ranks, extras)
    print(f"resaved {len(tensors)} tensors and {len(extras)} other items over {ranks} ranks "
          f"({len(wanted)} keys loaded into AdamW, LambdaLR and train_state)")


def mismatch(folder, output, kind):
    _, items = load_items(folder)
    names = [k for k, v in items.items() if isinstance(v, torch.Tensor) and not k.startswith(_STATEFUL)]
    fqn = "layers.0.attention.wq.weight"
    assert fqn in names, names
    if kind == "drop_moment":
        del items[f"optimizer.state.{fqn}.exp_avg_sq"]
    elif kind == "moment_shape":
        moment = items[f"optimizer.state.{fqn}.exp_avg"]
        items[f"optimizer.state.{fqn}.exp_avg"] = moment[: moment.shape[0] // 2].clone()
    elif kind == "sgd_state":
        # What torch.optim.SGD(momentum=0.9) keeps per parameter.
        for n in names:
            if f"optimizer.state.{n}.exp_avg" in items:
                items[f"optimizer.state.{n}.momentum_buffer"] = items.pop(f"optimizer.state.{n}.exp_avg")
                del items[f"optimizer.state.{n}.exp_avg_sq"]
    elif kind == "model_only":
        items = {k: v for k, v in items.items() if k in names}
    elif kind == "schedule_position":
        items["lr_scheduler.last_epoch"] = items["train_state.step"] + 2
    else:
        sys.exit(f"unknown mismatch {kind}")
    write(output, {k: v for k, v in items.items() if isinstance(v, torch.Tensor)}, 1,
          {k: v for k, v in items.items() if not isinstance(v, torch.Tensor)})


class _OsSystem:
    def __reduce__(self):
        return (os.system, ("echo titan-ran-this > hacked",))


def hostile(folder, kind):
    os.makedirs(folder, exist_ok=True)
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    write(folder, {"w": tensor}, 1, {})
    path = os.path.join(folder, ".metadata")
    with open(path, "rb") as f:
        metadata = pickle.load(f)
    if kind == "os_system":
        metadata.planner_data = {"w": _OsSystem()}
    elif kind == "unknown_global":
        metadata.planner_data = {"w": dataclasses.make_dataclass("Gadget", [])()}
        metadata.planner_data["w"].__class__.__module__ = "__main__"
    elif kind == "traversal":
        info = next(iter(metadata.storage_data.values()))
        info.relative_path = "../outside.distcp"
    if kind == "unknown_global":
        globals()["Gadget"] = metadata.planner_data["w"].__class__
    data = pickle.dumps(metadata)
    if kind == "truncated":
        data = data[: len(data) // 2]
    with open(path, "wb") as f:
        f.write(data)


def main():
    command = sys.argv[1]
    if command == "read":
        read(sys.argv[2], sys.argv[3])
    elif command == "write":
        tensors, _ = safetensors_io.load(sys.argv[3])
        extras = {}
        if "--torchtitan" in sys.argv:
            # What TorchTitan's CheckpointManager saves beside the model (its Stateful
            # objects' state dicts, flattened by DCP into "<name>.<key>").
            extras = {"train_state.step": 7, "train_state.ntokens_seen": 7168,
                      "lr_scheduler.last_epoch": 7, "dataloader.dp_rank_0": b"loader state"}
        write(sys.argv[2], tensors, int(sys.argv[4]), extras)
    elif command == "hostile":
        hostile(sys.argv[2], sys.argv[3])
    elif command == "mismatch":
        mismatch(sys.argv[2], sys.argv[3], sys.argv[4])
    elif command == "resave":
        resave(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
