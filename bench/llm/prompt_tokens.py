"""Prompt size per LLM stage, measured the way a user's run sends them:
`cubridge run SPEC` on the LLM path of a checkout, with the `command` provider
pointed at this script's answerer, which records every request and answers
from the recorded fixture replies (tests/fixtures/llm/<stage>_<spec>.md of the
measuring checkout). The first reply of each stage is deliberately rejected
(no code), so a feedback round is measured too.

    python bench/llm/prompt_tokens.py                       # this checkout
    python bench/llm/prompt_tokens.py --checkout /tmp/base  # another one (e.g. main
        # at 8441fdc: git archive 8441fdc | tar -x -C /tmp/base)
    python bench/llm/prompt_tokens.py --json out.json

Tokens are estimated as characters / 4 (cubridge.llm.Usage.estimate, what the
tool records for providers that report none); exact counts depend on the
model's tokenizer. Round 2 is the whole request of the first feedback round;
"new" is what it adds to round 1 (the rejected reply and the feedback), the
part an API with prompt caching bills at full price.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
REJECTED = "(a first reply without an answer, to measure a feedback round)"


def _tokens(chars: int) -> int:
    return -(-chars // 4)


def answer() -> int:
    """The command provider's side: record the request, then answer it."""
    request = json.loads(sys.stdin.read())
    messages = request["messages"]
    task = next(m["content"] for m in messages if m["role"] == "user")
    stage = "lower" if "# Task: lower" in task else "transfer"
    out = Path(os.environ["PROMPT_TOKENS_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    rounds = sum(1 for m in messages if m["role"] == "assistant") + 1
    (out / f"{stage}-{rounds}.json").write_text(json.dumps(request))
    if rounds == 1:
        print(REJECTED)
        return 0
    fixtures = Path(os.environ["PROMPT_TOKENS_FIXTURES"])
    print((fixtures / f"{stage}_{os.environ['PROMPT_TOKENS_SPEC']}.md").read_text())
    return 0


def measure(checkout: Path, spec: str, kernel: str, arch: str, work: Path) -> dict:
    out = work / spec
    env = {**os.environ, "PYTHONPATH": str(checkout), "PROMPT_TOKENS_OUT": str(out),
           "PROMPT_TOKENS_FIXTURES": str(checkout / "tests" / "fixtures" / "llm"),
           "PROMPT_TOKENS_SPEC": spec, "XDG_CONFIG_HOME": str(work / "no-config"),
           "CUBRIDGE_LLM_COMMAND_INPUT": "json"}
    cmd = [sys.executable, "-m", "cubridge.cli", "run", str(checkout / "examples" / "specs" /
                                                           f"{spec}.py"),
           "--kernel", kernel, "--arch", arch, "--out", str(work / f"run-{spec}"),
           "--llm-provider", "command", "--llm-command", f"{sys.executable} {HERE} --answer"]
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    result: dict = {"spec": spec, "kernel": kernel, "arch": arch, "exit": proc.returncode}
    for stage in ("transfer", "lower"):
        first, second = out / f"{stage}-1.json", out / f"{stage}-2.json"
        if not (first.is_file() and second.is_file()):
            result[stage] = None
            result["error"] = proc.stderr[-2000:]
            continue
        r1 = json.loads(first.read_text())["messages"]
        r2 = json.loads(second.read_text())["messages"]
        c1 = sum(len(m["content"]) for m in r1)
        c2 = sum(len(m["content"]) for m in r2)
        result[stage] = {"round1_tokens": _tokens(c1), "round2_tokens": _tokens(c2),
                         "round2_new_tokens": _tokens(c2 - c1),
                         "messages": [{"role": m["role"], "tokens": _tokens(len(m["content"]))}
                                      for m in r1]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--specs", nargs="+", default=["cosine", "mla"])
    parser.add_argument("--kernel", default="fa_sm80",
                        help="library kernel (the recorded fixtures' kernel)")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--commit", help="the checkout's commit, where it has no git metadata")
    args = parser.parse_args(argv)
    if args.answer:
        return answer()
    checkout = args.checkout.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                            capture_output=True, text=True).stdout.strip() or args.commit or "?"
    commit = args.commit or commit
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(checkout, s, args.kernel, args.arch, Path(tmp)) for s in args.specs]
    print(f"prompt tokens (chars / 4) per stage, checkout {checkout} ({commit}), "
          f"kernel {args.kernel}, {args.arch}")
    print("| spec | stage | round 1 | round 2 (whole request) | round 2 new |")
    print("|---|---|---|---|---|")
    for r in results:
        for stage in ("transfer", "lower"):
            s = r.get(stage)
            if s is None:
                print(f"| {r['spec']} | {stage} | (not reached: {r.get('error', '')[-200:]!r}) |")
                continue
            print(f"| {r['spec']} | {stage} | {s['round1_tokens']} | {s['round2_tokens']} | "
                  f"{s['round2_new_tokens']} |")
    if args.json:
        args.json.write_text(json.dumps({"checkout": str(checkout), "commit": commit,
                                         "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
