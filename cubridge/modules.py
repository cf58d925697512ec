"""Loading a Python file as a module: spec files, `--impl FILE.py:func`
implementations, generated CuIR programs, run directories' kernel.py and
library entries' kernel.py all go through `load_module_from_path`."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def module_name_for(path: str | Path, prefix: str) -> str:
    """A stable module name for a file: the prefix, its stem and a hash of its path."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{prefix}_{stem}_{digest}"


def load_module_from_path(path: str | Path, name: str | None = None, *,
                          prefix: str = "cubridge_file") -> ModuleType:
    """Execute the Python file at `path` as a module named `name` (default: a
    stable name from `prefix` and the path) registered in sys.modules, since
    dataclasses and pickling look modules up by name. Whatever the file raises
    propagates unchanged (callers say where it came from); the half-imported
    module is then removed again."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    name = name or module_name_for(path, prefix)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
