"""rlscan: reinforcement-learning credit assignment as fused GPU scans.

Every op is one first-order linear recurrence ``A_t = α_t + β_t · A_{t±1}``; see
docs/semantics.md for the equations and docs/api.md for the calls.
"""
from . import reference
from ._backend import get_backend, set_backend, use_backend
from .ops.discounted_returns import discounted_returns
from .ops.eligibility_traces import eligibility_traces
from .ops.episodic_cumsum import episodic_cumsum
from .ops.gae import GAEOutput, gae
from .ops.linear_scan import linear_scan
from .ops.retrace import RetraceOutput, retrace, retrace_from_q
from .ops.td_lambda import td_lambda
from .ops.vtrace import VTraceOutput, vtrace
from .whiten import masked_whiten

__version__ = "0.1.0"

__all__ = [
    "gae",
    "td_lambda",
    "discounted_returns",
    "vtrace",
    "retrace",
    "retrace_from_q",
    "eligibility_traces",
    "episodic_cumsum",
    "linear_scan",
    "masked_whiten",
    "GAEOutput",
    "VTraceOutput",
    "RetraceOutput",
    "get_backend",
    "set_backend",
    "use_backend",
    "reference",
    "__version__",
]
