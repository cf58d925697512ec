"""Static allow-list check of generated code, before it runs.

Generated CuIR may import only cubridge.ir (and its submodules), torch (and
torch.nn.functional) and math, and may not reach files, the network or other
processes: no open/exec/eval/compile/__import__/globals/locals/vars, no
getattr & co. with a computed name, no dunder attributes or names (except
`super().__init__`-style calls, `__name__` and `__all__`), no string literal naming a
dunder (which str.format could reach), no private or I/O parts of torch
(torch.load, torch.hub, torch.utils, torch._C...), private attributes only on
self/cls, no numpy file methods (tofile, dump...), and imported modules may
only be used as `module.name`, never passed around. This is a first line of
defence and a precise message for the model; the sandbox process is the
second (sandbox/process.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cubridge.llm.errors import StaticCheckError

# Module -> whether its submodules are allowed too ("*" matches one name part).
# Besides the IR, a program may subclass a library kernel's CuIR and use the
# interval arithmetic of block classification: what the rules transfer's own
# target_cuir.py imports.
CUIR_MODULES: Mapping[str, bool] = {
    "cubridge.ir": True,
    "cubridge.kernels.*.cuir": False,
    "cubridge.transfer.interval": False,
    "torch": False,
    "torch.nn.functional": False,
    "math": False,
    "__future__": False,
}

# Builtins that reach files, code or namespaces.
FORBIDDEN_BUILTINS = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
)
# Builtins that take an attribute name: allowed only with a literal, checked like `x.name`.
NAME_TAKING_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
# Attributes of torch that read or write files, load code, or leave the CPU tile world.
TORCH_FORBIDDEN = frozenset(
    {
        "load", "save", "hub", "utils", "ops", "library", "cuda", "classes", "jit", "compile",
        "from_file", "backends", "distributed", "multiprocessing", "package", "export", "onnx",
        "profiler", "serialization", "storage", "UntypedStorage", "TypedStorage", "compiler",
        "fx", "set_default_device", "mps", "xpu", "testing",
    }
)  # fmt: skip
# Attribute names that would reach a dangerous module through another module.
MODULE_ATTRIBUTES_FORBIDDEN = frozenset(
    {
        "os", "sys", "subprocess", "socket", "shutil", "pathlib", "importlib", "ctypes",
        "pickle", "builtins", "io", "multiprocessing", "threading", "signal", "inspect",
        "urllib", "http", "tempfile", "glob", "runpy", "marshal", "torch", "resource", "mmap",
        # Methods that read or write files behind the audit hook's back (numpy's C I/O).
        "numpy", "tofile", "fromfile", "dump", "memmap",
    }
)  # fmt: skip
# Private attributes (`_name`) are allowed on these only: the program's own state.
OWN = frozenset({"self", "cls"})
_DUNDER = re.compile(r"__\w+__")


def _module_matches(name: str, pattern: str, subs: bool) -> bool:
    """`name` is `pattern` (each "*" one dotted part), or below it when `subs`."""
    parts, want = name.split("."), pattern.split(".")
    if len(parts) < len(want) or (len(parts) > len(want) and not subs):
        return False
    pairs = zip(parts[: len(want)], want, strict=True)
    return all(w in ("*", p) and (w != "*" or p.isidentifier()) for p, w in pairs)


@dataclass
class _Checker(ast.NodeVisitor):
    modules: Mapping[str, bool]
    problems: list[tuple[int, str]] = field(default_factory=list)
    # Local names bound to torch modules: they may only be used as `name.attr`,
    # so that the torch attribute checks cannot be dodged by aliasing.
    module_aliases: dict[str, str] = field(default_factory=dict)
    # `import cubridge.ir` binds `cubridge`: only the imported path may follow it.
    package_roots: dict[str, set[str]] = field(default_factory=dict)

    def flag(self, node: ast.AST, message: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), message))

    def allowed_module(self, name: str) -> bool:
        return any(_module_matches(name, mod, subs) for mod, subs in self.modules.items())

    def allowed_list(self) -> str:
        return ", ".join(m for m in self.modules if m != "__future__")

    def add_alias(self, name: str, module: str | None) -> None:
        module = module or name
        if module == "torch" or module.startswith("torch."):
            self.module_aliases[name] = module

    # -- imports --

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self.allowed_module(alias.name):
                self.flag(
                    node,
                    f"import of {alias.name!r} is not allowed "
                    f"(generated code may import only {self.allowed_list()})",
                )
            elif alias.asname:
                self.add_alias(alias.asname, alias.name)
            else:  # `import torch.nn.functional` binds `torch`
                root, _, rest = alias.name.partition(".")
                self.add_alias(root, None)
                if rest and root != "torch":
                    self.package_roots.setdefault(root, set()).add(rest.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, "relative imports are not allowed")
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if alias.name == "*":
                self.flag(node, f"'from {module} import *' is not allowed: import names explicitly")
            elif self.allowed_module(full):
                self.add_alias(alias.asname or alias.name, full)
            elif not self.allowed_module(module):
                self.flag(
                    node,
                    f"import from {module!r} is not allowed "
                    f"(generated code may import only {self.allowed_list()})",
                )
            elif module == "torch":
                self.check_torch_attribute(node, alias.name)
        self.generic_visit(node)

    # -- names and attributes --

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self.flag(node, f"{node.id}() is not allowed (no file, code or namespace access)")
        elif _DUNDER.fullmatch(node.id) and node.id not in ("__name__", "__all__"):
            self.flag(node, f"the name {node.id} is not allowed")
        elif node.id in self.module_aliases and not self._is_attribute_value(node):
            self.flag(
                node,
                f"the module {node.id!r} may only be used as {node.id}.<name>, not passed around",
            )

    def _is_attribute_value(self, node: ast.Name) -> bool:
        parent = getattr(node, "parent", None)
        return isinstance(parent, ast.Attribute) and parent.value is node

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.check_attribute(node, node.value, node.attr)
        self.generic_visit(node)

    def check_attribute(self, node: ast.AST, value: ast.AST, attr: str) -> None:
        if isinstance(value, ast.Name) and value.id in self.package_roots:
            if attr not in self.package_roots[value.id]:
                self.flag(node, f"{value.id}.{attr} was not imported (only the imported module)")
                return
        if _DUNDER.fullmatch(attr):
            if not _is_super_call(value):
                self.flag(node, f"access to the attribute {attr} is not allowed")
            return
        if attr in MODULE_ATTRIBUTES_FORBIDDEN:
            self.flag(node, f"access to the attribute {attr!r} is not allowed")
            return
        if isinstance(value, ast.Name) and self.module_aliases.get(value.id) == "torch":
            self.check_torch_attribute(node, attr)
        elif attr.startswith("_") and not (isinstance(value, ast.Name) and value.id in OWN):
            self.flag(node, f"the private attribute {attr!r} is allowed only on self or cls")

    def check_torch_attribute(self, node: ast.AST, attr: str) -> None:
        if attr.startswith("_") or attr in TORCH_FORBIDDEN:
            self.flag(node, f"torch.{attr} is not allowed (no file, device or private torch APIs)")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in NAME_TAKING_BUILTINS:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(node, f"{func.id}() with a computed attribute name is not allowed")
            elif node.args:
                self.check_attribute(node, node.args[0], name.value)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _DUNDER.search(node.value):
            self.flag(node, "a string naming a dunder attribute is not allowed")


def _is_super_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def check_source(
    source: str, *, filename: str = "<generated>", modules: Mapping[str, bool] = CUIR_MODULES
) -> None:
    """Raise StaticCheckError listing every violation, each with its line."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        text = f": {exc.text.strip()}" if exc.text else ""
        raise StaticCheckError(
            f"{filename} is not valid Python: {where}: {exc.msg}{text}",
            [(exc.lineno or 0, f"invalid Python: {exc.msg}")],
        ) from None
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]
    checker = _Checker(modules)
    checker.visit(tree)
    if checker.problems:
        problems = sorted(set(checker.problems))
        lines = "\n".join(f"  {filename} line {line}: {msg}" for line, msg in problems)
        raise StaticCheckError(
            f"{filename} failed the static check ({len(problems)} problem(s)):\n{lines}", problems
        )
