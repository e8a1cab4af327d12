"""Source templates of the compiled kernels: a model's terms, and the kernel of each kind.

A kernel evaluation is two compiled C functions, both written as Python modules into the
kernel cache directory by :mod:`pymc_wendy.backends.kernel_cache` and compiled with numba's
on-disk cache:

* the **terms** of one model structure (:func:`c_terms`, one module per model, its flags and
  kind): the model's generated functions ``f``, ``f_u``, ``f_p``, ``f_up`` (and an operator
  form's ``C``, ``beta`` and their derivatives) at the data, written into one flat array.
  This is all that a new model compiles: about 4 s with a cold cache.
* the **kernel** of one kind (:func:`c_entry`, one module per kind, shared by every model):
  the covariance, its factorisation, the log-likelihood and its gradient
  (:mod:`~pymc_wendy.backends.numba_kernels`, :mod:`~pymc_wendy.backends.numba_banded`),
  reading the terms. Its flags (noise inferred, gradient wanted, log-determinant) are
  arguments, not constants, so it is compiled once per kind.

The caller (the Op's numba function, or :func:`~pymc_wendy.backends.kernel_cache.make_kernel`)
calls both through their addresses. Were the kernel called from the model's module instead,
numba would link and optimise its machine code into every model's module again: 9-15 s a
model with a cold cache, against 4-5.5 s now (``docs/performance.md``).

The functions here are never compiled in this module: the names they read that are not
imported (the flags, the model functions ``f``... and ``kernel``, ``terms``) are bound by the
generated module. Their placeholders below only make this file valid Python for readers and
linters.
"""

from __future__ import annotations

import numba
import numpy as np

from pymc_wendy._codecache import sources
from pymc_wendy.backends import numba_banded as nb
from pymc_wendy.backends import numba_kernels as nk

# Bound by the generated module (placeholders, see the module doc).
WANT_GRAD = True
f = f_u = f_p = f_up = None  # the model's right-hand side and its derivatives
c_fn = b_fn = cp_fn = bp_fn = None  # operator form: C(p), beta(p) and their derivatives
t_f = t_fu = t_fp = t_fup = None  # operator form: the total derivative terms' functions
SHAPE_C = SHAPE_BETA = SHAPE_C_P = SHAPE_BETA_P = ()
SHAPE_TF = SHAPE_TFU = SHAPE_TFP = SHAPE_TFUP = ()
kernel = None  # the ``*_kernel`` function of the module's kind
terms = None  # the ``*_terms`` function of the module's kind

#: the bits of a kernel's ``flags`` argument (:func:`~pymc_wendy.backends.numba_kernels.flag_bits`)
INFER_SIGMA, WANT_GRADIENT, LOGDET = nk.INFER_SIGMA, nk.WANT_GRADIENT, nk.LOGDET


# --- the terms of one model (compiled per model structure) ---------------------------------


def model_terms(t, X, p, out):
    """The right-hand side at the data, ``f_u`` and, for a gradient, ``f_p`` and ``f_up``,
    written in that order into ``out`` (:func:`~pymc_wendy.backends.numba_kernels.split_terms`);
    returns the number of entries written."""
    M1, D, J = t.size, X.shape[1], p.size
    # fresh arrays rather than views of ``out``: reshaping a slice, like a slice assignment,
    # compiles numba's shape error message
    parts = [f(t, X, p, np.zeros((M1, D))).ravel(), f_u(t, X, p, np.zeros((M1, D, D))).ravel()]
    if WANT_GRAD:
        parts.append(f_p(t, X, p, np.zeros((M1, D, J))).ravel())
        parts.append(f_up(t, X, p, np.zeros((M1, D, D, J))).ravel())
    return put_parts(parts, out, 0)


def put_parts(parts, out, n):
    """``parts`` written one after the other into ``out`` from entry ``n``; returns where
    they end, or -1 (nothing more written) if they do not fit."""
    # element by element: a slice assignment compiles numba's shape error message, 3 s of
    # a model's compilation. The caller checks the returned size against the buffer's
    # (terms_size), so a layout bug is an error, not a write past the buffer.
    for part in parts:
        if n < 0 or n + part.size > out.size:
            return -1
        for i in range(part.size):
            out[n + i] = part[i]
        n += part.size
    return n


