"""``rlscan.gae``: generalised advantage estimation."""
from __future__ import annotations

from typing import NamedTuple

import torch

from ... import _packed
from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._inputs import check_bool
from ..._library import register_fused
from ..._spec import Arguments, Bench, Kernel, Masked, OpSpec, PublicOp, Ref
from ...whiten import masked_whiten
from .. import _forms, _skip, _value_backward
from ..linear_scan import linear_scan


class GAEOutput(NamedTuple):
    advantages: torch.Tensor
    returns: torch.Tensor


def _differentiable(call, r, v, nv, boot, term, trunc, g_t, l_t, gamma, lmbda, gamma_lmbda):
    r, v, nv, term, trunc = (_forms.time_first(x, call) for x in (r, v, nv, term, trunc))
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    nu, kappa = _forms.masks(term, trunc, r)
    delta = r + g * _forms.value_after(v, nv, _forms.upcast(boot, call), r) * nu - v
    adv = linear_scan(delta, g * lam * kappa, reverse=True)
    return _forms.result(adv, call), _forms.result(adv + v, call)


def _backward(call, tensors, scalars, outs, grads, needs):
    """One fused scan (``_value_backward``): the adjoint runs forward in time."""
    return _value_backward.run(_value_backward.GAE, call, tensors, scalars, outs[0], grads, needs)


