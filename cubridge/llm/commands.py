"""`cubridge llm ...`: look at and try the LLM layer by hand.

cubridge llm config [--llm-* flags]    the resolved configuration, with each value's source
cubridge llm ask PROMPT --run-dir DIR  one exchange through the configured provider
cubridge llm log RUN_DIR               the exchanges of a run, with tokens and cost
cubridge llm pending RUN_DIR           manual-provider prompts still waiting for a reply
cubridge llm check FILE.py             the static sandbox check of generated CuIR
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cubridge.llm.client import LLMClient
from cubridge.llm.config import add_llm_arguments, config_from_args
from cubridge.llm.errors import LLMError
from cubridge.llm.request import Message, system, user
from cubridge.llm.sandbox.static_check import check_source
from cubridge.llm.transcript import read_exchanges


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("llm", help="the LLM layer: configuration, transcripts, checks")
    sub = parser.add_subparsers(dest="llm_command", metavar="ACTION", required=True)

    show = sub.add_parser("config", help="show the resolved LLM configuration")
    add_llm_arguments(show)
    show.set_defaults(func=_config)

    ask = sub.add_parser("ask", help="send one prompt through the configured provider")
    ask.add_argument("prompt", help="prompt file, or - for stdin")
    ask.add_argument("--system", metavar="FILE", help="system prompt file")
    ask.add_argument("--run-dir", type=Path, required=True, help="where the exchange is recorded")
    ask.add_argument("--stage", default="ask", help="stage name for the transcript (default: ask)")
    add_llm_arguments(ask)
    ask.set_defaults(func=_ask)

    log = sub.add_parser("log", help="list the LLM exchanges of a run directory")
    log.add_argument("run_dir", type=Path)
    log.set_defaults(func=_log)

    pending = sub.add_parser("pending", help="manual-provider prompts without a reply yet")
    pending.add_argument("run_dir", type=Path)
    pending.set_defaults(func=_pending)

    check = sub.add_parser("check", help="statically check generated CuIR (the sandbox allow-list)")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_check)


def _config(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except LLMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, source in config.sources.items():
        print(f"{name:24} = {getattr(config, name)!r:40}  ({source})")
    env = config.key_env
    if env is not None:
        state = "set" if os.environ.get(env) else "NOT set"
        print(f"{'api key':24} : environment variable {env} is {state} (value never shown)")
    return 0


def _ask(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.prompt == "-" else Path(args.prompt).read_text()
    messages: list[Message] = [system(Path(args.system).read_text())] if args.system else []
    messages.append(user(text))
    try:
        client = LLMClient.from_config(config_from_args(args), args.run_dir, args.stage)
        exchange = client.complete(messages)
    except LLMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(exchange.text)
    print(f"(recorded in {exchange.path})", file=sys.stderr)
    return 0


def _log(args: argparse.Namespace) -> int:
    exchanges = sorted(read_exchanges(args.run_dir / "llm"), key=lambda e: (e.stage, e.seq))
    if not exchanges:
        print(f"no LLM exchanges under {args.run_dir / 'llm'}")
        return 0
    tokens = 0
    cost = 0.0
    for e in exchanges:
        usage = e.reply.usage
        tokens += usage.total_tokens
        cost += e.cost_usd or 0.0
        verdict = "" if e.verification is None else f"  verified: {_verdict(e.verification)}"
        price = f"  ${e.cost_usd:.4f}" if e.cost_usd is not None else ""
        print(
            f"{e.stage:10} #{e.seq:04d}  {e.provider}/{e.model}  "
            f"{usage.input_tokens}+{usage.output_tokens} tok{price}  "
            f"{e.reply.latency_s:.1f}s{verdict}"
        )
    print(f"{len(exchanges)} exchanges, {tokens} tokens, ${cost:.4f} (priced exchanges only)")
    return 0


def _verdict(verification: object) -> str:
    if isinstance(verification, dict) and "ok" in verification:
        return "ok" if verification["ok"] else "rejected"
    return str(verification)[:40]


def _pending(args: argparse.Namespace) -> int:
    folder = args.run_dir / "llm" / "manual"
    waiting = [
        p
        for p in sorted(folder.glob("*.prompt.md"))
        if not p.with_name(p.name.replace(".prompt.md", ".reply.md")).exists()
    ]
    for prompt in waiting:
        reply = prompt.with_name(prompt.name.replace(".prompt.md", ".reply.md"))
        print(f"{prompt}\n  -> write the reply to {reply}")
    if not waiting:
        print(f"no prompts waiting under {folder}")
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        check_source(args.file.read_text(), filename=str(args.file))
    except LLMError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{args.file}: passes the static check")
    return 0
