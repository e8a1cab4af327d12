r"""Replica-exchange chains on a ladder of relaxed weak likelihoods (SFT-style tempering).

Smooth functional tempering (Campbell & Steele 2012) runs a population of chains, each on a
*relaxed* version of the model, and swaps states between neighbouring rungs so that the easy
rungs carry the exact one across the barriers between modes. The weak form has no latent
trajectory to relax, so :func:`sample_sft` relaxes the weak likelihood itself
(``docs/tempering.md`` has the derivation and the choices):

``relaxation="hybrid"`` (default)
    Both at once: rung ``m`` relaxes the covariance to ``alpha_m`` (below) and raises the
    relaxed likelihood to the power ``beta_m``, so the easiest rung is weak least squares
    flattened to nearly the prior. Covariance relaxation removes the spurious modes the
    weak likelihood's ``S(p)`` creates; the power bridges the gap between weak least squares
    (biased at high noise) and the model, which covariance relaxation alone cannot.
``relaxation="covariance"``
    Rung ``m`` replaces the covariance of every :class:`~pymc_wendy.WeakODELikelihood` by

    .. math:: S_{\alpha_m}(p) = (1 - \alpha_m)\, S(p) + \alpha_m\, c\, I,

    with ``c = tr S(p_0) / (K D)`` at the start ``p_0`` (the WENDy-MLE): ``alpha = 0`` is the
    model, ``alpha = 1`` is weak least squares ``|r(p)|^2 / (2 c)`` (no ``log det S(p)``, no
    ``S(p)^{-1}`` weighting, a Gaussian in ``p`` for models linear in the parameters). The spurious
    modes of the weak likelihood come from its parameter-dependent covariance (a ``p`` that
    inflates ``S`` explains the residual as noise); they fade as ``alpha`` grows.
``relaxation="power"``
    Classic parallel tempering: rung ``m`` raises every likelihood term (observed variables
    and potentials) to the power ``beta_m``, the prior untouched (``beta = 1`` is the model).

Rungs are placed at levels ``0 = s_0 < ... < s_{R-1} = 1`` mapped to ``alpha(s) =
(alpha_min^s - alpha_min) / (1 - alpha_min)`` (geometric in between, exactly 1 and 0 at the
ends) and/or ``beta(s) = beta_min^(1 - s)``. During tuning the gaps between levels are adapted to
equalise the swap acceptance of all neighbouring pairs (Vousden, Farr & Mandel 2016); the
ladder is frozen for the draws, so every swap is an exact Metropolis-Hastings move between
two fixed targets and every rung's chain has its rung's target as stationary distribution.

Within a rung, each chain moves by NUTS (multinomial, generalised no-U-turn criterion) in the
model's unconstrained space, with its own step size (dual averaging) and dense mass matrix
(started from the inverse Hessian at the start point, re-estimated in doubling windows).
Swaps follow the deterministic even-odd scheme (Okabe et al. 2001; Syed et al. 2022):
even pairs on even iterations, odd pairs on odd ones, which moves states through the ladder
faster than random pairs (``swap="random"`` gives the SFT paper's scheme).

The modules, from the bottom up (only :func:`sample_sft` and :class:`SFTWarning` are public):

- ``ladder``: the rung levels and their map to ``alpha`` and ``beta``;
- ``model``: the model compiled as a function of the unconstrained vector and the rung;
- ``nuts``: one NUTS transition with identity metric;
- ``adaptation``: step size and mass matrix adaptation;
- ``replica``: one chain on one rung, its NUTS move and its exchange with a neighbour;
- ``population``: one chain of the sampler, a full ladder of replicas run iteration by iteration;
- ``pool``: the populations run in this process or in forked worker processes;
- ``diagnostics``: :class:`SFTWarning`, the communication barrier and the warnings;
- ``results``: the ArviZ ``DataTree`` of a run;
- ``sampler``: :func:`sample_sft`, which checks its arguments and wires the rest together.
"""

from pymc_wendy.bayes.tempering.diagnostics import SFTWarning
from pymc_wendy.bayes.tempering.sampler import sample_sft

__all__ = ["SFTWarning", "sample_sft"]
