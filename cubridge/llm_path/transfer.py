"""The LLM transfer stage: source CuIR + the user's spec -> target CuIR.

The prompt (templates stage_system + transfer) carries the CuIR manual, the
source program and spec, the user's spec and the two-phase instructions
(semantic alignment, then performance-aware transformation). Every reply is
parsed (its last ```python block), checked statically, executed in the
sandbox against the user's spec; a failure goes back as the precise error.
The verified program is written to RUN/target_cuir.py with its verification
table; the stage is recorded in RUN/manifest.json, so a rerun is reused and
an interrupted one resumes from the cached exchanges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cubridge.llm import LLMClient
from cubridge.llm_path.library import library_kernel
from cubridge.llm_path.programs import IR_FILENAME, VerifiedProgram, program_from_reply
from cubridge.llm_path.prompts import stage_messages
from cubridge.llm_path.sampling import best_of_k
from cubridge.llm_path.settings import StageSettings
from cubridge.rundir import RunDir, StageRecord, content_hash

STAGE = "transfer"


@dataclass
class TransferResult:
    target: Path  # the verified target CuIR
    record: StageRecord


def transfer_messages(spec_path: Path, kernel: str = "fa_sm80"):  # noqa: ANN201
    lib = library_kernel(kernel)
    from cubridge.spec import load

    spec = load(spec_path)
    return stage_messages(
        "transfer", kernel_name=lib.name, arch="sm80 (A100: 163 KiB shared memory per CTA)",
        spec_name=spec.name, spec_source=Path(spec_path).read_text().rstrip(),
        source_spec=lib.spec.read_text().rstrip(), source_ir=lib.cuir.read_text().rstrip())


def transfer(spec_path: Path, client: LLMClient, run_dir: RunDir,
             settings: StageSettings | None = None, *, kernel: str = "fa_sm80"
             ) -> TransferResult:
    """Run the stage (or reuse it when its inputs are unchanged); raises
    StageFailed when no reply passes, BudgetExceeded when the budget ends."""
    settings = settings or StageSettings()
    spec_path = Path(spec_path)
    messages = transfer_messages(spec_path, kernel)
    key = content_hash(client.provider.kind, client.provider.model,
                       json.dumps([m.to_json() for m in messages]), repr(settings))

    def body(rec: StageRecord) -> None:
        selection = best_of_k(
            client, messages, lambda reply: program_from_reply(reply, spec_path, settings),
            settings, describe=_describe)
        program: VerifiedProgram = selection.best.value
        run_dir.write(IR_FILENAME, program.source)
        run_dir.write("verify_ir.txt", program.table + "\n")
        run_dir.write("transfer.json", json.dumps(
            {"kernel": program.kernel, "config": program.config, "source_kernel": kernel,
             **selection.describe()}, indent=1))
        rec.artifacts += [IR_FILENAME, "verify_ir.txt", "transfer.json"]
        rec.data.update(kernel=program.kernel, config=program.config)
        rec.summary = (f"LLM transfer {kernel} -> {program.kernel}: {program.summary}; "
                       f"{selection.timing}; {client.summary()}")

    rec = run_dir.run_stage(STAGE, key, body)
    return TransferResult(run_dir.file(IR_FILENAME), rec)


def _describe(program: VerifiedProgram) -> dict[str, object]:
    return {"kernel": program.kernel, "config": program.config, "verified": program.summary}
