"""Peer construction on CPU with tiny shapes: each peer either expresses the
variant and matches the float64 reference, or says clearly why it cannot."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
import torch
from bench_specs import (
    TINY,
    alibi_score,
    causal_mask,
    make_slopes,
    make_spec,
    softcap_score,
)

from cubridge.bench.case import Case
from cubridge.bench.check import check_output, tolerance_for
from cubridge.bench.oracle import float64_reference
from cubridge.bench.ours import external_impl, load_callable
from cubridge.bench.peers import PEERS, Unsupported, peer_impls
from cubridge.bench.runner import BenchConfig, build_case
from cubridge.spec.grids import eval_score_bias, index_grid, softcap_of
from cubridge.verify.peers import make_flex_preparer

CPU = BenchConfig(seq_lens=(64,), configs=("tiny",), tokens=128, device="cpu")


def case_for(spec, seq_len: int = 64) -> Case:
    return build_case(spec, TINY, seq_len, CPU)


def timed(name: str):
    """The registry's peer as the benchmark times it: prepare(case)."""
    return peer_impls([name])[0].prepare


def passes(prepare, case: Case) -> tuple[bool, str]:
    prepared = prepare(case)
    out = prepared.to_standard(prepared.run())
    ref = float64_reference(case.spec, case.q, case.k, case.v, case.aux, case.mods, True).out
    check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
    return check.ok, prepared.note


@pytest.mark.slow
@pytest.mark.parametrize("name", ["full", "causal", "document_causal", "alibi_causal",
                                  "softcap_causal", "sigmoid_causal"])
def test_eager_peers_run_the_spec_reference_and_verify(specs, name):
    ok, note = passes(timed("eager"), case_for(specs[name]))
    assert ok and note == "spec reference"
    ok, note = passes(timed("eager_fp32"), case_for(specs[name]))
    assert ok and note == "float32 compute"


@pytest.mark.parametrize("name,note", [("full", "native"), ("causal", "native is_causal"),
                                       ("document_causal", "dense mask"),
                                       ("alibi_causal", "dense bias, rows shifted to a max of 0")])
def test_sdpa_expresses_masks_and_additive_biases(specs, name, note):
    ok, got_note = passes(timed("sdpa"), case_for(specs[name]))
    assert ok and got_note == note


def test_sdpa_keeps_a_bias_that_grows_with_the_distance_exact_in_bf16():
    """attention-gym's non-causal ALiBi, slope * (k - q), reaches ~1,700 at 2,048 keys:
    as a bf16 tensor the keys near each row's max round by 8 and SDPA's output fails
    verification (seen on an H100). Shifted per row to a max of 0 the bias keeps them
    exact; at 512 keys with slopes 4x the default the unshifted form already fails."""
    steep = lambda shape, gen, device: {"slopes": 4 * make_slopes(shape, gen, device)["slopes"]}  # noqa: E731
    spec = make_spec("alibi_linear", score_mod=alibi_score, make_aux=steep)
    case = build_case(spec, TINY, 512, BenchConfig(seq_lens=(512,), configs=("tiny",),
                                                   tokens=512, device="cpu"))
    ok, note = passes(timed("sdpa"), case)
    assert ok and note == "dense bias, rows shifted to a max of 0"
    grid = index_grid(*(torch.arange(n, dtype=torch.int32) for n in (1, 4, 512, 512)))
    bound = lambda s, b, h, q, k: alibi_score(s, b, h, q, k, slopes=case.aux["slopes"])  # noqa: E731
    shifted = eval_score_bias(bound, *grid, dtype=torch.bfloat16, shift_rows=True)
    plain = eval_score_bias(bound, *grid, dtype=torch.bfloat16)
    exact = eval_score_bias(bound, *grid, dtype=torch.float64)
    exact = exact - exact.amax(-1, keepdim=True)
    assert shifted.amax(-1).eq(0).all()
    near = exact > -8  # the keys that carry the weight
    assert (shifted.double() - exact)[near].abs().max() < 0.05
    assert (plain.double() - plain.double().amax(-1, keepdim=True) - exact)[near].abs().max() > 0.1


