"""Generated Python modules kept on disk, so numba's cache can hold what they compile.

numba caches a compiled function on disk by its source file; code generated per model (the
weak likelihood's kernels, the forward solver's right-hand sides) gets one by being written to
a module here (:func:`load_module`), named by the digest of its source, and compiled with
``cache=True``: a second process with the same model loads the machine code. A closure over
generated functions could not be cached: numba keys a closure's cache entry on its pickled
cells, which for a numba function include a per-process id.

The modules are submodules of :mod:`pymc_wendy._generated`, whose ``__path__`` is the cache
directory: numba pickles a compiled function by its module's name, and a process that
unpickles it (PyMC's chain processes under "spawn" or "forkserver") imports the module from
there. A process whose cache directory cannot be written uses a temporary one and names it
in ``$_PYMC_WENDY_FALLBACK_DIRS``, which the processes it starts inherit.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
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

#: the package the generated modules belong to
PACKAGE = "pymc_wendy._generated"
_FALLBACK_ENV = "_PYMC_WENDY_FALLBACK_DIRS"


def jitted(name: str, source: str) -> list[str]:
    """Lines that define ``name`` as the numba-compiled (disk-cached) function of ``source``, a
    generated ``def`` (:func:`pymc_wendy.model.codegen.generate`) whose own name is replaced.

    Compiled with numpy's error model: a model's ``dose / V`` at a sampler's underflowed
    ``V = 0`` gives ``inf`` (a rejected point), not a ``ZeroDivisionError`` that numba cannot
    raise through nutpie's compiled log-density and prints as "Exception ignored"."""
    src = re.sub(r"^def \w+\(", f"def _{name}_source(", source, count=1)
    jit = f"{name} = numba.njit(cache=True, error_model='numpy')(_{name}_source)"
    return ["", "", src.rstrip(), jit]


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


def search_path() -> list[str]:
    """Where :mod:`pymc_wendy._generated` looks for modules: the cache directory, then the
    temporary directories of processes whose cache directory could not be written."""
    extra = [d for d in os.environ.get(_FALLBACK_ENV, "").split(os.pathsep) if d]
    return [str(cache_dir()), *extra]


@functools.cache
def _fallback_dir() -> Path:
    """One temporary directory per process for kernels when the cache cannot be written."""
    return Path(tempfile.mkdtemp(prefix="pymc_wendy_kernels_"))


def load_module(source: str, prefix: str) -> ModuleType:
    """Write ``source`` to :func:`cache_dir` (once; the name is ``prefix`` and its digest) and
    import it.

    The file is written atomically, so processes of a study starting together do not read a
    half-written module. Where the cache directory cannot be written the module goes to a
    temporary directory: correct, compiled once per process. The module is
    ``pymc_wendy._generated.<prefix><digest>``, importable by that name in any process that
    shares the cache directory (see the module's docstring)."""
    # the digest covers the module's full name too: numba's cached machine code refers to
    # its module by name, so a file must never be imported under two names
    digest = hashlib.sha256(f"{PACKAGE}.{prefix}\n{source}".encode()).hexdigest()[:24]
    stem = prefix + digest
    name = f"{PACKAGE}.{stem}"
    if name in sys.modules:
        return sys.modules[name]
    for directory in (cache_dir(), None):
        try:
            if directory is None:
                directory = _fallback_dir()
                known = os.environ.get(_FALLBACK_ENV, "").split(os.pathsep)
                if str(directory) not in known:
                    os.environ[_FALLBACK_ENV] = os.pathsep.join(
                        [*filter(None, known), str(directory)]
                    )
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{stem}.py"
            if not path.exists() or path.read_text() != source:
                fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
                with os.fdopen(fd, "w") as fh:
                    fh.write(source)
                os.replace(tmp, path)
            break
        except OSError:
            continue
    package = importlib.import_module(PACKAGE)
    if str(directory) not in package.__path__:  # the cache directory changed since import
        package.__path__.append(str(directory))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache looks functions up by their module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a later call tries again instead of finding half a module
        raise
    return module
