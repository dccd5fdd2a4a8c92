"""Bad inputs get the error docs/errors.md lists for them.

The doc is the source of truth: its tables are parsed here (``rlscan_testing.read_errors``),
every row must have a case below (and every case a row), and each case must raise the row's
exception with a message that names the row's argument and matches its pattern."""
import importlib
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import rlscan
from rlscan_testing import read_errors

ROWS = read_errors()

T, N = 5, 3


def f32(*shape, device="cpu"):
    return torch.randn(*shape, device=device)


def r():
    return f32(T, N)


def boot():
    return f32(N)


def flags(*shape):
    return torch.zeros(*shape or (T, N), dtype=torch.bool)


def meta(x):
    return x.to("meta")


def gae(rewards=None, values=None, **kw):
    kw.setdefault("bootstrap_value", None if "next_values" in kw else boot())
    return rlscan.gae(r() if rewards is None else rewards, r() if values is None else values, **kw)


def vtrace(**kw):
    kw.setdefault("bootstrap_value", boot())
    args = {"rewards": r(), "values": r(), "log_rhos": r(), **kw}
    return rlscan.vtrace(args.pop("rewards"), args.pop("values"), args.pop("log_rhos"), **args)


def retrace(**kw):
    kw.setdefault("bootstrap_value", boot())
    args = {"rewards": r(), "q_taken": r(), "expected_q": r(), "log_rhos": r(), **kw}
    series = [args.pop(k) for k in ("rewards", "q_taken", "expected_q", "log_rhos")]
    return rlscan.retrace(*series, **args)


def with_element(value, name_shape=(T, N), fill=0.9):
    x = torch.full(name_shape, fill)
    x[2, 1] = value
    return x


def big_endian(x: np.ndarray) -> np.ndarray:
    return x.astype(x.dtype.newbyteorder(">" if sys.byteorder == "little" else "<"))


def in_subprocess(code: str, **env):
    """Run ``code`` in a fresh interpreter and re-raise its exception here, by type name."""
    environ = {**os.environ, **env}
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    match = re.match(r"(\w+): (.*)", last)
    if done.returncode == 0 or not match:
        raise AssertionError(f"expected an exception, got rc={done.returncode}: {done.stderr[-2000:]}")
    raise {"ValueError": ValueError, "TypeError": TypeError}.get(match.group(1), RuntimeError)(match.group(2))


def packed(**kw):
    """A packed call: 4 sequences of 3, 0, 5 and 1 tokens (``total = 9``)."""
    cu = torch.tensor([0, 3, 3, 8, 9])
    args = {"rewards": f32(9), "values": f32(9), "cu_seqlens": cu, **kw}
    if args["cu_seqlens"] is None:
        del args["cu_seqlens"]
    return rlscan.gae(args.pop("rewards"), args.pop("values"), **args)


def jagged(x, offsets=(0, 3, 3, 8, 9)):
    return torch.nested.nested_tensor_from_jagged(x, torch.tensor(offsets))


def strided_nested(*xs):
    with warnings.catch_warnings():  # torch's note that the strided layout is a prototype
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor(list(xs))


