"""attention-gym (PyPI `attn-gym`) as a corpus of FlexAttention mods, as users
write them: every mask and score generator it exports, called unchanged.

`CORPUS` holds one entry per generator (and per parameter that changes what
it computes: softcap's approx=True), each either taken (its mods) or not
(the reason, which docs/flex_attention.md repeats; test_attn_gym_corpus.py
checks both agree). `make(device, size)` builds the mods for a `Size`: the
verifier's (SMALL: up to 128 queries and keys, the default) or a benchmark's
(e.g. Size(8, 32, 2048)). Every length, window, canvas side, tile and
document a generator takes is scaled with the size, so each mask keeps the
density it has at 128 positions; captured tensors are made on `device` for
the size's batches and heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

N = 128  # the longest sequence a corpus mod is made for at the verifier's size
B, H = 2, 4  # batches and query heads captured tensors are made for at that size


@dataclass(frozen=True)
class Size:
    """What a corpus mod is made for: batches, query heads and positions (n a
    multiple of 128 whose ratio to 128 is a square, so 2-D and 3-D canvases
    scale by an integer side: 128, 512, 2048, 8192)."""

    b: int = B
    h: int = H
    n: int = N

    def __post_init__(self) -> None:
        r = self.n // N
        if self.n % N or math.isqrt(r) ** 2 != r:
            raise ValueError(f"corpus size n={self.n}: use 128 * k^2 (128, 512, 2048, 8192)")

    @property
    def r(self) -> int:
        """Lengths scale by r = n / 128."""
        return self.n // N

    @property
    def side(self) -> int:
        """Canvas sides scale by sqrt(r)."""
        return math.isqrt(self.r)


SMALL = Size()


Make = Callable[[str, Size], tuple]  # (device, size) -> (score_mod, mask_mod)


@dataclass(frozen=True)
class Case:
    name: str  # the attention-gym export (and parameters where they matter)
    make_at: Make
    sq: int = N  # queries and keys at the verifier's size; they scale with n
    sk: int = N
    not_taken: str = ""  # why cubridge cannot take it (empty: taken)
    tags: tuple[str, ...] = field(default=())

    @property
    def taken(self) -> bool:
        return not self.not_taken

    def make(self, device: str, size: Size = SMALL) -> tuple:
        """(score_mod, mask_mod) made on `device` for `size`."""
        return self.make_at(device, size)

    def lengths(self, size: Size = SMALL) -> tuple[int, int]:
        """(Sq, Sk) the mods are made for at `size`."""
        return self.sq * size.r, self.sk * size.r


def _masks():  # noqa: ANN202
    import attn_gym.masks as m

    return m


def _mods():  # noqa: ANN202
    import attn_gym.mods as m

    return m


def _offsets(lengths: list[int], s: Size, device: str) -> torch.Tensor:
    from attn_gym.masks.document_mask import length_to_offsets

    return length_to_offsets([n * s.r for n in lengths], device)


def _gen() -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(0)


def _mask(fn: Make) -> Make:
    return lambda device, s: (None, fn(device, s))


def _score(fn: Make) -> Make:
    return lambda device, s: (fn(device, s), None)


def _graphormer_spatial(device: str, s: Size) -> Callable:
    m = _mods()
    adjacency = (torch.rand(s.b, s.n, s.n, generator=_gen()) < 0.05).to(device)
    distances = m.shortest_path_distances(adjacency, max_distance=5)
    spatial_bias = torch.randn(s.h, 7, generator=_gen())
    return m.generate_graphormer_spatial_bias(spatial_bias.to(device), distances)


def _graphormer_edge(device: str, s: Size) -> Callable:
    m = _mods()
    g = _gen()
    adjacency = (torch.rand(s.b, s.n, s.n, generator=g) < 0.05).to(device)
    edge_types = torch.randint(0, 3, (s.b, s.n, s.n), generator=g).to(device)
    path_types, path_lengths = m.shortest_path_edge_types(adjacency, edge_types, max_path_len=2)
    edge_bias = torch.randn(s.h, 2, 3, generator=g)
    return m.generate_graphormer_edge_bias(edge_bias.to(device), path_types, path_lengths)


def _flamingo(device: str, s: Size) -> Callable:
    intervals = torch.tensor([[0, 70], [20, 100], [90, N]], dtype=torch.int32) * s.r
    return _masks().generate_vision_cross_attention_mask_mod(intervals.to(device),
                                                             image_token_length=40 * s.r)


def _vsa(device: str, s: Size) -> Callable:
    tile = 32 * s.r  # four query and key tiles at every size
    topk = torch.randint(0, s.n // tile, (s.b, s.h, s.n // tile, 2), generator=_gen())
    return _masks().generate_vsa_mask_mod(topk.to(device), tile_numel=tile)


def _mla(device: str, s: Size) -> Callable:
    g = _gen()
    q_rope = torch.randn(s.b, s.h, s.n, 16, generator=g).to(device)
    k_rope = torch.randn(s.b, 1, s.n, 16, generator=g).to(device)
    return _mods().generate_mla_rope_score_mod(q_rope, k_rope, num_heads=s.h)


def _is_global(device: str, s: Size) -> torch.Tensor:
    return (torch.arange(s.n) % 37 == 0).to(device)


def _odd(x: int) -> int:
    return x | 1


def _natten(device: str, s: Size) -> Callable:
    k = s.side
    return _masks().generate_natten(16 * k, 8 * k, _odd(5 * k), _odd(3 * k))


def _morton_natten(device: str, s: Size) -> Callable:
    k = s.side  # the Morton curve's canvas is (2^ceil(log2(n)/2), the rest)
    return _masks().generate_morton_natten(16 * k, 8 * k, _odd(3 * k), _odd(3 * k))


def _tiled_natten(device: str, s: Size) -> Callable:
    k = s.side
    return _masks().generate_tiled_natten(16 * k, 8 * k, _odd(5 * k), _odd(3 * k), 4 * k, 2 * k)


def _sta_2d(device: str, s: Size) -> Callable:
    k = s.side
    return _masks().generate_sta_mask_mod_2d((8 * k, 12 * k), (4 * k, 8 * k), (2 * k, 4 * k),
                                             32 * s.r)


def _sta_3d(device: str, s: Size) -> Callable:
    k = s.side
    return _masks().generate_sta_mask_mod_3d((2, 8 * k, 6 * k), (2, 4 * k, 4 * k),
                                             (1, 2 * k, 2 * k), 32 * s.r)


def _tree_ancestors(device: str, s: Size) -> torch.Tensor:
    nodes = 64 * s.r  # a complete binary tree
    return _masks().build_tree_ancestor_matrix([-1] + [i // 2 for i in range(nodes - 1)],
                                               device=device)


CORPUS: tuple[Case, ...] = (
    # masks
    Case("causal_mask", _mask(lambda d, s: _masks().causal_mask)),
    Case("batchify_mask_mod(causal_mask, 32)",
         _mask(lambda d, s: _masks().batchify_mask_mod(_masks().causal_mask, 32 * s.r))),
    Case("generate_block_diffusion_mask(64, 16)",
         _mask(lambda d, s: _masks().generate_block_diffusion_mask(64 * s.r, 16 * s.r))),
    Case("generate_dilated_sliding_window(16, 2)",
         _mask(lambda d, s: _masks().generate_dilated_sliding_window(16 * s.r, 2))),
    Case("generate_doc_mask_mod(causal_mask, offsets)",
         _mask(lambda d, s: _masks().generate_doc_mask_mod(_masks().causal_mask,
                                                           _offsets([40, 50, 38], s, d))),
         tags=("captured",)),
    Case("generate_packed_causal_doc_mask_mod(offsets)",
         _mask(lambda d, s: _masks().generate_packed_causal_doc_mask_mod(
             _offsets([40, 50, 38], s, d))),
         tags=("captured",)),
    Case("generate_vision_cross_attention_mask_mod (Flamingo)", _mask(_flamingo), sk=120,
         tags=("captured", "per-element")),
    Case("generate_global_sliding_window(16, is_global)",
         _mask(lambda d, s: _masks().generate_global_sliding_window(16 * s.r, _is_global(d, s))),
         tags=("captured",)),
    Case("generate_jetspec_training_mask_mod(32, 16)",
         _mask(lambda d, s: _masks().generate_jetspec_training_mask_mod(32 * s.r, 16 * s.r)),
         sq=96),
    Case("generate_jetspec_tree_causal_mask_mod(64, ancestors)",
         _mask(lambda d, s: _masks().generate_jetspec_tree_causal_mask_mod(
             64 * s.r, _tree_ancestors(d, s))),
         sq=64, tags=("captured",)),
    Case("generate_morton_natten(16, 8, 3, 3)", _mask(_morton_natten), tags=("bits",)),
    Case("generate_natten(16, 8, 5, 3)", _mask(_natten)),
    Case("generate_tiled_natten(16, 8, 5, 3, 4, 2)", _mask(_tiled_natten)),
    Case("generate_prefix_lm_mask(40)",
         _mask(lambda d, s: _masks().generate_prefix_lm_mask(40 * s.r))),
    Case("generate_shared_prefix_mask_mod(offsets, prefix_document_id)",
         _mask(lambda d, s: _masks().generate_shared_prefix_mask_mod(
             _offsets([30, 20, 25, 25, 28], s, d),
             torch.tensor([0, 0, 0, 3, 3], dtype=torch.int32, device=d))),
         tags=("captured",)),
    Case("generate_sliding_window(32)",
         _mask(lambda d, s: _masks().generate_sliding_window(32 * s.r))),
    Case("generate_sta_mask_mod_2d((8, 12), (4, 8), (2, 4), text_seq_len=32)", _mask(_sta_2d),
         tags=("sta",)),
    Case("generate_sta_mask_mod_3d((2, 8, 6), (2, 4, 4), (1, 2, 2), text_seq_len=32)",
         _mask(_sta_3d), tags=("sta",)),
    Case("generate_spatial_head_mask_mod(16, 4, 28, 2, round_width=8)",
         _mask(lambda d, s: _masks().generate_spatial_head_mask_mod(
             16 * s.r, 4, 28 * s.r, 2, False, 8 * s.r))),
    Case("generate_temporal_head_mask_mod(16, 4, 28, 2)",
         _mask(lambda d, s: _masks().generate_temporal_head_mask_mod(16 * s.r, 4, 28 * s.r, 2))),
    Case("generate_vsa_mask_mod(topk_indices, 32)", _mask(_vsa),
         tags=("captured", "row")),
    # score mods
    Case("generate_activation_score_mod(gelu)",
         _score(lambda d, s: _mods().generate_activation_score_mod())),
    Case("generate_alibi_bias(4)", _score(lambda d, s: _mods().generate_alibi_bias(s.h))),
    Case("generate_graphormer_edge_bias(...)", _score(_graphormer_edge), tags=("captured",)),
    Case("generate_graphormer_spatial_bias(...)", _score(_graphormer_spatial),
         tags=("captured",)),
    Case("generate_mla_rope_score_mod(query_rope, key_rope, 4)", _score(_mla),
         not_taken="the score adds torch.dot of a query's and a key's rope vectors: a second "
                   "matrix product (Q_rope K_rope^T) beside QK^T, not an elementwise edit "
                   "of the score; it needs a kernel with a wider QK^T (or concatenated "
                   "heads), not hooks"),
    Case("generate_sandwich_bias(4, 128)", _score(lambda d, s: _mods().generate_sandwich_bias(
        s.h, s.n, device=d)), tags=("captured",)),
    Case("generate_tanh_softcap(20)", _score(lambda d, s: _mods().generate_tanh_softcap(20))),
    Case("generate_tanh_softcap(20, approx=True)",
         _score(lambda d, s: _mods().generate_tanh_softcap(20, approx=True)),
         not_taken="it calls the custom op torch.ops.approx.tanh, whose meaning cubridge cannot "
                   "see (FlexAttention runs it through its autograd.Function's vmap rule, "
                   "torch.tanh); the default approx=False is taken, and cubridge's score "
                   "hooks already compute tanh with tanh.approx.f32"),
)

TAKEN = tuple(c for c in CORPUS if c.taken)
NOT_TAKEN = tuple(c for c in CORPUS if not c.taken)


def case(name: str) -> Case:
    return next(c for c in CORPUS if c.name.startswith(name))
