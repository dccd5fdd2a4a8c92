"""Packed sequences (``cu_seqlens=``): the public layer's checks and dispatch.

A packed batch is 1-D: ``rewards``, ``values``, ``mask`` are ``[total]``, the sequences laid
end to end, and ``cu_seqlens`` (``[S + 1]``, int32 or int64: flash-attention's varlen
convention) says where each starts: sequence ``s`` is tokens ``cu_seqlens[s]`` to
``cu_seqlens[s + 1] − 1``. Per sequence, ``terminated`` ``[S]`` (nothing is bootstrapped
after it) and ``bootstrap_value`` ``[S]`` (the value after a sequence cut by the length
limit). ``gamma``, ``lmbda``: a float, or a tensor of ``total`` values (one per token) or of
``S`` (one per sequence; a tensor of ``total`` values is read per token where ``S ==
total``). The result on sequence ``s`` is the padded op's on a row holding it (the mask 0
past its end, the bootstrap 0 where it terminated), bit for bit on the CPU path, but for
whitened results that are not in the compute dtype (half-precision results, REINFORCE++'s
float64 compute of float32 rewards): the loop whitens the values it computed, where the
padded op whitens its rounded results (a last-bit difference at most). The loops read
1-D inputs with unit stride; strided views are copied first.

Nested tensors with ``layout=torch.jagged`` (``[S, j]``) are packed batches too: their
``offsets()`` are ``cu_seqlens`` and their ``values()`` the buffer (no copy); the results
come back nested on the same offsets.

Packed calls run without autograd: an input that requires grad while grad mode is on is
refused. CPU tensors run :mod:`rlscan._packed_cpu`, CUDA tensors (or the ``triton``
backend) ``rlscan._triton.packed``.
"""
from __future__ import annotations

import logging
import numbers
from typing import Optional

import numpy as np
import torch

from ._call import Call, _compiling
from ._inputs import check_bool, check_device, check_flag, check_float, to_tensor, type_name
from .ops import _skip

#: What each argument that does not apply to packed sequences says when it is passed.
REFUSED = {
    "next_values": "the value after a kept token is the next kept token's (values), and bootstrap_value[s] "
                   "after sequence s",
    "truncated": "a sequence cut by the length limit bootstraps from its bootstrap_value (leave terminated "
                 "False there)",
    "out": "the outputs are fresh [total] tensors",
}


def is_packed(rewards, cu_seqlens) -> bool:
    """Whether a call is on packed sequences: ``cu_seqlens`` given, or nested jagged rewards."""
    return cu_seqlens is not None or (isinstance(rewards, torch.Tensor) and rewards.is_nested)


# ----------------------------------------------------------------------------- the ops


def gae(rewards, values, *, cu_seqlens, bootstrap_value, terminated, mask, whiten, group, gamma, lmbda, time_dim,
        exact, out_dtype, value_lmbda=None, sequence_sharded=False, **refused):
    """``rlscan.gae`` on packed sequences: ``(advantages, returns)``; with ``value_lmbda``, the
    returns of a second pass with that λ (the packed loops carry one λ)."""
    whiten = check_bool("whiten", whiten)
    if check_bool("sequence_sharded", sequence_sharded):
        raise ValueError("sequence_sharded=True takes each rank's chunk of padded rows ([B, T_r]); it cannot be "
                         "combined with cu_seqlens or nested rewards (packed sequences)")
    if group is not None and not whiten:
        raise ValueError("gae: group= is the process group of the whitening: it needs whiten=True")
    arguments = dict(values=values, values_required=True, mask=mask, terminated=terminated,
                     bootstrap_value=bootstrap_value, gamma=gamma, time_dim=time_dim, exact=exact,
                     out_dtype=out_dtype, refused=refused)
    advantages, returns = _run("gae", "rewards", rewards, cu_seqlens, lmbda=lmbda, whiten=whiten and group is None,
                               group=group, **arguments)
    if value_lmbda is not None:
        _, returns = _run("gae", "rewards", rewards, cu_seqlens, lmbda=value_lmbda, lmbda_name="value_lmbda",
                          **arguments)
    return advantages, returns


def td_lambda(rewards, values, *, cu_seqlens, bootstrap_value, terminated, mask, gamma, lmbda, time_dim, exact,
              out_dtype, **refused):
    """``rlscan.td_lambda`` on packed sequences: the λ-returns."""
    return _run("td_lambda", "rewards", rewards, cu_seqlens, values=values, values_required=True, mask=mask,
                terminated=terminated, bootstrap_value=bootstrap_value, gamma=gamma, lmbda=lmbda,
                time_dim=time_dim, exact=exact, out_dtype=out_dtype, refused=refused)[0]


