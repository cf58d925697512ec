"""Calling a spec's reference and checking what it returns."""

from __future__ import annotations

import torch

from cubridge.spec.errors import (
    SpecError,
    describe_exception,
    location_in_traceback,
    location_of,
    return_location,
    self_attention_hint,
)
from cubridge.spec.inputs import Inputs
from cubridge.spec.model import Spec


def call_reference(
    spec: Spec, inputs: Inputs, *, expect_lse: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the reference on `inputs` and check its result: (out, lse) with
    the layouts of cubridge.attention, out in the input dtype, everything
    finite except lse = -inf on rows with no allowed key.

    expect_lse: None accepts out or (out, lse); True/False requires one form.
    """
    s, where = inputs.shape, location_of(spec.reference)
    at = f"shape {s}, {_dtype_name(inputs.dtype)}, {inputs.distribution} inputs"
    try:
        result = spec.reference(inputs.q, inputs.k, inputs.v, **inputs.aux)
    except Exception as exc:
        loc = location_in_traceback(exc, spec.path) if spec.path else where
        raise SpecError(f"reference raised on {at}: {describe_exception(exc)}"
                        f"{self_attention_hint(spec, s)}", loc) from exc

    where = return_location(spec.reference, where)  # (what it returned is blamed there)
    lse = None
    if isinstance(result, tuple | list):
        if len(result) != 2:
            raise SpecError(f"reference returned a {len(result)}-tuple on {at}; "
                            "return out or (out, lse)", where)
        out, lse = result
    else:
        out = result
    if expect_lse is True and lse is None:
        raise SpecError(f"reference returned out only on {at}, but (out, lse) before", where)
    if expect_lse is False and lse is not None:
        why = ("an elementwise normaliser has no LSE: return out only"
               if spec.normalizer != "softmax" else "it returned out only before")
        raise SpecError(f"reference returned (out, lse) on {at}; {why}", where)

    want_out = (s.b, s.hq, s.sq, s.head_dim_v)
    _check_tensor("out", out, want_out, at, where)
    if out.dtype != inputs.dtype:
        raise SpecError(f"reference returned out in {_dtype_name(out.dtype)} for "
                        f"{_dtype_name(inputs.dtype)} inputs on {at}; compute in (or cast back "
                        "to) the input dtype", where)
    if not torch.isfinite(out).all():
        raise SpecError(f"reference returned {_bad_count(out)} in out on {at} (valid inputs); "
                        "rows with no allowed key must give 0", where)
    if lse is not None:
        _check_tensor("lse", lse, (s.b, s.hq, s.sq), at, where)
        if not lse.is_floating_point():
            raise SpecError(f"reference returned lse of dtype {lse.dtype} on {at}", where)
        if torch.isnan(lse).any() or (lse == float("inf")).any():
            raise SpecError(f"reference returned {_bad_count(lse)} in lse on {at}; only rows "
                            "with no allowed key may be -inf", where)
    return out, lse


def _check_tensor(name: str, t: object, want: tuple[int, ...], at: str, where: str | None) -> None:
    if not isinstance(t, torch.Tensor):
        raise SpecError(f"reference returned {name} as {type(t).__name__}, not a tensor, on {at}",
                        where)
    if tuple(t.shape) != want:
        raise SpecError(f"reference returned {name} of shape {tuple(t.shape)} on {at}; expected "
                        f"{want} ([B, Hq, Sq{', Dv' if name == 'out' else ''}])", where)


def _bad_count(t: torch.Tensor) -> str:
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    return f"{nan} NaN and {inf} Inf values"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
