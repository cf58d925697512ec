"""`cubridge run` on a spec file that holds attention-gym's generators
unchanged and no reference (tests/corpus/specs/natten_softcap.py): the run
verifies its kernel on the GPU against the mods' own float64 attention."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.pipeline.run import RunOptions, run

pytest.importorskip("attn_gym", reason="attention-gym (pip install attn-gym)")
pytestmark = pytest.mark.gpu

SPEC = Path(__file__).with_name("specs") / "natten_softcap.py"


def test_cubridge_run_verifies_a_mods_only_spec_on_the_gpu(tmp_path):
    result = run(SPEC, RunOptions(out=tmp_path / "run", bench=False, log=print))
    assert not result.stopped, result
    assert result.stages["route"].summary.startswith("deterministic hook rules")
    assert "PASS" in result.stages["verify-gpu"].summary