def general_terms(p, buf, out):
    """:func:`model_terms` of the general path, at the data with the initial row of ``p``
    when the initial state is free; returns the number of entries written."""
    o = nk.offsets(buf)
    t, X, scalars = nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1), nk.unpack1(buf, o, 9)
    if scalars[4] > 0.5:
        J = int(scalars[5])
        X, _ = nk.with_initial_row(X, nk.unpack2(buf, o, 4), nk.unpack2(buf, o, 3), p[J:])
        p = p[:J]
    return model_terms(t, X, np.ascontiguousarray(p), out)


def banded_terms(p, buf, out):
    """:func:`model_terms` of the banded path; returns the number of entries written."""
    o = nk.offsets(buf)
    return model_terms(nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1), np.ascontiguousarray(p), out)


def operator_terms(p, buf, out):
    """:func:`model_terms`, the total derivative terms' functions (the same four, stacked
    after the time axis), then ``C``, ``beta`` and, for a gradient, their derivatives;
    returns the number of entries written."""
    o = nk.offsets(buf)
    p = np.ascontiguousarray(p)
    t, X = nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1)
    n = model_terms(t, X, p, out)
    M1 = t.size
    parts = [t_f(t, X, p, np.zeros((M1,) + SHAPE_TF)).ravel()]
    parts.append(t_fu(t, X, p, np.zeros((M1,) + SHAPE_TFU)).ravel())
    if WANT_GRAD:
        parts.append(t_fp(t, X, p, np.zeros((M1,) + SHAPE_TFP)).ravel())
        parts.append(t_fup(t, X, p, np.zeros((M1,) + SHAPE_TFUP)).ravel())
    zt, zu = np.zeros(1), np.zeros((1, 0))
    parts.append(c_fn(zt, zu, p, np.zeros((1,) + SHAPE_C)).ravel())
    parts.append(b_fn(zt, zu, p, np.zeros((1,) + SHAPE_BETA)).ravel())
    if WANT_GRAD:
        parts.append(cp_fn(zt, zu, p, np.zeros((1,) + SHAPE_C_P)).ravel())
        parts.append(bp_fn(zt, zu, p, np.zeros((1,) + SHAPE_BETA_P)).ravel())
    return put_parts(parts, out, n)


def c_terms(p_, J, buf_, n_buf, out_, n_out):
    """The terms' C entry point (:data:`~pymc_wendy.backends.numba_kernels.TERMS_SIGNATURE`):
    returns the number of entries written, -1 if they do not fit in ``n_out``."""
    return terms(numba.carray(p_, (J,)), numba.carray(buf_, (n_buf,)), numba.carray(out_, (n_out,)))


# --- the kernel of each kind (compiled once per kind, shared by every model) ---------------


def noise_terms(sigma2, fixed_s2, alpha, scalars, infer_sigma):
    """The noise variances, the covariance's scale and its added diagonal at relaxation
    ``alpha`` (ridge, relaxation scale and diagonal ridge from the buffer's scalars)."""
    s2 = np.ascontiguousarray(sigma2) if infer_sigma else fixed_s2
    keep = 1.0 - alpha
    return s2, keep * (1.0 - scalars[0]), keep * scalars[3] + alpha * scalars[1]


def linear_kernel(p, sigma2, alpha, buf, terms, flags):
    """Linear-in-parameter models: ``S`` a precomputed quadratic polynomial in ``p`` (no
    model terms)."""
    infer_sigma, want_grad, logdet = nk.flag_bits(flags)
    o = nk.offsets(buf)
    blocks = nk.unpack3(buf, o, 0)
    be, bq = nk.unpack_index(buf, o, 1), nk.unpack_index(buf, o, 2)
    bd, bd2 = nk.unpack_index(buf, o, 3), nk.unpack_index(buf, o, 4)
    r0, G = nk.unpack1(buf, o, 5), nk.unpack2(buf, o, 6)
    tilt, ref, scalars = nk.unpack1(buf, o, 7), nk.unpack1(buf, o, 8), nk.unpack1(buf, o, 9)
    ridge, c, offset, ridge_diag = scalars[0], scalars[1], scalars[2], scalars[3]
    p = np.ascontiguousarray(p)
    keep = 1.0 - alpha
    scale = 1.0 - ridge  # folded into the blocks when sigma is fixed
    w = keep * scale * sigma2 if infer_sigma else np.full(1, keep)
    diag = keep * ridge_diag + alpha * c
    nll, gp, gw = nk.linear(blocks, be, bq, bd, bd2, r0, G, p, w, diag, want_grad, logdet)
    if not logdet:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, want_grad)
    return nk.finite_or_failed(nll, gp, gw * (keep * scale))