CASES = {
    # packed sequences
    "packed-cu-dtype": lambda: packed(cu_seqlens=torch.tensor([0.0, 3.0, 9.0])),
    "packed-cu-shape": lambda: packed(cu_seqlens=torch.tensor([[0, 3, 9]])),
    "packed-cu-values": lambda: packed(cu_seqlens=torch.tensor([0, 5, 3, 9])),
    "packed-cu-nested": lambda: packed(rewards=jagged(f32(9)), values=jagged(f32(9))),
    "packed-rewards-2d": lambda: packed(rewards=f32(1, 9), values=f32(1, 9)),
    "packed-time-dim": lambda: packed(time_dim=1),
    "packed-next-values": lambda: packed(next_values=f32(9)),
    "packed-truncated": lambda: packed(truncated=flags(9)),
    "packed-out": lambda: packed(out=(f32(9), f32(9))),
    "packed-terminated-shape": lambda: packed(terminated=flags(5)),
    "packed-bootstrap-shape": lambda: packed(bootstrap_value=f32(9 + 1)),
    "packed-gamma-shape": lambda: packed(gamma=torch.full((5,), 0.9)),
    "packed-requires-grad": lambda: packed(values=f32(9).requires_grad_()),
    "packed-values-not-nested": lambda: packed(rewards=jagged(f32(9)), cu_seqlens=None),
    "packed-values-offsets": lambda: packed(rewards=jagged(f32(9)), values=jagged(f32(9), (0, 1, 4, 8, 9)),
                                            cu_seqlens=None),
    "packed-mask-nested": lambda: packed(mask=jagged(flags(9))),
    "packed-nested-strided": lambda: packed(rewards=strided_nested(f32(3), f32(6)), cu_seqlens=None),
    # shapes
    "values-shape": lambda: gae(values=f32(T - 2, N)),
    "next-values-shape": lambda: gae(next_values=f32(T, 1)),
    "log-rhos-shape": lambda: vtrace(log_rhos=f32(N, T)),
    "q-taken-shape": lambda: retrace(q_taken=f32(T, N, 1)),
    "flags-shape": lambda: gae(terminated=flags(T, 1)),
    "dones-shape": lambda: rlscan.episodic_cumsum(r(), dones=flags(T)),
    "bootstrap-keeps-time": lambda: gae(bootstrap_value=f32(1, N)),
    "bootstrap-full-shape": lambda: gae(bootstrap_value=f32(T, N)),
    "bootstrap-time-last": lambda: gae(f32(N, T), f32(N, T), bootstrap_value=f32(T), time_dim=1),
    "initial-shape": lambda: rlscan.linear_scan(r(), r(), initial=f32(T)),
    "beta-shape": lambda: rlscan.linear_scan(r(), f32(T, 1)),
    "gamma-broadcast": lambda: gae(gamma=torch.full((N + 1,), 0.9)),
    "lmbda-broadcast": lambda: gae(lmbda=torch.full((T, 2), 0.9)),
    "zero-dim": lambda: rlscan.gae(torch.tensor(1.0), torch.tensor(1.0), bootstrap_value=torch.tensor(0.0)),
    # the time dimension
    "time-dim-high": lambda: gae(time_dim=2),
    "time-dim-low": lambda: gae(time_dim=-3),
    "time-dim-float": lambda: gae(time_dim=1.0),
    "time-dim-bool": lambda: gae(time_dim=True),
    "time-dim-none": lambda: gae(time_dim=None),
    # devices
    "values-device": lambda: gae(values=meta(r())),
    "bootstrap-device": lambda: gae(bootstrap_value=meta(boot())),
    "flags-device": lambda: gae(terminated=meta(flags())),
    "gamma-device": lambda: gae(gamma=meta(torch.full((T, N), 0.9))),
    "initial-device": lambda: rlscan.linear_scan(r(), 0.5, initial=meta(boot())),
    "cpu-backend-device": lambda: _under("cpu", lambda: gae(meta(r()), meta(r()), bootstrap_value=meta(boot()))),
    "triton-without-interpreter": lambda: in_subprocess(
        "import torch, rlscan; rlscan.set_backend('triton'); "
        "rlscan.gae(torch.zeros(4, 2), torch.zeros(4, 2), bootstrap_value=torch.zeros(2))",
        TRITON_INTERPRET="0", RLSCAN_BACKEND="auto"),
    # types and dtypes
    "rewards-int": lambda: gae(rewards=torch.ones(T, N, dtype=torch.int64)),
    "values-int": lambda: gae(values=torch.ones(T, N, dtype=torch.int32)),
    "rewards-complex": lambda: gae(rewards=torch.ones(T, N, dtype=torch.complex64)),
    "rewards-bool": lambda: gae(rewards=flags()),
    "x-uint8": lambda: rlscan.episodic_cumsum(torch.ones(T, N, dtype=torch.uint8), dones=None),
    "numpy-complex": lambda: rlscan.gae(np.ones((T, N), np.complex128), np.ones((T, N), np.float32),
                                        bootstrap_value=np.ones(N, np.float32)),
    "numpy-object": lambda: rlscan.gae(np.ones((T, N), np.float32), np.full((T, N), None, dtype=object),
                                       bootstrap_value=np.ones(N, np.float32)),
    "numpy-int": lambda: rlscan.gae(np.ones((T, N), np.int64), np.ones((T, N), np.float32),
                                    bootstrap_value=np.ones(N, np.float32)),
    "rewards-list": lambda: rlscan.gae([[0.0] * N] * T, r(), bootstrap_value=boot()),
    "bootstrap-float": lambda: gae(bootstrap_value=1.0),
    "initial-float": lambda: rlscan.episodic_cumsum(r(), dones=None, initial=0.0),
    "flags-int64": lambda: gae(terminated=torch.zeros(T, N, dtype=torch.int64)),
    "dones-int32": lambda: rlscan.episodic_cumsum(r(), dones=torch.zeros(T, N, dtype=torch.int32)),
    "numpy-flags-int64": lambda: gae(next_values=r(), truncated=np.zeros((T, N), np.int64)),
    "byte-order": lambda: rlscan.discounted_returns(big_endian(np.ones((T, N), np.float32))),
    "numpy-flags-byte-order": lambda: gae(terminated=big_endian(np.zeros((T, N), np.float32))),
    # γ and λ
    "gamma-above-one": lambda: gae(gamma=1.5),
    "gamma-negative": lambda: gae(gamma=-0.1),
    "gamma-nan": lambda: gae(gamma=float("nan")),
    "lmbda-above-one": lambda: gae(lmbda=1.01),
    "lmbda-nan": lambda: gae(lmbda=float("nan")),
    "value-lmbda-above-one": lambda: gae(value_lmbda=1.5),
    "eligibility-gamma-above-one": lambda: rlscan.eligibility_traces(r(), dones=None, gamma=2.0, lmbda=0.9),
    "gamma-tensor-above-one": lambda: gae(gamma=with_element(1.5)),
    "gamma-tensor-nan": lambda: gae(gamma=with_element(float("nan"))),
    "lmbda-tensor-negative": lambda: gae(lmbda=with_element(-0.5)),
    "gamma-0d-tensor-inf": lambda: gae(gamma=torch.tensor(float("inf"))),
    "gamma-int-tensor": lambda: gae(gamma=torch.ones(T, N, dtype=torch.int64)),
    "gamma-str": lambda: gae(gamma="0.99"),
    "gamma-none": lambda: gae(gamma=None),
    "gamma-bool": lambda: gae(gamma=True),
    "gamma-list": lambda: gae(gamma=[0.99]),
    # clips
    "rho-clip-negative": lambda: vtrace(rho_clip=-1.0),
    "c-clip-nan": lambda: vtrace(c_clip=float("nan")),
    "pg-rho-clip-minus-inf": lambda: vtrace(pg_rho_clip=-float("inf")),
    "retrace-c-clip-negative": lambda: retrace(c_clip=-0.5),
    "c-clip-tensor": lambda: vtrace(c_clip=torch.tensor(1.0)),
    "rho-clip-none": lambda: vtrace(rho_clip=None),
    # the value after the last step
    "truncated-without-next-values": lambda: gae(truncated=flags()),
    "td-lambda-truncated-without-next-values": lambda: rlscan.td_lambda(r(), r(), bootstrap_value=boot(),
                                                                        truncated=flags()),
    "returns-truncated-without-next-values": lambda: rlscan.discounted_returns(r(), truncated=flags()),
    "retrace-truncated-without-next-expected-q": lambda: retrace(truncated=flags()),
    "both-next-values-and-bootstrap": lambda: gae(next_values=r(), bootstrap_value=boot()),
    "returns-both-next-values-and-bootstrap": lambda: rlscan.discounted_returns(r(), next_values=r(),
                                                                                bootstrap_value=boot()),
    "gae-missing-bootstrap": lambda: rlscan.gae(r(), r()),
    "td-lambda-missing-bootstrap": lambda: rlscan.td_lambda(r(), r(), terminated=flags()),
    "vtrace-missing-bootstrap": lambda: rlscan.vtrace(r(), r(), r()),
    "retrace-missing-bootstrap": lambda: rlscan.retrace(r(), r(), r(), r()),
    # options
    "out-dtype-int": lambda: gae(out_dtype=torch.int32),
    "out-dtype-str": lambda: gae(out_dtype="float32"),
    "out-dtype-numpy": lambda: gae(out_dtype=np.float32),
    "exact-int": lambda: gae(exact=1),
    "exact-none": lambda: gae(exact=None),
    "exact-str": lambda: rlscan.gae(f32(0, N), f32(0, N), bootstrap_value=boot(), exact="yes"),
    "reverse-int": lambda: rlscan.linear_scan(r(), 0.5, reverse=1),
    "dones-missing": lambda: rlscan.episodic_cumsum(r()),
    "eligibility-gamma-missing": lambda: rlscan.eligibility_traces(r(), dones=flags(), lmbda=0.9),
    # masks
    "mask-shape": lambda: gae(mask=flags(T, 1)),
    "mask-values": lambda: gae(mask=torch.full((T, N), 0.5)),
    "mask-dtype": lambda: gae(mask=torch.ones(T, N, dtype=torch.complex64)),
    "mask-next-values": lambda: gae(mask=torch.ones(T, N), next_values=r()),
    "mask-truncated": lambda: gae(mask=torch.ones(T, N), truncated=flags()),
    "mask-td-lambda-values": lambda: rlscan.td_lambda(r(), None, mask=torch.ones(T, N)),
    "whiten-without-mask": lambda: gae(whiten=True),
    "whiten-int": lambda: gae(mask=torch.ones(T, N), whiten=1),
    "whiten-one-kept": lambda: rlscan.masked_whiten(r(), with_element(1.0, fill=0.0)),
    # outputs given with out=
    "out-not-a-tuple": lambda: gae(out=f32(T, N)),
    "out-too-short": lambda: gae(out=[f32(T, N)]),
    "out-tuple-for-one": lambda: rlscan.td_lambda(r(), r(), bootstrap_value=boot(), out=(f32(T, N), f32(T, N))),
    "out-str": lambda: rlscan.discounted_returns(r(), out="x"),
    "out-shape": lambda: gae(out=(f32(T, 1), f32(T, N))),
    "out-int": lambda: gae(out=(torch.zeros(T, N, dtype=torch.int32), f32(T, N))),
    "out-device": lambda: gae(out=(f32(T, N), meta(f32(T, N)))),
    "out-vs-out-dtype": lambda: gae(out=(f32(T, N), f32(T, N)), out_dtype=torch.float64),
    "out-is-an-input": lambda: (lambda x: gae(rewards=x, out=(x, f32(T, N))))(r()),
    "out-twice": lambda: (lambda o: gae(out=(o, o)))(f32(T, N)),
    "out-with-grad": lambda: gae(rewards=r().requires_grad_(), out=(f32(T, N), f32(T, N))),
    # backends
    "set-backend-unknown": lambda: rlscan.set_backend("gpu"),
    "set-backend-case": lambda: rlscan.set_backend("CPU"),
    "set-backend-none": lambda: rlscan.set_backend(None),
    "use-backend-unknown": lambda: _under("cuda", lambda: None),
    "env-backend-unknown": lambda: in_subprocess("import rlscan", RLSCAN_BACKEND="gpu"),
    "numpy-negative-strides": lambda: rlscan.discounted_returns(np.ones((T, N), np.float32)[::-1]),
    # known gaps
    "functorch-transform": lambda: torch.func.grad(lambda x: rlscan.discounted_returns(x).sum())(r()),
    "out-overlaps-itself": lambda: rlscan.episodic_cumsum(r(), dones=None, out=torch.empty(1, N).expand(T, N)),
    "auto-backend-other-device": lambda: _under("auto", lambda: gae(meta(r()), meta(r()),
                                                                    bootstrap_value=meta(boot()))),
    # every tensor or array argument
    "values-none": lambda: rlscan.gae(r(), None, bootstrap_value=boot()),
    "sparse": lambda: gae(rewards=r().to_sparse()),
    "nested": lambda: gae(values=_prototype(torch.nested.nested_tensor, [r()])),
    "masked-tensor": lambda: gae(values=_prototype(torch.masked.masked_tensor, r(), flags() | True)),
    "numpy-masked": lambda: rlscan.discounted_returns(np.ma.masked_array(np.ones((T, N), np.float32))),
    "device": lambda: gae(rewards=meta(r())),
    "rewards-fewer-axes": lambda: rlscan.gae(f32(N), f32(N), bootstrap_value=boot(), time_dim=1),
    "time-dim-str": lambda: gae(time_dim="0"),
    "gamma-inf": lambda: gae(gamma=float("inf")),
    "gamma-numpy-bool": lambda: gae(gamma=np.bool_(True)),
    "cleanrl-gamma-tensor": lambda: _cleanrl(gae_lambda=torch.tensor(0.95)),
    "rllib-lambda-above-one": lambda: _adapter("rllib", "ray").RLScanGAE(gamma=0.99, lambda_=1.5),
    "verl-lam-str": lambda: _verl(lam="0.95"),
    "verl-gamma-vector": lambda: _verl(gamma=torch.tensor([0.9, 0.9])),
    "rllib-discounts-above-one": lambda: _vtrace_torch(discounts=with_element(1.5)),
    "rllib-threshold-vector": lambda: _vtrace_torch(clip_rho_threshold=torch.ones(2)),
    "rllib-bootstrap-none": lambda: _vtrace_torch(bootstrap_values=None),
    "actions-float": lambda: rlscan.retrace_from_q(r(), f32(T, N, 3), torch.zeros(T, N), torch.full((T, N, 3), 1 / 3),
                                                   r(), bootstrap_value=boot()),
    "actions-out-of-range": lambda: rlscan.retrace_from_q(r(), f32(T, N, 3), torch.full((T, N), 3),
                                                          torch.full((T, N, 3), 1 / 3), r(), bootstrap_value=boot()),
    "verl-mask-values": lambda: _verl(response_mask=torch.full((T, N), 0.5)),
    "out-read-only": lambda: rlscan.discounted_returns(np.ones((T, N), np.float32),
                                                       out=_read_only(np.zeros((T, N), np.float32))),
    "out-requires-grad": lambda: rlscan.discounted_returns(r(), out=f32(T, N).requires_grad_()),
    "shift-mean-float": lambda: rlscan.masked_whiten(r(), torch.ones(T, N), shift_mean=1.0),
    "eps-negative": lambda: rlscan.masked_whiten(r(), torch.ones(T, N), eps=-1.0),
    "eps-nan": lambda: rlscan.masked_whiten(r(), torch.ones(T, N), eps=float("nan")),
    "eps-str": lambda: rlscan.masked_whiten(r(), torch.ones(T, N), eps="1e-8"),
    # adapters
    "cleanrl-numpy": lambda: _cleanrl(rewards=np.ones((T, N), np.float32)),
    "cleanrl-rewards-1d": lambda: _cleanrl(rewards=f32(T)),
    "cleanrl-next-value-shape": lambda: _cleanrl(next_value=f32(N, 1)),
    "cleanrl-next-done-shape": lambda: _cleanrl(next_done=flags(1, N)),
    "cleanrl-dones-without-next-done": lambda: _cleanrl(next_done=None),
    "verl-rewards-numpy": lambda: _verl(token_level_rewards=np.ones((T, N), np.float32)),
    "sb3-model": lambda: _adapter("sb3", "stable_baselines3").enable("PPO"),
    "sb3-base": lambda: _adapter("sb3", "stable_baselines3").rlscan_buffer_class(dict),
    "rsl-rl-alg": lambda: _adapter("rsl_rl", "rsl_rl").enable("PPO"),
    "rllib-learner-base": lambda: _adapter("rllib", "ray").learner_class(dict),
}


