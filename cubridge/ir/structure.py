"""Printing and structural diff of CuIR programs.

`outline(cls)` reads a kernel class (its own methods and the ones it
inherits from other kernels) into roles: setup (`__init__`, `grid`, `run`),
workers (methods bound in `run`), hooks and helpers, each with the primitives
it calls. `diff_kernels(a, b)` compares two kernels method by method on their
syntax trees (comments, docstrings and formatting do not count) and says
whether every difference stays inside the hook points: such a transfer lowers
deterministically (hook header generation); anything else needs LLM lowering.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cubridge.ir.hooks import HookDefaults
from cubridge.ir.kernel import KernelBase
from cubridge.modules import load_module_from_path

HOOK_METHODS = ("score_mod", "mask_mod", "activation", "kv_block_range", "block_kind")
HOOK_ATTRIBUTES = ("normalizer", "aux_names", "empty_row_score", "has_score_mod",
                   "has_mask_mod")
SETUP_METHODS = ("__init__", "grid", "run")
PRIMITIVES = frozenset({
    "alloc", "copy", "copy_async", "copy_commit", "copy_wait", "load", "store", "gemm",
    "gemm_async", "commit", "wait_group", "barrier", "barriers", "named_barrier",
    "sync_threads", "bind", "arrive", "arrive_expect_tx", "expect_tx", "wait", "try_wait",
    "sync", "kv_blocks", "apply_score_hooks", "advance",
})


def load_kernels(path: str | Path) -> list[type[KernelBase]]:
    """Import a Python file and return the KernelBase subclasses it defines,
    in source order. Raises ValueError when it defines none."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        module = load_module_from_path(path, prefix="cubridge_cuir")
    except Exception as e:
        raise ValueError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    found = [c for c in vars(module).values() if inspect.isclass(c)
             and issubclass(c, KernelBase) and c.__module__ == module.__name__]
    if not found:
        raise ValueError(f"{path}: defines no KernelBase subclass")
    return sorted(found, key=lambda c: inspect.getsourcelines(c)[1])


def pick_kernel(path: str | Path, class_name: str | None = None) -> type[KernelBase]:
    kernels = load_kernels(path)
    if class_name is not None:
        for c in kernels:
            if c.__name__ == class_name:
                return c
        raise ValueError(f"{path}: no kernel class {class_name!r} (has "
                         f"{', '.join(c.__name__ for c in kernels)})")
    if len(kernels) > 1:
        raise ValueError(f"{path}: several kernels ({', '.join(c.__name__ for c in kernels)}); "
                         "choose one with --class")
    return kernels[0]


@dataclass
class MethodOutline:
    name: str
    role: str  # setup | worker | hook | helper
    defined_in: str
    file: str
    line: int
    calls: list[tuple[int, str]] = field(default_factory=list)  # (line, source text)
    tree: str = ""  # normalised syntax tree, for diffs


@dataclass
class KernelOutline:
    name: str
    bases: list[str]
    attributes: dict[str, Any]
    config: dict[str, Any]
    methods: dict[str, MethodOutline]


