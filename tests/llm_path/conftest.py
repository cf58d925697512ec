"""Fixtures of the stage tests: the LLM tests' local HTTP server (tests/llm/llm_fakes.py)."""

import sys
from pathlib import Path

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_fakes import llm_server  # noqa: E402, F401
