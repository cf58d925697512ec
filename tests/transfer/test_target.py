"""The generated target CuIR: a hook-only subclass of FaSm80 that the executor
verifies against the spec, with block hooks that match brute force."""

from __future__ import annotations

import ast
import functools
import glob
import inspect
from pathlib import Path

import pytest
import torch
from hook_variants import VARIANTS

from cubridge.attention import Shape
from cubridge.ir import BlockKind, attention_fn
from cubridge.ir.structure import diff_kernels
from cubridge.kernels.fa_sm80.cuir import FaSm80
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.rules import NotHookConfined, transfer_by_rules
from cubridge.transfer.target import load_target, render_target, write_target
from cubridge.verify import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
# example specs documented as outside the hook family (their mods cannot say
# what the reference computes): the rule-based transfer must refuse them
OUTSIDE = {"cosine", "mla", "differential", "gated_output", "learnable_sink", "softmax_one"}
ALL_EXAMPLES = {load(p).name: load(p) for p in sorted(glob.glob(str(EXAMPLES / "*.py")))}
SPECS = {f"examples/{n}": s for n, s in ALL_EXAMPLES.items() if n not in OUTSIDE}
# our own variants that cover ops the example specs do not use
SPECS.update({n: VARIANTS[n] for n in ("kitchen_sink", "dilated_window", "relative_position",
                                       "finfo_min_mask", "trig_terms",
                                       "finfo_window_empty_rows")})
HOOKS = {"score_mod", "mask_mod", "activation", "block_kind", "kv_block_range", "normalizer",
         "aux_names", "empty_row_score"}
# tails, Sq != Sk both ways, GQA, and long enough for the 1024 windows
SHAPES = [Shape(b=1, hq=2, hk=1, sq=1100, sk=1037, d=32),
          Shape(b=2, hq=2, hk=2, sq=65, sk=200, d=32)]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    out = {}
    root = tmp_path_factory.mktemp("targets")
    for name, spec in SPECS.items():
        plan = plan_hooks(spec)
        path = write_target(plan, FaSm80, root / f"{name.replace('/', '_')}.py")
        out[name] = (spec, plan, path, load_target(path))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_target_overrides_hooks_only(targets, name):
    spec, plan, path, target = targets[name]
    assert issubclass(target, FaSm80)
    own = {k for k in vars(target) if not k.startswith("__")}
    assert own <= HOOKS, own - HOOKS
    assert diff_kernels(FaSm80, target).hooks_only
    assert target.normalizer == ("softmax" if spec.normalizer == "softmax" else "elementwise")
    # (a mask written in score_mod is the target's mask_mod: score_masks)
    assert ("score_mod" in own) == (plan.score is not None)
    assert ("mask_mod" in own) == (spec.mask_mod is not None or plan.mask_in_score)
    assert ("empty_row_score" in own) == (plan.mask_floor is not None)
    ast.parse(path.read_text())  # the file on disk is the program that ran


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_target_passes_the_verifier(name, tmp_path):
    result = transfer_by_rules(SPECS[name], FaSm80, out_dir=tmp_path, shapes=SHAPES)
    assert result.report.passed and len(result.report.cases) == len(SHAPES)
    assert result.path == tmp_path / "target_cuir.py" and result.path.exists()
    assert "hooks only" in result.summary()


@pytest.mark.parametrize("name", sorted(OUTSIDE & set(ALL_EXAMPLES)))
def test_specs_outside_the_hook_family_are_refused(name, tmp_path):
    with pytest.raises(NotHookConfined, match="LLM-driven transfer"):
        transfer_by_rules(ALL_EXAMPLES[name], FaSm80, out_dir=tmp_path, shapes=SHAPES[1:])


