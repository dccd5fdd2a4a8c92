"""Shared setup for the integration tests: the environment they run in.

Without a GPU, Triton's interpreter runs the real kernels on CPU tensors; it must be
switched on before anything imports triton. A GPU machine keeps the compiled kernels,
and an explicit ``TRITON_INTERPRET`` is always left as it is.
"""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

