"""The compiled kernel of each model structure, kept on disk across processes.

A kernel evaluation calls two compiled C functions (:mod:`~pymc_wendy.backends.kernel_templates`
says why two): the **terms** of a model structure (its generated functions at the data) and
the **kernel** of its kind (covariance, factorisation, log-likelihood and gradient), which
every model of the kind shares. :func:`kernel_for` writes each as one Python module with
:func:`pymc_wendy._codecache.load_module` (the terms: the model's generated functions, its
flags and the terms template; the kernel: its template alone) and numba compiles them with its
on-disk cache, so a second process (the next ``pymc-wendy demo``, each worker of a coverage
study) loads the machine code instead of compiling (``docs/performance.md``).

:func:`make_kernel` wraps a kernel and a likelihood's packed data as a Python function (tests,
benchmarks).
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np

from pymc_wendy._codecache import IMPORTS, jitted, load_module
from pymc_wendy.backends import kernel_templates
from pymc_wendy.backends.numba_kernels import kernel_inputs


class CompiledKernel(NamedTuple):
    """The two compiled C functions of one model structure, and the flags to call them with.

    ``terms`` has :data:`~pymc_wendy.backends.numba_kernels.TERMS_SIGNATURE`: it reads ``p``
    and :func:`kernel_inputs`' ``buffer``, writes the model's terms and returns how many
    entries it wrote (callers check it against :func:`terms_size`). ``entry`` has
    :data:`~pymc_wendy.backends.numba_kernels.C_SIGNATURE`: it reads ``p`` (J,), ``sigma2``
    (``n_sigma2`` noise variances; ignored without ``INFER_SIGMA`` in ``flags``, where the
    data's noise level is used), ``alpha``, the buffer, the terms and ``flags``, and writes
    ``out`` (1 + J + ``n_sigma2``) with ``nll``, its gradient in ``p`` and in ``sigma2``.
    """

    terms: Any
    entry: Any
    flags: int


def kernel_for(lik, kind: str, *, infer_sigma: bool, want_grad: bool) -> CompiledKernel:
    """The compiled kernel of a model structure, shared by every likelihood of that structure.

    Callers (the Op's numba functions) call its two functions through their addresses, so
    compiling a caller does not compile them again: a new data set of the same model costs
    milliseconds, not seconds.
    ``alpha`` relaxes the covariance toward a multiple ``c`` (in the buffer) of the identity,
    ``S_alpha = (1 - alpha) S + alpha c I`` (``S`` the model's, ridge included); ``alpha = 0``
    is the model's likelihood exactly. A bias-corrected likelihood
    (:meth:`~pymc_wendy.WeakLikelihood.corrected`) gives its corrected objective.

    Both modules are written once to the cache directory and compiled with numba's on-disk
    cache, so another process with the same model structure loads the machine code instead of
    compiling it (``cache_hits`` of ``terms`` and ``entry`` count the loads).
    """
    entry_module = _load(_entry_source(kind), "pymc_wendy_kernel_")
    if kind == "linear":  # the linear path calls no model code
        terms = entry_module.c_no_terms
    else:
        terms = _load(_terms_source(kind, lik.form.kernel_spec(), want_grad), "pymc_wendy_terms_")
        terms = terms.c_terms
    T = kernel_templates
    flags = (T.INFER_SIGMA if infer_sigma else 0) | (T.WANT_GRADIENT if want_grad else 0)
    flags |= T.LOGDET if lik.correction is None else 0
    return CompiledKernel(terms, entry_module.c_entry, flags)


def terms_size(lik, kind: str, *, want_grad: bool) -> int:
    """How many entries the terms of ``lik``'s structure take (:class:`CompiledKernel`)."""
    if kind == "linear":
        return 0
    spec = lik.form.kernel_spec()
    M1, D = spec.arrays[1].shape
    J = lik.model.n_params
    size = M1 * D * (1 + D + ((1 + D) * J if want_grad else 0))
    names = ("C", "beta", "C_p", "beta_p") if want_grad else ("C", "beta")
    size += sum(int(np.prod(spec.shapes[name])) for name in names if name in spec.shapes)
    # the total derivative terms' functions, at every time point
    totals = ("total_f", "total_f_u", "total_f_p", "total_f_up")[: 4 if want_grad else 2]
    return size + sum(M1 * int(np.prod(spec.shapes[n])) for n in totals if n in spec.shapes)


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
    terms = np.empty(terms_size(lik, kind, want_grad=want_grad))

    def bound(p, sigma2, alpha):
        p = np.ascontiguousarray(p, dtype=float)
        s2 = np.ascontiguousarray(sigma2, dtype=float) if infer_sigma else np.zeros(0)
        if s2.shape != (D,):
            raise ValueError(f"sigma2 must have shape ({D},); got {s2.shape}")
        out = np.empty(1 + J + D)
        ptr = [a.ctypes.data_as(_DOUBLE_P) for a in (p, s2, buf, terms, out)]
        if kernel.terms.ctypes(ptr[0], J, ptr[2], buf.size, ptr[3], terms.size) != terms.size:
            raise ValueError("the model's terms do not match their buffer (terms_size)")
        kernel.entry.ctypes(
            ptr[0], J, ptr[1], D, float(alpha), ptr[2], buf.size, ptr[3], terms.size,
            kernel.flags, ptr[4],
        )  # fmt: skip
        return out[0], out[1 : 1 + J], out[1 + J :] if infer_sigma else np.zeros(D)

    return bound


_DOUBLE_P = ctypes.POINTER(ctypes.c_double)

#: loaded kernel and terms modules by their source (:func:`kernel_for`)
_KERNELS: dict[str, Any] = {}


def _load(source: str, prefix: str):
    module = _KERNELS.get(source)
    if module is None:
        module = _KERNELS[source] = load_module(source, prefix)
    return module


def _header(what: str) -> list[str]:
    return [
        f'"""{what} generated by pymc_wendy.',
        "",
        "Safe to delete: it is written and compiled again when needed.",
        '"""',
        "",
        *IMPORTS,
        "",
        "from pymc_wendy.backends import numba_banded as nb",
        "from pymc_wendy.backends import numba_kernels as nk",
        "",
        f"# library: {_LIBRARY_DIGEST}",
    ]


def _define(lines: list[str], fn: Callable, jit: str) -> None:
    lines += ["", "", kernel_templates.SOURCES[fn.__name__], f"{jit}({fn.__name__})"]


def _entry_source(kind: str) -> str:
    """The Python source of the module holding the kernel of ``kind`` (:func:`kernel_for`)."""
    T = kernel_templates
    template = T.TEMPLATES[kind][0]
    lines = _header(f"The compiled weak-likelihood kernel ({kind})")
    _define(lines, T.noise_terms, "noise_terms = numba.njit(cache=True)")
    _define(lines, template, "kernel = numba.njit(cache=True)")
    _define(lines, T.c_entry, "c_entry = numba.cfunc(nk.C_SIGNATURE, cache=True)")
    if kind == "linear":
        lines += ["", "", "def c_no_terms(p_, J, buf_, n_buf, out_, n_out):", "    return 0"]
        lines.append("c_no_terms = numba.cfunc(nk.TERMS_SIGNATURE, cache=True)(c_no_terms)")
    return "\n".join(lines) + "\n"


def _terms_source(kind: str, spec, want_grad: bool) -> str:
    """The Python source of the module holding one model structure's terms (:func:`kernel_for`)."""
    T = kernel_templates
    _, template, calls = T.TEMPLATES[kind]
    lines = _header(f"The compiled terms of one model ({kind})")
    lines.append(f"WANT_GRAD = {bool(want_grad)}")
    lines += [f"{name} = {tuple(spec.shapes[key])!r}"
              for name, key in T.OPERATOR_SHAPES.items() if key in spec.shapes]  # fmt: skip
    for name, key in calls.items():
        lines += jitted(name, spec.functions[key].py_func.__source__)
    _define(lines, T.put_parts, "put_parts = numba.njit(cache=True)")
    _define(lines, T.model_terms, "model_terms = numba.njit(cache=True)")
    _define(lines, template, "terms = numba.njit(cache=True)")
    _define(lines, T.c_terms, "c_terms = numba.cfunc(nk.TERMS_SIGNATURE, cache=True)")
    return "\n".join(lines) + "\n"


def _library_digest() -> str:
    """A digest of the compiled code a kernel module calls: numba caches a module's functions
    by its own source only, so a change of the library must change the module's source.
    Read once at import (:data:`_LIBRARY_DIGEST`), as the templates' sources are."""
    h = hashlib.sha256(numba.__version__.encode())
    here = Path(__file__).parent
    mods = ("numba_kernels", "numba_banded", "lapack", "kernel_templates", "kernel_cache")
    for mod in (*mods, "../weak/banded"):
        h.update((here / f"{mod}.py").read_bytes())
    return h.hexdigest()[:16]


_LIBRARY_DIGEST = _library_digest()