def test_bias_rows_shift_past_their_masked_pairs():
    grid = index_grid(*(torch.arange(n, dtype=torch.int32) for n in (1, 2, 6, 6)))
    mask = (grid[2] >= grid[3]).expand(1, 2, 6, 6)
    mask = mask.clone()
    mask[0, 1, 3] = False  # a row with no allowed key keeps -inf, unshifted
    slopes = torch.tensor([1.0, 2.0])
    bias = eval_score_bias(lambda s, b, h, q, k: alibi_score(s, b, h, q, k, slopes=slopes),
                           *grid, mask=mask, shift_rows=True)
    assert bias.shape == (1, 2, 6, 6)
    assert torch.isinf(bias[~mask]).all() and bias[mask].isfinite().all()
    assert float(bias[0, 1, 4, 4]) == 0.0 and float(bias[0, 1, 4, 0]) == -8.0
    assert torch.isneginf(bias[0, 1, 3]).all()


@pytest.mark.parametrize("name,why", [("softcap_causal", "not an additive bias"),
                                      ("sigmoid_causal", "no sigmoid normaliser")])
def test_sdpa_refuses_what_it_cannot_express(specs, name, why):
    with pytest.raises(Unsupported, match=why):
        PEERS["sdpa"].prepare(case_for(specs[name]))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", ["causal", "document_causal", "alibi_causal"])
def test_flex_block_mask_and_score_mod_verify(specs, name):
    # FlexAttention's eager path on CPU: same BlockMask and mods as the compiled peer.
    flex = make_flex_preparer("TRITON", compiled=False)
    ok, _ = passes(lambda case: flex(case), case_for(specs[name], 128))
    assert ok


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_takes_a_block_mask_of_a_mask_written_in_score_mod():
    # (FlexAttention's own example form: its users give it the BlockMask too)
    from bench_specs import make_spec

    spec = make_spec("causal_in_score_mod", None,
                     lambda s, b, h, q, k: torch.where(q >= k, s * 0.5, -float("inf")))
    case = case_for(spec, 128)
    assert case.stats.allowed_pairs < case.shape.b * case.shape.hq * 128 * 128  # the pairs left
    ok, note = passes(lambda c: make_flex_preparer("TRITON", compiled=False)(c), case)
    assert ok and note.startswith("BlockMask of score_mod's -inf condition")


def test_flash_backed_peers_report_missing_flash_attn_4(specs):
    from cubridge.verify.peers import flash_attn_cute_available

    if flash_attn_cute_available():
        pytest.skip("flash-attn-4 is installed here")
    for name in ("fa4", "flex_flash"):
        with pytest.raises(Unsupported, match="flash-attn-4"):
            PEERS[name].prepare(case_for(specs["causal"]))


def test_score_mod_analysis():
    grid = index_grid(*(torch.arange(n, dtype=torch.int32) for n in (1, 4, 5, 5)))
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    alibi = lambda s, b, h, q, k: alibi_score(s, b, h, q, k, slopes=slopes)
    bias = eval_score_bias(alibi, *grid)
    assert bias.shape == (1, 4, 5, 5)
    assert float(bias[0, 1, 4, 1]) == pytest.approx(0.25 * (1 - 4))
    assert eval_score_bias(softcap_score, *grid) is None
    assert softcap_of(softcap_score, "cpu") == pytest.approx(30.0)
    assert softcap_of(alibi, "cpu") is None


def test_peer_list_is_validated():
    assert [i.name for i in peer_impls()] == list(PEERS)
    with pytest.raises(ValueError, match="unknown peer"):
        peer_impls(["sdpa", "cudnn"])


def test_ours_with_a_causal_flag_runs_full_and_causal_only(specs, tmp_path):
    module = tmp_path / "lib_kernel.py"
    module.write_text("import torch\n" + textwrap.dedent("""
        def attention(q, k, v, scale=None, causal=False):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    """))
    impl = external_impl("ours", f"{module}:attention")
    assert passes(impl.prepare, case_for(specs["causal"]))[0]
    assert passes(impl.prepare, case_for(specs["full"]))[0]
    with pytest.raises(Unsupported, match="causal flag only"):
        impl.prepare(case_for(specs["document_causal"]))