def general_kernel(p, sigma2, alpha, buf, terms, flags):
    """The general path (:class:`~pymc_wendy.weak.first_order.FirstOrderForm`)."""
    infer_sigma, want_grad, logdet = nk.flag_bits(flags)
    o = nk.offsets(buf)
    X = nk.unpack2(buf, o, 1)
    phi, dphi, b = nk.unpack2(buf, o, 2), nk.unpack2(buf, o, 3), nk.unpack2(buf, o, 4)
    W, fixed_s2 = nk.unpack2(buf, o, 5), nk.unpack1(buf, o, 6)
    tilt, ref, scalars = nk.unpack1(buf, o, 7), nk.unpack1(buf, o, 8), nk.unpack1(buf, o, 9)
    offset = scalars[2]
    free = scalars[4] > 0.5  # p ends with the initial row (an initial state with a prior)
    J = int(scalars[5]) if free else p.size
    x0 = np.ascontiguousarray(p[J:])
    p = np.ascontiguousarray(p[:J])
    if free:
        X, b = nk.with_initial_row(X, b, dphi, x0)
    F, Ju, Jp, Jup, _ = nk.split_terms(terms, X.shape[0], X.shape[1], J, want_grad)
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars, infer_sigma)
    nll, gp, gs, a = nk.general(
        phi, dphi, b, F, Ju, Jp, Jup, s2, W, scale, diag, want_grad, logdet, infer_sigma
    )
    if not logdet:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, want_grad)
    if free:
        gp = np.concatenate((gp, nk.initial_row_gradient(phi, dphi, Ju, a, want_grad)))
    return nk.finite_or_failed(nll, gp, gs)


def banded_kernel(p, sigma2, alpha, buf, terms, flags):
    """The general path with local test functions (:mod:`~pymc_wendy.backends.numba_banded`)."""
    infer_sigma, want_grad, logdet = nk.flag_bits(flags)
    o = nk.offsets(buf)
    X, start = nk.unpack2(buf, o, 1), nk.unpack_index(buf, o, 2)
    phi, dphi = nk.unpack2(buf, o, 3), nk.unpack2(buf, o, 4)
    Gp, Gd = nk.unpack3(buf, o, 5), nk.unpack3(buf, o, 6)
    bb, W, fixed_s2 = nk.unpack2(buf, o, 7), nk.unpack2(buf, o, 8), nk.unpack1(buf, o, 9)
    tilt, ref, scalars = nk.unpack1(buf, o, 10), nk.unpack1(buf, o, 11), nk.unpack1(buf, o, 12)
    offset = scalars[2]
    p = np.ascontiguousarray(p)
    F, Ju, Jp, Jup, _ = nk.split_terms(terms, X.shape[0], X.shape[1], p.size, want_grad)
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars, infer_sigma)
    nll, gp, gs = nb.banded(
        start, phi, dphi, Gp, Gd, bb, F, Ju, Jp, Jup, s2, W, scale, diag, want_grad, logdet
    )
    if not logdet:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, want_grad)
    return nk.finite_or_failed(nll, gp, gs)