def _own_methods(cls: type) -> dict[str, tuple[type, Any]]:
    """Methods a kernel defines or inherits from kernel classes (not from
    KernelBase itself), plus hook methods it overrides."""
    out: dict[str, tuple[type, Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, KernelBase, HookDefaults) or not issubclass(klass, HookDefaults):
            continue
        for name, fn in vars(klass).items():
            if inspect.isfunction(fn):
                out[name] = (klass, fn)
    return out


def _tree(fn: Any) -> tuple[ast.FunctionDef, str]:
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
    return node, ast.dump(node, include_attributes=False)  # type: ignore[return-value]


def _bound_workers(run_fn: Any) -> set[str]:
    node, _ = _tree(run_fn)
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                and call.func.attr == "bind" and call.args:
            target = call.args[0]
            if isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


def outline(cls: type[KernelBase]) -> KernelOutline:
    methods = _own_methods(cls)
    workers = _bound_workers(methods["run"][1]) if "run" in methods else set()
    out: dict[str, MethodOutline] = {}
    for name, (klass, fn) in methods.items():
        role = ("setup" if name in SETUP_METHODS else "worker" if name in workers
                else "hook" if name in HOOK_METHODS else "helper")
        node, dump = _tree(fn)
        lines, start = inspect.getsourcelines(fn)
        hit = sorted({c.lineno for c in ast.walk(node) if isinstance(c, ast.Call)
                      and isinstance(c.func, ast.Attribute) and c.func.attr in PRIMITIVES})
        calls = [(start + i - 1, lines[i - 1].strip()) for i in hit]
        out[name] = MethodOutline(name, role, klass.__name__, inspect.getsourcefile(fn) or "?",
                                  start, calls, dump)
    attributes = {a: getattr(cls, a) for a in ("arch", "normalizer", "aux_names")}
    if cls.empty_row_score is not None:  # (a floor mask's targets only)
        attributes["empty_row_score"] = cls.empty_row_score
    for a in ("has_score_mod", "has_mask_mod"):
        if not isinstance(getattr(cls, a), property):
            attributes[a] = getattr(cls, a)
    config = {}
    if "__init__" in methods:
        for p in inspect.signature(methods["__init__"][1]).parameters.values():
            if p.name != "self" and p.default is not inspect.Parameter.empty:
                config[p.name] = p.default
    return KernelOutline(cls.__name__, [b.__name__ for b in cls.__bases__], attributes, config,
                         out)


ROLE_ORDER = ("setup", "worker", "hook", "helper")


def show(cls: type[KernelBase]) -> str:
    """A readable outline of a kernel: attributes, config, and each method by
    role with its lines that call primitives (the synchronisation skeleton)."""
    o = outline(cls)
    lines = [f"kernel {o.name}({', '.join(o.bases)})"]
    for k, v in o.attributes.items():
        lines.append(f"  {k} = {v!r}")
    if o.config:
        lines.append("  config: " + ", ".join(f"{k}={v!r}" for k, v in o.config.items()))
    for role in ROLE_ORDER:
        for m in (m for m in o.methods.values() if m.role == role):
            inherited = f" (from {m.defined_in})" if m.defined_in != o.name else ""
            lines.append(f"  {role} {m.name}{inherited}  [{Path(m.file).name}:{m.line}]")
            for line, text in m.calls:
                lines.append(f"      {line:5d}  {text}")
    return "\n".join(lines)


@dataclass
class KernelDiff:
    a: str
    b: str
    added: list[str]
    removed: list[str]
    changed: list[str]
    attributes: dict[str, tuple[Any, Any]]  # name -> (in a, in b)
    config: dict[str, tuple[Any, Any]]
    roles: dict[str, str]

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed or self.attributes or self.config)

    @property
    def hooks_only(self) -> bool:
        """True when every difference is a hook method or hook attribute: the
        change lowers by generating the hook header alone."""
        methods_ok = all(n in HOOK_METHODS for n in self.added + self.removed + self.changed)
        attrs_ok = all(n in HOOK_ATTRIBUTES for n in self.attributes)
        return methods_ok and attrs_ok and not self.config

    def __str__(self) -> str:
        lines = [f"diff {self.a} -> {self.b}"]
        if self.identical:
            return lines[0] + "\n  identical structure\n  change stays inside hooks: yes"
        for label, names in (("added", self.added), ("removed", self.removed),
                             ("changed", self.changed)):
            for n in names:
                lines.append(f"  {label} method {n} ({self.roles.get(n, 'helper')})")
        for n, (x, y) in self.attributes.items():
            lines.append(f"  attribute {n}: {x!r} -> {y!r}")
        for n, (x, y) in self.config.items():
            lines.append(f"  config {n}: {x!r} -> {y!r}")
        verdict = "yes (deterministic hook lowering)" if self.hooks_only else \
            "no (workers, buffers or barriers change: LLM lowering)"
        lines.append(f"  change stays inside hooks: {verdict}")
        return "\n".join(lines)


def diff_kernels(a: type[KernelBase], b: type[KernelBase]) -> KernelDiff:
    """Structural diff of two kernels (methods compared on syntax trees)."""
    oa, ob = outline(a), outline(b)
    names_a, names_b = set(oa.methods), set(ob.methods)
    changed = sorted(n for n in names_a & names_b if oa.methods[n].tree != ob.methods[n].tree)
    roles = {n: m.role for n, m in {**oa.methods, **ob.methods}.items()}
    attrs = {k: (oa.attributes.get(k), ob.attributes.get(k))
             for k in sorted(set(oa.attributes) | set(ob.attributes))
             if oa.attributes.get(k) != ob.attributes.get(k)}
    config = {k: (oa.config.get(k), ob.config.get(k))
              for k in sorted(set(oa.config) | set(ob.config))
              if oa.config.get(k) != ob.config.get(k)}
    return KernelDiff(oa.name, ob.name, sorted(names_b - names_a), sorted(names_a - names_b),
                      changed, attrs, config, roles)
