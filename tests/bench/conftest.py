"""Fixtures of the benchmark tests."""

from __future__ import annotations

import pytest
from bench_specs import (
    alibi_score,
    causal_mask,
    document_mask,
    make_doc_ids,
    make_slopes,
    make_spec,
    softcap_score,
)

from cubridge.spec.model import Spec


@pytest.fixture
def specs() -> dict[str, Spec]:
    return {
        "full": make_spec("full"),
        "causal": make_spec("causal", causal_mask),
        "document_causal": make_spec("document_causal", document_mask, make_aux=make_doc_ids),
        "alibi_causal": make_spec("alibi_causal", causal_mask, alibi_score, make_aux=make_slopes),
        "softcap_causal": make_spec("softcap_causal", causal_mask, softcap_score),
        "sigmoid_causal": make_spec("sigmoid_causal", causal_mask, normalizer="sigmoid"),
    }
