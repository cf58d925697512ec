"""The LLM path of `cubridge run`: transfer (LLM) -> lower (LLM) in the run
directory, with the LLM configuration from the environment and config file
(`cubridge llm config` shows it; the manual provider lets a person answer
the prompt files). Stops after the target CuIR when nvcc is absent."""

from __future__ import annotations

from pathlib import Path

from cubridge.llm import LLMClient, load_config
from cubridge.llm_path.settings import StageSettings
from cubridge.llm_path.transfer import transfer
from cubridge.rundir import RunDir


def run_llm_path(spec_path: Path, run_dir: RunDir, *, kernel: str = "fa_sm80",
                 arch: str | None = None, settings: StageSettings | None = None) -> str:
    """Run the LLM stages; returns why the run stopped early ("" when it did not)."""
    from cubridge.build.nvcc import nvcc_available
    from cubridge.llm_path.lower import lower

    settings = settings or StageSettings()
    config = load_config()
    run_dir.write("spec.py", Path(spec_path).read_text())
    target = transfer(spec_path, LLMClient.from_config(config, run_dir.path, "transfer"),
                      run_dir, settings, kernel=kernel).target
    if not nvcc_available():
        return (f"nvcc not found: stopped after the verified target CuIR ({target}); the LLM "
                "lowering checks each reply by compiling it")
    lowered = lower(target, LLMClient.from_config(config, run_dir.path, "lower"), run_dir,
                    Path(spec_path), settings, kernel=kernel, arch=arch or "sm_90a")
    return "" if "compile-only" not in lowered.record.summary else (
        f"no CUDA GPU visible: the lowered kernel ({lowered.source}) was compiled, "
        "not run; rerun on a GPU machine to verify it")
