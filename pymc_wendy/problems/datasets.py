"""Real data sets shipped with the package.

:func:`theophylline`: the classic population-pharmacokinetic data of Boeckmann, Sheiner and
Beal (1994), 12 subjects given one oral dose of theophylline and sampled 11 times over 24 h
(R's ``datasets::Theoph``).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["theophylline"]


def theophylline():
    """The Theophylline study: one oral dose, 11 serum concentrations per subject.

    Returns
    -------
    pandas.DataFrame
        One row per sample, columns ``subject`` (1-12), ``weight`` (kg), ``dose`` (mg/kg, given
        at time 0), ``time`` (h after the dose) and ``conc`` (mg/L). The concentration at
        time 0 is a pre-dose sample (not always 0). ``attrs["source"]`` names the origin.

    Notes
    -----
    Boeckmann, A. J., Sheiner, L. B. and Beal, S. L. (1994), NONMEM Users Guide, Part V;
    distributed with R as ``datasets::Theoph`` (columns renamed, values unchanged).

    Examples
    --------
    >>> df = theophylline()
    >>> df.groupby("subject").size().unique().tolist()
    [11]
    """
    import pandas as pd  # deferred: a dependency of xarray, needed only here

    path = resources.files("pymc_wendy.problems") / "data" / "theophylline.csv"
    with resources.as_file(path) as file:
        df = pd.read_csv(file, comment="#")
    df = df.astype({"subject": int, "weight": float, "dose": float, "time": float, "conc": float})
    if not (np.all(np.isfinite(df[["time", "conc"]].to_numpy())) and len(df) == 132):
        raise RuntimeError(f"the shipped Theophylline data are damaged ({path})")
    df.attrs["source"] = (
        "Boeckmann, Sheiner and Beal (1994), NONMEM Users Guide Part V; R datasets::Theoph"
    )
    return df
