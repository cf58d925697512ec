"""Anti-cheat: isolated candidates that crash, hang or reach for the network
become failed cases, never failures of the verifier."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import verify_candidates

from cubridge.attention import Shape
from cubridge.spec import load
from cubridge.verify import verify
from cubridge.verify.peers import flex_impl, sdpa_impl

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"


def misbehaving(q, k, v, scale=None):
    """Right on Sq = 65; on other lengths, one way each of going wrong."""
    import os
    import time
    sq = q.shape[2]
    if sq == 66:
        os._exit(3)
    if sq == 67:
        time.sleep(60)
    if sq == 68:
        import socket
        socket.create_connection(("192.0.2.1", 80), timeout=1)
    return verify_candidates.TiledAttention()(q, k, v, scale)


@pytest.mark.slow
def test_isolated_crash_hang_and_network_are_reported_and_verification_goes_on():
    spec = load(SPEC_DIR / "causal.py")
    shapes = [Shape(1, 2, 1, sq, 64, 32) for sq in (65, 66, 67, 68, 65)]
    report = verify(spec, misbehaving, shapes=shapes, dtypes=["bf16"],
                    distributions=["normal"], isolate=True, timeout_s=5, seed=0)
    verdicts = [c.verdict for c in report.cases]
    assert verdicts == ["pass", "crash", "timeout", "error", "pass"], report.table()
    assert "exit code 3" in report.cases[1].reason
    assert "no result after 5 s" in report.cases[2].reason
    assert "network access is disabled" in report.cases[3].reason
    assert not report.passed


@pytest.mark.slow
def test_isolated_string_impl_resolves_in_the_worker():
    spec = load(SPEC_DIR / "causal.py")
    shapes = [Shape(1, 4, 2, 65, 129, 32)]
    report = verify(spec, "verify_candidates:eager_causal", shapes=shapes, dtypes=["bf16"],
                    isolate=True, seed=0)
    assert report.passed and report.impl == "verify_candidates:eager_causal", report.table()


@pytest.mark.slow
def test_isolated_impl_that_does_not_load_fails_every_case_once():
    spec = load(SPEC_DIR / "causal.py")
    report = verify(spec, "verify_candidates:no_such_function", shapes=[Shape(1, 2, 1, 9, 9, 16)],
                    dtypes=["bf16"], isolate=True, seed=0)
    assert [c.verdict for c in report.cases] == ["error"] * 3
    assert all("could not load the impl" in c.reason and "no_such_function" in c.reason
               for c in report.cases)


@pytest.mark.slow
def test_a_worker_takes_the_verifiers_present_path_cwd_and_environment(tmp_path, monkeypatch):
    """Workers may come from a fork server started earlier: a module folder, a working
    folder and an environment variable set after it must still reach the impl."""
    spec = load(SPEC_DIR / "causal.py")
    shapes = [Shape(1, 2, 1, 17, 17, 16)]
    assert verify(spec, "verify_candidates:eager_causal", shapes=shapes, dtypes=["bf16"],
                  isolate=True, seed=0).passed  # (starts the fork server, where there is one)
    (tmp_path / "late_candidate.py").write_text(
        "import os\n"
        "from verify_candidates import eager_causal\n"
        "def impl(q, k, v, scale=None):\n"
        "    assert os.environ['CUBRIDGE_TEST_LATE'] == 'set', 'environment'\n"
        "    assert os.path.exists('marker.txt'), 'working folder'\n"
        "    return eager_causal(q, k, v, scale)\n")
    (tmp_path / "marker.txt").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUBRIDGE_TEST_LATE", "set")
    report = verify(spec, "late_candidate:impl", shapes=shapes, dtypes=["bf16"], isolate=True,
                    seed=0)
    assert report.passed, report.table()


def test_unpicklable_impl_is_refused_clearly():
    spec = load(SPEC_DIR / "causal.py")
    with pytest.raises(ValueError, match="cannot be pickled"):
        verify(spec, lambda q, k, v, scale=None: q, isolate=True)


@pytest.mark.slow
def test_peers_pickle_by_spec_path():
    spec = load(SPEC_DIR / "alibi_causal.py")
    for factory in (sdpa_impl, flex_impl):
        impl = pickle.loads(pickle.dumps(factory(spec)))
        assert impl.spec.path == spec.path and impl.name.endswith("[alibi_causal]")
    q = torch.randn(1, 2, 5, 16)
    out, lse = pickle.loads(pickle.dumps(flex_impl(spec)))(
        q, q[:, :1], q[:, :1], alibi_slopes=torch.tensor([0.5, 0.25]))
    assert out.shape == (1, 2, 5, 16) and lse.shape == (1, 2, 5)