def _adapter(name: str, framework: str):
    """An adapter's module, once its framework is there (the row is skipped without it)."""
    pytest.importorskip(framework)
    return importlib.import_module(f"rlscan.adapters.{name}")


def _prototype(make, *args):
    """A nested or masked tensor, without torch's warning that their API is a prototype."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(*args)


def _read_only(x):
    x.flags.writeable = False
    return x


def _vtrace_torch(**changes):
    args = dict(target_action_log_probs=r(), behaviour_action_log_probs=r(), discounts=torch.full((T, N), 0.9),
                rewards=r(), values=r(), bootstrap_values=boot())
    return _adapter("rllib", "ray").vtrace_torch(**{**args, **changes})


def _cleanrl(**changes):
    args = dict(rewards=r(), values=r(), dones=flags(), next_value=f32(1, N), next_done=flags(N), gamma=0.99,
                gae_lambda=0.95)
    return importlib.import_module("rlscan.adapters.cleanrl").gae(**{**args, **changes})


def _verl(**changes):
    args = dict(token_level_rewards=r(), values=r(), response_mask=torch.ones(T, N, dtype=torch.int64), gamma=1.0,
                lam=0.95)
    return importlib.import_module("rlscan.adapters.verl").compute_gae_advantage_return(**{**args, **changes})


def _under(backend, fn):
    with rlscan.use_backend(backend):
        return fn()


EXCEPTIONS = {"ValueError": ValueError, "TypeError": TypeError}


def test_doc_and_cases_agree():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), "errors.md: duplicate ids"
    assert set(ids) == set(CASES), (
        f"in errors.md but not tested: {sorted(set(ids) - set(CASES))}; "
        f"tested but not in errors.md: {sorted(set(CASES) - set(ids))}"
    )


def _param(row):
    marks = [pytest.mark.xfail(strict=True, reason="known gap (docs/errors.md)")] if row.known_gap else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_bad_input(row):
    with pytest.raises(EXCEPTIONS[row.exception]) as caught:
        CASES[row.id]()
    message = str(caught.value)
    assert row.argument in message, f"the message does not name {row.argument}: {message!r}"
    assert row.matches(message), f"{row.pattern!r} does not match {message!r}"


def test_table_is_parsed():
    """The parser sees every section's rows (a doc edit that breaks the table format fails here)."""
    assert {row.exception for row in ROWS} == {"ValueError", "TypeError"}
    assert len(ROWS) > 100
    assert any(row.section_arguments is None for row in ROWS)  # every tensor argument's section
    assert all(row.covers(row.argument) for row in ROWS)
    values_shape = next(row for row in ROWS if row.id == "values-shape")
    assert values_shape.matches("values must have the shape of rewards, (5, 3), got (3, 3)")
    assert not values_shape.matches("values must have a shape")


