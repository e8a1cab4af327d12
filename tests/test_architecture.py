"""The package structure stays as docs/architecture.md describes it.

Static checks over the library's source (no imports of it except for the public-namespace
check): the packages depend on each other in one direction, no module imports another in a
circle, no private name crosses a package boundary, and functions stay short.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import pymc_wendy

ROOT = pathlib.Path(pymc_wendy.__file__).parent

#: what each package may import (besides itself and the shared private modules at the top,
#: ``_validation``, ``_threads``, ``_progress``); docs/architecture.md draws the same picture
LAYERS = {
    "model": set(),
    "weak": {"model"},
    "backends": {"model", "weak"},
    "estimators": {"model", "weak", "backends"},
    "problems": {"model"},
    "bayes": {"model", "weak", "backends", "estimators", "problems"},
    "studies": {"model", "weak", "backends", "estimators", "problems", "bayes"},
}
SHARED = {"_validation", "_threads", "_progress", "_codecache"}

#: functions between 60 and 100 lines of code must say why in a comment starting with this
LONG_MARK = "# long:"
MAX_LINES = 100
JUSTIFY_LINES = 60


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), filename=str(path))
    return out


MODULES = _modules()


def _package(module: str) -> str:
    """``pymc_wendy.weak.kernels`` -> ``weak``; top-level modules are their own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(module: str, tree: ast.Module):
    """``(target module, imported names, lineno)`` of every run-time import of the library."""
    skip = _type_checking_nodes(tree)
    is_pkg = (ROOT.parent / module.replace(".", "/") / "__init__.py").exists()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent[: len(parent) - node.level + (1 if is_pkg else 0)]
                base = ".".join(parent + ([base] if base else []))
            if not base.startswith("pymc_wendy"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in MODULES else base
                yield target, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pymc_wendy"):
                    yield alias.name, None, node.lineno


def _edges():
    for module, tree in MODULES.items():
        for target, name, line in _imports(module, tree):
            yield module, target, name, line


def test_packages_depend_in_one_direction():
    bad = []
    for module, target, _, line in _edges():
        src, dst = _package(module), _package(target)
        if src in LAYERS and dst in LAYERS and dst != src and dst not in LAYERS[src]:
            bad.append(f"{module}:{line} imports {target} ({src} may not depend on {dst})")
        if src in SHARED and dst not in ("", src):
            bad.append(f"{module}:{line}: shared module imports {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, target, _, _ in _edges():
        # a package's __init__ re-exports its modules; an import of the package from inside
        # it is an import of what it re-exports, which the module-level edges already show
        if target != module and not module.startswith(target + "."):
            graph[module].add(target)
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_private_names_across_packages():
    bad = []
    for module, target, name, line in _edges():
        if _package(module) == _package(target):
            continue
        private_module = any(p.startswith("_") for p in target.split(".")[1:])
        if (name and name.startswith("_")) or (
            private_module and target.split(".")[-1] not in SHARED
        ):
            bad.append(f"{module}:{line} imports {name or ''} from {target}")
    assert not bad, "\n".join(bad)


def _private_attribute_reads(tree: ast.Module) -> list[tuple[int, str]]:
    """``obj._name`` reads where ``obj`` is not ``self``/``cls`` and ``_name`` is not defined
    in the module itself (a class reading another instance of itself is fine): reads of
    another module's private attributes."""
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in defined:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_private_attributes_read_across_modules():
    bad = [
        f"{module}:{line} {expr}"
        for module, tree in MODULES.items()
        for line, expr in _private_attribute_reads(tree)
    ]
    assert not bad, "\n".join(bad)


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    body = fn.body
    start = body[0]
    if isinstance(start, ast.Expr) and isinstance(getattr(start, "value", None), ast.Constant):
        body = body[1:]
    if not body:
        return 0
    first, last = body[0].lineno, fn.end_lineno
    code = [ln.strip() for ln in lines[first - 1 : last]]
    return sum(1 for ln in code if ln and not ln.startswith("#"))


def test_noise_names_are_compared_only_by_the_observation_models():
    """A noise model is an object (model/observation.py); code elsewhere asks it (``log_scale``,
    ``per_entry``, ``scaled``, its methods) instead of comparing its name (issue 56)."""
    names = {"normal", "lognormal", "proportional", "combined", "poisson", "negbinomial"}
    offenders = []
    for path in ROOT.rglob("*.py"):
        if path.name == "observation.py" or "_generated" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            consts = [
                c.value
                for o in operands
                for c in ([o] if not isinstance(o, ast.Tuple) else o.elts)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            if names & set(consts):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_functions_are_short():
    too_long, unexplained = [], []
    for path in sorted(ROOT.rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            n = _code_lines(fn, lines)
            where = f"{path.relative_to(ROOT.parent)}:{fn.lineno} {fn.name} ({n} lines)"
            if n > MAX_LINES:
                too_long.append(where)
            elif n > JUSTIFY_LINES:
                head = lines[max(fn.lineno - 3, 0) : fn.body[0].lineno + 2]
                if not any(LONG_MARK in ln for ln in head):
                    unexplained.append(where)
    assert not too_long, "over 100 lines:\n" + "\n".join(too_long)
    assert not unexplained, f"over 60 lines without a '{LONG_MARK}' comment:\n" + "\n".join(
        unexplained
    )


def test_public_namespace_is_all():
    public = {n for n in dir(pymc_wendy) if not n.startswith("_")}
    assert public == set(pymc_wendy.__all__)
    missing = [n for n in pymc_wendy.__all__ if not hasattr(pymc_wendy, n)]
    assert not missing


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_package_all_names_exist(package):
    mod = __import__(f"pymc_wendy.{package}", fromlist=["__all__"])
    assert all(hasattr(mod, n) for n in getattr(mod, "__all__", ()))


def _doc_blocks(name: str) -> list[str]:
    import re

    text = (ROOT.parent / "docs" / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_worked_example_new_estimator(monkeypatch):
    """docs/architecture.md: an estimator registered from user code runs through ``fit``."""
    import numpy as np

    from pymc_wendy.estimators import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    namespace: dict = {}
    exec(_doc_blocks("architecture.md")[0], namespace)  # noqa: S102
    res, P = namespace["res"], namespace["P"]
    assert res.method == "gls1" and res.success and "gls1" in registry.names()
    assert np.all(np.abs(res.x - P.p_true) < 4 * res.stderr)
    # one GLS step from weak least squares lands near the converged IRLS estimate
    irls = namespace["pw"].fit(P.model, namespace["data"].t, namespace["data"].U, method="irls")
    assert np.all(np.abs(res.x - irls.x) < 0.5 * irls.stderr)


def test_worked_example_new_test_function_family(monkeypatch):
    """docs/architecture.md: a family registered from user code serves ``fit``."""
    import numpy as np

    from pymc_wendy.weak.test_functions import families

    monkeypatch.setattr(families, "_REGISTRY", dict(families._REGISTRY))
    namespace: dict = {}
    exec(_doc_blocks("architecture.md")[1], namespace)  # noqa: S102
    res, P = namespace["res"], namespace["P"]
    assert res.success and res.likelihood.test_functions.family.name == "poly_bump"
    assert np.all(np.abs(res.x - P.p_true) < 4 * res.stderr)


#: modules whose functions numba compiles by call or from a generated module, not by decorator
COMPILED_MODULES = {
    "pymc_wendy.model.dopri",
    "pymc_wendy.model.solver_templates",
    "pymc_wendy.backends.kernel_templates",
}


def _compiled(fn: ast.FunctionDef, module: str) -> bool:
    decorators = " ".join(ast.unparse(d) for d in fn.decorator_list)
    return module in COMPILED_MODULES or "njit" in decorators or "cfunc" in decorators


def _array_slice_assignments(fn: ast.FunctionDef) -> list[int]:
    """Lines of ``a[i:j] = b`` (or ``+=``) with ``b`` not a number."""
    lines = []
    for node in ast.walk(fn):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AugAssign) else []
        )  # fmt: skip
        value = getattr(node, "value", None)
        scalar = isinstance(value, ast.Constant) or (
            isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant)
        )
        for target in targets:
            if isinstance(target, ast.Subscript) and not scalar:
                if any(isinstance(n, ast.Slice) for n in ast.walk(target.slice)):
                    lines.append(node.lineno)
    return lines


def test_compiled_code_assigns_arrays_without_slices():
    """Numba compiles a formatted shape-mismatch message for each slice assignment of an
    array, 3-4.6 s per combination of dimensions with a cold cache (a loop: 0.15 s), which
    a fresh machine's first fit or demo pays (docs/performance.md, "A fresh machine")."""
    offenders = []
    for module, tree in MODULES.items():
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and _compiled(fn, module):
                offenders += [f"{module}:{line} {fn.name}" for line in _array_slice_assignments(fn)]
    assert not offenders, "slice assignments of arrays in compiled code:\n" + "\n".join(
        sorted(set(offenders))
    )
