"""rlscan: reinforcement-learning credit assignment as fused GPU scans.

Every op is one first-order linear recurrence ``A_t = α_t + β_t · A_{t±1}``; see
docs/semantics.md for the equations and docs/api.md for the calls.
"""
from . import reference
from ._backend import get_backend, set_backend, use_backend
from .broadcast import masked_broadcast
from .ops import REGISTRY
from .normalize import masked_normalize
from .reinforce import reinforce_pp_returns
from .whiten import masked_whiten

__version__ = "0.1.0"

# the ops, from the registry: each op's function, then its output type where it has one
_OPS: dict = {}
for _op in REGISTRY:
    _OPS.update(_op.namespace())
globals().update(_OPS)

__all__ = [
    *(op.name for op in REGISTRY),
    "masked_whiten",
    "masked_normalize",
    "reinforce_pp_returns",
    "masked_broadcast",
    *(name for name in _OPS if name not in REGISTRY.names()),
    "get_backend",
    "set_backend",
    "use_backend",
    "reference",
    "__version__",
]
del _op, _OPS
