"""The driver launch's argument packing (``rlscan._triton.cuda_launch``), checked without a
GPU: kernels compiled for sm_90 (Triton's compiler needs no device), their arguments
packed against the compiled PTX entry, and a stand-in for ``cuLaunchKernel`` that reads
back what a launch would pass. The compiler runs in a subprocess, because under
``TRITON_INTERPRET=1`` ``@triton.jit`` makes interpreted functions, not compilable ones."""
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from rlscan._triton import cuda_launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent(r'''
    import ctypes, struct, sys
    sys.path.insert(0, "scripts")
    import compile_for_gpu as C
    import torch
    import rlscan
    import rlscan._backend as backend
    from rlscan._triton import launch as L, cuda_launch

    packed = []
    real_init = cuda_launch.PackedArgs.__init__

    def keep(self, kernel, args, grid):
        real_init(self, kernel, args, grid)
        packed.append((self, args))

    C.PackedArgs.__init__ = keep
    L.LaunchPlan._first_launch = lambda self, phase, args: C.compile_only(
        self.fn, self.grid[:2], args, dict(self.constexprs, PHASE=phase, **self.options))
    backend.path_for = lambda device_type, what="": "triton"

    def leaf(args, path):
        for i in path:
            args = args[i]
        return args

    T, N = 40, 8
    r, v = torch.randn(T, N), torch.randn(T, N)
    boot, term = torch.randn(N), torch.rand(T, N) < 0.1
    for forced in (dict(kind="chained", stripes=1, steps=8, block_b=128, num_warps=1, lookback=4),
                   dict(kind="scan", block_t=16, block_b=8, num_warps=4, n_chunks=3)):
        with L.forced_config(**forced):
            rlscan.gae(r, v, bootstrap_value=boot, terminated=term, gamma=0.97, lmbda=0.9)
    assert len(packed) == 3, len(packed)  # the chained kernel, and the scan kernel's two phases
    for p, args in packed:
        calls = []
        p.launch_kernel = lambda *a: calls.append(a) or 0
        p.function, p.grid = 1234, (5, 6, 1)
        assert p(args, 42) == 0
        function, gx, gy, gz, bx, by, bz, shared, stream, params, extra = calls[0]
        assert (function, gx, gy, gz, by, bz, stream, extra) == (1234, 5, 6, 1, 1, 1, 42, None)
        assert bx == 32 * (1 if p is packed[0][0] else 4)  # the chained kernel runs one warp, the scan four
        address = lambda i: ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[i]
        for slot in range(p.n_slots):
            assert address(slot) == ctypes.addressof(p.slots) + 8 * slot
        for slot, i, j in p.tensors:
            t = args[i] if j is None else args[i][j]
            assert p.slots[slot] == t.data_ptr(), (slot, i, j)
        for slot, fmt, path in p.formats:
            want = leaf(args, path)
            got = struct.unpack_from(fmt, p.slots, 8 * slot)[0]
            assert got == (struct.unpack(fmt, struct.pack(fmt, want))[0]), (slot, path, got, want)
        extra = set(range(p.n_slots)) - {s for s, *_ in p.tensors} - {s for s, *_ in p.formats}
        assert all(p.slots[s] == 0 for s in extra)  # Triton's scratch pointers: null
        print("packed", p.n_slots, "parameters:", len(p.tensors), "pointers,", len(p.formats), "values")
''')


def test_packing_matches_compiled_kernels():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("packed") == 3, done.stdout


def _kernel(**meta):
    fields = dict(global_scratch_size=0, profile_scratch_size=0, num_ctas=1, num_warps=1, shared=0)
    fields.update(meta)
    return SimpleNamespace(metadata=SimpleNamespace(**fields), src=SimpleNamespace(signature={"X": "*fp32"}),
                           asm={"ptx": ".entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0\n)"}, function=1)


@pytest.mark.parametrize("meta, reason", [
    (dict(global_scratch_size=64), "scratch"),
    (dict(num_ctas=2), "cluster"),
    (dict(launch_cooperative_grid=True), "cooperative"),
])
def test_launches_it_cannot_make_are_left_to_triton(meta, reason):
    with pytest.raises(cuda_launch.Unsupported, match=reason):
        cuda_launch.PackedArgs(_kernel(**meta), (None,), (1, 1, 1))


def test_a_parameter_of_another_width_is_refused():
    kernel = _kernel()
    kernel.src.signature = {"n": "i64"}
    kernel.asm = {"ptx": ".entry k(\n\t.param .u32 k_param_0\n)"}
    with pytest.raises(cuda_launch.Unsupported, match="i64"):
        cuda_launch.PackedArgs(kernel, (5,), (1, 1, 1))


def test_tuple_types_written_as_strings_are_read():
    assert cuda_launch._tuple_type("[*fp32,i32,[i32,constexpr],[]]") == ("*fp32", "i32", ("i32", "constexpr"), ())