# ----------------------------------------------------------------------------- accepted inputs


@pytest.mark.parametrize("flag_value", [2.0, -1.0, 0.5, float("nan")])
def test_non_binary_flags_count_as_set(path, flag_value):
    """A flag is set where it is non-zero (docs/errors.md, "Accepted, though they may surprise")."""
    rewards = torch.randn(T, N, device=path.device)
    values = torch.randn(T, N, device=path.device)
    where = torch.zeros(T, N, dtype=torch.bool, device=path.device)
    where[1, 0] = where[3, 2] = True
    odd = torch.where(where, flag_value, 0.0)
    for kind in ("terminated", "truncated"):
        got = rlscan.gae(rewards, values, next_values=values, **{kind: odd})
        want = rlscan.gae(rewards, values, next_values=values, **{kind: where})
        torch.testing.assert_close(got.advantages, want.advantages, rtol=0, atol=0)
    got = rlscan.episodic_cumsum(rewards, dones=odd)
    torch.testing.assert_close(got, rlscan.episodic_cumsum(rewards, dones=where), rtol=0, atol=0)


def test_read_only_numpy_is_read():
    """In place and without torch's warning that it cannot protect the array (rlscan only reads it)."""
    base = np.arange(T, dtype=np.float32)[:, None]
    rewards = np.broadcast_to(base, (T, N))
    assert not rewards.flags.writeable
    with rlscan.use_backend("cpu"), warnings.catch_warnings():
        warnings.simplefilter("error")
        out = rlscan.discounted_returns(rewards, gamma=1.0)
    np.testing.assert_array_equal(out, np.broadcast_to(np.cumsum(base[::-1], 0)[::-1], (T, N)))


def test_wider_gamma_does_not_widen():
    out = rlscan.gae(r(), r(), bootstrap_value=boot(), gamma=torch.full((T, N), 0.9, dtype=torch.float64))
    assert out.advantages.dtype == torch.float32


def test_tiny_float64_flags_count_as_set():
    """Non-zero is non-zero on both paths, whatever the flag's dtype."""
    x = torch.ones(4, 2)
    dones = torch.zeros(4, 2, dtype=torch.float64)
    dones[1] = 1e-300
    with rlscan.use_backend("cpu"):
        got = rlscan.episodic_cumsum(x, dones=dones)
    torch.testing.assert_close(got, rlscan.episodic_cumsum(x, dones=dones != 0))
