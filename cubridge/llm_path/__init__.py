"""cubridge.llm_path: the LLM-driven stages of the general path.

    lift      expert .cu            -> source CuIR + IR<->CUDA correspondences
    transfer  source CuIR + spec    -> target CuIR, verified by the executor
    lower     target CuIR + .cu     -> edited .cu, compiled (and GPU-verified)

Each stage builds its prompt from a template (cubridge/llm_path/prompts/), asks
through an `LLMClient` (cache, budget, transcripts in the run directory),
checks every reply (parse, static check, sandboxed execution, verification),
feeds a failure back as the precise error for a bounded number of rounds, and
keeps the best of k verified candidates (`sampling.best_of_k`).
"""

from cubridge.llm_path.settings import StageFailed, StageSettings

__all__ = ["StageFailed", "StageSettings"]
