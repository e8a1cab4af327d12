"""The compiled kernel of each model structure, kept on disk across processes.

:func:`kernel_for` writes one Python module per model structure (path, flags and the model's
generated functions) into :func:`cache_dir`: the model's functions, the flags and the source of
one template of :mod:`~pymc_wendy.backends.kernel_templates`, which calls the numeric kernels of
:mod:`~pymc_wendy.backends.numba_kernels` and :mod:`~pymc_wendy.backends.numba_banded`. numba
compiles it with its on-disk cache, so a second process (the next ``pymc-wendy demo``, each
worker of a coverage study) loads the machine code instead of compiling (6 s for
FitzHugh-Nagumo, ``docs/performance.md``). A closure over the generated functions could not be
cached: numba keys a closure's cache entry on its pickled cells, which for a numba function
include a per-process id.

:func:`make_kernel` wraps a kernel and a likelihood's packed data as a Python function (tests,
benchmarks).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import inspect
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numba
import numpy as np

from pymc_wendy.backends import kernel_templates
from pymc_wendy.backends.numba_kernels import kernel_inputs


def kernel_for(lik, kind: str, *, infer_sigma: bool, want_grad: bool):
    """The compiled kernel of a model structure, shared by every likelihood of that structure.

    A numba ``cfunc`` with :data:`~pymc_wendy.backends.numba_kernels.C_SIGNATURE`: it reads
    ``p`` (J,), ``sigma2`` (``n_sigma2`` noise variances; ignored with ``infer_sigma=False``,
    where the data's noise level is used), ``alpha`` and :func:`kernel_inputs`' ``buffer``,
    and writes ``out`` (1 + J + ``n_sigma2``) with ``nll``, its gradient in ``p`` and in
    ``sigma2``. Callers (the Op's numba functions) call it through its address, so compiling
    a caller does not compile the kernel again: a new data set of the same model costs
    milliseconds, not seconds.
    ``alpha`` relaxes the covariance toward a multiple ``c`` (in the buffer) of the identity,
    ``S_alpha = (1 - alpha) S + alpha c I`` (``S`` the model's, ridge included); ``alpha = 0``
    is the model's likelihood exactly. A bias-corrected likelihood
    (:meth:`~pymc_wendy.WeakLikelihood.corrected`) gives its corrected objective.

    The kernel's source (the model's generated functions, the flags and a template of
    :mod:`~pymc_wendy.backends.kernel_templates`) is written once to :func:`cache_dir` and
    compiled with numba's on-disk cache, so another process with the same model structure
    loads the machine code instead of compiling it (``cache_hits`` of the returned object
    counts the loads).
    """
    spec = (
        None if kind == "linear" else lik.form.kernel_spec()
    )  # the linear path calls no model code
    source = _kernel_source(kind, spec, infer_sigma=infer_sigma, want_grad=want_grad,
                            logdet=lik.correction is None)  # fmt: skip
    kernel = _KERNELS.get(source)
    if kernel is None:
        kernel = _KERNELS[source] = _load_kernel_module(source).c_kernel
    return kernel


def make_kernel(
    lik, *, infer_sigma: bool, want_grad: bool, relax_scale: float = 1.0,
    free_initial: bool = False,
) -> Callable:  # fmt: skip
    """``(p, sigma2, alpha) -> (nll, grad_p, grad_sigma2)`` for ``lik``, callable from Python
    (tests, benchmarks): :func:`kernel_for`'s kernel on :func:`kernel_inputs`' buffer. With
    ``free_initial`` ``p`` ends with the initial row and so does ``grad_p``."""
    kind, buf = kernel_inputs(
        lik, infer_sigma=infer_sigma, relax_scale=relax_scale, free_initial=free_initial
    )
    kernel = kernel_for(lik, kind, infer_sigma=infer_sigma, want_grad=want_grad)
    J = lik.model.n_params + (lik.model.n_states if free_initial else 0)
    D = lik.model.n_states if infer_sigma else 0

    def bound(p, sigma2, alpha):
        p = np.ascontiguousarray(p, dtype=float)
        s2 = np.ascontiguousarray(sigma2, dtype=float) if infer_sigma else np.zeros(0)
        if s2.shape != (D,):
            raise ValueError(f"sigma2 must have shape ({D},); got {s2.shape}")
        out = np.empty(1 + J + D)
        ptr = (a.ctypes.data_as(_DOUBLE_P) for a in (p, s2, buf, out))
        kernel.ctypes(next(ptr), J, next(ptr), D, float(alpha), next(ptr), buf.size, next(ptr))
        return out[0], out[1 : 1 + J], out[1 + J :] if infer_sigma else np.zeros(D)

    return bound


_DOUBLE_P = ctypes.POINTER(ctypes.c_double)

#: loaded kernels by their module's source (:func:`kernel_for`)
_KERNELS: dict[str, Callable] = {}


def cache_dir() -> Path:
    """Where :func:`kernel_for` keeps the generated kernel modules and their machine code.

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


def _kernel_source(kind: str, spec, *, infer_sigma: bool, want_grad: bool, logdet: bool) -> str:
    """The Python source of the module holding one structure's kernel (:func:`kernel_for`)."""
    template, calls = kernel_templates.TEMPLATES[kind]
    lines = [
        f'"""A compiled weak-likelihood kernel ({kind}) generated by pymc_wendy.',
        "",
        "Safe to delete: it is written and compiled again when needed.",
        '"""',
        "",
        "import math",
        "",
        "import numba",
        "import numpy",
        "import numpy as np",
        "",
        "from pymc_wendy.backends import numba_banded as nb",
        "from pymc_wendy.backends import numba_kernels as nk",
        "",
        f"# library: {_library_digest()}",
        f"INFER_SIGMA = {bool(infer_sigma)}",
        f"WANT_GRAD = {bool(want_grad)}",
        f"LOGDET = {bool(logdet)}",
    ]
    if kind == "operator":
        lines += [f"{name} = {tuple(spec.shapes[key])!r}"
                  for name, key in kernel_templates.OPERATOR_SHAPES.items()]  # fmt: skip
    for name, key in calls.items():
        src = spec.functions[key].py_func.__source__
        src = re.sub(r"^def \w+\(", f"def _{name}_source(", src, count=1)
        lines += ["", "", src.rstrip(), f"{name} = numba.njit(cache=True)(_{name}_source)"]
    entries = (
        (template, "kernel = numba.njit(cache=True)"),
        (kernel_templates.c_kernel, "c_kernel = numba.cfunc(nk.C_SIGNATURE, cache=True)"),
    )
    for fn, jit in entries:
        lines += ["", "", inspect.getsource(fn).rstrip(), f"{jit}({fn.__name__})"]
    return "\n".join(lines) + "\n"


@functools.cache
def _library_digest() -> str:
    """A digest of the compiled code a kernel module calls: numba caches a module's functions
    by its own source only, so a change of the library must change the module's source."""
    h = hashlib.sha256(numba.__version__.encode())
    here = Path(__file__).parent
    mods = ("numba_kernels", "numba_banded", "lapack", "kernel_templates", "kernel_cache")
    for mod in (*mods, "../weak/banded"):
        h.update((here / f"{mod}.py").read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def _fallback_dir() -> Path:
    """One temporary directory per process for kernels when the cache cannot be written."""
    return Path(tempfile.mkdtemp(prefix="pymc_wendy_kernels_"))


def _load_kernel_module(source: str) -> ModuleType:
    """Write ``source`` to :func:`cache_dir` (once; the name is its digest) and import it.

    The file is written atomically, so processes of a study starting together do not read a
    half-written module. Where the cache directory cannot be written the module goes to a
    temporary directory: correct, compiled once per process."""
    name = "pymc_wendy_kernel_" + hashlib.sha256(source.encode()).hexdigest()[:24]
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
    spec.loader.exec_module(module)
    return module
