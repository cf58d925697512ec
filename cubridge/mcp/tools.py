"""The tools `cubridge mcp` serves. Each takes JSON arguments (its schema)
and returns text; a failure raises ToolError, which the agent receives as a
tool result with isError. Generated CuIR is only ever run in the sandbox."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ToolError(Exception):
    """A tool could not do what was asked; the message goes to the agent as a
    tool result with isError (not a protocol error)."""


@dataclass(frozen=True)
class Tool:
    description: str
    schema: dict[str, Any]
    run: Callable[..., str]


def _schema(required: list[str], **props: tuple[str, str]) -> dict[str, Any]:
    """props: name -> (JSON type, description)."""
    properties: dict[str, Any] = {}
    for name, (typ, desc) in props.items():
        properties[name] = {"type": typ, "description": desc}
        if typ == "array":
            properties[name]["items"] = {"type": "array", "items": {"type": "integer"}}
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def _file(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ToolError(f"{what} {path} does not exist")
    return p


def _settings(seed: int | None = None, sizes: list[list[int]] | None = None):  # noqa: ANN202
    from cubridge.llm_path.settings import IR_SIZES, StageSettings

    if sizes is not None and not all(len(s) == 3 and all(x > 0 for x in s) for s in sizes):
        raise ToolError(f"sizes must be a list of [batch, seqlen_q, seqlen_k], got {sizes}")
    return StageSettings(seed=seed, ir_sizes=tuple(tuple(s) for s in sizes) if sizes else IR_SIZES)


def _kernel(name: str | None, spec: Any = None) -> Any:
    """The library entry: by name, else the one selected for the spec (or the library's first)."""
    from cubridge.kernels import select_for_spec, select_kernel

    try:
        if spec is not None:
            return select_for_spec(spec, None, name)
        return select_kernel(kernel=name)
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def list_kernels() -> str:
    from cubridge.kernels import list_kernels as entries

    out = []
    for kernel in entries():
        meta = kernel.metadata
        out.append({"name": kernel.name, "description": meta.description,
                    "cuda": str(kernel.source), "cuir": str(kernel.cuir_path),
                    "spec": str(kernel.spec_path), "entry": meta.entry,
                    "head_dims": list(meta.head_dims),
                    "head_dims_built": meta.dims_text(),
                    "head_dim_pairs": [f"{d}/{dv}" for d, dv in sorted(meta.pair_configs)],
                    "archs": list(meta.archs),
                    "dtypes": [str(d).removeprefix("torch.") for d in meta.dtypes]})
    return json.dumps(out, indent=1)


def show_ir(path: str | None = None, kernel: str | None = None) -> str:
    from cubridge.llm_path.lower import describe_target

    if (path is None) == (kernel is None):
        raise ToolError("give exactly one of path (a CuIR file) or kernel (a library kernel)")
    lib = _kernel(kernel)
    if kernel is not None:
        path = str(lib.cuir_path)
    described = describe_target(_file(path, "CuIR file"), lib, _settings())
    return described["outline"]


def verify_ir(path: str, spec: str, sizes: list[list[int]] | None = None,
              seed: int | None = None) -> str:
    from cubridge.llm.loop import Rejected
    from cubridge.llm_path.programs import verify_ir_source

    source = _file(path, "CuIR file").read_text()
    try:
        program = verify_ir_source(source, _file(spec, "spec"), _settings(seed, sizes),
                                   filename=Path(path).name if Path(path).name.endswith(".py")
                                   and Path(path).stem.isidentifier() else "program.py")
    except Rejected as exc:
        raise ToolError(str(exc)) from None
    return program.table


def diff_ir(path: str, kernel: str | None = None) -> str:
    from cubridge.llm_path.lower import describe_target

    lib = _kernel(kernel)
    target = _file(path, "CuIR file")
    described = describe_target(target, lib, _settings())
    text = "".join(difflib.unified_diff(
        lib.cuir_path.read_text().splitlines(keepends=True), target.read_text().splitlines(True),
        fromfile=f"{lib.name}/{lib.cuir_path.name}", tofile=str(target)))
    return f"{described['diff']}\n\n{text}"


def lower(out: str, spec: str | None = None, edits: str | None = None,
          kernel: str | None = None) -> str:
    """Hook codegen for a spec whose change stays in the hooks; or the kernel's
    CUDA with edit actions applied (the agent's own lowering)."""
    from cubridge.llm import EditError, ReplyParseError, apply_edits, parse_edits

    target = Path(out)
    if edits is not None:
        lib = _kernel(kernel)
        try:
            actions = parse_edits(edits)
            if not actions:
                raise ToolError("edits holds no edit actions (see the edit action format)")
            text = apply_edits(lib.source.read_text(), actions)
        except (ReplyParseError, EditError) as exc:
            raise ToolError(str(exc)) from None
        target.write_text(text)
        return f"{len(actions)} edit action(s) applied to {lib.name}'s CUDA -> {target}"
    if spec is None:
        raise ToolError("give spec (hook codegen) or edits (edit actions on the CUDA source)")
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path
    from cubridge.spec import load

    loaded = load(_file(spec, "spec"))
    route = choose_path(loaded, _kernel(kernel, loaded))
    if route.path != "rules" or route.plan is None:
        raise ToolError(f"no hook lowering for this spec: {route.reason}; lower it with edit "
                        "actions on the CUDA source (argument edits)")
    header = generate_header(route.plan)
    target.write_text(header.text)
    return f"hook header for {loaded.name} -> {target} ({len(header.slots)} aux slot(s))"


def _builds(spec: str, kernel: str | None, config: dict[str, Any] | None):  # noqa: ANN202
    from cubridge.llm_path.lower import builds_for
    from cubridge.spec import load

    loaded = load(_file(spec, "spec"))
    lib = _kernel(kernel, loaded)
    return loaded, lib, builds_for(loaded, lib, config or {})


def compile_cuda(source: str, arch: str = "sm_90a", spec: str | None = None,
                 config: dict[str, Any] | None = None, hooks_header: str | None = None,
                 kernel: str | None = None) -> str:
    from cubridge.build import BuildPartError, CompileError
    from cubridge.build import compile_cuda as nvcc

    src = _file(source, "CUDA source")
    header = _file(hooks_header, "hooks header").read_text() if hooks_header else None
    lines = []
    if spec is None:
        jobs = [({}, lambda: nvcc(src, arch=arch, hooks_header=header))]
    else:
        loaded, lib, builds = _builds(spec, kernel, config)
        dtype = loaded.dtypes[0]
        jobs = [(lib.compile_defines(b.head_dim, dtype, lib.build_config(b), causal=b.causal,
                                     head_dim_v=b.head_dim_v),
                 lambda b=b: lib.compile_build(b, dtype, arch, hooks_header=header,
                                               source=src.read_text()))
                for b in builds]
    for defines, job in jobs:
        try:
            ck = job()
        except CompileError as exc:
            diags = "\n".join(f"{Path(f).name}:{ln}: {sev}: {msg}"
                              for f, ln, sev, msg in exc.diagnostics[:20])
            raise ToolError(f"nvcc failed ({defines}):\n{diags or exc}") from None
        except (BuildPartError, ValueError, TypeError) as exc:
            raise ToolError(str(exc)) from None
        res = [r.to_json() for r in ck.resources.values()]
        lines.append(json.dumps({"defines": defines, "cubin": str(ck.cubin_path),
                                 "resources": res}, default=str))
    return "\n".join(lines)


def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise ToolError("no CUDA GPU visible on this machine: GPU verification and benchmarks "
                        "need one (compile works without)")


def verify_gpu(source: str, spec: str, arch: str | None = None,
               config: dict[str, Any] | None = None, kernel: str | None = None) -> str:
    """In a watched child process (cubridge.llm_path.gpu_check): a kernel that
    faults or hangs ends the child, not the server."""
    _require_gpu()
    import torch

    from cubridge.build.driver import device_arch
    from cubridge.llm.loop import Rejected
    from cubridge.llm_path.gpu_check import IsolatedGpuCheck

    loaded, lib, builds = _builds(spec, kernel, config)
    arch = arch or device_arch(torch.device("cuda"))
    dtype = loaded.dtypes[0]
    text = _file(source, "CUDA source").read_text()
    compiled = [(b, lib.compile_build(b, dtype, arch, source=text)) for b in builds]
    settings = _settings()
    check = IsolatedGpuCheck(kernel=lib, spec_path=Path(spec), dtype=dtype, arch=arch,
                             seed=settings.seed, silence_s=settings.gpu_timeout_s)
    try:
        result = check(compiled, text)
    except Rejected as exc:
        raise ToolError(str(exc)) from None
    timed = f"; {result.time_ms:.3f} ms" if result.time_ms is not None else ""
    return f"{result.verification}{timed}"


def benchmark(source: str, spec: str, seq_len: int = 4096, config: dict[str, Any] | None = None,
              kernel: str | None = None) -> str:
    """Verified, then timed, in the watched child of cubridge.llm_path.gpu_check: the
    first build on the spec's first matching head config, B = 1, Sq = Sk = seq_len."""
    _require_gpu()
    import torch

    from cubridge.attention import attention_flops
    from cubridge.build.driver import device_arch
    from cubridge.llm.loop import Rejected
    from cubridge.llm_path.gpu_check import IsolatedGpuCheck

    loaded, lib, builds = _builds(spec, kernel, config)
    arch = device_arch(torch.device("cuda"))
    dtype = loaded.dtypes[0]
    text = _file(source, "CUDA source").read_text()
    compiled = [(b, lib.compile_build(b, dtype, arch, source=text)) for b in builds]
    settings = _settings()
    check = IsolatedGpuCheck(kernel=lib, spec_path=Path(spec), dtype=dtype, arch=arch,
                             seed=settings.seed, silence_s=settings.gpu_timeout_s,
                             time_seq_len=seq_len)
    try:
        result = check(compiled, text)
    except Rejected as exc:
        raise ToolError(str(exc)) from None
    build = builds[0]
    cfg = next(c for c in loaded.configs if (c.d, c.head_dim_v) == build.dims)
    # Pairs as the build computes them (causal or all); `cubridge bench` counts a
    # spec's own allowed pairs.
    pairs = seq_len * (seq_len + 1) // 2 if build.causal else seq_len * seq_len
    ms = result.time_ms or float("nan")
    tflops = attention_flops(pairs, cfg.hq, cfg.d, cfg.head_dim_v) / (ms * 1e-3) / 1e12
    return (f"{result.device}: verified ({result.verification}); {cfg.name} S={seq_len} B=1: "
            f"{ms:.3f} ms, {tflops:.0f} TFLOP/s on {'causal' if build.causal else 'all'} "
            "pairs")


_CONFIG = ("object", "tile config of the build (the kernel's config fields, causal)")
_KERNEL = ("string", "library kernel the source edits (default: selected for the spec)")

TOOLS: dict[str, Tool] = {
    "list_kernels": Tool("The expert kernel library: each kernel's CUDA source, CuIR program, "
                         "spec, head dims, archs and dtypes.", _schema([]), list_kernels),
    "show_ir": Tool("Outline of a CuIR program (roles, config, synchronisation skeleton); a "
                    "file is run only in the sandbox.",
                    _schema([], path=("string", "a CuIR .py file"),
                            kernel=("string", "a library kernel name")), show_ir),
    "verify_ir": Tool("Execute a CuIR program (sandboxed, static-checked) against a spec on CPU "
                      "shapes and return the verifier's table; a failure is an error result.",
                      _schema(["path", "spec"], path=("string", "the CuIR .py file"),
                              spec=("string", "the spec file"),
                              sizes=("array", "[[batch, seqlen_q, seqlen_k], ...]"),
                              seed=("integer", "seed of the random inputs")), verify_ir),
    "diff_ir": Tool("Structural and text diff of a library kernel's CuIR -> a CuIR file; says "
                    "whether the change stays inside the hooks.",
                    _schema(["path"], path=("string", "the target CuIR file"),
                            kernel=("string", "library kernel (default: the selected one)")),
                    diff_ir),
    "lower": Tool("Lower to CUDA: the hook header for a spec whose change stays in the hooks, "
                  "or the kernel's CUDA with edit actions (@@@ replace/insert/delete) applied.",
                  _schema(["out"], out=("string", "file to write"),
                          spec=("string", "spec file (hook codegen)"),
                          edits=("string", "edit actions against the numbered CUDA source"),
                          kernel=("string", "library kernel (default: selected for the spec)")),
                  lower),
    "compile": Tool("Compile a CUDA source with nvcc (one build per head-dim pair of spec); "
                    "returns cubin and register/spill report, or the diagnostics.",
                    _schema(["source"], source=("string", ".cu file"),
                            arch=("string", "sm_80 | sm_90a (default sm_90a)"),
                            spec=("string", "spec file: head dims and dtype of the builds"),
                            config=_CONFIG, hooks_header=("string", "hooks header file"),
                            kernel=("string", "library kernel (with spec)")),
                    compile_cuda),
    "verify_gpu": Tool("Compile, launch on the GPU and verify against the spec (needs a GPU).",
                       _schema(["source", "spec"], source=("string", ".cu file"),
                               spec=("string", "spec file"), arch=("string", "default: GPU's"),
                               config=_CONFIG, kernel=_KERNEL),
                       verify_gpu),
    "benchmark": Tool("Verify, then time the compiled kernel on the GPU (the first build, "
                      "the spec's first matching head config, batch 1; needs a GPU).",
                      _schema(["source", "spec"], source=("string", ".cu file"),
                              spec=("string", "spec file"), seq_len=("integer", "default 4096"),
                              config=_CONFIG, kernel=_KERNEL),
                      benchmark),
}
