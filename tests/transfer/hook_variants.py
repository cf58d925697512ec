"""The docs/benchmark.md variants as FlexAttention-style mods, for the hook tests.

Written here so the transfer/lower tests do not depend on examples/specs (the
tests also run over examples/specs/*.py when those exist). Each variant is a
Spec whose reference evaluates its own mods densely in float64.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B, Shape
from cubridge.spec.helpers import softmax_attention
from cubridge.spec.model import Spec, Tolerance
from cubridge.spec.mods import aux_parameters


def causal(b, h, q, k):
    return q >= k


def sliding_window(b, h, q, k):
    return (q >= k) & (q - k < 1024)


def global_sliding_window(b, h, q, k):
    return (q >= k) & ((q - k < 1024) | (k < 64))


def prefix_lm(b, h, q, k, *, prefix_len):
    return (q >= k) | (k < prefix_len)


def prefix_past_int_range(b, h, q, k, *, far_prefix):
    # far_prefix is 2^25 + S/4: past the integer interval range, so the header's
    # block_kind takes its double rules at run time (same mask as prefix_lm)
    return (q >= k) | (k < far_prefix - 2**25)


def document_causal(b, h, q, k, *, doc_id):
    return (q >= k) & (doc_id[b, q] == doc_id[b, k])


def share_question(b, h, q, k, *, segment):
    # segment 0 is the question; answers 1, 2, ... each see the question and themselves
    same = segment[b, q] == segment[b, k]
    return (q >= k) & (same | (segment[b, k] == 0))


def causal_blockwise(b, h, q, k):
    return k // 512 <= q // 512


def alibi(score, b, h, q, k, *, slope):
    return score + slope[h] * (k - q)


def softcap(score, b, h, q, k):
    return 30 * torch.tanh(score / 30)


def relative_position(score, b, h, q, k, *, rel_bias):
    # rel_bias is [H, 2S - 1] (S = max(Sq, Sk)); its size gives S, read at run time
    return score + rel_bias[h, q - k + (rel_bias.shape[1] + 1) // 2 - 1]


def minus_log_s(score, b, h, q, k, *, log_s):
    return score - log_s


def softcap_minus_log_s(score, b, h, q, k, *, log_s):
    return 30 * torch.tanh(score / 30) - log_s


# Extra coverage: negative floor division/modulo, where, clamp, min/max, abs,
# exp/exp2/log/sigmoid, float/int mixing.
def row_factor_signs(score, b, h, q, k, *, slope):
    # a factor of the score no key changes, negative, zero and positive on rows of
    # one warp (fa_sm90's row factor: |R| in the exp2 factor, negative rows negated)
    return score * (slope[h] * 4.0 * (q % 5 - 2))


def kitchen_sink_score(score, b, h, q, k, *, slope):
    d = q - k
    bucket = torch.where(d < 0, d // 3, d % 5)
    t = torch.clamp(score, min=-4.0, max=4.0) + 0.25 * torch.abs(d % -7)
    u = torch.minimum(t, torch.maximum(score, torch.exp(score / 8) - torch.exp2(-score / 8)))
    return u + torch.log(1 + torch.sigmoid(score)) + slope[h] * bucket.float() / 10


# log2 (an op of its own, exact at powers of two) and the composed log1p: the score
# term is a distance table, the mask renders log2f itself
def log_buckets_score(score, b, h, q, k, *, slope):
    d = (q - k).abs()
    return score + slope[h] * (torch.log2(d + 1).floor() + 0.1 * torch.log1p(d.float()))


def log_band(b, h, q, k):
    return (q >= k) & (torch.log2((q - k).float() + 1) < 9)


def dilated_window(b, h, q, k):
    return (q >= k) & (q - k < 300) & ((q - k) % 2 == 0)


def floor_mod_mask(b, h, q, k):
    # (position offsets too: (k - 200) // 64 and (k - 16) % 28 take unsigned forms)
    return (((q - k) // 96 >= -1) & ((k - q) % 128 < 100) & ((q + 7) // 64 >= (k - 200) // 64)
            | (h == 1) & ~(q < 40) | ((k - 16) % 28 == (q + 12) % 28))


def window_per_head(b, h, q, k):
    # a key-free choice of window (Sparse Transformer style head split): one row
    # interval whose bounds the head chooses
    return (q >= k) & torch.where(h % 2 == 1, q - k < 512, q - k < 128)


def strided_heads(b, h, q, k):
    # Sparse Transformer's strided and local heads plus global keys on the first two:
    # choices on the head alone around per-key patterns (mask cases,
    # lower/mask_cases.py: four copies of the mask loop, two of them never taken)
    return (q >= k) & torch.where(h % 2 == 1, (q - k) % 64 == 0, q - k < 96) | (h < 2) & (k < 8)


def residue_keys(b, h, q, k):
    # key sets (lower/row_interval.py with periods, per mask case): keys ahead of one
    # residue modulo 4 (a key coefficient of +1; every other column pair), keys with q + k
    # a multiple of 16 among the first 40, and on odd heads one key in 256 (a comb
    # shifted past most blocks; rows below 7 allow no key)
    return torch.where(h % 2 == 0,
                       ((k - q + 3) % 4 == 1) & (k <= q + 50) | ((q + k) % 16 == 0) & (k < 40),
                       (q >= k) & ((q - k) % 256 == 7))


def sparse_fixed(b, h, q, k):
    # Sparse Transformer's "fixed" pattern: the keys of the query's own 64-key block
    # (floor quotients bound the key) and each block's last 8 keys (a range of residues
    # modulo 64), causal
    return (q >= k) & ((q // 64 == k // 64) | (k % 64 >= 56))


def residue_ranges(b, h, q, k):
    # ranges of residues per head: a band of 40 in every 256 keys behind (two runs a
    # block), keys ahead with (k - q + 3) % 16 in 11..15, and every key with k % 4 < 2
    # among the first 300
    return torch.where(h % 2 == 0,
                       ((q - k) % 256 < 40) & (k <= q) | ((k - q + 3) % 16 > 10) & (k < q + 90),
                       ((k % 4) < 2) & (k < 300) & (k <= q + 3))


def unequal_shifted_blocks(b, h, q, k):
    # written with != and bit operations (lower/row_interval.py, transfer/simplify.py): on
    # even heads the keys behind the query's own 64-key block ((q >> 6) != (k >> 6) is
    # q // 64 < k // 64 | q // 64 > k // 64: two intervals a row), on odd heads the keys
    # behind with a signed offset's low bits other than 1 (((k - q) & 3) != 1 is
    # (k - q) % 4 != 1: a key set of three residues in four)
    return torch.where(h % 2 == 0, (q >= k) & ((q >> 6) != (k >> 6)),
                       (q >= k) & (((k - q) & 3) != 1))


def odd_periods(b, h, q, k):
    # key sets of periods that are not powers of two (odd_period_bits, key_bits.cuh): on
    # even heads every third key of a causal window and keys ahead at one residue modulo
    # 7; on odd heads a band whose signed offset has C remainder 0 or -5 by 24 (torch.fmod
    # keeps the sign of k - q: keys behind at (k - q) % 24 == 19)
    d = q - k
    r = torch.fmod(k - q, 24)
    return torch.where(h % 2 == 0,
                       (d >= 0) & (d < 200) & (d % 3 == 0) | ((k - q + 2) % 7 == 5) & (k <= q + 60),
                       (d.abs() < 100) & ((r == 0) | (r == -5)))


def prompt_then_frames(b, h, q, k, *, prefix_len):
    # a causal prompt, then frames of 64 tokens (whole within a frame, causal across
    # them) that see the whole prompt: three conjunctions, two of which no row has both
    # of (a choice between them by the row, row_interval._choices)
    text_k, text_q = k < prefix_len, q < prefix_len
    frames = (k - prefix_len) // 64 <= (q - prefix_len) // 64
    return text_k & (text_q & (k <= q) | ~text_q) | ~text_k & ~text_q & frames


def longformer_globals(b, h, q, k):
    # Longformer: a bidirectional window plus 64 global tokens that see every key and
    # are seen by every query; the key-free term (q < 64: rows that see every key) is a
    # choice inside the other two (row_interval._whole_rows): two intervals a row
    return ((q - k).abs() <= 256) | (q < 64) | (k < 64)


def abs_window_fmod_stride(b, h, q, k):
    # as users write them: a bidirectional window by abs() and strided keys behind by
    # torch.fmod (fmod(d, n) == 0 is d % n == 0)
    return (abs(q - k) <= 40) | (q >= k) & (torch.fmod(q - k, 64) == 0)


def c_style_ops_score(score, b, h, q, k, *, slope):
    # torch.div(rounding_mode="trunc"), torch.fmod and torch.sign of signed offsets,
    # softplus, clamp_min and an integer power
    d = k - q
    return (score + torch.sign(d) * torch.nn.functional.softplus(slope[h] * 4 - 2)
            + torch.div(d, 7, rounding_mode="trunc").clamp_min(-9) * 0.01
            + torch.fmod(d, 5) * 0.02 - (d.float() / 256) ** 3)


def trig_terms(score, b, h, q, k):
    # sin and cos: a term on the score's path (the SFU's sin.approx in score_mod) and
    # a cos of the distance alone (a distance table)
    return score + 0.3 * torch.sin(score) + 0.2 * torch.cos((q - k) * 0.05)


def finfo_min_mask_score(score, b, h, q, k):
    # Hugging Face's causal mask value, the lowest finite float: without a mask_mod a
    # floor mask, lifted into the mask like -inf (every row keeps key 0, so no row
    # needs the pass after the kernel; transfer/score_masks.py)
    return torch.where(k <= q, score, torch.finfo(torch.float32).min)


def finfo_min_causal_score(score, b, h, q, k, *, slope):
    # the floor mask of finfo_min_causal (bench specs): a kept score that reads aux
    return torch.where(q >= k, score * (0.5 + slope[h]), torch.finfo(torch.float32).min)


def finfo_window_score(score, b, h, q, k):
    # an added floor mask of bfloat16's lowest value: a 16-key window behind each query,
    # so with Sq > Sk + 15 rows keep no key and weigh every key alike (out = mean of V),
    # which the pass after the kernel writes (cubridge/empty_rows.py)
    window = (q - k >= 0) & (q - k < 16)
    return score + torch.where(window, 0.0, torch.finfo(torch.bfloat16).min)


def keys_before_q_plus_1000(b, h, q, k):
    # a mask_mod that keeps the keys past the diagonal (score_mod masks them)
    return k - q < 1000


def finfo_window_sigmoid_score(score, b, h, q, k, *, log_s):
    # finfo_window_score's floor mask under sigmoid, beside a mask_mod: a pair at C
    # weighs nothing there, as at -inf, so the condition is an exact mask (no pass)
    return torch.where(q - k < 16, score - log_s, torch.finfo(torch.bfloat16).min)


def first_keys_only(b, h, q, k):
    # a mask of the key alone (a memory of the first 200 positions): block_kind's
    # interval bounds read no query span
    return k < 200


# finfo_min_mask_score beside a mask_mod stays in score_mod (its fully masked rows would
# weigh the mask_mod's keys alike): every block is computed, and a row's first block in
# fa_sm90, the last one, has finfo.min at every key; the kernels raise it to SCORE_FLOOR,
# whose product with log2(e) does not overflow to -inf (transfer/score_masks.py)


def causal_in_score_mod(score, b, h, q, k, *, slope):
    # FlexAttention's own example form: the mask written as -inf in score_mod (the
    # plan lifts the condition into the mask, transfer/score_masks.py)
    return torch.where(q >= k, score + slope[h] * (k - q), -float("inf"))


def window_in_score_mod(score, b, h, q, k):
    # an added -inf term, the condition's negation written with masked_fill
    return score.masked_fill(q - k >= 300, -float("inf")) + torch.where(q >= k, 0.0, -math.inf)


def half_gate(b, h, q, k, *, gate16):
    return gate16[k] >= 0


def half_precision_reads(score, b, h, q, k, *, gate16, bias16):
    return score + gate16[k] * bias16[h, q, k]


def pair_masks(b, h, q, k, *, links, links8):
    # (the bool read is the mask's pair read; the int8 one stays a load)
    return (q >= k) & links[b, q, k] | (links8[h, q, k] > 0) & (k < 8)


TREE_PREFIX, TREE_NODES = 40, 96


def tree_mask(b, h, q, k, *, ancestors):
    # jetspec's tree drafting: a prefix every query sees, then tree nodes at a key offset
    # (a byte read at a computed column: read from a [Sq, Sk] mask table)
    tree = (k >= TREE_PREFIX) & (k < TREE_PREFIX + TREE_NODES)
    return (k < TREE_PREFIX) | tree & ancestors[q, (k - TREE_PREFIX).clamp(0, TREE_NODES - 1)]


def random_blocks(b, h, q, k, *, rand_blocks):
    # BigBird (ITC) on 32-key blocks: neighbour blocks, a global first block and random
    # blocks per head from a table; the key only as k // 32 (and k // 64): key groups
    qb, kb = q // 32, k // 32
    return ((qb - kb).abs() <= 1) | (qb == 0) | (k // 64 == 0) | rand_blocks[h, qb, kb]


def random_blocks_aux(s: int, hq: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """random_blocks' table: ~3 random key blocks a query block and head."""
    nb = (s + 31) // 32
    return {"rand_blocks": torch.rand(hq, nb, nb, generator=gen) < min(1.0, 3.0 / nb)}


