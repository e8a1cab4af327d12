"""Source templates of the compiled kernels' entry points, one per kernel kind.

:func:`pymc_wendy.backends.kernel_cache.kernel_for` writes one Python module per model
structure into the kernel cache directory: the model's generated functions, the structure's
flags, the source of one ``*_kernel`` function below and of :func:`c_kernel`, each compiled
with numba's on-disk cache. A second process (a later ``pymc-wendy demo``, a worker of a
coverage study) then loads the machine code instead of compiling it again.

The functions here are never compiled in this module: the names they read that are not
imported (the flags, the model functions ``f``... and ``kernel``) are bound by the generated
module. Their placeholders below only make this file valid Python for readers and linters.
"""

from __future__ import annotations

import numba
import numpy as np

from pymc_wendy._codecache import sources
from pymc_wendy.backends import numba_banded as nb
from pymc_wendy.backends import numba_kernels as nk

# Bound by the generated module (placeholders, see the module doc).
INFER_SIGMA = WANT_GRAD = LOGDET = True
f = f_u = f_p = f_up = None  # the model's right-hand side and its derivatives
c_fn = b_fn = cp_fn = bp_fn = None  # operator form: C(p), beta(p) and their derivatives
SHAPE_C = SHAPE_BETA = SHAPE_C_P = SHAPE_BETA_P = ()
kernel = None  # the ``*_kernel`` function of the module's kind


def linear_kernel(p, sigma2, alpha, buf):
    """Linear-in-parameter models: ``S`` a precomputed quadratic polynomial in ``p``."""
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
    w = keep * scale * sigma2 if INFER_SIGMA else np.full(1, keep)
    diag = keep * ridge_diag + alpha * c
    nll, gp, gw = nk.linear(blocks, be, bq, bd, bd2, r0, G, p, w, diag, WANT_GRAD, LOGDET)
    if not LOGDET:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, WANT_GRAD)
    return nk.finite_or_failed(nll, gp, gw * (keep * scale))


def model_terms(t, X, p):
    """The right-hand side at the data, ``f_u`` and, for a gradient, ``f_p`` and ``f_up``
    (without one, empty stand-ins of the right rank)."""
    M1, D, J = t.size, X.shape[1], p.size
    F = f(t, X, p, np.zeros((M1, D)))
    Ju = f_u(t, X, p, np.zeros((M1, D, D)))
    if WANT_GRAD:
        Jp = f_p(t, X, p, np.zeros((M1, D, J)))
        Jup = f_up(t, X, p, np.zeros((M1, D, D, J)))
    else:
        Jp = np.zeros((0, D, J))
        Jup = np.zeros((0, D, D, J))
    return F, Ju, Jp, Jup


def noise_terms(sigma2, fixed_s2, alpha, scalars):
    """The noise variances, the covariance's scale and its added diagonal at relaxation
    ``alpha`` (ridge, relaxation scale and diagonal ridge from the buffer's scalars)."""
    s2 = np.ascontiguousarray(sigma2) if INFER_SIGMA else fixed_s2
    keep = 1.0 - alpha
    return s2, keep * (1.0 - scalars[0]), keep * scalars[3] + alpha * scalars[1]


def general_kernel(p, sigma2, alpha, buf):
    """The general path (:class:`~pymc_wendy.weak.first_order.FirstOrderForm`)."""
    o = nk.offsets(buf)
    t, X = nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1)
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
    F, Ju, Jp, Jup = model_terms(t, X, p)
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars)
    nll, gp, gs, a = nk.general(
        phi, dphi, b, F, Ju, Jp, Jup, s2, W, scale, diag, WANT_GRAD, LOGDET, INFER_SIGMA
    )
    if not LOGDET:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, WANT_GRAD)
    if free:
        gp = np.concatenate((gp, nk.initial_row_gradient(phi, dphi, Ju, a, WANT_GRAD)))
    return nk.finite_or_failed(nll, gp, gs)


def banded_kernel(p, sigma2, alpha, buf):
    """The general path with local test functions (:mod:`~pymc_wendy.backends.numba_banded`)."""
    o = nk.offsets(buf)
    t, X, start = nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1), nk.unpack_index(buf, o, 2)
    phi, dphi = nk.unpack2(buf, o, 3), nk.unpack2(buf, o, 4)
    Gp, Gd = nk.unpack3(buf, o, 5), nk.unpack3(buf, o, 6)
    bb, W, fixed_s2 = nk.unpack2(buf, o, 7), nk.unpack2(buf, o, 8), nk.unpack1(buf, o, 9)
    tilt, ref, scalars = nk.unpack1(buf, o, 10), nk.unpack1(buf, o, 11), nk.unpack1(buf, o, 12)
    offset = scalars[2]
    p = np.ascontiguousarray(p)
    F, Ju, Jp, Jup = model_terms(t, X, p)
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars)
    nll, gp, gs = nb.banded(
        start, phi, dphi, Gp, Gd, bb, F, Ju, Jp, Jup, s2, W, scale, diag, WANT_GRAD, LOGDET
    )
    if not LOGDET:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, WANT_GRAD)
    return nk.finite_or_failed(nll, gp, gs)


