"""Launching a compiled Triton kernel with one ``cuLaunchKernel`` call.

Triton's launcher converts every argument on every call (for rlscan's kernels, about 60
strides, sizes and scalars); a launch plan fixes all of them but the tensors' addresses.
:class:`PackedArgs` writes the kernel's parameters once into a buffer of 8-byte slots,
in the order and widths of the compiled kernel's PTX entry, and on each call writes only
the addresses, then calls the driver through ctypes. Anything it does not recognise (a
parameter type, a scratch buffer Triton would allocate, a cluster launch) raises
:class:`Unsupported`, and the plan keeps Triton's launcher.
"""
from __future__ import annotations

import ctypes
import re
import struct
import threading

import torch

_PTX_PARAM = re.compile(r"\.param\s+\.(\w+)(?:\s+\.ptr\s+\.global\s+\.align\s+\d+)?\s+\w+_param_(\d+)")
# Triton's argument types, as packed into a slot: struct format and the PTX parameter types that hold them
_PACKING = {
    "i1": ("<b", ("u8", "s8", "b8", "u32", "s32", "b32")),
    "i8": ("<b", ("u8", "s8", "b8")),
    "u8": ("<B", ("u8", "s8", "b8")),
    "i16": ("<h", ("u16", "s16", "b16")),
    "u16": ("<H", ("u16", "s16", "b16")),
    "i32": ("<i", ("u32", "s32", "b32")),
    "u32": ("<I", ("u32", "s32", "b32")),
    "i64": ("<q", ("u64", "s64", "b64")),
    "u64": ("<Q", ("u64", "s64", "b64")),
    "fp32": ("<f", ("f32", "b32")),
    "fp64": ("<d", ("f64", "b64")),
}
_POINTER = ("<Q", ("u64", "b64"))


class Unsupported(Exception):
    """This kernel or launch is not one :class:`PackedArgs` can make."""


_driver = None
_driver_lock = threading.Lock()


def driver_launch():
    """``cuLaunchKernel`` from the CUDA driver library, as a ctypes function."""
    global _driver
    if _driver is None:
        with _driver_lock:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise Unsupported(f"no CUDA driver library: {exc}") from exc
            fn = lib.cuLaunchKernel
            fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
            fn.restype = ctypes.c_int
            _driver = fn
    return _driver


def _ptx_params(ptx: str) -> list:
    """The PTX types of the kernel entry's parameters, in order."""
    head = ptx[ptx.index(".entry"):]
    head = head[: head.index(")")]
    found = sorted((int(i), ty) for ty, i in _PTX_PARAM.findall(head))
    if [i for i, _ in found] != list(range(len(found))):
        raise Unsupported("unreadable PTX parameter list")
    return [ty for _, ty in found]


def _tuple_type(ty: str) -> tuple:
    """A tuple's type written as a string, ``"[*fp32,i32,[i32,constexpr]]"``, as a tuple."""
    items, depth, start = [], 0, 1
    for i, ch in enumerate(ty):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if (ch == "," and depth == 1) or (ch == "]" and depth == 0):
            item = ty[start:i].strip()
            if item:
                items.append(_tuple_type(item) if item.startswith("[") else item)
            start = i + 1
    return tuple(items)


def _leaves(types, values, path=()):
    """``(type, path)`` for every non-constexpr argument, tuples flattened, in order."""
    for i, (ty, value) in enumerate(zip(types, values)):
        if isinstance(ty, str) and ty.startswith("["):
            ty = _tuple_type(ty)
        if isinstance(ty, tuple):
            if not isinstance(value, tuple) or len(value) != len(ty):
                raise Unsupported(f"argument {path + (i,)} does not match its tuple type")
            yield from _leaves(ty, value, path + (i,))
        elif ty != "constexpr":
            yield ty, path + (i,)


def _at(values, path):
    for i in path:
        values = values[i]
    return values


class PackedArgs:
    """The parameters of one compiled kernel for one launch plan, packed once.

    ``args`` is the full argument tuple of the first launch (positional arguments, then
    constexpr values, in the kernel's parameter order). A later call passes a tuple of
    the same structure; its tensors are written on every call, its other values only by
    :meth:`pack` (the launch plan repacks when its scalars change).
    """

    def __init__(self, kernel, args: tuple, grid: tuple):
        meta = kernel.metadata
        if getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0):
            raise Unsupported("the kernel needs a scratch buffer from Triton's allocator")
        if getattr(meta, "num_ctas", 1) != 1 or tuple(getattr(meta, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) not in (
                (1, 1, 1), (0, 0, 0)):
            raise Unsupported("cluster launches are left to Triton")
        if getattr(meta, "launch_cooperative_grid", False) or getattr(meta, "launch_pdl", False):
            raise Unsupported("cooperative or programmatic-dependent launches are left to Triton")
        signature = kernel.src.signature
        types = tuple(signature.values())
        if len(types) != len(args):
            raise Unsupported(f"{len(args)} arguments for {len(types)} parameters")
        leaves = list(_leaves(types, args))
        ptx = _ptx_params(kernel.asm["ptx"])
        extra = ptx[len(leaves):]
        if len(ptx) < len(leaves) or any(ty not in _POINTER[1] for ty in extra):
            raise Unsupported(f"PTX parameters {ptx} do not follow the signature {types}")
        self.n_slots = len(ptx)
        self.slots = (ctypes.c_uint64 * self.n_slots)()
        base = ctypes.addressof(self.slots)
        self.params = (ctypes.c_void_p * self.n_slots)(*[base + 8 * i for i in range(self.n_slots)])
        self.tensors = []  # (slot, path) of each pointer: an argument, or an item of a tuple argument
        self.formats = []  # (slot, struct format, path) of each value
        for slot, ((ty, path), ptx_ty) in enumerate(zip(leaves, ptx)):
            pointer = ty.startswith("*")
            fmt, holders = _POINTER if pointer else _PACKING.get(ty, (None, ()))
            if ptx_ty not in holders:
                raise Unsupported(f"argument {path} of type {ty} in a .{ptx_ty} parameter")
            if pointer and len(path) > 2:
                raise Unsupported(f"a pointer nested deeper than one tuple, at {path}")
            if pointer:
                self.tensors.append((slot, path[0], path[1] if len(path) == 2 else None))
            else:
                self.formats.append((slot, fmt, path))
        self.pack(args)
        self.function = kernel.function
        self.grid = tuple(int(g) for g in grid)
        self.block = 32 * meta.num_warps
        self.shared = meta.shared
        self.launch_kernel = None  # set to driver_launch() by whoever launches
        self.lock = threading.Lock()

    def pack(self, args: tuple) -> None:
        """Write every non-pointer value of ``args`` into its slot."""
        for slot, fmt, path in self.formats:
            self.slots[slot] = 0
            struct.pack_into(fmt, self.slots, 8 * slot, _at(args, path))

    def __call__(self, args: tuple, stream: int) -> int:
        """Launch with the tensors of ``args`` (its other values as last packed); the
        driver's result code (0: launched)."""
        with self.lock:
            slots = self.slots
            for slot, i, j in self.tensors:
                slots[slot] = (args[i] if j is None else args[i][j]).data_ptr()
            gx, gy, gz = self.grid
            return self.launch_kernel(self.function, gx, gy, gz, self.block, 1, 1, self.shared, stream,
                                      self.params, None)


def available() -> bool:
    """Whether this process can launch through the driver directly (CUDA built and present)."""
    return torch.version.cuda is not None and torch.cuda.is_available()
