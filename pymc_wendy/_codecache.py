"""Generated Python modules kept on disk, so numba's cache can hold what they compile.

numba caches a compiled function on disk by its source file; code generated per model (the
weak likelihood's kernels, the forward solver's right-hand sides) gets one by being written to
a module here (:func:`load_module`), named by the digest of its source, and compiled with
``cache=True``: a second process with the same model loads the machine code. A closure over
generated functions could not be cached: numba keys a closure's cache entry on its pickled
cells, which for a numba function include a per-process id.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

#: the first lines of every generated module: generated code calls ``math.``, ``numpy.`` and
#: ``np.`` functions, and is compiled by numba
IMPORTS = ("import math", "", "import numba", "import numpy", "import numpy as np")


def jitted(name: str, source: str) -> list[str]:
    """Lines that define ``name`` as the numba-compiled (disk-cached) function of ``source``, a
    generated ``def`` (:func:`pymc_wendy.model.codegen.generate`) whose own name is replaced."""
    src = re.sub(r"^def \w+\(", f"def _{name}_source(", source, count=1)
    return ["", "", src.rstrip(), f"{name} = numba.njit(cache=True)(_{name}_source)"]


def sources(*functions) -> dict[str, str]:
    """``{name: source}`` of template ``functions``, read when called.

    A template module calls this at import, so the code a process generates is the code it
    imported even if the file changes on disk while it runs (an upgrade, an edit during a
    long study): :func:`inspect.getsource` reads the file at call time, and a later read
    could pair the old line numbers with the new text."""
    return {fn.__name__: inspect.getsource(fn).rstrip() for fn in functions}


def cache_dir() -> Path:
    """Where generated modules (compiled kernels, forward solvers) and their machine code live.

    ``$PYMC_WENDY_CACHE_DIR`` if set, else ``pymc_wendy_kernels`` in ``$NUMBA_CACHE_DIR`` if
    that is set, else ``pymc_wendy/kernels`` in the user's cache directory
    (``$XDG_CACHE_HOME`` or ``~/.cache``). Deleting it is safe: kernels are compiled again.
    """
    if os.environ.get("PYMC_WENDY_CACHE_DIR"):
        return Path(os.environ["PYMC_WENDY_CACHE_DIR"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]) / "pymc_wendy_kernels"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pymc_wendy" / "kernels"


@functools.cache
def _fallback_dir() -> Path:
    """One temporary directory per process for kernels when the cache cannot be written."""
    return Path(tempfile.mkdtemp(prefix="pymc_wendy_kernels_"))


def load_module(source: str, prefix: str) -> ModuleType:
    """Write ``source`` to :func:`cache_dir` (once; the name is ``prefix`` and its digest) and
    import it.

    The file is written atomically, so processes of a study starting together do not read a
    half-written module. Where the cache directory cannot be written the module goes to a
    temporary directory: correct, compiled once per process."""
    name = prefix + hashlib.sha256(source.encode()).hexdigest()[:24]
    if name in sys.modules:
        return sys.modules[name]
    for directory in (cache_dir(), None):
        try:
            if directory is None:
                directory = _fallback_dir()
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{name}.py"
            if not path.exists() or path.read_text() != source:
                fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
                with os.fdopen(fd, "w") as fh:
                    fh.write(source)
                os.replace(tmp, path)
            break
        except OSError:
            continue
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache looks functions up by their module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a later call tries again instead of finding half a module
        raise
    return module
