"""Which docs/benchmark.md variant each peer cannot run, and the words of its
reason: the only gaps a benchmark report may show (issue 14, "peers at their
best"). Everything else must run and verify. Shared by the CPU test of the
peers' forms and the GPU test that runs every peer on every variant.
(imported as `peer_coverage`: tests/bench is on sys.path under pytest.)"""

from __future__ import annotations

ELEMENTWISE = ("relu_causal", "sigmoid_causal", "comb_prefix_softcap_sigmoid")
_NORMALISER = "normaliser"

# variant -> a phrase of the Unsupported reason, per peer.
EXPECTED_UNSUPPORTED: dict[str, dict[str, str]] = {
    "sdpa": {"softcap_causal": "not an additive bias",
             **{v: _NORMALISER for v in ELEMENTWISE}},
    "flex_triton": {v: _NORMALISER for v in ELEMENTWISE},
    "flex_flash": {v: _NORMALISER for v in ELEMENTWISE},
    "fa4": {
        **{v: "mask is general" for v in ("global_sliding_window", "prefix_lm",
                                           "document_causal", "share_question",
                                           "causal_blockwise")},
        **{v: "not c * tanh(s / c)" for v in ("alibi_causal", "relative_position")},
        **{v: _NORMALISER for v in ELEMENTWISE},
    },
}
