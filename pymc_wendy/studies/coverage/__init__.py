"""Coverage and accuracy studies: many seeded data sets, several methods, one labelled result.

A study simulates ``n_datasets`` data sets of a :class:`~pymc_wendy.Problem` for every
combination of noise ratio and number of points, applies every method to every data set, and
collects estimates, intervals, timings and failures in an :class:`xarray.Dataset`
(:func:`run_coverage`). :func:`summarize` turns it into the metrics of WENDy-MLE Table 1 with
Monte Carlo standard errors; :func:`to_table` into a paper-style table.

Methods are named ``"<estimator>"`` or ``"<estimator>-<covariance>"``:

==================  ===========================================================================
``mle-hessian``     :func:`~pymc_wendy.fit` ``method="mle"``, Wald interval from the inverse
                    Hessian (``mle`` alone means this); ``mle-sandwich`` (WENDy eq. 9) and
                    ``mle-gls`` use the same fit with the other covariances.
``irls-gls`` ...    likewise for ``irls``, ``wls``, ``oels`` (``oels-oe``) and ``hybrid``.
``nuts``            posterior mean and equal-tailed credible interval from NUTS through
                    :class:`~pymc_wendy.WeakODELikelihood` (:func:`pymc_wendy.sample`).
``sft``             the same from the top rung of replica-exchange tempering
                    (:func:`pymc_wendy.sample_sft`, default ladder).
``laplace``         posterior mean and equal-tailed interval of the Laplace approximation at
                    the posterior mode (:func:`pymc_wendy.laplace`).
``forward``         the forward-solve posterior: NUTS through the weak likelihood, then
                    :func:`pymc_wendy.forward_correction` (the exact likelihood around the ODE
                    solution, the initial state a parameter); the noise level is inferred
                    (``sigma ~ HalfNormal(sd of the data)`` per state), not plugged in,
                    unless ``fit_options`` gives it.
``mle+analytic``    a bias correction (:mod:`pymc_wendy.weak.bias`) appended to ``mle``, ``nuts``,
                    ``sft`` or ``laplace`` with ``+``: ``mle+analytic-hessian``, ``nuts+profile``.
==================  ===========================================================================

Methods sharing an estimator share one fit per data set. The Bayesian methods use the priors
of :func:`default_priors` (uniform on the problem's bounds, else ``Normal(0, 10)``) and the
noise level estimated from the data, like the frequentist ones (``fit_options={"sigma":
"residual"}`` switches both to the residual estimate; ``{"sigma": "true"}`` gives every method
the noise level that generated each data set, as known instrument noise). Problems with known inputs
(``Problem.inputs``) pass each data set's inputs to every method.

Every run is reproducible on its own: its data are drawn with a seed derived from the study's
``seed``, the noise ratio, the number of points and the data set index (not the method), so all
methods see the same data sets. With ``store=`` each finished run is appended to
``<store>/runs.jsonl`` as soon as it completes; calling :func:`run_coverage` again with the same
store skips what is done (a study can be interrupted, resumed, or extended with more data sets,
noise ratios or methods), and the assembled result is saved to ``<store>/results.nc``.
:func:`open_coverage` reads a store back, finished or still running, without its settings.

The package holds one concept per module: :mod:`.methods` (method names), :mod:`.runners`
(one estimator on one data set; the Bayesian runs and :func:`default_priors` in
:mod:`.bayesian`), :mod:`.pool` (where runs execute: in this process, a local process pool or
a given executor), :mod:`.store` (the resumable ``runs.jsonl`` store), :mod:`.dataset` (runs as
an :class:`xarray.Dataset`; :func:`open_coverage`), :mod:`.summary` (:func:`summarize`,
:func:`to_table`) and :mod:`.study` (:func:`run_coverage`). Names of those modules outside
``__all__`` are for the package's own use.
"""

from pymc_wendy.studies.coverage.bayesian import default_priors
from pymc_wendy.studies.coverage.dataset import open_coverage
from pymc_wendy.studies.coverage.study import run_coverage
from pymc_wendy.studies.coverage.summary import summarize, to_table

__all__ = ["default_priors", "open_coverage", "run_coverage", "summarize", "to_table"]
