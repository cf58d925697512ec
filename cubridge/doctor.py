"""`cubridge doctor`: what this machine has for each cubridge stage, and what is
missing. Every probe is read-only and quick; credentials are reported by
environment variable name only, never by value."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

LLM_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
NEEDED_ARCHS = ("sm_80", "sm_90a")


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Stage:
    name: str
    ready: bool
    missing: list[str]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _run(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def probe_torch() -> list[Finding]:
    import torch

    found = [Finding("torch", True, f"{torch.__version__} (CUDA build: "
                     f"{torch.version.cuda or 'none, CPU-only build'})")]
    if not torch.cuda.is_available():
        why = ("this torch is a CPU-only build" if not torch.version.cuda
               else "no CUDA device visible to torch")
        found.append(Finding("gpu", False, f"no CUDA GPU: {why}"))
        return found
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        props = torch.cuda.get_device_properties(i)
        supported = major >= 8  # the kernels use mma.sync bf16 and cp.async
        found.append(Finding(f"gpu {i}", supported, f"{props.name}, sm_{major}{minor}, "
                             f"{props.total_memory / 2**30:.0f} GiB" + (
                                 "" if supported else "; cubridge kernels need sm_80 or newer")))
    found.append(Finding("cuda runtime", True, f"{torch.version.cuda} (via torch)"))
    return found


def probe_driver() -> Finding:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out and out.strip():
        return Finding("nvidia driver", True, out.strip().splitlines()[0])
    return Finding("nvidia driver", False, "not found (nvidia-smi absent or failing)")


def probe_nvcc() -> list[Finding]:
    """nvcc found exactly as the build finds it (cubridge.build.nvcc.find_nvcc:
    PATH, then CUDA_HOME / CUDA_PATH, then /usr/local/cuda)."""
    from cubridge.build.errors import NvccNotFoundError
    from cubridge.build.nvcc import find_nvcc

    try:
        path = str(find_nvcc())
    except NvccNotFoundError:
        return [Finding("nvcc", False, "not found on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin or "
                        "/usr/local/cuda/bin (needed to compile kernels)")]
    text = _run([path, "--version"]) or ""
    match = re.search(r"release (\d+\.\d+)", text)
    version = match.group(1) if match else "unknown version"
    found = [Finding("nvcc", True, f"{version} at {path}")]
    archs = _run([path, "--list-gpu-code"]) or ""
    # nvcc lists base targets; an arch-specific one (sm_90a) comes with its base.
    missing = [a for a in NEEDED_ARCHS if a.rstrip("a") not in archs.split()]
    found.append(Finding("nvcc targets", not missing,
                         f"{', '.join(NEEDED_ARCHS)} supported" if not missing
                         else f"missing {', '.join(missing)}"))
    return found


def probe_cutlass() -> Finding:
    version = _version("nvidia-cutlass")
    spec = importlib.util.find_spec("cutlass_library") if _has_module("cutlass_library") else None
    if spec is None or spec.origin is None:
        return Finding("CUTLASS headers", False, "nvidia-cutlass not installed (pip install "
                       "nvidia-cutlass==4.2.0.0)")
    include = Path(spec.origin).parent / "source" / "include"
    if not (include / "cute" / "tensor.hpp").is_file():
        return Finding("CUTLASS headers", False, f"nvidia-cutlass {version}: no cute/tensor.hpp "
                       f"under {include}")
    return Finding("CUTLASS headers", True, f"nvidia-cutlass {version} at {include}")


def probe_packages() -> list[Finding]:
    found = []
    triton = _version("triton") or _version("pytorch-triton")
    found.append(Finding("triton", triton is not None,
                         triton or "not installed (FlexAttention's Triton backend, do_bench)"))
    fa4 = _has_module("flash_attn.cute")
    fa4_version = _version("flash-attn-4") or _version("flash-attn") or "version unknown"
    found.append(Finding("flash-attn-4", fa4, fa4_version if fa4 else
                         "not installed (optional peer: FA4 and Flex FLASH backend)"))
    cuda_python = _version("cuda-python") or _version("cuda-bindings")
    found.append(Finding("cuda-python", cuda_python is not None and _has_module("cuda.bindings"),
                         cuda_python or "not installed (pip install cuda-python; launches "
                         "cubins)"))
    mpl = _version("matplotlib")
    found.append(Finding("matplotlib", mpl is not None, mpl or "not installed (bench plots)"))
    clients = [n for n in ("openai", "anthropic") if _has_module(n)]
    found.append(Finding("LLM client libraries", bool(clients),
                         ", ".join(clients) if clients else "neither openai nor anthropic"))
    mcp = _version("mcp")
    found.append(Finding("MCP SDK", mcp is not None, mcp or "not installed (cubridge mcp; "
                         "pip install 'cubridge[llm]')"))
    from cubridge.build.sanitizer import find_compute_sanitizer

    sanitizer = find_compute_sanitizer()
    found.append(Finding("compute-sanitizer", sanitizer is not None, str(sanitizer) if sanitizer
                         else "not found (a faulting generated kernel is reported without its "
                         "memcheck report)"))
    return found


def probe_credentials() -> list[Finding]:
    """Presence only: the value is never read beyond 'is it non-empty'."""
    return [Finding(var, bool(os.environ.get(var)), "set" if os.environ.get(var) else "not set")
            for var in LLM_KEY_VARS]


def gather() -> list[Finding]:
    findings = [Finding("python", True, f"{platform.python_version()} on {platform.machine()}")]
    findings += probe_torch()
    findings.append(probe_driver())
    findings += probe_nvcc()
    findings.append(probe_cutlass())
    findings += probe_packages()
    findings += probe_credentials()
    return findings


def stages(findings: list[Finding]) -> list[Stage]:
    ok = {f.name: f.ok for f in findings}
    has_gpu = any(f.ok for f in findings if f.name.startswith("gpu"))

    def stage(name: str, needs: list[tuple[bool, str]]) -> Stage:
        missing = [what for present, what in needs if not present]
        return Stage(name, not missing, missing)

    compile_needs = [(ok.get("nvcc", False), "nvcc"),
                     (ok.get("nvcc targets", False), "nvcc with sm_80/sm_90a")]
    gpu_needs = [(has_gpu, "a CUDA GPU visible to torch"),
                 (ok.get("cuda-python", False), "cuda-python")]
    return [
        stage("spec + verify on CPU", [(ok.get("torch", False), "torch")]),
        stage("transfer + lower (hook codegen)", [(ok.get("torch", False), "torch")]),
        stage("compile", compile_needs),
        stage("compile CuTe/CUTLASS kernels",
              compile_needs + [(ok.get("CUTLASS headers", False), "CUTLASS headers")]),
        stage("GPU verify", compile_needs + gpu_needs),
        stage("bench", compile_needs + gpu_needs + [
            (ok.get("triton", False), "triton (Flex Triton peer, do_bench)"),
            (ok.get("matplotlib", False), "matplotlib (plots)")]),
        # The manual, command and replay providers need no key; the hosted ones do.
        stage("LLM path (hosted models)", [
            (any(ok.get(v, False) for v in LLM_KEY_VARS),
             "an API key: " + " or ".join(LLM_KEY_VARS)
             + " (the manual, command and replay providers need none)"),
            (ok.get("LLM client libraries", False), "the openai or anthropic package")]),
    ]


def render(findings: list[Finding], stage_list: list[Stage]) -> str:
    width = max(len(f.name) for f in findings)
    lines = ["cubridge doctor", "", "This machine:"]
    lines += [f"  {'ok' if f.ok else '--'}  {f.name:<{width}}  {f.detail}" for f in findings]
    lines += ["", "Stages:"]
    stage_width = max(len(s.name) for s in stage_list)
    for s in stage_list:
        state = "ready" if s.ready else "missing " + "; ".join(s.missing)
        lines.append(f"  {'ok' if s.ready else '--'}  {s.name:<{stage_width}}  {state}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("doctor", help="what this machine has for each cubridge stage",
                              description="Report GPU, driver, nvcc, CUTLASS headers, library "
                              "versions and LLM credentials (by name only), and what each "
                              "stage is missing.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    findings = gather()
    stage_list = stages(findings)
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in findings],
                          "stages": [asdict(s) for s in stage_list]}, indent=1))
    else:
        print(render(findings, stage_list))
    return 0
