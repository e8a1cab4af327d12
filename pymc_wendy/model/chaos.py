"""How far a forward solve can be trusted: the growth of ``du/du0`` against the noise level.

A solution whose sensitivity to its initial state grows by a factor ``g`` over the data
(chaotic systems over many Lyapunov times) amplifies the solver's own relative error by about
``g``. Once that reaches a share of the noise level, neither the exact likelihood
(:func:`pymc_wendy.check_weak`) nor the forward residuals of a fit (:func:`pymc_wendy.fit`'s
forward check) can be computed at the solver's tolerance: both skip with a note.
"""

from __future__ import annotations

import numpy as np

from pymc_wendy.model.observation import as_observation

__all__ = ["CHAOS_NOISE_SHARE", "solver_error_share"]

#: share of the noise level that the solver's relative tolerance, amplified by the largest
#: singular value of ``du(t)/du0`` over the data, may reach before the forward problem is
#: treated as chaotic and the check skipped (Lorenz over 10 time units: about 1e-4 of it;
#: over 30: above 1)
CHAOS_NOISE_SHARE = 0.1


def solver_error_share(
    S0: np.ndarray, sigma: np.ndarray, U: np.ndarray, noise: str, rtol: float
) -> tuple[float, float]:
    """``(growth, share)``: the largest singular value of ``du(t)/du0`` over the data, and
    the relative tolerance ``rtol`` amplified by it as a share of the noise level.

    ``S0`` (n, D, n0) the sensitivities of the observed states to the initial state at the
    data times; ``sigma`` (D,) the noise level per state (of ``log U`` for log-normal noise);
    ``U`` (n, D) the data on their own scale. The noise level is taken relative to the data's
    size (log-normal noise is relative already), its smallest state counting.
    """
    growth = float(np.max(np.linalg.norm(S0, ord=2, axis=(1, 2))))
    sigma = np.asarray(sigma, dtype=float)
    if as_observation(noise).log_scale:
        relative = float(np.min(sigma))
    else:
        size = np.maximum(np.sqrt(np.mean(np.asarray(U) ** 2, axis=0)), 1e-300)
        relative = float(np.min(sigma / size))
    return growth, rtol * growth / relative
