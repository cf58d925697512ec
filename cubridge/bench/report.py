"""Benchmark records: a JSON file, a markdown table and a PNG plot, each carrying
the device, date, git commit, exact command line and library versions, so a
figure is never retyped by hand or separated from how it was made."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import torch

from cubridge.bench.runner import OK, CaseResult, ImplResult, median_result
from cubridge.bench.summary import OURS, summary_markdown

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "cubridge.bench/1"
STATUS_CELL = {"wrong": "FAIL", "oom": "OOM", "error": "ERR", "unsupported": "-",
               "skipped": "n/v"}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_commit(root: Path = REPO_ROOT) -> str:
    """HEAD's hash, with '+dirty' when tracked files differ from it. A copy of
    the tree without git (a device machine) is named by $CUBRIDGE_COMMIT, which
    also overrides git when set."""
    given = os.environ.get("CUBRIDGE_COMMIT", "").strip()
    if given:
        return f"{given} (from CUBRIDGE_COMMIT)"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout; set CUBRIDGE_COMMIT)"
    return head + ("+dirty" if dirty.strip() else "")


def invocation(argv: Sequence[str]) -> str:
    """The command line as a user would retype it."""
    program = argv[0] if argv else "cubridge"
    if Path(program).name == "cubridge":
        program = "cubridge"
    elif program.replace("\\", "/").endswith("cubridge/cli.py"):
        program = "python -m cubridge.cli"
    return " ".join([program, *(shlex.quote(a) for a in argv[1:])])


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()})"


def collect_metadata(command: str, device: str, timing: str, extra: dict | None = None) -> dict:
    meta = {
        "schema": SCHEMA,
        "device": device_name(device),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": command,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "triton": _version("triton"),
        "flash_attn_4": _version("flash-attn-4") if _version("flash-attn-4") != "not installed"
        else _version("flash-attn"),
        "python": platform.python_version(),
        "timing": timing,
    }
    meta.update(extra or {})
    return meta


def write_json(path: Path, meta: dict, results: Sequence[CaseResult]) -> None:
    path.write_text(json.dumps({"meta": meta, "results": [r.to_json() for r in results]},
                               indent=1) + "\n")


def load_json(path: Path) -> tuple[dict, list[CaseResult]]:
    data = json.loads(Path(path).read_text())
    if data.get("meta", {}).get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a cubridge bench result (schema {SCHEMA} expected)")
    results = []
    for r in data["results"]:
        impls = [ImplResult(**i) for i in r.pop("impls")]
        results.append(CaseResult(**r, impls=impls))
    return data["meta"], results


def merge_results(runs: Sequence[tuple[dict, list[CaseResult]]], *, median: bool = False
                  ) -> tuple[dict, list[CaseResult]]:
    """One report from several runs on the same device: the first run's metadata,
    with every run's date, commit and command listed under 'merged_from'. With
    `median`, runs that repeat the same cases become one result per case
    (`median_of_repeats`)."""
    devices = {meta["device"] for meta, _ in runs}
    if len(devices) != 1:
        raise ValueError(f"cannot merge results from different devices: {sorted(devices)}")
    meta = dict(runs[0][0])
    origins = [origin for m, _ in runs for origin in _origins(m)]
    meta["merged_from"] = origins
    meta["command"] = " ; ".join(m["command"] for m, _ in runs)
    meta["timing"] = merged_timing([o["timing"] for o in origins])
    results = [r for _, results in runs for r in results]
    if median:
        results = median_of_repeats(results)
        meta["timing"] = f"{meta['timing']}{MEDIAN_NOTE}"
    return meta, results


MEDIAN_NOTE = "; each case the median of its runs' times"


def _origins(meta: dict) -> list[dict]:
    """The runs a report was made from, each with its date, commit, command and
    timing: a merged report's own runs, so that merging merged reports lists every
    run once and numbers their timings together."""
    if not meta.get("merged_from"):
        return [{**{k: meta[k] for k in ("date", "commit", "command")},
                 "timing": meta.get("timing", "")}]
    entries = meta["merged_from"]
    if all("timing" in e for e in entries):
        return [dict(e) for e in entries]
    # merged before each run kept its timing: read it back from the timing line
    timings = _split_timing(meta.get("timing", ""), len(entries))
    return [{**e, "timing": t} for e, t in zip(entries, timings, strict=True)]


def _split_timing(line: str, n: int) -> list[str]:
    """Each of n merged runs' timing from merged_timing's line ("runs 1, 2: A; runs
    3: B"); the whole line for each run where it does not name all n."""
    if line.endswith(MEDIAN_NOTE):  # (said of the merge, not of a run)
        line = line[:-len(MEDIAN_NOTE)]
    parts = re.split(r"(?:^|; )runs ((?:\d+, )*\d+): ", line)
    if len(parts) < 3 or parts[0]:
        return [line] * n
    per_run: dict[int, str] = {}
    for numbers, timing in zip(parts[1::2], parts[2::2], strict=True):
        per_run.update((int(i), timing) for i in numbers.split(", "))
    if sorted(per_run) != list(range(1, n + 1)):
        return [line] * n
    return [per_run[i] for i in range(1, n + 1)]


def merged_timing(timings: Sequence[str]) -> str:
    """The timing line of merged runs: theirs where they agree, else each distinct
    setting with the runs (1-based, in merged_from's order) it timed."""
    groups: dict[str, list[int]] = {}
    for i, timing in enumerate(timings, 1):
        groups.setdefault(timing, []).append(i)
    if len(groups) == 1:
        return timings[0]
    return "; ".join(f"runs {', '.join(map(str, idx))}: {timing}"
                     for timing, idx in groups.items())


def median_of_repeats(results: Sequence[CaseResult]) -> list[CaseResult]:
    """One result per case (variant, config, S) from runs that each measured it:
    per implementation the median of its verified times (TFLOP/s from that time,
    the largest error of any run, the runs' times in its note); an implementation
    that failed or did not run in any repeat keeps that status, naming the repeat.
    Ratios between cases (a variant against its own causal) then move less with a
    run's clock and thermal state than a single run's do. A repeat that did not
    verify or run outranks the others: a median never hides it (`median_result`)."""
    groups: dict[tuple, list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.variant, r.config, r.seq_len, r.seq_len_k), []).append(r)
    merged = []
    for key, repeats in groups.items():
        first = repeats[0]
        if any(r.allowed_pairs != first.allowed_pairs or r.flops != first.flops
               for r in repeats):
            raise ValueError(f"{key}: the repeats count different work; they are not one case")
        names = [i.impl for i in first.impls]
        names += [i.impl for r in repeats for i in r.impls if i.impl not in names]
        impls = []
        for name in names:
            runs = [(k, i) for k, r in enumerate(repeats, 1) for i in r.impls if i.impl == name]
            impls.append(median_result(runs, len(repeats), first.flops, "run"))
        merged.append(dataclasses.replace(first, impls=impls))
    return merged