def test_ours_from_a_run_directory_gets_aux(specs, tmp_path):
    (tmp_path / "target_ir.py").write_text("class Target:\n    pass\n")
    (tmp_path / "kernel.py").write_text(textwrap.dedent("""
        import torch
        def attention(q, k, v, *, doc_ids):  # fails without the aux tensor
            same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
            pos = torch.arange(q.shape[2])
            mask = same & (pos[:, None] >= pos[None, :])
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, enable_gqa=True)
    """))
    impl = external_impl("ours", str(tmp_path))
    case = case_for(specs["document_causal"])
    assert passes(impl.prepare, case)[0]
    assert load_callable(str(tmp_path)).__name__ == "attention"


def test_ours_missing_is_unsupported_not_fatal(specs, tmp_path):
    impl = external_impl("ours", "cubridge.no_such_module:attention")
    with pytest.raises(Unsupported, match="cannot import"):
        impl.prepare(case_for(specs["causal"]))
    with pytest.raises(Unsupported, match="no run directory for 'causal'"):
        external_impl("ours", str(tmp_path)).prepare(case_for(specs["causal"]))
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("def attention(q, k, v):\n    return q\n")
    with pytest.raises(Unsupported, match=r"expected one .py file .* found \['a.py', 'b.py'\]"):
        external_impl("ours", str(tmp_path)).prepare(case_for(specs["causal"]))


FAKE_FA4 = '''
"""A stand-in for flash_attn.cute with FA4's calling convention ([B, S, H, D],
window_size=(left, right), softcap), computed naively: it checks how the
benchmark maps a variant onto FA4's flags, not FA4 itself."""
import torch

CALLS = []


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None),
                    softcap=0.0):
    CALLS.append(dict(causal=causal, window_size=window_size, softcap=softcap))
    q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * softmax_scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(q.shape[2])[:, None]
    ki = torch.arange(k.shape[2])[None, :]
    allowed = torch.ones_like(s, dtype=torch.bool)
    left, right = window_size
    if causal:
        allowed &= qi >= ki
    if left is not None:
        allowed &= qi - ki <= left
    if right is not None:
        allowed &= ki - qi <= right
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    out = (p @ v).to(torch.bfloat16).transpose(1, 2)
    return out, torch.logsumexp(s, -1)
'''


@pytest.fixture
def fake_fa4(tmp_path, monkeypatch):
    pkg = tmp_path / "flash_attn"
    (pkg / "cute").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cute" / "__init__.py").write_text(FAKE_FA4)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = {m: mod for m, mod in sys.modules.items() if m.startswith("flash_attn")}
    for name in real:
        del sys.modules[name]
    import flash_attn.cute

    yield flash_attn.cute
    for name in [m for m in sys.modules if m.startswith("flash_attn")]:
        del sys.modules[name]
    sys.modules.update(real)


@pytest.mark.slow
def test_fa4_flags_express_causal_window_band_and_softcap(specs, fake_fa4):
    window = make_spec("window8", lambda b, h, q, k: (q >= k) & (q - k < 8))
    band = make_spec("band", lambda b, h, q, k: (q - k <= 7) & (k - q <= 4))
    for spec, flags in [(specs["full"], dict(causal=False, window_size=(None, None), softcap=0.0)),
                        (specs["causal"], dict(causal=True, window_size=(None, None),
                                               softcap=0.0)),
                        (window, dict(causal=True, window_size=(7, 0), softcap=0.0)),
                        (band, dict(causal=False, window_size=(7, 4), softcap=0.0)),
                        (specs["softcap_causal"], dict(causal=True, window_size=(None, None),
                                                       softcap=30.0))]:
        fake_fa4.CALLS.clear()
        ok, _ = passes(timed("fa4"), case_for(spec))
        assert ok, spec.name
        assert fake_fa4.CALLS[0] == flags, spec.name
    for name in ("document_causal", "alibi_causal"):
        with pytest.raises(Unsupported, match="FA4's flags"):
            timed("fa4")(case_for(specs[name]))