def operator_kernel(p, sigma2, alpha, buf):
    """Models with derivative terms or inputs (:class:`~pymc_wendy.weak.operator.OperatorForm`)."""
    o = nk.offsets(buf)
    t, X, phi = nk.unpack1(buf, o, 0), nk.unpack2(buf, o, 1), nk.unpack2(buf, o, 2)
    ops, OX, Psi = nk.unpack3(buf, o, 3), nk.unpack3(buf, o, 4), nk.unpack2(buf, o, 5)
    W, fixed_s2 = nk.unpack2(buf, o, 6), nk.unpack1(buf, o, 7)
    tilt, ref, scalars = nk.unpack1(buf, o, 8), nk.unpack1(buf, o, 9), nk.unpack1(buf, o, 10)
    offset = scalars[2]
    p = np.ascontiguousarray(p)
    zt, zu = np.zeros(1), np.zeros((1, 0))
    F, Ju, Jp, Jup = model_terms(t, X, p)
    Cq = c_fn(zt, zu, p, np.zeros((1,) + SHAPE_C))[0]
    beta = b_fn(zt, zu, p, np.zeros((1,) + SHAPE_BETA))[0]
    if WANT_GRAD:
        Cp = cp_fn(zt, zu, p, np.zeros((1,) + SHAPE_C_P))[0]
        bp = bp_fn(zt, zu, p, np.zeros((1,) + SHAPE_BETA_P))[0]
    else:
        Cp = np.zeros(SHAPE_C_P)
        bp = np.zeros(SHAPE_BETA_P)
    s2, scale, diag = noise_terms(sigma2, fixed_s2, alpha, scalars)
    nll, gp, gs = nk.operator(
        phi, ops, OX, Psi, F, Ju, Jp, Jup, Cq, beta, Cp, bp, s2, W, scale, diag, WANT_GRAD,
        LOGDET,
    )  # fmt: skip
    if not LOGDET:
        nll = nk.apply_tilt(nll, gp, p, tilt, ref, offset, WANT_GRAD)
    return nk.finite_or_failed(nll, gp, gs)


def c_kernel(p_, J, s2_, n_s2, alpha, buf_, n_buf, out_):
    """The C entry point (:data:`~pymc_wendy.backends.numba_kernels.C_SIGNATURE`)."""
    p = numba.carray(p_, (J,))
    s2 = numba.carray(s2_, (n_s2,))
    buf = numba.carray(buf_, (n_buf,))
    out = numba.carray(out_, (1 + J + n_s2,))
    nll, gp, gs = kernel(p, s2, alpha, buf)
    out[0] = nll
    out[1 : 1 + J] = gp
    if n_s2 > 0:
        out[1 + J :] = gs[:n_s2]
    return 0


#: helpers compiled into the module of every kind that calls model functions
HELPERS = (model_terms, noise_terms)

#: the template of each kernel kind (:attr:`WeakForm.kind <pymc_wendy.weak.form.WeakForm.kind>`)
#: and the model functions it calls, by the name it calls them: a new kind of model adds its
#: template here
TEMPLATES = {
    "linear": (linear_kernel, {}),
    "general": (general_kernel, {"f": "f", "f_u": "f_u", "f_p": "f_p", "f_up": "f_up"}),
    "banded": (banded_kernel, {"f": "f", "f_u": "f_u", "f_p": "f_p", "f_up": "f_up"}),
    "operator": (
        operator_kernel,
        {
            "f": "f",
            "f_u": "f_u",
            "f_p": "f_p",
            "f_up": "f_up",
            "c_fn": "C",
            "b_fn": "beta",
            "cp_fn": "C_p",
            "bp_fn": "beta_p",
        },
    ),  # fmt: skip
}

#: shapes the operator template reads, by the spec's shape name
OPERATOR_SHAPES = {
    "SHAPE_C": "C",
    "SHAPE_BETA": "beta",
    "SHAPE_C_P": "C_p",
    "SHAPE_BETA_P": "beta_p",
}

#: every template's source as imported (:func:`pymc_wendy._codecache.sources`)
SOURCES = sources(*HELPERS, c_kernel, *(template for template, _ in TEMPLATES.values()))
