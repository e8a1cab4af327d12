"""One BLAS thread for the library's dense linear algebra.

The weak likelihood's matrices have a few hundred to a few thousand rows: too small for
OpenBLAS's threads to pay (``docs/performance.md``: 1.2-2x slower with two threads on an idle
2-core machine), and ruinous when the other cores are busy, where its threads spin against the
other work. Measured on 2 cores with both loaded by other processes: one Lotka-Volterra
``nll_grad`` (513 points) took 2.0 s with two threads and 15 ms with one, a whole ``fit`` 21 s
against 0.77 s, and the SVD of the test functions 11.6 s against 0.18 s. The entry points that
do this algebra therefore run under one BLAS thread; a ``ThreadpoolController`` limit costs
about 20 us per call.
"""

from __future__ import annotations

from functools import lru_cache, wraps

from threadpoolctl import ThreadpoolController


@lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    import scipy.linalg  # noqa: F401  (its BLAS must be loaded before the controller looks)

    return ThreadpoolController()


def blas_threads(n: int | None):
    """Context manager: BLAS limited to ``n`` threads inside (``None``: unchanged), restored
    on exit; ``.restore_original_limits()`` ends it early."""
    return _controller().limit(limits=n, user_api="blas")


def one_blas_thread():
    """Context manager: BLAS limited to one thread inside, restored on exit."""
    return blas_threads(1)


def single_blas_thread(fn):
    """Run ``fn`` under :func:`one_blas_thread`."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)

    return wrapper