def discounted_returns(rewards, *, cu_seqlens, bootstrap_value, terminated, mask, gamma, time_dim, exact, out_dtype,
                       **refused):
    """``rlscan.discounted_returns`` on packed sequences: the returns."""
    return _run("discounted_returns", "rewards", rewards, cu_seqlens, mask=mask, terminated=terminated,
                bootstrap_value=bootstrap_value, gamma=gamma, time_dim=time_dim, exact=exact, out_dtype=out_dtype,
                refused=refused)[0]


def kept_returns(rewards, mask, gamma, *, cu_seqlens, time_dim, exact, compute_dtype):
    """REINFORCE++'s ``(advantages, returns)`` on packed sequences, each in the rewards' dtype."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma must be a float, got {type_name(gamma)}")
    return _run("kept_returns", "token_level_rewards", rewards, cu_seqlens, mask=mask, gamma=float(gamma),
                time_dim=time_dim, exact=exact, out_dtype=None, refused={}, wide=compute_dtype == torch.float64)


# ----------------------------------------------------------------------------- checks


def _unnest(name: str, x, offsets: Optional[torch.Tensor], anchor: bool = False):
    """The buffer of a nested jagged ``x`` (on ``offsets``, the anchor's), or ``x`` itself where
    neither is nested."""
    nested = isinstance(x, torch.Tensor) and x.is_nested
    if not nested:
        if offsets is not None and x is not None:
            raise TypeError(f"{name} must be a nested jagged tensor on rewards' offsets (rewards is one), got "
                            f"{type_name(x)}")
        return x
    if offsets is None and not anchor:
        raise TypeError(f"{name} is a nested tensor but rewards is not: pass both nested (jagged), or both 1-D "
                        "with cu_seqlens")
    if x.layout is not torch.jagged:
        raise TypeError(f"{name} must be a nested tensor with layout=torch.jagged (offsets and one buffer), got "
                        f"{x.layout}")
    if x.dim() != 2 or x._ragged_idx != 1 or x._lengths is not None:
        raise ValueError(f"{name} must be a [S, j] nested jagged tensor without holes (one value per token), got "
                         f"{x.dim()} dimensions")
    if offsets is not None and x.offsets() is not offsets and not torch.equal(x.offsets(), offsets):
        raise ValueError(f"{name} must share rewards' offsets (the same sequences), got other offsets")
    return x.values()


def _cu_seqlens(cu, total: int, device: torch.device) -> torch.Tensor:
    """``cu_seqlens``, checked: 1-D int32/int64 on the rewards' device, from 0, non-decreasing, to ``total``."""
    x, _ = to_tensor("cu_seqlens", cu)
    if x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be an int32 or int64 tensor of sequence offsets, got {x.dtype}")
    if x.dim() != 1 or x.numel() < 1:
        raise ValueError(f"cu_seqlens must be 1-D [S + 1] (S sequences), got shape {tuple(x.shape)}")
    check_device("cu_seqlens", x, device, "rewards")
    if not _compiling():
        a = x.detach().numpy() if x.device.type == "cpu" else x  # numpy: a fraction of torch's per-call cost
        first, last = int(a[0]), int(a[-1])
        if first != 0 or last != total or (len(a) > 1 and bool((a[1:] < a[:-1]).any())):
            raise ValueError(f"cu_seqlens must start at 0, never decrease and end at the number of tokens, {total} "
                             f"(got {first} ... {last})")
    return x


def _per_sequence(name: str, x, S: int, call: Call, flag: bool) -> Optional[torch.Tensor]:
    if x is None:
        return None
    t = call._tensor(name, x)
    if flag:
        check_flag(name, t)
    else:
        check_float(name, t)
    if t.shape != (S,):
        raise ValueError(f"{name} must hold one value per sequence, ({S},), got {tuple(t.shape)}")
    if not flag:
        call.dtypes.append(t.dtype)
    return t


def _coef(name: str, value, S: int, total: int, call: Call):
    """``gamma`` or ``lmbda``: a float in [0, 1], or a 1-D tensor of ``total`` (one per token) or
    ``S`` (one per sequence) values in [0, 1]."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not isinstance(value, np.ndarray):
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")
        return value
    if not isinstance(value, (torch.Tensor, np.ndarray)):
        raise TypeError(f"{name} must be a float or a tensor, got {type_name(value)}")
    x = call._tensor(name, value)
    check_float(name, x)
    if x.dim() != 1 or x.numel() not in (S, total):
        raise ValueError(f"{name} must be a float, or a 1-D tensor of {S} values (one per sequence) or {total} "
                         f"(one per token), got shape {tuple(x.shape)}")
    if x.device.type == "cpu" and not _compiling() and x.numel() and not bool(((x >= 0) & (x <= 1)).all()):
        raise ValueError(f"{name} must lie in [0, 1] (and not be NaN) at every step")
    return x


def _refuse(refused: dict) -> None:
    for name, value in refused.items():
        if value is not None:
            raise ValueError(f"{name} cannot be combined with cu_seqlens (packed sequences): {REFUSED[name]}")


def _no_grad(named: dict) -> None:
    if not torch.is_grad_enabled():
        return
    for name, x in named.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            raise ValueError(f"{name} requires grad: packed sequences (cu_seqlens) are computed without autograd; "
                             f"pass {name}.detach(), or call under torch.no_grad()")


def _flat(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A 1-D input with unit stride (the loops' contract): strided views are copied."""
    if x is None or x.numel() < 2 or x.stride(0) == 1:
        return x
    return x.contiguous()


# ----------------------------------------------------------------------------- running


def _run(kind: str, anchor: str, rewards, cu_seqlens, *, values=None, values_required=False, mask=None,
         terminated=None, bootstrap_value=None, gamma, lmbda=None, time_dim, whiten=False, exact, out_dtype,
         refused: dict, group=None, wide: bool = False, lmbda_name: str = "lmbda") -> tuple:
    offsets = None
    if isinstance(rewards, torch.Tensor) and rewards.is_nested:  # first: a nested tensor of another layout is
        nested = rewards                                         # the rewards' error, whatever else is passed
        rewards = _unnest(anchor, nested, None, anchor=True)
        if cu_seqlens is not None:
            raise ValueError("cu_seqlens: nested jagged rewards carry their own offsets; leave cu_seqlens out")
        offsets = cu_seqlens = nested.offsets()
    _refuse(refused)
    exact = check_bool("exact", exact)
    _no_grad({anchor: rewards, "values": values, "mask": mask, "cu_seqlens": cu_seqlens, "terminated": terminated,
              "bootstrap_value": bootstrap_value, "gamma": gamma, lmbda_name: lmbda})
    values, mask = _unnest("values", values, offsets), _unnest("mask", mask, offsets)
    if isinstance(time_dim, bool) or not isinstance(time_dim, numbers.Integral):
        raise TypeError(f"time_dim must be an int, got {type_name(time_dim)}")
    if time_dim not in (0, -1):
        raise ValueError(f"time_dim must be 0 or -1 with cu_seqlens (the packed inputs are 1-D [total_tokens]), "
                         f"got {time_dim}")
    call = Call(anchor, rewards, time_dim, out_dtype)
    if call.anchor.dim() != 1:
        raise ValueError(f"{anchor} must be 1-D [total_tokens] with cu_seqlens (the sequences laid end to end), got "
                         f"shape {tuple(call.shape)}")
    total = call.shape[0]
    cu = _cu_seqlens(cu_seqlens, total, call.device)
    S = cu.numel() - 1
    values = call.series("values", values, required=values_required)
    if mask is not None:
        mask = _skip.check_mask(call, kind, mask, None, None, values=False)
    terminated = _per_sequence("terminated", terminated, S, call, flag=True)
    bootstrap_value = _per_sequence("bootstrap_value", bootstrap_value, S, call, flag=False)
    gamma = _coef("gamma", gamma, S, total, call)
    lmbda = _coef(lmbda_name, lmbda, S, total, call)
    compute = torch.float64 if wide else call.compute_dtype
    result = call.anchor.dtype if kind == "kept_returns" else call.result_dtype
    if call.path() == "cpu":
        from . import _packed_cpu as impl
    else:
        if mask is not None:
            _skip.check_mask_values(call, mask)
        from ._triton import packed as impl
    with torch.no_grad():
        outs = impl.scan(kind, cu, rewards=_flat(call.anchor), values=_flat(values), mask=_flat(mask),
                         terminated=_flat(terminated), bootstrap_value=_flat(bootstrap_value),
                         gamma=gamma if isinstance(gamma, float) else _flat(gamma),
                         lmbda=lmbda if lmbda is None or isinstance(lmbda, float) else _flat(lmbda), exact=exact,
                         whiten=whiten, compute_dtype=compute)
    outs = tuple(o if o.dtype == result else o.to(result) for o in outs)
    if group is not None:
        from .whiten import masked_whiten

        keep = mask if mask is not None else torch.ones(total, dtype=torch.bool, device=call.device)
        outs = (masked_whiten(outs[0], keep, group=group),) + outs[1:]
    if offsets is not None:
        return tuple(_nested(o, offsets) for o in outs)
    return call.finish(outs)


def _nested(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """A nested jagged tensor on ``values`` and ``offsets`` (no copy). torch's constructor
    logs a note about ``is_fx_tracing`` on its first use in a process, which is torch's own
    business, not the caller's: it is kept quiet here."""
    log = logging.getLogger("torch.fx._symbolic_trace")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return torch.nested.nested_tensor_from_jagged(values, offsets)
    finally:
        log.setLevel(level)
