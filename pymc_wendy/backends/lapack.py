"""The few LAPACK/BLAS routines the compiled likelihood needs, callable from numba nopython code.

numba's ``np.linalg`` raises Python exceptions on a failed factorisation and has no symmetric
rank-k update or Cholesky inverse; the weak likelihood needs all three and must turn a failed
factorisation into ``-inf`` log-density rather than an exception in the middle of a sampler.
The routines are taken from ``scipy.linalg.cython_lapack``/``cython_blas`` (the same LAPACK
scipy uses), with the pointer cached by pytensor's helper so numba can cache callers on disk.

All matrices are passed in **Fortran order** (column-major), as LAPACK expects. Every wrapper
works on float64 only.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types
from numba.core.extending import get_cython_function_address
from pytensor.link.numba.cache import _call_cached_ptr
from pytensor.link.numba.dispatch.linalg._LAPACK import int_ptr_to_val, val_to_dptr, val_to_int_ptr

_i32p = types.CPointer(types.int32)
_f64p = types.CPointer(types.float64)


def _routine(module: str, name: str, argtypes: tuple):
    """A numba-callable wrapper around ``scipy.linalg.<module>.<name>``."""
    fn_type = types.FunctionType(types.void(*argtypes))
    key = f"pymc_wendy.{module}.{name}"

    @numba.njit(cache=True)
    def get_pointer():
        with numba.objmode(ptr=types.intp):
            ptr = get_cython_function_address(f"scipy.linalg.{module}", name)
        return ptr

    @numba.njit(cache=True)
    def call(*args):
        fn = _call_cached_ptr(
            get_ptr_func=get_pointer, func_type_ref=fn_type, unique_func_name_lit=key
        )
        fn(*args)

    return call


# UPLO, N, A, LDA, INFO
_dpotrf = _routine("cython_lapack", "dpotrf", (_i32p, _i32p, _f64p, _i32p, _i32p))
# UPLO, N, A, LDA, INFO
_dpotri = _routine("cython_lapack", "dpotri", (_i32p, _i32p, _f64p, _i32p, _i32p))
# UPLO, N, NRHS, A, LDA, B, LDB, INFO
_dpotrs = _routine(
    "cython_lapack", "dpotrs", (_i32p, _i32p, _i32p, _f64p, _i32p, _f64p, _i32p, _i32p)
)
# UPLO, TRANS, N, K, ALPHA, A, LDA, BETA, C, LDC
_dsyrk = _routine(
    "cython_blas",
    "dsyrk",
    (_i32p, _i32p, _i32p, _i32p, _f64p, _f64p, _i32p, _f64p, _f64p, _i32p),
)


# UPLO, N, KD, AB, LDAB, INFO
_dpbtrf = _routine("cython_lapack", "dpbtrf", (_i32p, _i32p, _i32p, _f64p, _i32p, _i32p))
# UPLO, N, KD, NRHS, AB, LDAB, B, LDB, INFO
_dpbtrs = _routine(
    "cython_lapack",
    "dpbtrs",
    (_i32p, _i32p, _i32p, _i32p, _f64p, _i32p, _f64p, _i32p, _i32p),
)

_L = np.int32(ord("L"))
_N = np.int32(ord("N"))


@numba.njit(cache=True)
def potrf_lower(A: np.ndarray) -> int:
    """Overwrite the lower triangle of the F-ordered square ``A`` with its Cholesky factor.

    Returns LAPACK's ``info``: 0 on success, > 0 when ``A`` is not positive definite.
    The strict upper triangle is left untouched.
    """
    n = np.int32(A.shape[0])
    info = val_to_int_ptr(np.int32(0))
    _dpotrf(val_to_int_ptr(_L), val_to_int_ptr(n), A.ctypes, val_to_int_ptr(n), info)
    return int_ptr_to_val(info)


@numba.njit(cache=True)
def potri_lower(C: np.ndarray) -> int:
    """Overwrite the lower triangle of the F-ordered factor ``C`` with that of ``(C C^T)^{-1}``."""
    n = np.int32(C.shape[0])
    info = val_to_int_ptr(np.int32(0))
    _dpotri(val_to_int_ptr(_L), val_to_int_ptr(n), C.ctypes, val_to_int_ptr(n), info)
    return int_ptr_to_val(info)


@numba.njit(cache=True)
def potrs_lower(C: np.ndarray, B: np.ndarray) -> int:
    """Overwrite the F-ordered ``B`` (n, nrhs) with ``(C C^T)^{-1} B``, ``C`` lower, F-ordered."""
    n = np.int32(C.shape[0])
    nrhs = np.int32(B.shape[1])
    info = val_to_int_ptr(np.int32(0))
    _dpotrs(
        val_to_int_ptr(_L),
        val_to_int_ptr(n),
        val_to_int_ptr(nrhs),
        C.ctypes,
        val_to_int_ptr(n),
        B.ctypes,
        val_to_int_ptr(n),
        info,
    )
    return int_ptr_to_val(info)


@numba.njit(cache=True)
def syrk_lower(A: np.ndarray, out: np.ndarray) -> None:
    """Lower triangle of ``out`` (n, n, F-ordered) <- ``A A^T`` for the F-ordered ``A`` (n, k).

    Half the work of ``A @ A.T``; the strict upper triangle of ``out`` is not written.
    """
    n = np.int32(A.shape[0])
    k = np.int32(A.shape[1])
    _dsyrk(
        val_to_int_ptr(_L),
        val_to_int_ptr(_N),
        val_to_int_ptr(n),
        val_to_int_ptr(k),
        val_to_dptr(1.0),
        A.ctypes,
        val_to_int_ptr(n),
        val_to_dptr(0.0),
        out.ctypes,
        val_to_int_ptr(n),
    )


@numba.njit(cache=True)
def pbtrf_lower(AB: np.ndarray) -> int:
    """Overwrite the F-ordered lower band storage ``AB`` (b + 1, n), ``AB[i - j, j] = A[i, j]``,
    with that of its Cholesky factor. Returns LAPACK's ``info`` (> 0: not positive definite)."""
    kd = np.int32(AB.shape[0] - 1)
    n = np.int32(AB.shape[1])
    ld = np.int32(AB.shape[0])
    info = val_to_int_ptr(np.int32(0))
    _dpbtrf(
        val_to_int_ptr(_L), val_to_int_ptr(n), val_to_int_ptr(kd), AB.ctypes, val_to_int_ptr(ld),
        info,
    )  # fmt: skip
    return int_ptr_to_val(info)


@numba.njit(cache=True)
def pbtrs_lower(CB: np.ndarray, B: np.ndarray) -> int:
    """Overwrite the F-ordered ``B`` (n, nrhs) with ``(C C^T)^{-1} B`` for the lower band
    factor ``C`` in F-ordered band storage ``CB`` (b + 1, n) (:func:`pbtrf_lower`)."""
    kd = np.int32(CB.shape[0] - 1)
    n = np.int32(CB.shape[1])
    ld = np.int32(CB.shape[0])
    nrhs = np.int32(B.shape[1])
    info = val_to_int_ptr(np.int32(0))
    _dpbtrs(
        val_to_int_ptr(_L), val_to_int_ptr(n), val_to_int_ptr(kd), val_to_int_ptr(nrhs),
        CB.ctypes, val_to_int_ptr(ld), B.ctypes, val_to_int_ptr(n), info,
    )  # fmt: skip
    return int_ptr_to_val(info)
