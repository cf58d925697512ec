"""Loading a spec file (docs/specs.md) into a typed Spec, with clear errors."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import keyword
import re
import tokenize
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B, HeadConfig
from cubridge.modules import load_module_from_path
from cubridge.spec.check import MODS_AGREEMENT
from cubridge.spec.errors import (
    SpecError,
    describe_exception,
    location_in_traceback,
    location_of,
    top_level_lines,
)
from cubridge.spec.inputs import make_inputs
from cubridge.spec.model import Spec, Tolerance
from cubridge.spec.mods import aux_parameters, mod_name, mods_attention, mods_reference
from cubridge.spec.reference import call_reference
from cubridge.spec.shapes import fit_shapes, smoke_shape, uses_s, validate_dim
from cubridge.spec.tolerances import DEFAULT_TOLERANCES

DTYPE_NAMES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp64": torch.float64, "float64": torch.float64, "double": torch.float64,
}
NORMALIZERS = ("softmax", "sigmoid", "relu")
DEFAULT_CONFIGS = (LLAMA2_7B, QWEN25_72B)
DEFAULT_SEQ_LENS = (1024, 2048, 4096, 8192)
DEFAULT_DTYPES = (torch.bfloat16,)


def parse_dtype(value: object, where: str | None = None) -> torch.dtype:
    """A torch floating dtype from a dtype or a name ("bf16", "float16"...)."""
    if isinstance(value, torch.dtype) and value in DTYPE_NAMES.values():
        return value
    if isinstance(value, str) and value.lower() in DTYPE_NAMES:
        return DTYPE_NAMES[value.lower()]
    raise SpecError(f"unknown dtype {value!r}; use one of {sorted(set(DTYPE_NAMES))} or the "
                    "torch floating dtypes", where)


def read_spec_source(path: str | Path) -> str:
    """The text of a spec file, decoded as Python decodes source (UTF-8 unless
    a coding cookie says otherwise); SpecError for a missing file, a
    directory, a non-.py file or bytes that do not decode."""
    path = Path(path)
    if path.is_dir():
        raise SpecError("is a directory; give the spec's .py file", str(path))
    if not path.is_file():
        raise SpecError("no such spec file", str(path))
    if path.suffix != ".py":
        raise SpecError("a spec file is a Python file (.py)", str(path))
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        raise SpecError(f"cannot read its encoding: {exc}", str(path)) from exc
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SpecError(f"is not {exc.encoding} text: byte 0x{data[exc.start]:02x} cannot be "
                        f"decoded; save the file as UTF-8", f"{path}:{line}") from exc


class _SpecFile:
    """A spec module plus the lines its top-level names are assigned on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        source = read_spec_source(path)
        try:
            tree = ast.parse(source, filename=str(path))
        except SyntaxError as exc:
            raise SpecError(f"does not parse: {exc.msg}", f"{path}:{exc.lineno}") from exc
        self.lines = top_level_lines(tree)
        self.module = self._execute(source)

    def _execute(self, source: str) -> ModuleType:
        try:
            return load_module_from_path(self.path, prefix="cubridge_spec")
        except Exception as exc:
            raise SpecError(f"raised while importing: {describe_exception(exc)}",
                            location_in_traceback(exc, self.path)) from exc

    def where(self, name: str) -> str:
        line = self.lines.get(name)
        return f"{self.path}:{line}" if line else str(self.path)

    def get(self, name: str, default: object = None) -> object:
        return getattr(self.module, name, default)


def _check_signature(
    fn: object, name: str, positional: tuple[str, ...], where: str, *, var_kw_ok: bool,
    extra_positional_ok: bool = False,
) -> Callable[..., object]:
    if not callable(fn):
        raise SpecError(f"{name} must be a function, got {type(fn).__name__}", where)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{name}: cannot read its signature ({exc})", where) from exc
    where = location_of(fn, where) or where
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    want = f"{name}({', '.join(positional)}{', <aux...>' if var_kw_ok else ''})"
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        raise SpecError(f"{name} takes *args; write it as {want}", where)
    if len(pos) < len(positional) or (len(pos) > len(positional) and not extra_positional_ok):
        got = ", ".join(p.name for p in params)
        hint = ("; aux parameters are keyword-only (after `*`), as FlexAttention calls mods "
                "with exactly these positional arguments"
                if var_kw_ok and not extra_positional_ok and len(pos) > len(positional) else "")
        raise SpecError(f"{name}({got}) takes {len(pos)} positional parameters; expected "
                        f"{want}{hint}", where)
    if not var_kw_ok and any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params):
        raise SpecError(f"{name} takes keyword parameters; expected {want}", where)
    return fn  # type: ignore[return-value]


def _sequence(value: object, name: str, where: str) -> list:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise SpecError(f"{name} must be a list, got {type(value).__name__}", where)
    if not value:
        raise SpecError(f"{name} is empty", where)
    return list(value)


