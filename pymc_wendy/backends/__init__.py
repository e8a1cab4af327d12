"""Compiled evaluations of the weak likelihood: the pytensor Op and its numba and JAX kernels.

:mod:`~pymc_wendy.backends.op` defines the Op; importing this package registers its numba
implementation and, when JAX is installed, its JAX one (:mod:`~pymc_wendy.backends.jax_kernels`).
"""

from pymc_wendy.backends.op import WeakLogLikelihoodOp, weak_loglik

try:  # the optional JAX backend registers jax_funcify for the Op
    from pymc_wendy.backends import jax_kernels  # noqa: F401
except ImportError:
    pass

__all__ = ["WeakLogLikelihoodOp", "weak_loglik"]
