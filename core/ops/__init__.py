"""The ops: one folder each, with the public function and its :class:`~rlscan._spec.OpSpec`
(``op.py``), its Triton coefficients (``kernel.py``), its compiled CPU loop (``cpu.py``) and
its float64 reference (``reference.py``).

:data:`REGISTRY` is the one list of the public ops: the package's namespace,
``rlscan.reference``, the benchmark, the tests and the tools enumerate it. Each op's
:class:`~rlscan._spec.PublicOp` is declared in its ``op.py``; adding an op is its folder and
one line here.
"""
from .._spec import Registry

REGISTRY = Registry(
    "rlscan.ops.gae.op:PUBLIC",
    "rlscan.ops.td_lambda.op:PUBLIC",
    "rlscan.ops.discounted_returns.op:PUBLIC",
    "rlscan.ops.vtrace.op:PUBLIC",
    "rlscan.ops.retrace.op:PUBLIC",
    "rlscan.ops.retrace.op:PUBLIC_FROM_Q",
    "rlscan.ops.eligibility_traces.op:PUBLIC",
    "rlscan.ops.episodic_cumsum.op:PUBLIC",
    "rlscan.ops.linear_scan.op:PUBLIC",
)