OP = OpSpec(
    name="gae",
    inputs=(("rewards", "series"), ("values", "series"), ("next_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=2,
    kernel=Kernel(module="rlscan.ops.gae.kernel", reverse=True),
    cpu=Ref("rlscan.ops.gae.cpu:run"),
    differentiable=_differentiable,
    backward=_backward,
)
register_fused(OP, trusted_call)


def _differentiable_masked(call, r, v, w, boot, term, mask, g_t, l_t, gamma, lmbda, gamma_lmbda):
    r, v, term, mask = (_forms.time_first(x, call) for x in (r, v, term, mask))
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    m = _skip.kept(mask, r)
    nu, _ = _forms.masks(term, None, r)
    delta = r + g * _skip.next_kept_values_form(v, _forms.upcast(boot, call), m) * nu - v
    adv = linear_scan(m * delta, m * (g * lam * nu) + (1 - m), reverse=True)
    return _forms.result(adv, call), _forms.result(adv + v, call)


MASKED = OpSpec(
    name="gae_masked",
    inputs=(("rewards", "series"), ("values", "series"), ("next_kept_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("mask", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=2,
    kernel=Kernel(module="rlscan.ops.gae.kernel", coeffs="coeffs_masked", reverse=True),
    cpu=Ref("rlscan.ops.gae.cpu:run_masked"),
    differentiable=_differentiable_masked,
)
register_fused(MASKED, trusted_call)


def _check_mask_values(call, mask):
    _skip.check_mask_values(call, mask)  # looked up at each call, so that a test may replace it


FROM_MASK = Masked(
    op=MASKED, first=_skip.NEXT_KEPT, feeds="next_kept_values", mask="mask",
    cpu=Ref("rlscan.ops.gae.rows:plan"), triton=Ref("rlscan.ops.gae.one_pass:plan"),
    check=_check_mask_values, whiten=masked_whiten,
)


def _masked(call, values, bootstrap_value, terminated, truncated, next_values, mask, g, lam, whiten, exact, out):
    """The masked GAE: the dispatcher runs one pass where a plan variant applies (``one_pass``
    on the Triton path, ``rows`` over rows contiguous in time on the CPU), else the next kept
    values and then GAE, two scans; the whitening after."""
    # the 0/1 check of the mask's values is the dispatcher's: a CPU row loop counts them as it reads
    mask = _skip.check_mask(call, "gae", mask, next_values, truncated, values=False)
    tensors = (call.anchor, values, None, bootstrap_value, terminated, mask, g.tensor, lam.tensor)
    return GAEOutput(*call.run(FROM_MASK, tensors, (g.value, lam.value, g.value * lam.value), exact=exact, out=out,
                               whiten=whiten))


def _sharded(call, values, bootstrap_value, terminated, truncated, next_values, mask, g, lam, whiten, group, exact,
             out):
    """``sequence_sharded=True``: this rank's chunk of sequences split across ``group``."""
    if group is None:
        raise ValueError("sequence_sharded=True needs group=, the process group whose ranks hold the sequences' chunks")
    if next_values is not None or truncated is not None:
        raise ValueError("gae: sequence_sharded=True takes neither next_values nor truncated (the value after a chunk "
                         "is the next rank's; mark ends with terminated, or skip steps with mask)")
    if whiten and mask is None:
        raise ValueError("gae: whiten=True needs mask= (the advantages are standardised over the kept steps)")
    if any(x is not None and x.requires_grad for x in (call.anchor, values, bootstrap_value, g.tensor, lam.tensor)):
        raise ValueError("gae: sequence_sharded=True is not differentiable: pass tensors that do not require grad "
                         "(detach them)")
    if mask is not None:
        mask = _skip.check_mask(call, "gae", mask, None, None, values=False)  # the 0/1 check goes through the group
    from . import sharded

    return GAEOutput(*sharded.run(call, values, mask, bootstrap_value, terminated, g, lam, whiten, group, exact, out))


@fast_path
def gae(
    rewards,
    values,
    *,
    bootstrap_value=None,
    next_values=None,
    terminated=None,
    truncated=None,
    mask=None,
    cu_seqlens=None,
    whiten=False,
    group=None,
    sequence_sharded=False,
    gamma=0.99,
    lmbda=0.95,
    value_lmbda=None,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
) -> GAEOutput:
    """Generalised advantage estimation (Schulman et al. 2016)::

        δ_t = r_t + γ_t ν_t V'_t − V_t
        Â_t = δ_t + γ_t λ_t κ_t Â_{t+1}          (Â_T = 0)
        R_t = Â_t + V_t

    ``V'_t`` is the value after step ``t``: ``next_values[t]`` when given, else
    ``values[t+1]``, and ``bootstrap_value`` after the last step. ``ν_t = 0`` where
    ``terminated`` (no bootstrap); ``κ_t = 0`` where terminated or truncated and at the
    last step (the trace is cut). See docs/semantics.md.

    Args:
        rewards, values: floating tensors (or numpy arrays), time along ``time_dim``.
        bootstrap_value: the value after the window, one per environment
            (the shape without ``time_dim``).
        next_values: the value of the state after each step, instead of
            ``bootstrap_value``; required with ``truncated``, where it must hold the
            final observation's value.
        terminated, truncated: episode-end flags (bool, uint8 or 0/1 floats).
        mask: where the steps count (1) or are skipped (0), e.g. a language model's
            response mask (bool, integer or 0/1 floats). A skipped step passes the
            recurrence through (``Â_t = Â_{t+1}``), and ``V'_t`` of a kept step is the
            value of the next kept step (``bootstrap_value`` past the end, 0 when
            left out). Not with ``next_values`` or ``truncated``.
        cu_seqlens: packed sequences (flash-attention's varlen convention): ``rewards``,
            ``values`` and ``mask`` are 1-D ``[total]``, the sequences laid end to end,
            and ``cu_seqlens`` ``[S + 1]`` (int32/int64, from 0 to ``total``) says where
            sequence ``s`` starts and ends; ``terminated`` and ``bootstrap_value`` are then
            ``[S]``, one per sequence (the bootstrap is ignored where terminated), and
            ``gamma``/``lmbda`` a float or a tensor of ``total`` (per token) or ``S`` (per
            sequence) values. Each sequence's result is that of a padded row holding it,
            masked past its end (bit for bit on the CPU); ``whiten`` works with or without
            ``mask``. Nested jagged tensors (``[S, j]``) carry their offsets instead, and
            come back nested. No autograd (inputs that require grad are refused), no
            ``next_values``, ``truncated`` or ``out``. See docs/api.md.
        whiten: standardise the advantages with the mean and variance of the kept
            steps (:func:`rlscan.masked_whiten`; with ``mask`` only). On the Triton
            path the sums are gathered during the scan, leaving one more pass.
        group: with ``whiten``, a ``torch.distributed`` process group whose ranks each
            hold a shard of the batch (data- or context-parallel): the advantages are
            whitened with the statistics of every rank's kept steps
            (``masked_whiten(..., group=group)``, one all-reduce of three scalars, after
            the scan). Every rank of the group must call.
        sequence_sharded: with ``group``, each rank holds a contiguous chunk of every
            sequence, in rank order along ``time_dim`` (rank 0 the first steps; chunks may
            differ in length between ranks, or be empty), and gets the advantages of its
            chunk of the whole sequences. ``bootstrap_value`` is read on the last rank only.
            One ``all_gather`` of a few scalars per sequence, independent of the length
            (with ``exact=True``: the exact carries passed rank to rank from the last,
            2 scalars per sequence per hop, the ranks one after another; bit for bit the
            unsplit result). See :mod:`rlscan.ops.gae.sharded`. Not with ``next_values``
            or ``truncated``.
        gamma, lmbda: floats in [0, 1], or tensors that broadcast to ``rewards``.
        value_lmbda: a second ``λ`` for the value targets (VAPO's decoupled λ, typically
            1.0), a float in [0, 1] or a tensor like ``lmbda``: ``returns`` are then
            ``Â(value_lmbda) + V`` while ``advantages`` stay ``Â(lmbda)`` (whitened with
            ``whiten``), both from one pass over the inputs where one applies
            (:mod:`rlscan.ops.gae.dual`). ``None``: ``returns = Â(lmbda) + V``.
        time_dim: the time axis.
        exact: evaluate one step at a time in the loop's order (bit for bit the
            float32 loops of Stable-Baselines3 and CleanRL). The CPU path always is.
        out_dtype: the result dtype (default: the inputs' promoted dtype).
        out: a tuple ``(advantages, returns)`` of preallocated tensors to write into
            (they must not overlap the inputs); returned as the result.

    Returns:
        ``GAEOutput(advantages, returns)``, each of ``rewards``' shape.
    """
    if _packed.is_packed(rewards, cu_seqlens):
        return GAEOutput(*_packed.gae(rewards, values, cu_seqlens=cu_seqlens, bootstrap_value=bootstrap_value,
                                      terminated=terminated, mask=mask, whiten=whiten, group=group, gamma=gamma,
                                      lmbda=lmbda, time_dim=time_dim, exact=exact, out_dtype=out_dtype,
                                      value_lmbda=value_lmbda, sequence_sharded=sequence_sharded,
                                      next_values=next_values, truncated=truncated, out=out))
    call = Call("rewards", rewards, time_dim, out_dtype)
    values = call.series("values", values, required=True)
    sequence_sharded = check_bool("sequence_sharded", sequence_sharded)
    # sharded, the bootstrap is the last rank's: its absence there is reported through the group
    next_values, bootstrap_value, terminated, truncated = call.episode_ends(
        "gae", next_values, bootstrap_value, terminated, truncated, required=mask is None and not sequence_sharded)
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    whiten = check_bool("whiten", whiten)
    exact = check_bool("exact", exact)  # the row loops answer before call.run would check it
    if sequence_sharded:
        adv, ret = _sharded(call, values, bootstrap_value, terminated, truncated, next_values, mask, g, lam, whiten,
                            group, exact, out)
        if value_lmbda is not None:  # the chunk's pass carries one λ: a second sharded pass for the value targets
            _, ret_v = _sharded(call, values, bootstrap_value, terminated, truncated, next_values, mask, g,
                                call.coef("value_lmbda", value_lmbda), False, group, exact, None)
            ret[...] = ret_v
        return GAEOutput(adv, ret)
    if value_lmbda is not None:
        from . import dual

        def again(lmbda, whiten, group, out):  # the fallback's calls: every argument but these as given
            return gae(rewards, values, bootstrap_value=bootstrap_value, next_values=next_values, terminated=terminated,
                       truncated=truncated, mask=mask, whiten=whiten, group=group, gamma=gamma, lmbda=lmbda,
                       time_dim=time_dim, exact=exact, out_dtype=out_dtype, out=out)

        return GAEOutput(*dual.gae(call, values, bootstrap_value, terminated, next_values, truncated, mask, g, lam,
                                   call.coef("value_lmbda", value_lmbda), whiten, exact, out, group, again))
    if group is not None:
        if not whiten or mask is None:
            raise ValueError("gae: group= is the process group of the whitening (it needs whiten=True and mask=) "
                             "or of the sequences' chunks (sequence_sharded=True)")
        from ...whiten import masked_whiten

        adv, ret = _masked(call, values, bootstrap_value, terminated, truncated, next_values, mask, g, lam, False,
                           exact, out)
        whitened = masked_whiten(adv, mask, group=group)
        if out is None:
            return GAEOutput(whitened, ret)
        adv[...] = whitened  # the given output, a tensor or an array (numpy in, numpy out)
        return GAEOutput(adv, ret)
    if mask is not None:
        return _masked(call, values, bootstrap_value, terminated, truncated, next_values, mask, g, lam, whiten, exact,
                       out)
    if whiten:
        raise ValueError("gae: whiten=True needs mask= (the advantages are standardised over the kept steps)")
    tensors = (call.anchor, values, next_values, bootstrap_value, terminated, truncated, g.tensor, lam.tensor)
    return GAEOutput(*call.run(OP, tensors, (g.value, lam.value, g.value * lam.value), exact=exact, out=out))


PUBLIC = PublicOp(
    name="gae",
    function=gae,
    reference=Ref("rlscan.ops.gae.reference:gae"),
    specs=(OP, MASKED),
    exports=(GAEOutput,),
    arguments=Arguments(positional=("rewards", "values"), value_after="next_values", bootstrap="required",
                        flags=("terminated", "truncated"), coefs=("gamma", "lmbda")),
    bench=Bench(series=("rewards", "values"), flags=("terminated",), batch=("bootstrap_value",),
                params=dict(gamma=0.99, lmbda=0.95)),
)