def ssmax_score(score, b, h, q_idx, kv_idx, *, temps):
    return score * (temps[h] * torch.log(q_idx + 1.0))


def make_temps(shape, generator, device):
    return {"temps": torch.linspace(0.3, 0.6, shape.hq, device=device)}


def q_scaled_spec():
    """SSMax-style: each row's scores times temps[h] * log(q + 1), causal."""
    return make_spec("ssmax", causal_mask, ssmax_score, make_aux=make_temps)


@pytest.mark.slow
def test_sdpa_and_fa4_take_a_key_independent_score_factor_as_q_scaled(fake_fa4):
    case = case_for(q_scaled_spec())
    ok, note = passes(timed("sdpa"), case)
    assert ok and note == "Q scaled per head and query row (once, untimed); native is_causal"
    fake_fa4.CALLS.clear()
    ok, note = passes(timed("fa4"), case)
    assert ok and note == "Q scaled per head and query row (once, untimed); causal"
    assert fake_fa4.CALLS[0] == dict(causal=True, window_size=(None, None), softcap=0.0)


def test_sdpa_keeps_a_bias_beside_a_q_scaled_factor():
    def mod(score, b, h, q_idx, kv_idx, *, temps, slopes):
        return ssmax_score(score, b, h, q_idx, kv_idx, temps=temps) + \
            alibi_score(0.0, b, h, q_idx, kv_idx, slopes=slopes)

    spec = make_spec("ssmax_alibi", causal_mask, mod,
                     make_aux=lambda *a: {**make_temps(*a), **make_slopes(*a)})
    ok, note = passes(timed("sdpa"), case_for(spec))
    assert ok and note == ("Q scaled per head and query row (once, untimed); "
                           "dense bias, rows shifted to a max of 0")


def test_ours_from_a_folder_of_run_directories_picks_each_variants_newest(specs, tmp_path):
    kernel = textwrap.dedent("""
        import torch
        def attention(q, k, v, scale=None):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=scale, enable_gqa=True){extra}
    """)
    old, new = tmp_path / "causal-0old", tmp_path / "causal-1new"
    for d, extra in ((old, " * 0"), (new, "")):
        d.mkdir()
        (d / "kernel.py").write_text(kernel.format(extra=extra))
    os.utime(old, (1, 1))  # the stale, wrong one is older
    impl = external_impl("ours", str(tmp_path))
    assert passes(impl.prepare, case_for(specs["causal"]))[0]
    with pytest.raises(Unsupported, match="no run directory for 'full'"):
        impl.prepare(case_for(specs["full"]))


def test_flex_triton_takes_smaller_tiles_only_when_its_tiles_run_out_of_shared_memory():
    from cubridge.verify.peers import TRITON_SMALL_TILES, fit_triton_tiles

    calls = []

    def out_of_smem(**kw):
        calls.append(kw)
        if "kernel_options" not in kw:
            raise RuntimeError("No valid triton configs. OutOfMemoryError: out of resource: "
                               "Required: 262144 Hardware limit:232448")
        return "ran"

    kwargs, note = fit_triton_tiles(out_of_smem, {"scale": 0.1}, "BlockMask")
    assert kwargs == {"scale": 0.1, "kernel_options": TRITON_SMALL_TILES}
    assert len(calls) == 2 and note.startswith("BlockMask; kernel_options BLOCK_M=64")
    # runs as given: unchanged; another error, or one with tiles already given: raised
    assert fit_triton_tiles(lambda **kw: None, {"scale": 0.1}, "") == ({"scale": 0.1}, "")

    def broken(**kw):
        raise RuntimeError("CuteDSL template failed")

    with pytest.raises(RuntimeError, match="CuteDSL"):
        fit_triton_tiles(broken, {}, "")
    def always_out(**kw):
        raise RuntimeError("out of resource: shared memory")

    with pytest.raises(RuntimeError, match="out of resource"):
        fit_triton_tiles(always_out, {"kernel_options": {"BLOCK_M": 32}}, "")
