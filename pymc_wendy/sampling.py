"""``pymc_wendy.sample``: ``pm.sample`` with the settings weak likelihoods need.

Two things differ from ``pm.sample``'s defaults, both for measured reasons (``docs/pymc.md``):

* **One BLAS thread per chain.** The likelihood's cost is Cholesky factorisations of
  K D x K D matrices; with chains already running in parallel, a multi-threaded BLAS
  oversubscribes the cores (1.2-2x slower per evaluation on a 2-core machine).
* **No start jitter for variables with an explicit initial value** (the WENDy-MLE set by
  ``WeakODELikelihood(init="wendy")``, or the user's). The weak posterior is typically orders
  of magnitude narrower than the ``U(-1, 1)`` jitter PyMC adds; when ``sigma`` is inferred, a
  start that far out can send a chain into a spurious local mode in which one equation is
  explained as pure noise (about 550 log-density units below the main mode on Lotka-Volterra,
  but a trap for a gradient sampler). Variables without an explicit initial value keep the
  jitter. Starting all chains at one point weakens what R-hat can detect; for genuinely
  multimodal problems use :func:`pymc_wendy.sample_sft` or ``pm.sample_smc``.
"""

from __future__ import annotations

import pymc as pm
from threadpoolctl import threadpool_limits

__all__ = ["sample"]


def sample(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    blas_threads: int | None = 1,
    jitter_initialised: bool = False,
    **kwargs,
):
    """Draw posterior samples with NUTS, like :func:`pymc.sample`.

    Parameters
    ----------
    draws : int
        Draws per chain after tuning.
    model : pm.Model, optional
        Defaults to the model on the context stack.
    blas_threads : int or None
        BLAS threads while sampling (None leaves the library default).
    jitter_initialised : bool
        Also jitter variables that have an explicit initial value.
    **kwargs
        Everything else goes to :func:`pymc.sample` (``tune``, ``chains``, ``nuts_sampler``,
        ``random_seed``, ``target_accept``, ...).

    Returns
    -------
    xarray.DataTree
        The ArviZ result of :func:`pymc.sample`.
    """
    model = pm.modelcontext(model)
    if not jitter_initialised:
        explicit = {v for v in model.free_RVs if model.rvs_to_initial_values.get(v) is not None}
        jitter = set(model.free_RVs) - explicit
        sampler = kwargs.get("nuts_sampler") or ("nutpie" if _has_nutpie() else "pymc")
        if sampler == "nutpie":
            compile_kwargs = dict(kwargs.pop("compile_kwargs", None) or {})
            compile_kwargs.setdefault("jitter_rvs", jitter)
            kwargs["compile_kwargs"] = compile_kwargs
        elif sampler == "pymc" and not jitter and "init" not in kwargs:
            kwargs["init"] = "adapt_diag"
    with threadpool_limits(blas_threads, user_api="blas"):
        return pm.sample(draws, model=model, **kwargs)


def _has_nutpie() -> bool:
    try:
        import nutpie  # noqa: F401
    except ImportError:
        return False
    return True
