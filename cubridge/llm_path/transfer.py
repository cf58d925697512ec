"""The LLM transfer stage: source CuIR + the user's spec -> target CuIR.

The prompt (templates stage_system + transfer) carries the CuIR reference
(in full for what the source program uses), the source program and its base
class, the user's spec with its aux tensors and the spec helpers it calls,
and the two-phase instructions (semantic alignment, then performance-aware
transformation). Every reply is
parsed (its last ```python block), checked statically, executed in the
sandbox against the user's spec; a failure goes back as the precise error.
The verified program is written to RUN/target_cuir.py with its verification
(verify_ir.txt, verify_ir.json) and transfer.json; the stage is recorded in
RUN/manifest.json, so a rerun is reused and an interrupted one resumes from
the cached exchanges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cubridge.kernels import LibraryKernel
from cubridge.llm import LLMClient
from cubridge.llm_path.context import aux_table, base_classes, helpers_used, manual_for
from cubridge.llm_path.messages import stage_messages
from cubridge.llm_path.programs import IR_FILENAME, VerifiedProgram, program_from_reply
from cubridge.llm_path.sampling import best_of_k
from cubridge.llm_path.settings import StageSettings
from cubridge.rundir import RunDir, StageRecord, content_hash
from cubridge.spec.loader import load

STAGE = "transfer"


@dataclass
class TransferResult:
    target: Path  # the verified target CuIR
    record: StageRecord


def transfer_messages(spec_path: Path, kernel: LibraryKernel):  # noqa: ANN201
    """The system prompt (rules, the CuIR reference with what the source program
    uses in full) and the task: the user's spec with its aux tensors and the
    spec helpers it calls, the source program once and the base class it
    derives from."""
    spec = load(spec_path)
    source_ir = kernel.cuir_path.read_text().rstrip()
    bases = base_classes(source_ir)
    base_text = "\n\n".join(
        "The base class the source program derives from (importable as it is):\n\n"
        f"```python\n{b.rstrip()}\n```" for b in bases)
    source_spec = kernel.spec()
    return stage_messages(
        "transfer", system_vars={"manual": manual_for([source_ir, *bases])},
        kernel_name=kernel.name, arch=kernel.metadata.device_note,
        spec_name=spec.name, spec_source=Path(spec_path).read_text().rstrip(),
        source_spec=source_spec.description, aux=aux_table(spec, cuda=False),
        helpers=helpers_used(Path(spec_path).read_text()) or "# (none)",
        source_ir=source_ir, base_classes=base_text)


def transfer(spec_path: Path, client: LLMClient, run_dir: RunDir,
             settings: StageSettings | None = None, *, kernel: LibraryKernel
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
        run_dir.write("verify_ir.json", json.dumps(
            {"passed": True, "summary": program.summary, "kernel": program.kernel,
             "config": program.config}, indent=1))
        run_dir.write("transfer.json", json.dumps(
            {"path": "llm", "kernel": program.kernel, "source_kernel": kernel.name,
             "config": program.config, **selection.describe()}, indent=1))
        rec.artifacts += [IR_FILENAME, "verify_ir.txt", "verify_ir.json", "transfer.json"]
        rec.data.update(kernel=program.kernel, config=program.config)
        rec.summary = (f"LLM transfer {kernel.name} -> {program.kernel}: {program.summary}; "
                       f"{selection.timing}; {client.summary()}")

    rec = run_dir.run_stage(STAGE, key, body)
    return TransferResult(run_dir.file(IR_FILENAME), rec)


def _describe(program: VerifiedProgram) -> dict[str, object]:
    return {"kernel": program.kernel, "config": program.config, "verified": program.summary}
