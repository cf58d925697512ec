"""attention-gym (PyPI `attn-gym`) as a corpus of FlexAttention mods, as users
write them: every mask and score generator it exports, called unchanged with
parameters scaled to the verifier's lengths (up to 128 queries and keys).

`CORPUS` holds one entry per generator (and per parameter that changes what
it computes: softcap's approx=True), each either taken (its mods) or not
(the reason, which docs/flex_attention.md repeats; test_attn_gym_corpus.py
checks both agree). `device` puts captured tensors where the inputs will be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

N = 128  # the longest sequence a corpus mod is made for
B, H = 2, 4  # batches and query heads captured tensors are made for


@dataclass(frozen=True)
class Case:
    name: str  # the attention-gym export (and parameters where they matter)
    make: Callable[[str], tuple]  # device -> (score_mod, mask_mod)
    sq: int = N
    sk: int = N
    not_taken: str = ""  # why cubridge cannot take it (empty: taken)
    tags: tuple[str, ...] = field(default=())

    @property
    def taken(self) -> bool:
        return not self.not_taken


def _masks():  # noqa: ANN202
    import attn_gym.masks as m

    return m


def _mods():  # noqa: ANN202
    import attn_gym.mods as m

    return m


def _offsets(lengths: list[int], device: str) -> torch.Tensor:
    from attn_gym.masks.document_mask import length_to_offsets

    return length_to_offsets(lengths, device)


def _gen(device: str) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(0)


def _mask(fn: Callable[[str], Callable]) -> Callable[[str], tuple]:
    return lambda device: (None, fn(device))


def _score(fn: Callable[[str], Callable]) -> Callable[[str], tuple]:
    return lambda device: (fn(device), None)


def _graphormer_spatial(device: str) -> Callable:
    m = _mods()
    adjacency = torch.rand(B, N, N, generator=_gen(device)) < 0.05
    distances = m.shortest_path_distances(adjacency, max_distance=5)
    spatial_bias = torch.randn(H, 7, generator=_gen(device))
    return m.generate_graphormer_spatial_bias(spatial_bias.to(device), distances.to(device))


def _graphormer_edge(device: str) -> Callable:
    m = _mods()
    g = _gen(device)
    adjacency = torch.rand(B, N, N, generator=g) < 0.05
    edge_types = torch.randint(0, 3, (B, N, N), generator=g)
    path_types, path_lengths = m.shortest_path_edge_types(adjacency, edge_types, max_path_len=2)
    edge_bias = torch.randn(H, 2, 3, generator=g)
    return m.generate_graphormer_edge_bias(edge_bias.to(device), path_types.to(device),
                                           path_lengths.to(device))


def _flamingo(device: str) -> Callable:
    intervals = torch.tensor([[0, 70], [20, 100], [90, N]], dtype=torch.int32, device=device)
    return _masks().generate_vision_cross_attention_mask_mod(intervals, image_token_length=40)


def _vsa(device: str) -> Callable:
    topk = torch.randint(0, N // 32, (B, H, N // 32, 2), generator=_gen(device))
    return _masks().generate_vsa_mask_mod(topk.to(device), tile_numel=32)


def _mla(device: str) -> Callable:
    g = _gen(device)
    q_rope = torch.randn(B, H, N, 16, generator=g).to(device)
    k_rope = torch.randn(B, 1, N, 16, generator=g).to(device)
    return _mods().generate_mla_rope_score_mod(q_rope, k_rope, num_heads=H)


def _is_global(device: str) -> torch.Tensor:
    return (torch.arange(N) % 37 == 0).to(device)


CORPUS: tuple[Case, ...] = (
    # masks
    Case("causal_mask", _mask(lambda d: _masks().causal_mask)),
    Case("batchify_mask_mod(causal_mask, 32)",
         _mask(lambda d: _masks().batchify_mask_mod(_masks().causal_mask, 32))),
    Case("generate_block_diffusion_mask(64, 16)",
         _mask(lambda d: _masks().generate_block_diffusion_mask(64, 16))),
    Case("generate_dilated_sliding_window(16, 2)",
         _mask(lambda d: _masks().generate_dilated_sliding_window(16, 2))),
    Case("generate_doc_mask_mod(causal_mask, offsets)",
         _mask(lambda d: _masks().generate_doc_mask_mod(_masks().causal_mask,
                                                        _offsets([40, 50, 38], d))),
         tags=("captured",)),
    Case("generate_packed_causal_doc_mask_mod(offsets)",
         _mask(lambda d: _masks().generate_packed_causal_doc_mask_mod(_offsets([40, 50, 38], d))),
         tags=("captured",)),
    Case("generate_vision_cross_attention_mask_mod (Flamingo)", _mask(_flamingo), sk=120,
         tags=("captured", "per-element")),
    Case("generate_global_sliding_window(16, is_global)",
         _mask(lambda d: _masks().generate_global_sliding_window(16, _is_global(d))),
         tags=("captured",)),
    Case("generate_jetspec_training_mask_mod(32, 16)",
         _mask(lambda d: _masks().generate_jetspec_training_mask_mod(32, 16)), sq=96),
    Case("generate_jetspec_tree_causal_mask_mod(64, ancestors)",
         _mask(lambda d: _masks().generate_jetspec_tree_causal_mask_mod(
             64, _masks().build_tree_ancestor_matrix([-1] + [i // 2 for i in range(63)],
                                                     device=d))),
         sq=64, tags=("captured",)),
    Case("generate_morton_natten(16, 8, 3, 3)",
         _mask(lambda d: _masks().generate_morton_natten(16, 8, 3, 3)), tags=("bits",)),
    Case("generate_natten(16, 8, 5, 3)", _mask(lambda d: _masks().generate_natten(16, 8, 5, 3))),
    Case("generate_tiled_natten(16, 8, 5, 3, 4, 2)",
         _mask(lambda d: _masks().generate_tiled_natten(16, 8, 5, 3, 4, 2))),
    Case("generate_prefix_lm_mask(40)", _mask(lambda d: _masks().generate_prefix_lm_mask(40))),
    Case("generate_shared_prefix_mask_mod(offsets, prefix_document_id)",
         _mask(lambda d: _masks().generate_shared_prefix_mask_mod(
             _offsets([30, 20, 25, 25, 28], d),
             torch.tensor([0, 0, 0, 3, 3], dtype=torch.int32, device=d))),
         tags=("captured",)),
    Case("generate_sliding_window(32)", _mask(lambda d: _masks().generate_sliding_window(32))),
    Case("generate_sta_mask_mod_2d((8, 12), (4, 8), (2, 4), text_seq_len=32)",
         _mask(lambda d: _masks().generate_sta_mask_mod_2d((8, 12), (4, 8), (2, 4), 32)),
         tags=("sta",)),
    Case("generate_sta_mask_mod_3d((2, 8, 6), (2, 4, 4), (1, 2, 2), text_seq_len=32)",
         _mask(lambda d: _masks().generate_sta_mask_mod_3d((2, 8, 6), (2, 4, 4), (1, 2, 2), 32)),
         tags=("sta",)),
    Case("generate_spatial_head_mask_mod(16, 4, 28, 2, round_width=8)",
         _mask(lambda d: _masks().generate_spatial_head_mask_mod(16, 4, 28, 2, False, 8))),
    Case("generate_temporal_head_mask_mod(16, 4, 28, 2)",
         _mask(lambda d: _masks().generate_temporal_head_mask_mod(16, 4, 28, 2))),
    Case("generate_vsa_mask_mod(topk_indices, 32)", _mask(_vsa),
         tags=("captured", "row")),
    # score mods
    Case("generate_activation_score_mod(gelu)",
         _score(lambda d: _mods().generate_activation_score_mod())),
    Case("generate_alibi_bias(4)", _score(lambda d: _mods().generate_alibi_bias(H))),
    Case("generate_graphormer_edge_bias(...)", _score(_graphormer_edge), tags=("captured",)),
    Case("generate_graphormer_spatial_bias(...)", _score(_graphormer_spatial),
         tags=("captured",)),
    Case("generate_mla_rope_score_mod(query_rope, key_rope, 4)", _score(_mla),
         not_taken="the score adds torch.dot of a query's and a key's rope vectors: a second "
                   "matrix product (Q_rope K_rope^T) beside QK^T, not an elementwise edit "
                   "of the score; it needs a kernel with a wider QK^T (or concatenated "
                   "heads), not hooks"),
    Case("generate_sandwich_bias(4, 128)", _score(lambda d: _mods().generate_sandwich_bias(
        H, N, device=d)), tags=("captured",)),
    Case("generate_tanh_softcap(20)", _score(lambda d: _mods().generate_tanh_softcap(20))),
    Case("generate_tanh_softcap(20, approx=True)",
         _score(lambda d: _mods().generate_tanh_softcap(20, approx=True)),
         not_taken="it calls the custom op torch.ops.approx.tanh, whose meaning cubridge cannot "
                   "see (FlexAttention runs it through its autograd.Function's vmap rule, "
                   "torch.tanh); the default approx=False is taken, and cubridge's score "
                   "hooks already compute tanh with tanh.approx.f32"),
)

TAKEN = tuple(c for c in CORPUS if c.taken)
NOT_TAKEN = tuple(c for c in CORPUS if not c.taken)


def case(name: str) -> Case:
    return next(c for c in CORPUS if c.name.startswith(name))
