"""The `cubridge` command. Each part owns its sub-commands in a `commands`
module with `register(subparsers)`; this file only wires them together."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that register sub-commands, in the order `cubridge --help` lists them.
COMMAND_MODULES = [
    "cubridge.pipeline.commands",
    "cubridge.pipeline.eval_commands",
    "cubridge.bench.commands",
    "cubridge.build.commands",
    "cubridge.ir.commands",
    "cubridge.doctor",
    "cubridge.llm.commands",
    "cubridge.spec.commands",
    "cubridge.lower.commands",
    "cubridge.llm_path.commands",
    "cubridge.mcp.commands",
    "cubridge.verify.commands",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cubridge",
        description="Turn a PyTorch attention spec into a fast, verified CUDA kernel.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