def _configs(f: _SpecFile) -> list[HeadConfig]:
    configs = _sequence(f.get("CONFIGS", list(DEFAULT_CONFIGS)), "CONFIGS", f.where("CONFIGS"))
    for c in configs:
        if not isinstance(c, HeadConfig):
            raise SpecError(f"CONFIGS holds {c!r}; entries must be cubridge.attention.HeadConfig "
                            "(e.g. LLAMA2_7B, QWEN25_72B, LLAMA31_405B)", f.where("CONFIGS"))
    return configs


def _seq_lens(f: _SpecFile) -> list[int]:
    lens = _sequence(f.get("SEQ_LENS", list(DEFAULT_SEQ_LENS)), "SEQ_LENS", f.where("SEQ_LENS"))
    for n in lens:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise SpecError(f"SEQ_LENS holds {n!r}; sequence lengths are positive ints",
                            f.where("SEQ_LENS"))
    return lens


def _tolerances(f: _SpecFile) -> dict[torch.dtype, Tolerance]:
    tols = dict(DEFAULT_TOLERANCES)
    given = f.get("TOLERANCES", {})
    where = f.where("TOLERANCES")
    if not isinstance(given, Mapping):
        raise SpecError("TOLERANCES must be a dict {dtype: Tolerance(rel, abs)}", where)
    for key, value in given.items():
        dtype = parse_dtype(key, where)
        if isinstance(value, tuple) and len(value) in (2, 3):
            value = Tolerance(*value)
        elif isinstance(value, Mapping):
            try:
                value = Tolerance(**value)
            except TypeError as exc:
                raise SpecError(f"TOLERANCES[{key!r}]: {exc}", where) from exc
        if not isinstance(value, Tolerance):
            raise SpecError(f"TOLERANCES[{key!r}] = {value!r}; use Tolerance(rel, abs) or "
                            "(rel, abs)", where)
        if not all(isinstance(x, int | float) and 0 < x < 1 for x in (value.rel, value.abs,
                                                                       value.lse)):
            raise SpecError(f"TOLERANCES[{key!r}] = {value}: each bound must be in (0, 1)", where)
        tols[dtype] = value
    return tols


def _aux_shapes(f: _SpecFile) -> dict[str, tuple[int | str, ...]] | None:
    given = f.get("AUX_SHAPES")
    if given is None:
        return None
    where = f.where("AUX_SHAPES")
    if not isinstance(given, Mapping):
        raise SpecError("AUX_SHAPES must be a dict {aux name: (dims...)}", where)
    shapes = {}
    for name, dims in given.items():
        if not isinstance(dims, tuple | list):
            raise SpecError(f"AUX_SHAPES[{name!r}] = {dims!r}; give a tuple of dims, () for a "
                            "scalar", where)
        for d in dims:
            if (why := validate_dim(d)) is not None:
                raise SpecError(f"AUX_SHAPES[{name!r}]: {why}", where)
        shapes[name] = tuple(dims)
    return shapes


def _check_aux_names(spec: Spec, f: _SpecFile, aux_names: list[str]) -> None:
    """Every aux parameter of the reference and the mods must be made by make_aux."""
    ref = inspect.signature(spec.reference).parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in ref)
    extra = [p for p in list(ref)[3:] if p.kind is not p.VAR_KEYWORD]
    for p in extra:
        if p.name not in aux_names and p.default is p.empty:
            raise SpecError(f"reference parameter {p.name!r} is not an aux key (make_aux gives "
                            f"{aux_names})", location_of(spec.reference, f.where("reference")))
    if not takes_any:
        unused = [n for n in aux_names if n not in {p.name for p in extra}]
        if unused:
            raise SpecError(f"make_aux gives {unused}, which reference does not accept; add "
                            "them as parameters or **aux", location_of(spec.reference))
    for fn in (spec.mask_mod, spec.score_mod):
        if fn is not None:
            missing = [n for n in aux_parameters(fn, aux_names) if n not in aux_names]
            if missing:
                raise SpecError(f"{mod_name(fn)} reads aux {missing}, which make_aux does not "
                                f"give (it gives {aux_names})", location_of(fn))


def _name_from_stem(stem: str) -> str:
    """A spec name from a file name the user did not mean as one ("my-spec",
    "2nd try", "class"): other characters become "_", never an error."""
    name = re.sub(r"\W", "_", stem) or "spec"
    if name[0].isdigit():
        name = "spec_" + name
    return name + "_" if keyword.iskeyword(name) else name


