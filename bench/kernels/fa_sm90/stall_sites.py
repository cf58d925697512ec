"""Where an untraced kernel's warps stall, by CUDA call site.

ncu's source counters give warp stall samples per SASS instruction; nvdisasm's inline
line info (`-gi`) gives each instruction's chain of inlined calls. Joined, every
sample lands on the kernel source's innermost line and the line that called it (an
`mbar_wait` is told apart by where it was called from), and on the role whose branch
of the kernel it runs in (fa_sm90's producer or consumers). The tile trace answers the
same question on a build its stamps slow by 13-22%; this reads the build as it runs.

    ncu --section SourceCounters -k regex:fa_sm90 -c 1 -o rep python driver.py
    ncu -i rep.ncu-rep --page source --csv --print-source sass | gzip > sass.csv.gz
    python bench/kernels/fa_sm90/stall_sites.py sass.csv.gz --cubin kernel.cubin [--top 30]

The cubin must be the profiled build (`variant_ab.py --compile-only` or the cache
`cubridge run` filled); `--source` is the kernel source it was built from (default:
the library's fa_sm90.cu). nvdisasm comes with the CUDA toolkit (the device image).
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

LOCATION = re.compile(r'\s*//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;?\s*$")
ROLE_CALLS = {"producer": "producer(P, sh,", "consumer": "consumer(P, sh,"}
DEFAULT_SOURCE = (Path(__file__).resolve().parents[3] / "cubridge" / "kernels" / "fa_sm90"
                  / "fa_sm90.cu")


def inline_chains(disassembly: str, source_name: str) -> dict[int, list[int]]:
    """SASS offset -> the lines of `source_name` in its inline chain, innermost first
    (nvdisasm -gi prints a chain before each instruction whose location changes)."""
    chains: dict[int, list[int]] = {}
    pending: list[tuple[str | None, ...]] = []
    current: list[int] = []
    for line in disassembly.splitlines():
        if m := LOCATION.match(line):
            pending.append(m.groups())
        elif m := INSTRUCTION.match(line):
            if pending:
                current = []
                for file, n, caller_file, caller_n in pending:
                    for f, k in ((file, n), (caller_file, caller_n)):
                        if f and Path(f).name == source_name and int(k) not in current:
                            current.append(int(k))
                pending = []
            chains[int(m.group(1), 16)] = current
    return chains


def stall_samples(csv_text: str) -> list[tuple[int, int]]:
    """(SASS offset from the function's start, warp stall samples) per instruction of
    `ncu --page source --csv --print-source sass`."""
    rows = [r for r in csv.reader(io.StringIO(csv_text)) if r]
    header_at = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header_at is None:
        raise ValueError("not ncu's SASS source page: no 'Address' / 'Source' header")
    header, data = rows[header_at], rows[header_at + 1:]
    ix = {h: i for i, h in enumerate(header)}
    column = "Warp Stall Sampling (All Samples)"
    if column not in ix:
        raise ValueError(f"no {column!r} column: profile with --section SourceCounters")
    base = int(data[0][ix["Address"]], 16)
    return [(int(r[ix["Address"]], 16) - base, int((r[ix[column]] or "0").replace(",", "")))
            for r in data]


def role_lines(source: str) -> dict[str, int]:
    """The line of each role's call in the kernel's entry (1-based)."""
    lines = source.splitlines()
    found = {role: next((i + 1 for i, text in enumerate(lines) if call in text), None)
             for role, call in ROLE_CALLS.items()}
    return {role: n for role, n in found.items() if n is not None}


def attribute(chains: dict[int, list[int]], samples: list[tuple[int, int]],
              roles: dict[str, int]) -> tuple[collections.Counter, collections.Counter, int]:
    """Samples per (role, call site line, caller line) and per role, and the total."""
    sites: collections.Counter = collections.Counter()
    by_role: collections.Counter = collections.Counter()
    total = 0
    for offset, n in samples:
        chain = chains.get(offset, [])
        role = next((r for r, line in roles.items() if line in chain), "entry")
        site = chain[0] if chain else 0
        caller = chain[1] if len(chain) > 1 else 0
        sites[role, site, caller] += n
        by_role[role] += n
        total += n
    return sites, by_role, total


def report(sites: collections.Counter, by_role: collections.Counter, total: int,
           source: str, top: int) -> str:
    lines = source.splitlines()

    def text(n: int) -> str:
        return f"{n}: `{lines[n - 1].strip()[:70]}`" if 0 < n <= len(lines) else "-"

    out = [f"{total} warp stall samples; by role: " + ", ".join(
        f"{r} {n / total:.1%}" for r, n in by_role.most_common()), "",
        "| share | role | call site | called from |", "|---|---|---|---|"]
    for (role, site, caller), n in sites.most_common(top):
        out.append(f"| {n / total:.2%} | {role} | {text(site)} | {text(caller)} |")
    return "\n".join(out)


def _read(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass_csv", type=Path,
                    help="ncu --page source --csv --print-source sass (.gz ok)")
    ap.add_argument("--cubin", type=Path, required=True, help="the profiled build")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                    help="the kernel source the cubin was built from")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    try:
        disassembly = subprocess.run([args.nvdisasm, "-c", "-gi", str(args.cubin)],
                                     capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"nvdisasm failed on {args.cubin} ({exc}); pass --nvdisasm PATH")
    try:
        source = args.source.read_text()
        samples = stall_samples(_read(args.sass_csv))
    except (OSError, ValueError) as exc:
        sys.exit(f"stall_sites: {exc}")
    chains = inline_chains(disassembly, args.source.name)
    if len(samples) != len(chains):
        sys.exit(f"{args.sass_csv} has {len(samples)} instructions, {args.cubin} "
                 f"{len(chains)}: not the profiled build")
    print(report(*attribute(chains, samples, role_lines(source)), source, args.top))


if __name__ == "__main__":
    main()
