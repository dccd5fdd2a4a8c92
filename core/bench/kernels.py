"""Triton kernels for the floors: an empty kernel (the launch floor) and a copy (the bandwidth).

Imported only when a CUDA device is present.
"""
import triton
import triton.language as tl


@triton.jit
def empty_kernel(X):
    pass


@triton.jit
def copy_kernel(X, Y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = offsets < n
    tl.store(Y + offsets, tl.load(X + offsets, mask=keep), mask=keep)
