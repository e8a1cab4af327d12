"""The package and its tests import only what ``pyproject.toml`` declares (core + ``test``)."""

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# imported only behind importorskip / try-except, for the optional extras (jax backend, peers)
OPTIONAL = {"jax", "jaxlib", "numpyro", "blackjax", "diffrax", "nbformat", "nbclient"}


def _imports(paths) -> set[str]:
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _closure(dist: str, extras: set[str]) -> set[str]:
    """Distributions installed because ``dist[extras]`` was: its requirements, recursively."""
    seen, todo = set(), [(dist, extras)]
    while todo:
        name, wanted = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for req in reqs:
            marker = req.split(";", 1)[1] if ";" in req else ""
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if extra and extra.group(1) not in wanted:
                continue
            sub = re.search(r"\[([^\]]+)\]", req.split(";", 1)[0])
            todo.append((_requirement_name(req), set(sub.group(1).split(",")) if sub else set()))
    return seen


def test_everything_imported_is_declared():
    imported = _imports([*ROOT.glob("pymc_wendy/*.py"), *ROOT.glob("tests/*.py")])
    third_party = imported - set(sys.stdlib_module_names) - {"pymc_wendy", "conftest"} - OPTIONAL
    third_party -= {p.stem for p in ROOT.glob("tests/*.py")}
    provided = {d.lower().replace("_", "-") for d in _closure("pymc-wendy", {"test"})}
    owners = md.packages_distributions()
    missing = {
        mod: owners.get(mod)
        for mod in sorted(third_party)
        if not any(o.lower().replace("_", "-") in provided for o in owners.get(mod, []))
    }
    assert not missing, f"imported but not declared (module: distributions): {missing}"


def test_the_coverage_module_of_earlier_releases_still_imports():
    """``import pymc_wendy.coverage`` failed after the move to ``pymc_wendy.studies`` (issue
    54); it is that module, the one ``pw.coverage`` names."""
    import pymc_wendy as pw
    import pymc_wendy.coverage as old
    from pymc_wendy.studies import coverage

    assert old is coverage is pw.coverage
    assert old.run_coverage is pw.run_coverage