def tree_aux(s: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """tree_mask's ancestors: a bool row of tree nodes per query."""
    return {"ancestors": torch.rand(s, TREE_NODES, generator=gen) < 0.3}


def pair_mask_aux(s: int, hq: int, bsz: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """pair_masks' tensors: a bool mask per batch row and an int8 one per head."""
    return {"links": torch.rand(bsz, s, s, generator=gen) < 0.5,
            "links8": torch.randint(-2, 3, (hq, s, s), generator=gen).to(torch.int8)}


def half_precision_aux(s: int, hq: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """fp16 gates and a bf16 bias with the values their widening must keep exactly:
    subnormals, signed zero, the largest fp16, negatives (masked off)."""
    gate = torch.randn(s, generator=gen).to(torch.float16)
    gate[:6] = torch.tensor([5.96e-8, -0.0, 65504.0, 1e-5, -1.0, 6.1e-5], dtype=torch.float16)
    bias = torch.randn(hq, s, s, generator=gen).to(torch.bfloat16)
    bias[:, :, :3] = torch.tensor([1e-40, -3e38, 0.0], dtype=torch.bfloat16)
    return {"gate16": gate, "bias16": bias}


def _mk_aux(shape: Shape, gen: torch.Generator, device: torch.device, *,
            names: frozenset[str]) -> dict[str, torch.Tensor]:
    """The aux tensors of `names` (what a test variant's mods take): made for every
    variant, the pair tensors (heads x S x S) took most of each plan_hooks call."""
    s, bsz = max(shape.sq, shape.sk), shape.b
    aux: dict[str, torch.Tensor] = {
        "prefix_len": torch.tensor(s // 4, dtype=torch.int64),
        "far_prefix": torch.tensor(2**25 + s // 4, dtype=torch.int64),
        "slope": torch.exp2(-8.0 * (torch.arange(shape.hq) + 1) / shape.hq),
        "log_s": torch.tensor(math.log(s), dtype=torch.float32),
    }
    if "doc_id" in names:
        doc = torch.empty(bsz, s, dtype=torch.int32)
        for bi in range(bsz):
            pos, d = 0, 0
            while pos < s:
                n = int(torch.randint(max(1, s // 8), max(2, s // 2), (1,), generator=gen))
                doc[bi, pos:pos + n] = d
                pos, d = pos + n, d + 1
        aux["doc_id"] = doc
    if "segment" in names:
        q_len, a_len = max(1, s // 4), max(1, s // 8)
        seg = torch.zeros(bsz, s, dtype=torch.int32)
        for pos in range(q_len, s):
            seg[:, pos] = 1 + (pos - q_len) // a_len
        aux["segment"] = seg
    if "rel_bias" in names:
        aux["rel_bias"] = torch.randn(shape.hq, 2 * s - 1, generator=gen)
    if names & {"gate16", "bias16"}:
        aux.update(half_precision_aux(s, shape.hq, gen))
    if names & {"links", "links8"}:
        aux.update(pair_mask_aux(s, shape.hq, bsz, gen))
    if "ancestors" in names:
        aux.update(tree_aux(s, gen))
    if "rand_blocks" in names:
        aux.update(random_blocks_aux(s, shape.hq, gen))
    return {n: t.to(device) for n, t in aux.items() if n in names}


def dense_attention(q, k, v, *, mask_mod=None, score_mod=None, normalizer="softmax",
                    scale=None, **aux):
    """float64 attention computed from the mods on the whole grid."""
    b, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(hq // hk, dim=1)
    vv = v.double().repeat_interleave(hq // hk, dim=1)
    s = (q.double() @ kk.transpose(-1, -2)) * (scale if scale is not None else d**-0.5)
    bi = torch.arange(b, device=q.device).view(b, 1, 1, 1)
    hi = torch.arange(hq, device=q.device).view(1, hq, 1, 1)
    qi = torch.arange(sq, device=q.device).view(1, 1, sq, 1)
    ki = torch.arange(sk, device=q.device).view(1, 1, 1, sk)

    def take(fn):
        return {n: aux[n] for n in aux_parameters(fn)}

    if score_mod is not None:
        s = score_mod(s, bi, hi, qi, ki, **take(score_mod)).double()
    allowed = torch.ones_like(s, dtype=torch.bool)
    if mask_mod is not None:
        allowed = mask_mod(bi, hi, qi, ki, **take(mask_mod)).expand_as(s)
    if normalizer == "softmax":
        # (weights over their sum: a row of finfo.min scores weighs its keys alike)
        out, lse = softmax_attention(s, allowed, vv)
        return out.to(q.dtype), lse.float()
    act = torch.sigmoid(s) if normalizer == "sigmoid" else torch.relu(s)
    return (act.masked_fill(~allowed, 0) @ vv).to(q.dtype)


def make_spec(name: str, mask_mod: Callable | None = None, score_mod: Callable | None = None,
              normalizer: str = "softmax") -> Spec:
    def reference(q, k, v, scale=None, **aux):
        return dense_attention(q, k, v, mask_mod=mask_mod, score_mod=score_mod,
                               normalizer=normalizer, scale=scale, **aux)

    return Spec(
        name=name, description=f"test variant {name}", path=None, reference=reference,
        make_aux=functools.partial(_mk_aux, names=frozenset(
            n for mod in (mask_mod, score_mod) if mod is not None for n in aux_parameters(mod))),
        configs=[LLAMA2_7B, QWEN25_72B], seq_lens=[1024, 2048],
        dtypes=[torch.bfloat16], tolerances={torch.bfloat16: Tolerance(2e-2, 2e-2)},
        mask_mod=mask_mod, score_mod=score_mod, normalizer=normalizer,  # type: ignore[arg-type]
        returns_lse=normalizer == "softmax",
    )


VARIANTS: dict[str, Spec] = {
    s.name: s
    for s in [
        make_spec("full"),
        make_spec("causal", causal),
        make_spec("sliding_window_1024", sliding_window),
        make_spec("global_sliding_window", global_sliding_window),
        make_spec("prefix_lm", prefix_lm),
        make_spec("prefix_past_int_range", prefix_past_int_range),
        make_spec("document_causal", document_causal),
        make_spec("share_question", share_question),
        make_spec("causal_blockwise", causal_blockwise),
        make_spec("alibi_causal", causal, alibi),
        make_spec("softcap_causal", causal, softcap),
        make_spec("relative_position", causal, relative_position),
        make_spec("relu_causal", causal, None, "relu"),
        make_spec("sigmoid_causal", causal, minus_log_s, "sigmoid"),
        make_spec("comb_prefix_softcap_sigmoid", prefix_lm, softcap_minus_log_s, "sigmoid"),
        make_spec("kitchen_sink", floor_mod_mask, kitchen_sink_score),
        make_spec("dilated_window", dilated_window),
        make_spec("window_per_head", window_per_head),
        make_spec("strided_heads", strided_heads),
        make_spec("residue_keys", residue_keys),
        make_spec("sparse_fixed", sparse_fixed),
        make_spec("residue_ranges", residue_ranges),
        make_spec("odd_periods", odd_periods),
        make_spec("prompt_then_frames", prompt_then_frames),
        make_spec("longformer_globals", longformer_globals),
        make_spec("unequal_shifted_blocks", unequal_shifted_blocks),
        make_spec("causal_in_score_mod", None, causal_in_score_mod),
        make_spec("sigmoid_window_in_score_mod", None, window_in_score_mod, "sigmoid"),
        make_spec("log_buckets", log_band, log_buckets_score),
        make_spec("half_precision_reads", half_gate, half_precision_reads),
        make_spec("pair_masks", pair_masks),
        make_spec("tree_mask", tree_mask),
        make_spec("random_blocks", random_blocks),
        make_spec("row_factor_signs", causal, row_factor_signs),
        make_spec("c_style_ops", abs_window_fmod_stride, c_style_ops_score),
        make_spec("finfo_min_mask", None, finfo_min_mask_score),
        make_spec("trig_terms", causal, trig_terms),
        make_spec("finfo_min_causal", None, finfo_min_causal_score),
        make_spec("finfo_window_empty_rows", None, finfo_window_score),
        make_spec("finfo_min_beside_mask_mod", keys_before_q_plus_1000, finfo_min_mask_score),
        make_spec("first_keys_only", first_keys_only),
        make_spec("finfo_window_sigmoid", causal, finfo_window_sigmoid_score, "sigmoid"),
    ]
}
