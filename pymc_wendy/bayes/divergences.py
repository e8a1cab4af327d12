"""Where a sampler's divergences sit, and what that says about the model's geometry.

NUTS reports *that* trajectories diverged; *where* says why. In a hierarchical model the usual
cause is a funnel: a group-level scale whose size sets the scale of the variables below it.
The non-centred form (``mu + tau * z``) struggles where the scale is large (the units' data
pin ``mu + tau * z``, so ``z`` is squeezed to a width of order ``se / tau``), the centred form
(``Normal(mu, tau)``) where it is small (the units are squeezed together). Measured on the
five-unit model of ``docs/experiments.md``: its non-centred divergences sat at ``tau`` near the
top of its posterior. :func:`pymc_wendy.hierarchical_normal` removes both funnels when each
unit can be fitted on its own.

:func:`divergence_report` finds the scalar whose divergent draws sit furthest into one tail
of its posterior (the median of their posterior percentiles), tests it against where
divergences would sit by chance, and words the advice; :func:`pymc_wendy.sample` warns with it
(:class:`DivergenceWarning`).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from scipy import stats

__all__ = ["DivergenceWarning", "divergence_report"]

#: how far from the middle the divergent draws' median percentile must be to name a tail
#: (beyond the 80th or below the 20th)
TAIL = 0.3
#: the chance, under "divergences anywhere" and over every scalar of the posterior, that some
#: scalar's divergences sit that far out: below it the tail is named
LEVEL = 0.01


class DivergenceWarning(UserWarning):
    """Divergences concentrated in one tail of one variable, with advice (see
    :func:`divergence_report`)."""


def divergence_report(idata, scales: Collection[str] = ()) -> str | None:
    """Say where the divergent transitions of ``idata`` sit, and what to do about them.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        With ``posterior`` and ``sample_stats["diverging"]`` (dims ``chain, draw`` first).
    scales : collection of str
        Names of group-level scale variables (positive, like a ``tau``): when the divergences
        sit in one tail of one of them, the advice names the parametrisation to try.

    Returns
    -------
    str or None
        None without divergences; otherwise the number of divergences, and, when their median
        posterior percentile in some scalar is beyond ``0.5 +- TAIL`` and that is unlikely by
        chance, that scalar, the tail and advice.

    Notes
    -----
    The chance is that of the median of ``n`` uniform percentiles lying that far out (a
    binomial tail), doubled for the two tails and multiplied by the number of scalars
    (Bonferroni), compared with :data:`LEVEL`. ``n`` counts runs of consecutive divergent
    draws in a chain, not draws: a chain stuck in one place diverges again and again there.
    """
    div = np.asarray(idata.sample_stats["diverging"].values, dtype=bool).ravel()
    sizes = idata.posterior.sizes
    if div.size != sizes["chain"] * sizes["draw"]:
        raise ValueError(
            f"sample_stats['diverging'] has {div.size} entries but the posterior has "
            f"{sizes['chain']} x {sizes['draw']} draws"
        )
    n = int(div.sum())
    if n == 0:
        return None
    head = f"{n} divergent transition(s) of {div.size}"
    found = _most_extreme(idata.posterior, div)
    if found is None:
        return f"{head}, not concentrated in one tail of any variable."
    name, label, q = found
    side = "large" if q > 0.5 else "small"
    where = (
        f"{head}, at {side} {label} (their median sits at percentile {100 * q:.0f} of its "
        "posterior)"
    )
    if name in scales and side == "large":
        advice = (
            f"in a non-centred model (mu + {name} * z) that is where the units' data squeeze z: "
            "if each unit's data determine its parameters better than the spread between units, "
            f"try the centred form (Normal(mu, {name})), or, when they are comparable, "
            "pw.hierarchical_normal with the units' own estimates and standard errors; a prior "
            f"on {name} that says what spread is plausible narrows what has to be explored"
        )
    elif name in scales:
        advice = (
            f"the neck of a funnel: in a centred model (Normal(mu, {name})) use the non-centred "
            f"form mu + {name} * z, or pw.hierarchical_normal with the units' own estimates "
            "and standard errors"
        )
    else:
        advice = (
            "raise target_accept, or reparametrise so that this variable's scale does not "
            "depend on the others"
        )
    return f"{where}: {advice} (docs/experiments.md, 'Sampling hierarchical models')."


def _most_extreme(posterior, div: np.ndarray) -> tuple[str, str, float] | None:
    """``(variable, scalar label, median percentile)`` of the scalar whose divergent draws
    sit furthest into a tail, if that passes :data:`TAIL` and :data:`LEVEL`."""
    best, n_scalars = None, 0
    for name, da in posterior.data_vars.items():
        x = np.asarray(da.values, dtype=float)
        flat = x.reshape(div.size, -1)
        for j in range(flat.shape[1]):
            col = flat[:, j]
            if not np.all(np.isfinite(col)) or np.ptp(col) == 0:
                continue
            n_scalars += 1
            q = float(np.median(stats.rankdata(col)[div] / col.size))
            if best is None or abs(q - 0.5) > abs(best[2] - 0.5):
                idx = np.unravel_index(j, x.shape[2:])
                label = name + (f"[{', '.join(map(str, idx))}]" if idx else "")
                best = (name, label, q)
    if best is None or abs(best[2] - 0.5) <= TAIL:
        return None
    chains = div.reshape(posterior.sizes["chain"], -1)
    runs = int(np.sum(chains[:, 0]) + np.sum(chains[:, 1:] & ~chains[:, :-1]))
    tail = 0.5 - abs(best[2] - 0.5)  # the probability of a percentile beyond the median's
    chance = 2 * n_scalars * float(stats.binom.sf(runs // 2, runs, tail))
    return best if chance < LEVEL else None
