"""The fa_sm90 bench scripts (bench/kernels/fa_sm90/*.py) as modules for tests: they
are scripts, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_fa_sm90_script(name: str) -> ModuleType:
    """bench/kernels/fa_sm90/NAME.py as a module (the scripts are not a package)."""
    path = Path(__file__).parents[2] / "bench" / "kernels" / "fa_sm90" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up while it executes)
    spec.loader.exec_module(module)
    return module
