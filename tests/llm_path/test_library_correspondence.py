"""Every library kernel keeps the lift of its CUDA beside it
(correspondence.json: IR method -> CUDA line ranges), and it is current: an
edit of the CUDA or the CuIR that moves a recorded line fails here, with
`python -m cubridge.llm_path.correspondence refresh` as the way back."""

from __future__ import annotations

import json

import pytest

from cubridge.kernels import list_kernels
from cubridge.llm_path.correspondence import (
    bound_workers,
    library_correspondence_path,
    refresh,
    stale_entries,
)


@pytest.mark.parametrize("kernel", list_kernels(), ids=lambda k: k.name)
def test_library_kernel_has_a_current_correspondence(kernel):
    path = library_correspondence_path(kernel)
    assert path.is_file(), f"{kernel.name} has no {path.name}: record its lift"
    data = json.loads(path.read_text())
    problems = stale_entries(data, kernel.source.read_text())
    assert not problems, (f"{path} is stale (python -m cubridge.llm_path.correspondence "
                          "refresh, then review):\n" + "\n".join(problems))
    methods = {e["method"] for e in data["correspondence"]}
    cuir = kernel.cuir_path.read_text()
    # run, every bound worker and the shared numerics map to CUDA lines
    assert {"run", *bound_workers(cuir), "scores", "normalize", "epilogue"} <= methods


def test_a_moved_line_is_stale_and_refresh_relocates_it():
    kernel = next(k for k in list_kernels() if k.name == "fa_sm80")
    data = json.loads(library_correspondence_path(kernel).read_text())
    source = kernel.source.read_text()
    ((first, last),) = next(e for e in data["correspondence"]
                            if e["method"] == "epilogue")["cuda_lines"]
    shifted = "// one more line at the top\n" + source
    problems = stale_entries(data, shifted)
    assert any(f"epilogue: CUDA lines {first}-{last}" in p for p in problems)
    new, lost = refresh(data, shifted)
    assert not lost and not stale_entries(new, shifted)
    epilogue = next(e for e in new["correspondence"] if e["method"] == "epilogue")
    assert epilogue["cuda_lines"] == [[first + 1, last + 1]]


def test_a_line_refresh_cannot_find_stays_stale():
    """A recorded line whose text is gone is reported and keeps its old anchors:
    `check` keeps failing rather than passing a range re-anchored to other text."""
    kernel = next(k for k in list_kernels() if k.name == "fa_sm80")
    data = json.loads(library_correspondence_path(kernel).read_text())
    source = kernel.source.read_text()
    epilogue = next(e for e in data["correspondence"] if e["method"] == "epilogue")
    ((first_text, _),) = epilogue["anchors"]
    edited = source.replace(first_text, "// (rewritten)", 1)
    new, lost = refresh(data, edited)
    assert any(m.startswith("epilogue:") for m in lost)
    assert next(e for e in new["correspondence"] if e["method"] == "epilogue") == epilogue
    assert any(p.startswith("epilogue:") for p in stale_entries(new, edited))


def test_refresh_finds_a_functions_own_closing_brace():
    """A range that ends a function ends at the function's `}`: lines added inside
    the function move that brace away from its recorded line, and nested blocks'
    braces then sit nearer to it. The anchor's indentation tells them apart."""
    kernel = next(k for k in list_kernels() if k.name == "fa_sm90")
    data = json.loads(library_correspondence_path(kernel).read_text())
    lines = kernel.source.read_text().splitlines()
    consumer = next(e for e in data["correspondence"] if e["method"] == "consumer")
    ((first, last),) = consumer["cuda_lines"]
    assert consumer["anchors"][0][1] == "}" and lines[last - 1] == "}"
    grown = lines[:last - 1] + ["  // (added)"] * 12 + lines[last - 1:]
    new, lost = refresh(data, "\n".join(grown) + "\n")
    assert not lost
    moved = next(e for e in new["correspondence"] if e["method"] == "consumer")
    assert moved["cuda_lines"] == [[first, last + 12]]
