"""Fixtures of the LLM tests (defined in llm_fakes.py)."""

from llm_fakes import llm_server  # noqa: F401
