"""Float64 reference implementations of every op, written straight from docs/semantics.md.

Each is a plain loop over time, vectorised over environments, computed in float64 on
the CPU; each returns float64 CPU tensors. They take the same arguments as the ops
(without ``exact`` and ``out_dtype``).
"""
from .ops.discounted_returns.reference import discounted_returns
from .ops.eligibility_traces.reference import eligibility_traces
from .ops.episodic_cumsum.reference import episodic_cumsum
from .ops.gae.reference import gae
from .ops.linear_scan.reference import linear_scan
from .ops.retrace.reference import retrace, retrace_from_q
from .ops.td_lambda.reference import td_lambda
from .ops.vtrace.reference import vtrace

__all__ = [
    "gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "retrace_from_q",
    "eligibility_traces", "episodic_cumsum", "linear_scan",
]
