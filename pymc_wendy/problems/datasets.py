"""Real data sets shipped with the package.

:func:`theophylline`: the classic population-pharmacokinetic data of Boeckmann, Sheiner and
Beal (1994), 12 subjects given one oral dose of theophylline and sampled 11 times over 24 h
(R's ``datasets::Theoph``). :func:`lynx_hare`: the Hudson's Bay Company lynx and hare pelts,
1900-1920, the classic predator-prey series. :func:`boarding_school`: pupils in bed in the
1978 influenza outbreak of an English boarding school, the classic SIR data set.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["boarding_school", "lynx_hare", "theophylline"]


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


def lynx_hare():
    """The Hudson's Bay Company pelts of lynx and snowshoe hare, 1900-1920 (21 years).

    Returns
    -------
    pandas.DataFrame
        One row per year, columns ``year``, ``hare`` and ``lynx`` (thousands of pelts), in the
        state order of the catalogue's ``lotka_volterra`` model (prey, predator).
        ``attrs["source"]`` names the origin.

    Notes
    -----
    MacLulich, D. A. (1937), *Fluctuations in the numbers of the varying hare (Lepus
    americanus)*, University of Toronto Studies, Biological Series 43; as tabulated by
    P. Howard (Texas A&M lecture notes) and used in the Stan case study "Predator-prey
    population dynamics" (B. Carpenter, 2018). Pelts are a proxy for the populations: the
    case study's log-normal measurement model is the usual one.

    Examples
    --------
    >>> df = lynx_hare()
    >>> len(df), df["year"].iloc[0], df["hare"].iloc[0]
    (21, 1900, 30.0)
    """
    import pandas as pd

    path = resources.files("pymc_wendy.problems") / "data" / "lynx_hare.csv"
    with resources.as_file(path) as file:
        df = pd.read_csv(file, comment="#")
    df = df.astype({"year": int, "lynx": float, "hare": float})[["year", "hare", "lynx"]]
    if not (len(df) == 21 and np.all(df[["hare", "lynx"]].to_numpy() > 0)):
        raise RuntimeError(f"the shipped lynx-hare data are damaged ({path})")
    df.attrs["source"] = "Hudson's Bay Company pelts (MacLulich 1937), via the Stan case study"
    return df


#: pupils of the boarding school (:func:`boarding_school`)
BOARDING_SCHOOL_PUPILS = 763


def boarding_school():
    """Influenza in an English boarding school, 1978: pupils in bed on 14 consecutive days.

    Returns
    -------
    pandas.DataFrame
        One row per day, columns ``day`` (1-14) and ``in_bed`` (pupils confined to bed, the
        ``I`` of an SIR model). ``attrs["pupils"]`` is the school's 763 boys, every one
        susceptible at the start but the one who brought the virus back;
        ``attrs["source"]`` names the origin.

    Notes
    -----
    "Influenza in a boarding school", British Medical Journal 1978, 1(6112): 587; distributed
    with the R package ``outbreaks`` (``influenza_england_1978_school``) and used in the Stan
    case study "Bayesian workflow for disease transmission modeling in Stan" (Grinsztajn,
    Semenova, Margossian and Riou, 2021). ``docs/hidden_states.md`` fits it with ``S`` and
    ``R`` hidden.

    Examples
    --------
    >>> df = boarding_school()
    >>> len(df), int(df["in_bed"].max()), df.attrs["pupils"]
    (14, 298, 763)
    """
    import pandas as pd

    path = resources.files("pymc_wendy.problems") / "data" / "boarding_school.csv"
    with resources.as_file(path) as file:
        df = pd.read_csv(file, comment="#")
    df = df.astype({"day": int, "in_bed": float})[["day", "in_bed"]]
    if not (len(df) == 14 and df["in_bed"].sum() == 1559):
        raise RuntimeError(f"the shipped boarding-school data are damaged ({path})")
    df.attrs["pupils"] = BOARDING_SCHOOL_PUPILS
    df.attrs["source"] = "British Medical Journal 1978, 1(6112): 587, via R's outbreaks package"
    return df