def operator_kernel(p, sigma2, alpha, buf, terms, flags):
    """Models with derivative terms or inputs (:class:`~pymc_wendy.weak.operator.OperatorForm`)."""
    infer_sigma, want_grad, logdet = nk.flag_bits(flags)
    o = nk.offsets(buf)
    X, pw = nk.unpack2(buf, o, 1), nk.unpack3(buf, o, 2)
    ops, OX, Psi = nk.unpack3(buf, o, 3), nk.unpack3(buf, o, 4), nk.unpack2(buf, o, 5)
    W, fixed_s2 = nk.unpack2(buf, o, 6), nk.unpack1(buf, o, 7)
    tilt, ref, scalars = nk.unpack1(buf, o, 8), nk.unpack1(buf, o, 9), nk.unpack1(buf, o, 10)
    shapes = nk.unpack_index(buf, o, 11)  # C (Q, D, D), beta (D, inputs), total terms P
    offset = scalars[2]
    p = np.ascontiguousarray(p)
    J = p.size
    M1 = X.shape[0]
    F, Ju, Jp, Jup, n = nk.split_terms(terms, M1, X.shape[1], J, want_grad)
    Q, D, n_in, P = shapes[0], shapes[1], shapes[4], shapes[5]
    F = nk.stacked(F, terms[n : n + M1 * P * D].reshape((M1, P, D)))
    n += M1 * P * D
    Ju = nk.stacked(Ju, terms[n : n + M1 * P * D * D].reshape((M1, P, D, D)))
    n += M1 * P * D * D
    if want_grad:
        Jp = nk.stacked(Jp, terms[n : n + M1 * P * D * J].reshape((M1, P, D, J)))
        n += M1 * P * D * J
        Jup = nk.stacked(Jup, terms[n : n + M1 * P * D * D * J].reshape((M1, P, D, D, J)))
        n += M1 * P * D * D * J
    else:
        Jp = np.zeros((1 + P, 0, D, J))
        Jup = np.zeros((1 + P, 0, D, D, J))
    Cq = terms[n : n + Q * D * D].reshape((Q, D, D))
    n += Q * D * D
    beta = terms[n : n + D * n_in].reshape((D, n_in))
    n += D * n_in
    if want_grad:
        Cp = terms[n : n + Q * D * D * J].reshape((Q, D, D, J))
        n += Q * D * D * J
        bp = terms[n : n + D * n_in * J].reshape((D, n_in, J))
    else:
        Cp = np.zeros((Q, D, D, J))
        bp = np.zeros((D, n_in, J))
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars, infer_sigma)
    nll, gp, gs = nk.operator(
        pw, ops, OX, Psi, F, Ju, Jp, Jup, Cq, beta, Cp, bp, s2, W, scale, diag, want_grad,
        logdet,
    )  # fmt: skip
    if not logdet:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, want_grad)
    return nk.finite_or_failed(nll, gp, gs)


def c_entry(p_, J, s2_, n_s2, alpha, buf_, n_buf, terms_, n_terms, flags, out_):
    """The kernel's C entry point (:data:`~pymc_wendy.backends.numba_kernels.C_SIGNATURE`)."""
    p = numba.carray(p_, (J,))
    s2 = numba.carray(s2_, (n_s2,))
    buf = numba.carray(buf_, (n_buf,))
    terms = numba.carray(terms_, (n_terms,))
    out = numba.carray(out_, (1 + J + n_s2,))
    nll, gp, gs = kernel(p, s2, alpha, buf, terms, flags)
    # loops, not slice assignments: those compile numba's shape-mismatch message, about
    # 3 s per kernel with a cold cache
    out[0] = nll
    for j in range(J):
        out[1 + j] = gp[j]
    for d in range(n_s2):
        out[1 + J + d] = gs[d]
    return 0


#: the kernel of each kind (:attr:`WeakForm.kind <pymc_wendy.weak.form.WeakForm.kind>`), its
#: terms (``None``: the kind calls no model code) and the model functions the terms call, by
#: the name they call them: a new kind of model adds its templates here
TEMPLATES = {
    "linear": (linear_kernel, None, {}),
    "general": (general_kernel, general_terms, {"f": "f", "f_u": "f_u", "f_p": "f_p",
                                                "f_up": "f_up"}),
    "banded": (banded_kernel, banded_terms, {"f": "f", "f_u": "f_u", "f_p": "f_p",
                                             "f_up": "f_up"}),
    "operator": (
        operator_kernel,
        operator_terms,
        {
            "f": "f",
            "f_u": "f_u",
            "f_p": "f_p",
            "f_up": "f_up",
            "c_fn": "C",
            "b_fn": "beta",
            "cp_fn": "C_p",
            "bp_fn": "beta_p",
            "t_f": "total_f",
            "t_fu": "total_f_u",
            "t_fp": "total_f_p",
            "t_fup": "total_f_up",
        },
    ),
}  # fmt: skip

#: shapes the operator terms read, by the spec's shape name
OPERATOR_SHAPES = {
    "SHAPE_C": "C",
    "SHAPE_BETA": "beta",
    "SHAPE_C_P": "C_p",
    "SHAPE_BETA_P": "beta_p",
    "SHAPE_TF": "total_f",
    "SHAPE_TFU": "total_f_u",
    "SHAPE_TFP": "total_f_p",
    "SHAPE_TFUP": "total_f_up",
}

#: every template's source as imported (:func:`pymc_wendy._codecache.sources`)
SOURCES = sources(
    model_terms, put_parts, c_terms, noise_terms, c_entry,
    *(fn for kernel, terms, _ in TEMPLATES.values() for fn in (kernel, terms) if fn is not None),
)  # fmt: skip
