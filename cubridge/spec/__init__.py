"""User specs: what an attention variant computes, in plain PyTorch
(docs/specs.md). `load(path)` gives a typed Spec; `check_spec` runs it through
everything the other stages will ask of it."""

from cubridge.spec.check import CheckSummary, check_spec
from cubridge.spec.errors import SpecError
from cubridge.spec.from_mods import from_mods
from cubridge.spec.inputs import DISTRIBUTIONS, Inputs, make_aux, make_inputs
from cubridge.spec.loader import load, parse_dtype
from cubridge.spec.model import Spec, Tolerance
from cubridge.spec.mods import BoundMods, bind_mods, dense_mask, mods_attention
from cubridge.spec.reference import call_reference
from cubridge.spec.shapes import verification_shapes

__all__ = [
    "DISTRIBUTIONS", "BoundMods", "CheckSummary", "Inputs", "Spec", "SpecError", "Tolerance",
    "bind_mods", "call_reference", "check_spec", "dense_mask", "from_mods", "load", "make_aux",
    "make_inputs", "mods_attention", "parse_dtype", "verification_shapes",
]