def load(path: str | Path, *, default_name: str | None = None) -> Spec:
    """Load and validate a spec file; calls its reference once on a tiny shape.
    A file without NAME is named `default_name`, else after its stem (a run's
    snapshot spec.py passes the name the run gave it).

    Raises SpecError saying what is wrong and where (file:line)."""
    f = _SpecFile(Path(path))
    holder: dict[str, Spec] = {}
    if f.get("reference") is not None:
        reference = _check_signature(f.get("reference"), "reference", ("q", "k", "v"),
                                     f.where("reference"), var_kw_ok=True,
                                     extra_positional_ok=True)
    elif f.get("mask_mod") is not None or f.get("score_mod") is not None:
        reference = mods_reference(holder)
    else:
        raise SpecError("no `reference(q, k, v, **aux)` function defined (nor mask_mod / "
                        "score_mod, whose attention would then be the reference)", str(f.path))
    make_aux = f.get("make_aux")
    if make_aux is not None:
        make_aux = _check_signature(make_aux, "make_aux", ("shape", "generator", "device"),
                                    f.where("make_aux"), var_kw_ok=False)
    mask_mod = f.get("mask_mod")
    if mask_mod is not None:
        mask_mod = _check_signature(mask_mod, "mask_mod", ("b", "h", "q_idx", "kv_idx"),
                                    f.where("mask_mod"), var_kw_ok=True)
    score_mod = f.get("score_mod")
    if score_mod is not None:
        score_mod = _check_signature(score_mod, "score_mod",
                                     ("score", "b", "h", "q_idx", "kv_idx"),
                                     f.where("score_mod"), var_kw_ok=True)
    flops = f.get("flops")
    if flops is not None:
        flops = _check_signature(flops, "flops", ("shape", "allowed_pairs"), f.where("flops"),
                                 var_kw_ok=False)
    normalizer = f.get("NORMALIZER", "softmax")
    if normalizer not in NORMALIZERS:
        raise SpecError(f"NORMALIZER = {normalizer!r}; use one of {NORMALIZERS}",
                        f.where("NORMALIZER"))
    name = f.get("NAME", default_name or _name_from_stem(f.path.stem))
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise SpecError(f"NAME = {name!r}; use a snake_case identifier", f.where("NAME"))
    description = f.get("DESCRIPTION", (f.module.__doc__ or "").strip())
    if not isinstance(description, str):
        raise SpecError("DESCRIPTION must be a string", f.where("DESCRIPTION"))
    scale = f.get("SCALE")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)
                              or scale <= 0):
        raise SpecError(f"SCALE = {scale!r}; give a positive float or leave it out for "
                        "1/sqrt(D)", f.where("SCALE"))
    dtypes = [parse_dtype(d, f.where("DTYPES"))
              for d in _sequence(f.get("DTYPES", list(DEFAULT_DTYPES)), "DTYPES",
                                 f.where("DTYPES"))]
    self_attention = f.get("SELF_ATTENTION", False)
    if not isinstance(self_attention, bool):
        raise SpecError(f"SELF_ATTENTION = {self_attention!r}; give True (queries and keys "
                        "are the same positions, Sq = Sk) or leave it out",
                        f.where("SELF_ATTENTION"))
    aux_shapes = _aux_shapes(f)
    for aux_name, dims in (aux_shapes or {}).items():
        if uses_s(dims) and not self_attention:
            raise SpecError(f"AUX_SHAPES[{aux_name!r}] names S, the sequence length of a "
                            "self-attention spec: say SELF_ATTENTION = True (Sq = Sk), or "
                            "use Sq / Sk", f.where("AUX_SHAPES"))

    spec = Spec(
        name=name, description=description, path=f.path, reference=reference,
        make_aux=make_aux, configs=_configs(f), seq_lens=_seq_lens(f), dtypes=dtypes,
        tolerances=_tolerances(f), mask_mod=mask_mod, score_mod=score_mod,
        normalizer=normalizer, returns_lse=normalizer == "softmax",
        scale=float(scale) if scale is not None else None, aux_shapes=aux_shapes,
        flops=flops, extra={"reference_from_mods": True} if not f.get("reference") else {},
        self_attention=self_attention,
    )
    holder["spec"] = spec
    return _smoke(spec, f)


def _smoke(spec: Spec, f: _SpecFile) -> Spec:
    """Call the reference once, float64, to learn whether it returns an LSE."""
    g = torch.Generator().manual_seed(0)
    inputs = make_inputs(spec, smoke_shape(spec.configs), torch.float64, "normal", g)
    _check_aux_names(spec, f, list(inputs.aux))
    expect = None if spec.normalizer == "softmax" else False
    out, lse = call_reference(spec, inputs.to_float64(), expect_lse=expect)
    described = True
    if spec.mask_mod is None and spec.score_mod is None:
        # No mods: is the reference plain attention? (With mods, check_spec
        # compares them with the reference and fails loudly when they differ.)
        for dist in ("normal", "scaled"):
            g = torch.Generator().manual_seed(1)
            probe_shape = fit_shapes(spec, [smoke_shape(spec.configs, sq=13, sk=29)])[0]
            probe = make_inputs(spec, probe_shape, torch.float64, dist, g).to_float64()
            ref_out, _ = call_reference(spec, probe, expect_lse=lse is not None)
            mods_out, _ = mods_attention(spec, probe.q, probe.k, probe.v, probe.aux)
            err = float((mods_out - ref_out).norm() / ref_out.norm().clamp_min(1e-300))
            described = described and err <= MODS_AGREEMENT
    return dataclasses.replace(spec, returns_lse=lse is not None,
                               mods_describe_reference=described)
