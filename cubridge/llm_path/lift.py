"""The LLM lift stage: an expert CUDA kernel -> its CuIR program, with the
IR-method <-> CUDA-line correspondence.

The prompt (templates stage_system + lift) carries the CuIR reference, the
attention base class programs derive from, the
numbered kernel source, the spec of what it computes and the three steps
(annotate intrinsics, map regions to workers, lift each region recording the
correspondence). A reply must hold the program (```python) and the
correspondence (```json); both are checked (the correspondence against the
program's methods and the source's lines, the program statically and by
executing it in the sandbox against the spec) and any failure goes back.
Artifacts: RUN/lifted_cuir.py, RUN/correspondence.json, RUN/verify_ir.txt.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubridge.ir import attention, docgen
from cubridge.llm import LLMClient, code_block
from cubridge.llm.sandbox import check_source
from cubridge.llm_path.correspondence import check_correspondence, parse_correspondence
from cubridge.llm_path.messages import numbered, stage_messages
from cubridge.llm_path.programs import VerifiedProgram, verify_ir_source
from cubridge.llm_path.sampling import best_of_k
from cubridge.llm_path.settings import StageSettings
from cubridge.rundir import RunDir, StageRecord, content_hash

STAGE = "lift"
LIFTED = "lifted_cuir.py"


@dataclass
class Lifted:
    program: VerifiedProgram
    correspondence: dict[str, Any]


@dataclass
class LiftResult:
    program: Path
    correspondence: Path
    record: StageRecord


def default_spec(kernel_cu: Path) -> Path:
    """A library kernel's spec: the one its metadata.json names, else spec.py beside it."""
    directory = Path(kernel_cu).resolve().parent
    meta = directory / "metadata.json"
    name = json.loads(meta.read_text()).get("spec", "spec.py") if meta.is_file() else "spec.py"
    spec = (directory / name).resolve()
    if not spec.is_file():
        raise FileNotFoundError(f"{kernel_cu} has no {name} beside it; pass --spec SPEC "
                                "(a spec of what the kernel computes)")
    return spec


def _tile_config(kernel_cu: Path) -> str:
    meta = Path(kernel_cu).resolve().parent / "metadata.json"
    if meta.is_file():
        configs = json.loads(meta.read_text()).get("configs", {})
        if configs:
            return json.dumps(configs[sorted(configs)[-1]])
    return "(as the kernel's defaults define it)"


def lift_messages(kernel_cu: Path, spec_path: Path):  # noqa: ANN201
    source = Path(kernel_cu).read_text()
    return stage_messages(
        "lift", system_vars={"manual": docgen.render_reference()},
        base_class=inspect.getsource(attention).rstrip(),
        spec_source=Path(spec_path).read_text().rstrip(), config=_tile_config(kernel_cu),
        kernel_name=Path(kernel_cu).name, kernel_lines=str(len(source.splitlines())),
        kernel_source=numbered(source))


def check_lift(reply: str, kernel_cu: Path, spec_path: Path, settings: StageSettings) -> Lifted:
    source = code_block(reply, "python", pick="last")
    data = parse_correspondence(reply)
    check_source(source, filename=LIFTED)  # cheap errors before the correspondence's
    check_correspondence(data, source, len(Path(kernel_cu).read_text().splitlines()))
    program = verify_ir_source(source, spec_path, settings, filename=LIFTED)
    return Lifted(program, data)


def lift(kernel_cu: Path, client: LLMClient, run_dir: RunDir,
         settings: StageSettings | None = None, *, spec_path: Path | None = None) -> LiftResult:
    settings = settings or StageSettings()
    kernel_cu = Path(kernel_cu)
    if not kernel_cu.is_file():
        raise FileNotFoundError(f"kernel source {kernel_cu} does not exist")
    spec_path = Path(spec_path) if spec_path is not None else default_spec(kernel_cu)
    messages = lift_messages(kernel_cu, spec_path)
    key = content_hash(client.provider.kind, client.provider.model,
                       json.dumps([m.to_json() for m in messages]), repr(settings))

    def body(rec: StageRecord) -> None:
        selection = best_of_k(
            client, messages, lambda r: check_lift(r, kernel_cu, spec_path, settings), settings,
            describe=lambda v: {"kernel": v.program.kernel,
                                "methods": [e["method"] for e in v.correspondence[
                                    "correspondence"]]})
        lifted: Lifted = selection.best.value
        run_dir.write(LIFTED, lifted.program.source)
        run_dir.write("correspondence.json", json.dumps(
            {"kernel_source": str(kernel_cu), **lifted.correspondence}, indent=1))
        run_dir.write("verify_ir.txt", lifted.program.table + "\n")
        rec.artifacts += [LIFTED, "correspondence.json", "verify_ir.txt"]
        rec.summary = (f"LLM lift {kernel_cu.name} -> {lifted.program.kernel} "
                       f"({len(lifted.correspondence['correspondence'])} correspondences): "
                       f"{lifted.program.summary}; {selection.timing}; {client.summary()}")

    rec = run_dir.run_stage(STAGE, key, body)
    return LiftResult(run_dir.file(LIFTED), run_dir.file("correspondence.json"), rec)