def _impl_names(results: Sequence[CaseResult]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [i.impl for i in r.impls if i.impl not in names]
    return names


def _cell(r: ImplResult | None) -> str:
    if r is None:
        return ""
    if r.status == OK:
        return f"{r.tflops:.0f}" + (f" ({r.note})" if r.note and "dense" in r.note else "")
    return STATUS_CELL.get(r.status, r.status)


def _commits(meta: dict) -> str:
    """meta's commit, or for runs merged from several commits each one with the
    runs (numbered as in the command) that were at it."""
    runs = [m["commit"] for m in meta.get("merged_from") or []]
    if len(set(runs)) <= 1:
        return meta["commit"]
    at = {c: [str(i + 1) for i, r in enumerate(runs) if r == c] for c in dict.fromkeys(runs)}
    return "; ".join(f"{c} (run{'s' * (len(ns) > 1)} {', '.join(ns)})" for c, ns in at.items())


def _dates(meta: dict) -> str:
    """meta's date, or for merged runs the first and the last."""
    dates = [m["date"] for m in meta.get("merged_from") or []]
    if len(set(dates)) <= 1:
        return meta["date"]
    return f"{min(dates)} to {max(dates)} ({len(dates)} runs merged)"


def meta_lines(meta: dict) -> list[str]:
    return [
        f"- device: {meta['device']}",
        f"- date: {_dates(meta)}",
        f"- commit: {_commits(meta)}",
        f"- command: `{meta['command']}`",
        f"- torch {meta['torch']} (CUDA {meta['cuda']}), triton {meta['triton']}, "
        f"flash-attn-4 {meta['flash_attn_4']}, python {meta['python']}",
        f"- timing: {meta['timing']}",
    ]


def markdown_table(results: Sequence[CaseResult]) -> str:
    """TFLOP/s on allowed pairs: one row per (variant, config, S), one column per
    impl; S reads Sq x Sk where the keys differ."""
    names = _impl_names(results)
    head = ["variant", "config", "S", "B", "density"] + names
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        by_name = {i.impl: i for i in r.impls}
        lengths = f"{r.seq_len}x{r.seq_len_k}" if r.seq_len_k else str(r.seq_len)
        config = r.config if r.dtype == "bf16" else f"{r.config} ({r.dtype})"
        row = [r.variant, config, lengths, str(r.batch), f"{r.density:.3f}"]
        lines.append("| " + " | ".join(row + [_cell(by_name.get(n)) for n in names]) + " |")
    return "\n".join(lines)


def render_markdown(meta: dict, results: Sequence[CaseResult]) -> str:
    parts = ["# cubridge bench", "", *meta_lines(meta), "",
             "TFLOP/s = 4 * allowed (q, k) pairs * Hq * D / time (docs/benchmark.md), bf16 "
             "unless the config says otherwise. `-`: the implementation cannot express the "
             "variant or is not installed; FAIL: wrong output (not timed); OOM / ERR: it ran "
             "out of memory / raised; n/v: no reference to verify against.", "",
             markdown_table(results), ""]
    reasons: dict[str, list[str]] = {}
    for r in results:
        for i in r.impls:
            if i.status != OK:
                key = f"{i.impl} ({i.status}): {i.reason}"
                reasons.setdefault(key, []).append(f"{r.variant}/{r.config}/S{r.seq_len}")
    if reasons:
        parts += ["## Not timed", ""]
        for key, where in reasons.items():
            shown = ", ".join(where[:4]) + (f" and {len(where) - 4} more" if len(where) > 4 else "")
            parts.append(f"- {key} [{shown}]")
        parts.append("")
    counted: dict[str, list[str]] = {}
    for r in results:
        how = r.counting or "not recorded (written before results stated their counting)"
        counted.setdefault(f"{r.variant}: {how}", []).append(f"{r.config}/S{r.seq_len}")
    parts += ["## Counting", "", "How each case's allowed pairs and FLOPs were obtained "
              "(docs/benchmark.md).", ""]
    parts += [f"- {key} [{', '.join(where)}]" for key, where in counted.items()] + [""]
    parts += peer_forms_section(results)
    refs = sorted({f"{r.variant}: {r.reference}" for r in results})
    parts += ["## Float64 references", "", *[f"- {x}" for x in refs], ""]
    return "\n".join(parts)


def peer_forms_section(results: Sequence[CaseResult]) -> list[str]:
    """How each implementation was given each variant (its notes: native flags,
    dense masks, BlockMask, constants bound, tensors captured), as a table at
    the first case of each variant (constants differ by S)."""
    names = _impl_names(results)
    rows = []
    for variant in dict.fromkeys(r.variant for r in results):
        first = next(r for r in results if r.variant == variant)
        notes = {i.impl: i.note.replace("|", "/") for i in first.impls}
        if any(notes.values()):
            rows.append(f"| {variant} | {first.config}, S = {first.seq_len} | "
                        + " | ".join(notes.get(n, "") for n in names) + " |")
    if not rows:
        return []
    head = ["variant", "at", *names]
    return ["## How each implementation was given the variant", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows, ""]


def render_summary(meta: dict, results: Sequence[CaseResult]) -> str:
    """summary.md: ours against the best peer and our own causal, with the bars
    (cubridge.bench.summary), under the run's provenance."""
    return "\n".join(["# cubridge bench: ours against the peers", "", *meta_lines(meta), "",
                      summary_markdown(results)])


def plot_png(path: Path, meta: dict, results: Sequence[CaseResult]) -> None:
    """TFLOP/s against S, one panel per (variant, config), one line per impl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r.variant, r.config) for r in results))
    cols = min(4, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows + 1.2), squeeze=False)
    names = _impl_names(results)
    for ax, (variant, config) in zip(axes.flat, panels, strict=False):
        mine = [r for r in results if (r.variant, r.config) == (variant, config)]
        for name in names:
            pts = [(r.seq_len, i.tflops) for r in mine for i in r.impls
                   if i.impl == name and i.status == OK]
            if pts:
                ax.plot(*zip(*sorted(pts), strict=True), marker="o", label=name)
        ax.set_title(f"{variant} / {config}", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S")
        ax.set_ylabel("TFLOP/s (allowed pairs)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    commit = meta["commit"]
    commit = commit[:12] + commit[40:] if re.match(r"[0-9a-f]{40}", commit) else commit
    fig.suptitle(f"cubridge bench: {meta['device']}, {meta['date']}, commit {commit}", fontsize=10)
    fig.text(0.01, 0.005, f"$ {meta['command']}", fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    info = {"Title": "cubridge bench", "Author": "cubridge",
            "Description": json.dumps({k: meta[k] for k in ("device", "date", "commit",
                                                             "command", "torch", "triton")})}
    fig.savefig(path, dpi=110, metadata=info)
    plt.close(fig)


def write_reports(out_dir: Path, meta: dict, results: Sequence[CaseResult]) -> dict[str, Path]:
    """results.json, results.md, results.png and (with ours among them)
    summary.md in out_dir; a plot that cannot be
    drawn (no matplotlib on the machine) is reported, the rest is still written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "results.md",
             "png": out_dir / "results.png"}
    write_json(paths["json"], meta, results)
    paths["markdown"].write_text(render_markdown(meta, results))
    if any(i.impl == OURS and i.status == OK for r in results for i in r.impls):
        paths["summary"] = out_dir / "summary.md"
        paths["summary"].write_text(render_summary(meta, results))
    try:
        plot_png(paths["png"], meta, results)
    except ImportError as exc:
        del paths["png"]
        print(f"plot skipped ({exc}); render later with: cubridge bench --render "
              f"{paths['json']}")
    return paths
