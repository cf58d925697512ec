"""Malformed specs: each gives a SpecError that says what is wrong and where."""

from __future__ import annotations

import textwrap
from pathlib import Path
from textwrap import dedent

import pytest

from cubridge.spec import SpecError, check_spec, load

HEADER = '''\
import torch
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention
CONFIGS = [HeadConfig("tiny", 4, 2, 16)]
'''

GOOD_REFERENCE = '''
def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)
'''


def write(tmp_path: Path, body: str, name: str = "bad_spec.py") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line containing `needle`."""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


# (id, body, message fragment, text of the line the error must point at or None for file only)
CASES = [
    ("unparseable", "def reference(q, k, v):\n    return (q +\n", "does not parse", "return (q +"),
    ("import_raises", GOOD_REFERENCE + "X = 1 / 0\n", "ZeroDivisionError", "X = 1 / 0"),
    ("missing_reference", "def refrence(q, k, v):\n    return q\n", "no `reference", None),
    ("reference_not_function", "reference = 3\n", "reference must be a function",
     "reference = 3"),
    ("reference_too_few_params", "def reference(q, k):\n    return q\n",
     "takes 2 positional parameters", "def reference(q, k)"),
    ("reference_raises", '''
        def reference(q, k, v):
            raise RuntimeError("boom")
        ''', "reference raised on shape", 'raise RuntimeError("boom")'),
    ("wrong_output_shape", '''
        def reference(q, k, v):
            return q[:, :, :, :8]
        ''', "out of shape", "return q[:, :, :, :8]"),
    ("wrong_output_dtype", '''
        def reference(q, k, v):
            q_idx, kv_idx = positions(q, k)
            k, v = expand_kv(q, k, v)
            out, lse = softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)
            return out.float(), lse
        ''', "out in float32 for float64 inputs", "return out.float(), lse"),
    ("nan_output", '''
        def reference(q, k, v):
            q_idx, kv_idx = positions(q, k)
            k, v = expand_kv(q, k, v)
            p = torch.softmax(scaled_scores(q, k).masked_fill(q_idx < kv_idx + 4, -torch.inf), -1)
            return p @ v
        ''', "NaN", "return p @ v"),
    ("reference_makes_a_cpu_tensor", '''
        def reference(q, k, v):
            q_idx, kv_idx = positions(q, k)
            odd = (torch.arange(q.shape[1]) % 2 == 1)[:, None, None]
            k, v = expand_kv(q, k, v)
            return softmax_attention(scaled_scores(q, k), (q_idx >= kv_idx) & ~odd, v)
        ''', "makes a tensor on the CPU and combines it with its inputs",
     "return softmax_attention(scaled_scores(q, k), (q_idx >= kv_idx) & ~odd, v)"),
    ("unknown_dtype", GOOD_REFERENCE + 'DTYPES = ["bf16", "bf17"]\n', "unknown dtype 'bf17'",
     "DTYPES ="),
    ("aux_wrong_shape", '''
        AUX_SHAPES = {"slopes": ("Hq",)}
        def make_aux(shape, generator, device):
            return {"slopes": torch.ones(shape.hk)}
        def reference(q, k, v, slopes):
            q_idx, kv_idx = positions(q, k)
            k, v = expand_kv(q, k, v)
            bias = slopes[:, None, None] * (kv_idx - q_idx)
            return softmax_attention(scaled_scores(q, k) + bias, q_idx >= kv_idx, v)
        ''', "AUX_SHAPES declares ('Hq',)", "def make_aux"),
    ("aux_not_tensor", '''
        def make_aux(shape, generator, device):
            return {"window": 16}
        def reference(q, k, v, window):
            return q
        ''', "aux values must be tensors", "def make_aux"),
    ("aux_not_dict", '''
        def make_aux(shape, generator, device):
            return [torch.zeros(())]
        def reference(q, k, v, **aux):
            return q
        ''', "must return a dict", "def make_aux"),
    ("reference_reads_missing_aux", '''
        def reference(q, k, v, slopes):
            return q
        ''', "reference parameter 'slopes' is not an aux key", "def reference"),
    ("mask_mod_wrong_signature", GOOD_REFERENCE + dedent('''
        def mask_mod(b, h, q_idx):
            return q_idx >= 0
        '''), "mask_mod(b, h, q_idx) takes 3 positional parameters", "def mask_mod"),
    ("mod_aux_not_keyword_only", GOOD_REFERENCE + dedent('''
        def make_aux(shape, generator, device):
            return {"prefix_len": torch.tensor(shape.sk // 4)}
        def mask_mod(b, h, q_idx, kv_idx, prefix_len):
            return q_idx >= kv_idx
        '''), "aux parameters are keyword-only", "def mask_mod"),
    ("mask_mod_disagrees", GOOD_REFERENCE + dedent('''
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx > kv_idx
        '''), "disagree", "def mask_mod"),
    ("score_mod_disagrees", GOOD_REFERENCE + dedent('''
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        def score_mod(score, b, h, q_idx, kv_idx):
            return 30 * torch.tanh(score / 30)
        '''), "mods disagree with the reference", "def score_mod"),
    ("unknown_normalizer", GOOD_REFERENCE + 'NORMALIZER = "softplus"\n', "NORMALIZER = 'softplus'",
     "NORMALIZER ="),
    ("elementwise_returns_lse", GOOD_REFERENCE + 'NORMALIZER = "relu"\n',
     "an elementwise normaliser has no LSE", "return softmax_attention("),
    ("bad_configs", GOOD_REFERENCE + "CONFIGS = [(32, 32, 128)]\n", "HeadConfig",
     "CONFIGS = [(32"),
    ("mod_reads_unknown_aux", GOOD_REFERENCE + dedent('''
        def mask_mod(b, h, q_idx, kv_idx, *, prefix_len):
            return q_idx >= kv_idx
        '''), "reads aux ['prefix_len']", "def mask_mod"),
    ("bad_tolerance", GOOD_REFERENCE + 'TOLERANCES = {"bf16": (0.5, 2.0)}\n', "must be in (0, 1)",
     "TOLERANCES ="),
]


@pytest.mark.parametrize("case_id, body, fragment, line_text", CASES, ids=[c[0] for c in CASES])
def test_malformed_spec_gives_located_error(tmp_path, case_id, body, fragment, line_text):
    path = write(tmp_path, body)
    with pytest.raises(SpecError) as info:
        check_spec(load(path))
    err = info.value
    assert fragment in err.message, err
    assert err.location is not None and err.location.startswith(str(path)), err
    if line_text is None:
        assert err.location == str(path)
    else:
        assert err.location == f"{path}:{line_of(path, line_text)}", err
    assert str(err).startswith(f"{err.location}: ")


def test_missing_file_and_wrong_suffix(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load(tmp_path / "nope.py")
    other = tmp_path / "spec.txt"
    other.write_text("x = 1")
    with pytest.raises(SpecError, match=r"Python file \(\.py\)"):
        load(other)


def test_nondeterministic_aux_is_reported(tmp_path):
    path = write(tmp_path, '''
        import random
        AUX_SHAPES = {"offset": ()}
        def make_aux(shape, generator, device):
            return {"offset": torch.tensor(random.random())}
        def reference(q, k, v, offset):
            q_idx, kv_idx = positions(q, k)
            k, v = expand_kv(q, k, v)
            return softmax_attention(scaled_scores(q, k) + offset.to(q.dtype), q_idx >= kv_idx, v)
        ''')
    with pytest.raises(SpecError, match="make_aux is not deterministic"):
        check_spec(load(path))


def test_good_spec_passes(tmp_path):
    spec = load(write(tmp_path, GOOD_REFERENCE + dedent('''
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        '''), name="good_spec.py"))
    summary = check_spec(spec)
    assert spec.name == "good_spec" and spec.returns_lse
    assert summary.mods_max_error is not None and summary.mods_max_error < 1e-12


def test_a_directory_is_not_called_a_missing_file(tmp_path, capsys):
    from cubridge.cli import main

    with pytest.raises(SpecError, match="is a directory") as info:
        load(tmp_path)
    assert "no such spec file" not in str(info.value)
    assert main(["spec", "check", str(tmp_path)]) == 1
    assert "is a directory" in capsys.readouterr().err


def test_non_utf8_spec_is_a_located_error_not_a_traceback(tmp_path, capsys):
    from cubridge.cli import main

    path = tmp_path / "latin1.py"
    path.write_bytes(HEADER.encode() + GOOD_REFERENCE.encode() + b"# caf\xe9\n")
    line = (HEADER + GOOD_REFERENCE).count("\n") + 1
    with pytest.raises(SpecError, match="not utf-8") as info:
        load(path)
    assert info.value.location == f"{path}:{line}"
    assert main(["spec", "check", str(path)]) == 1
    assert main(["verify", str(path), "--impl", "cubridge.verify.peers:eager_impl"]) == 2
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count(f"latin1.py:{line}") == 3
    # a coding cookie is honoured, as Python itself does
    cookie = tmp_path / "cookie.py"
    cookie.write_bytes(b"# -*- coding: latin-1 -*-\n" + path.read_bytes())
    assert load(cookie).name == "cookie"


@pytest.mark.parametrize("stem, name", [("my-spec", "my_spec"), ("2nd try", "spec_2nd_try"),
                                        ("class", "class_"), ("causal.v2", "causal_v2")])
def test_a_name_from_the_file_name_never_fails(tmp_path, stem, name):
    path = tmp_path / f"{stem}.py"
    path.write_text(HEADER + GOOD_REFERENCE)
    assert load(path).name == name
    # a NAME the user wrote is still checked
    path.write_text(HEADER + GOOD_REFERENCE + 'NAME = "my-spec"\n')
    with pytest.raises(SpecError, match="NAME = 'my-spec'"):
        load(path)


def test_a_reference_that_meta_tensors_cannot_run_is_not_blamed_for_devices(tmp_path):
    # (the device probe runs the reference on "meta": data-dependent work raises there
    # for reasons of meta's own, which say nothing about the spec)
    path = write(tmp_path, '''
        def reference(q, k, v):
            q_idx, kv_idx = positions(q, k)
            shift = int((q.abs().sum() > -1).item())  # 1, read from the data
            k, v = expand_kv(q, k, v)
            return softmax_attention(scaled_scores(q, k), q_idx + shift > kv_idx, v)
        ''')
    check_spec(load(path))