def test_verifier_catches_a_wrong_hook(targets, tmp_path):
    """The check is real: a target whose mask is off by one fails verification."""
    spec = SPECS["examples/causal"]
    path = tmp_path / "wrong.py"
    path.write_text(targets["examples/causal"][2].read_text().replace(
        "return (q_idx >= kv_idx)", "return (q_idx > kv_idx)"))
    wrong = load_target(path)
    report = verify(spec, attention_fn(wrong), shapes=SHAPES[1:], dtypes=[torch.bfloat16],
                    distributions=["normal"], seed=0)
    assert not report.passed


def _truth(spec, aux, shape, b, h, q0, q1, k0, k1) -> BlockKind:
    names = [p.name for p in inspect.signature(spec.mask_mod).parameters.values()
             if p.kind == p.KEYWORD_ONLY]
    m = spec.mask_mod(torch.tensor(b), torch.tensor(h), torch.arange(q0, q1)[:, None],
                      torch.arange(k0, k1)[None, :], **{n: aux[n] for n in names})
    m = m.expand(q1 - q0, k1 - k0)
    return BlockKind.FULL if m.all() else BlockKind.PARTIAL if m.any() else BlockKind.EMPTY


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.mask_mod is not None])
def test_target_block_hooks_match_brute_force(targets, name):
    spec, _, _, target = targets[name]
    shape = SHAPES[0]
    kernel = target(block_m=128, block_n=64)
    kernel.seqlen_q, kernel.seqlen_k = shape.sq, shape.sk
    aux = dict(spec.make_aux(shape, torch.Generator().manual_seed(2), torch.device("cpu"))) \
        if spec.make_aux else {}
    kernel.aux = aux
    nk = -(-shape.sk // 64)
    exact = name not in ("kitchen_sink", "dilated_window", "examples/dilated_sliding_window")
    for h in range(shape.hq):
        for q0 in range(0, shape.sq, 128):
            q1 = min(q0 + 128, shape.sq)
            kinds = []
            for j in range(nk):
                k0, k1 = j * 64, min(j * 64 + 64, shape.sk)
                got = kernel.block_kind(0, h, q0, q1, k0, k1)
                want = _truth(spec, aux, shape, 0, h, q0, q1, k0, k1)
                assert got is want or (got is BlockKind.PARTIAL and not exact), (h, q0, j)
                kinds.append(want)
            lo, hi = kernel.kv_block_range(0, h, q0, q1)
            live = [j for j, k in enumerate(kinds) if k is not BlockKind.EMPTY]
            assert all(lo <= j < hi for j in live)
            if exact and live:
                assert (lo, hi) == (live[0], live[-1] + 1)


def test_rendered_source_is_deterministic_and_readable():
    plan = plan_hooks(VARIANTS["alibi_causal"])
    a, b = render_target(plan, FaSm80), render_target(plan, FaSm80)
    assert a == b
    assert "class Target(FaSm80):" in a
    assert "slope = self.aux['slope']" in a
    assert "iv.kind(" in a and "def kv_block_range" in a


@pytest.mark.parametrize("floored", [True, False])
def test_finfo_min_in_score_mod_verifies_on_fa_sm90_only_with_the_floor(floored, tmp_path,
                                                                         monkeypatch):
    """Hugging Face's causal mask value in score_mod (beside a mask_mod, so not lifted
    as a floor mask): fa_sm90 takes a row's last block first, all of it finfo.min,
    whose scaled max overflowed to -inf and made the row NaN; with the kernels' score
    floor (transfer/score_masks.py) the target verifies."""
    from cubridge.kernels.fa_sm90.cuir import FaSm90
    from cubridge.transfer import target

    if not floored:
        monkeypatch.setattr(target, "kernel_score", lambda score, normalizer: score)
    run = functools.partial(transfer_by_rules, VARIANTS["finfo_min_beside_mask_mod"], FaSm90,
                            out_dir=tmp_path, shapes=[Shape(b=1, hq=2, hk=1, sq=65, sk=129, d=64)])
    if floored:
        assert run().report.passed
    else:
        with pytest.raises(NotHookConfined, match="does not compute the reference"):
            run()
