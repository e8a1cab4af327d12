"""The data users bring, as the float arrays the weak form needs.

Every entry point (:func:`~pymc_wendy.fit`, :class:`~pymc_wendy.WeakLikelihood`,
:class:`~pymc_wendy.WeakODELikelihood`) passes its ``t`` and ``U`` through :func:`as_data`:

* **Labels.** A :class:`pandas.DataFrame` is matched to the model's states by column name
  (reordered; an error names missing or unknown columns); its index is the time axis when
  ``t`` is None. An :class:`xarray.DataArray` is read by dimension name: the dimension whose
  coordinate holds the state names is the state axis, the other one is time. A
  :class:`pandas.Series` is the data of a one-state model.
* **Time axes.** Datetimes (``numpy.datetime64``, a pandas ``DatetimeIndex`` or ``Series``)
  and durations (``timedelta64``, ``TimedeltaIndex``) become floats counted from the first
  time point in ``time_unit`` (default days for datetimes, seconds for durations). The
  parameters are then per that unit (a rate in 1/day).
* **Missing values.** NaN or masked (:class:`numpy.ma.MaskedArray`) entries are missing. The
  weak form evaluates the right-hand side ``f(u(t_m))`` at each time point, which needs every
  state there, so a time point with any missing entry is left out (a :class:`MissingDataWarning`
  says how many) and the others form a non-uniform grid. Infinite values stay an error.
* **Hidden states.** A state never measured is a column of NaN, or a column a DataFrame
  (a coordinate value a DataArray) does not have: :func:`hidden_states` names them and
  :func:`observed_part` keeps the other columns, for the equations of the observed states
  (:func:`~pymc_wendy.input_output`).
* **Known initial states.** :func:`as_initial_state` reads the state at a known time ``t0``
  (a dose given at time 0, a count known at the start): values in the state order or by
  name, ``t0`` in the units of the time axis (a datetime for a datetime axis).

Nothing here depends on the weak form: the returned arrays still go through
:func:`pymc_wendy._validation.check_data`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from pymc_wendy._validation import check_real

__all__ = [
    "InitialState",
    "LatentInitialState",
    "MissingDataWarning",
    "ObservedData",
    "as_data",
    "as_initial_state",
    "as_times",
    "hidden_states",
    "observed_part",
    "time_labels",
]

#: the default unit of datetime time axes, and of durations
DATETIME_UNIT = "D"
DURATION_UNIT = "s"


class MissingDataWarning(UserWarning):
    """Time points with missing (NaN or masked) entries were left out of the data."""


class ObservedData(NamedTuple):
    """Data as float arrays, with what :func:`as_data` did to get there.

    Attributes
    ----------
    t : ndarray, shape (N,)
        Times of the kept rows (floats, in ``time_unit`` from ``origin`` for datetimes).
    U : ndarray, shape (N, D)
        The kept rows, columns in the model's state order.
    kept : ndarray of bool, shape (M,)
        Which of the given time points were kept (False: a missing entry).
    t_given : ndarray, shape (M,)
        All the given times as floats (inputs given as values on the time points use them).
    origin : Any
        The first given time point when the time axis was datetimes or durations, else None.
    time_unit : str or None
        The unit of ``t`` for datetime or duration axes, else None.
    """

    t: np.ndarray
    U: np.ndarray
    kept: np.ndarray
    t_given: np.ndarray
    origin: Any = None
    time_unit: str | None = None


def _is_pandas(obj: Any, *names: str) -> bool:
    """Whether ``obj`` is one of the pandas classes ``names`` (without importing pandas)."""
    cls = type(obj)
    return cls.__module__.split(".")[0] == "pandas" and any(
        c.__name__ in names for c in cls.__mro__
    )


def _is_dataarray(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.split(".")[0] == "xarray" and cls.__name__ == "DataArray"


def as_times(t: Any, time_unit: str | None = None) -> tuple[np.ndarray, Any, str | None]:
    """Times as floats: ``(t, origin, unit)``; datetimes and durations counted from the first.

    Parameters
    ----------
    t : array_like
        Numbers, ``datetime64`` / ``timedelta64`` values, or a pandas index or series of them
        (periods count from their start; time-zone-aware times in elapsed time between their
        UTC instants, and labelled results show them in UTC).
    time_unit : str, optional
        Unit of the returned times for datetime or duration axes: a ``numpy.timedelta64``
        unit (``"s"``, ``"m"``, ``"h"``, ``"D"``, ``"W"``, ...) or a pandas alias (``"min"``).
        Default: days for datetimes, seconds for durations. Refused for numeric times
        (they are already in their own unit).

    Returns
    -------
    (ndarray, origin, str or None)
        Float times, the first time point (None for numeric times) and the unit.
    """
    if _is_pandas(t, "Index", "Series"):
        t = t.to_numpy()
    arr = np.asarray(t)
    kind = arr.dtype.kind
    if kind not in "mM":
        if arr.dtype == object and arr.size and hasattr(arr.flat[0], "to_timestamp"):
            # pandas Periods (a PeriodIndex's values): each at its start. Cast directly to
            # datetime64 they all became the same instant (issue 54, defect 8)
            import pandas as pd

            arr = pd.PeriodIndex(arr.ravel()).to_timestamp().to_numpy().reshape(arr.shape)
            kind = "M"
        elif arr.dtype == object and arr.size and hasattr(arr.flat[0], "year"):
            # datetime.datetime / pandas Timestamp objects
            if getattr(arr.flat[0], "tzinfo", None) is not None:
                # time-zone aware: elapsed time is counted between UTC instants (a daylight
                # saving change is no gap in the data); numpy has no time zones and warned
                import pandas as pd

                utc = pd.to_datetime(arr.ravel(), utc=True).tz_localize(None)
                arr = utc.to_numpy().reshape(arr.shape)
            else:
                arr = arr.astype("datetime64[ns]")
            kind = "M"
        else:
            if time_unit is not None:
                raise ValueError(
                    "time_unit applies to datetime or timedelta time axes; t is numeric, so "
                    "it is already in its own unit (rescale t instead)"
                )
            return arr, None, None
    if np.any(np.isnat(arr)):
        raise ValueError("t contains missing times (NaT)")
    unit = time_unit or (DATETIME_UNIT if kind == "M" else DURATION_UNIT)
    step = _unit_step(unit)
    origin = arr.flat[0] if arr.size else None
    rel = arr - origin
    return rel / step, origin, unit


def time_labels(data: ObservedData) -> np.ndarray:
    """The kept rows' times as the user gave them: numbers, or datetimes / durations
    rebuilt from ``origin`` and ``time_unit`` (to the nanosecond); coordinate values for
    labelled results."""
    if data.origin is None:
        return np.asarray(data.t)
    ns = _unit_step(data.time_unit) / np.timedelta64(1, "ns")
    return data.origin + np.rint(np.asarray(data.t) * ns).astype("int64").astype("m8[ns]")


def _unit_step(unit: str) -> np.timedelta64:
    aliases = {"min": "m", "sec": "s", "hour": "h", "day": "D", "days": "D", "week": "W"}
    code = aliases.get(str(unit), str(unit))
    try:
        step = np.timedelta64(1, code)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"time_unit must be a numpy time unit ('s', 'm', 'h', 'D', 'W', 'ms', ...); "
            f"got {unit!r}"
        ) from exc
    if code in ("Y", "M"):
        raise ValueError(
            f"time_unit {unit!r} has no fixed length; use 'D' or 'W' and rescale afterwards"
        )
    return step


def _columns_by_name(
    columns: Sequence,
    states: Sequence[str],
    what: str,
    hint: str = "rename them, or pass U.to_numpy() in the state order",
) -> np.ndarray | None:
    """Positions of the model's states among labelled columns; None for unlabelled ones."""
    labels = list(columns)
    if all(isinstance(c, int | np.integer) for c in labels) and labels == list(range(len(labels))):
        return None  # a default RangeIndex: positional, like an array
    names = [str(c) for c in labels]
    missing = [s for s in states if s not in names]
    extra = [c for c in names if c not in states]
    if missing or extra:
        raise ValueError(
            f"{what} {names} do not match the model's states {list(states)}"
            + (f": missing {missing}" if missing else "")
            + (f"; unknown {extra}" if extra else "")
            + f" ({hint})"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{what} {names} repeat a name")
    return np.array([names.index(s) for s in states])


def _from_dataframe(U, t, states: Sequence[str]):
    order = _columns_by_name(U.columns, states, "the DataFrame's columns")
    values = U.to_numpy(dtype=float, na_value=np.nan)
    if order is not None:
        values = values[:, order]
    return values, (U.index if t is None else t)


def _from_dataarray(U, t, states: Sequence[str]):
    if U.ndim == 1:
        return U.to_numpy().astype(float), (U[U.dims[0]].to_numpy() if t is None else t)
    if U.ndim != 2:
        raise ValueError(f"U must have 2 dims (time, state); the DataArray has {U.dims}")
    state_dims = [
        d for d in U.dims if d in U.coords and set(map(str, U[d].to_numpy())) == set(states)
    ]
    if len(state_dims) != 1:
        raise ValueError(
            f"cannot tell the state dimension of the DataArray with dims {U.dims}: one "
            f"dimension needs a coordinate holding the model's states {list(states)}"
        )
    sdim = state_dims[0]
    tdim = next(d for d in U.dims if d != sdim)
    values = U.sel({sdim: list(states)}).transpose(tdim, sdim).to_numpy().astype(float)
    if t is None:
        if tdim not in U.coords:
            raise ValueError(f"the DataArray's dimension {tdim!r} has no time coordinate; pass t")
        t = U[tdim].to_numpy()
    return values, t


def _labelled(U, t, states: Sequence[str]):
    """``(values, t)`` from a labelled container, or ``(U, t)`` unchanged."""
    if _is_pandas(U, "DataFrame"):
        return _from_dataframe(U, t, states)
    if _is_pandas(U, "Series"):
        return U.to_numpy(dtype=float, na_value=np.nan), (U.index if t is None else t)
    if _is_dataarray(U):
        return _from_dataarray(U, t, states)
    if isinstance(U, np.ma.MaskedArray):
        return np.ma.filled(U.astype(float), np.nan), t
    return U, t


def hidden_states(U: Any, states: Sequence[str]) -> tuple[str, ...]:
    """The states ``U`` never measures: all-NaN (or all-masked) columns of an array of one
    column per state, the states a labelled DataFrame or DataArray lacks (or holds only
    NaN for). Empty when every state has a value somewhere; anything unreadable is left
    for :func:`as_data` to report."""
    states = list(states)
    names = _state_labels(U, states)
    try:
        if names is not None:
            present = set(names)
            values = {n: np.asarray(_column(U, n), dtype=float) for n in names if n in states}
            return tuple(s for s in states if s not in present or np.all(np.isnan(values[s])))
        if isinstance(U, np.ma.MaskedArray):
            U = np.ma.filled(U.astype(float), np.nan)
        if np.iscomplexobj(U):  # as_data refuses it, naming it
            return ()
        A = np.asarray(U, dtype=float)
    except (TypeError, ValueError):
        return ()
    if A.ndim != 2 or A.shape[1] != len(states) or A.shape[0] == 0:
        return ()
    return tuple(s for s, col in zip(states, A.T, strict=True) if np.all(np.isnan(col)))


def _state_labels(U: Any, states: Sequence[str]) -> list[str] | None:
    """The state names of a labelled ``U`` whose labels are all state names; None otherwise."""
    if _is_pandas(U, "DataFrame"):
        labels = [str(c) for c in U.columns]
    elif _is_dataarray(U) and U.ndim == 2:
        dims = [
            d for d in U.dims if d in U.coords and set(map(str, U[d].to_numpy())) <= set(states)
        ]
        if len(dims) != 1:
            return None
        labels = [str(v) for v in U[dims[0]].to_numpy()]
    else:
        return None
    return labels if labels and set(labels) <= set(states) else None


def _column(U: Any, name: str):
    if _is_pandas(U, "DataFrame"):
        return U[[c for c in U.columns if str(c) == name][0]].to_numpy(dtype=float, na_value=np.nan)
    dim = next(d for d in U.dims if d in U.coords and name in set(map(str, U[d].to_numpy())))
    return U.sel({dim: name}).to_numpy()


def observed_part(U: Any, states: Sequence[str], observed: Sequence[str]) -> Any:
    """``U`` restricted to the ``observed`` states (labels kept: a DataFrame's columns, a
    DataArray's state coordinate, an array's columns in ``states`` order)."""
    if _is_pandas(U, "DataFrame"):
        return U[[c for c in U.columns if str(c) in observed]]
    if _is_dataarray(U):
        dim = next(
            d for d in U.dims if d in U.coords and set(observed) <= set(map(str, U[d].to_numpy()))
        )
        return U.sel({dim: list(observed)})
    idx = [list(states).index(s) for s in observed]
    if isinstance(U, np.ma.MaskedArray):
        return U[:, idx]
    return np.asarray(U, dtype=float)[:, idx]


def as_data(
    t: Any,
    U: Any,
    states: Sequence[str],
    *,
    time_unit: str | None = None,
    warn: bool = True,
    undefined: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, str]] | None = None,
) -> ObservedData:
    """Read ``(t, U)`` as float arrays in the model's state order, leaving out missing rows.

    Parameters
    ----------
    t : array_like or None
        Times: numbers, datetimes or durations (see :func:`as_times`); None to take them
        from ``U``'s index (DataFrame, Series) or time coordinate (DataArray).
    U : array_like, DataFrame, Series, DataArray or masked array
        Observations, one row per time point. Labelled columns or dims are matched to
        ``states`` by name.
    states : sequence of str
        The model's state names, in order.
    time_unit : str, optional
        Unit of datetime or duration time axes (default days, resp. seconds).
    warn : bool, default True
        Issue a :class:`MissingDataWarning` when rows are left out.
    undefined : callable, optional
        ``undefined(t, U) -> (rows, what)``: complete rows where the model's equations are
        undefined (``log I`` at ``I <= 0``), left out as missing rows are, and the
        expressions concerned, for the warning.

    Returns
    -------
    ObservedData
        ``t`` and ``U`` of the kept rows, the mask of kept rows and the time origin.

    Raises
    ------
    ValueError
        When labels do not match the states, ``t`` is missing and ``U`` has no time axis, or
        every time point has a missing entry.
    """
    U, t = _labelled(U, t, states)
    if t is None:
        raise ValueError(
            "t is missing: pass the time points, or U as a pandas DataFrame/Series (its index) "
            "or an xarray DataArray with a time coordinate"
        )
    t, origin, unit = as_times(t, time_unit)
    check_real(U, "U")
    try:
        U = np.asarray(U, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"U must be numbers; could not read it as floats ({exc})") from exc
    if U.ndim == 1 and len(states) == 1:
        U = U[:, None]
    if U.ndim != 2 or t.ndim != 1 or U.shape[0] != t.shape[0] or U.shape[1] != len(states):
        # check_data names the shape problem (before the missing entries: a NaN column of
        # a state the model does not have is a column too many, issue 54 defect 6)
        return ObservedData(t, U, np.ones(np.shape(t)[:1], dtype=bool), t, origin, unit)
    t_given = t
    missing = np.isnan(U).any(axis=1)
    if missing.all():
        raise ValueError("every time point has a missing (NaN or masked) entry")
    if missing.any() and warn:
        warnings.warn(
            f"{int(missing.sum())} of {t.size} time points have missing (NaN or masked) "
            "entries and are left out: the weak form needs every state at a time point",
            MissingDataWarning,
            stacklevel=3,
        )
    if undefined is not None:
        outside, what = undefined(t, np.where(missing[:, None], 1.0, U))
        outside &= ~missing
        if outside.all():
            raise ValueError(f"the model's terms {what} are undefined at every time point")
        if outside.any() and warn:
            warnings.warn(
                f"{int(outside.sum())} of {t.size} time points lie outside the domain of the "
                f"model's terms {what} (at t = {_first_times(t[outside])}) and are left out "
                "as missing entries are",
                MissingDataWarning,
                stacklevel=3,
            )
        missing = missing | outside
    kept = ~missing
    if missing.any():
        t, U = t[kept], U[kept]
    return ObservedData(t, U, kept, t_given, origin, unit)


def _first_times(t: np.ndarray, n: int = 5) -> str:
    shown = ", ".join(f"{x:g}" for x in t[:n])
    return shown + (", ..." if t.size > n else "")


class InitialState(NamedTuple):
    """A state known exactly at a time: ``u(t0) = u0``.

    Attributes
    ----------
    t0 : float
        The time, on the float time axis of :class:`ObservedData` (at or before its first
        kept time point).
    u0 : ndarray, shape (D,)
        The state there, in the model's state order.
    system : ODEModel or None
        The model whose state ``u0`` is when it is not the likelihood's own: for data that
        never measure some states, the model given, observing the measured ones
        (:meth:`~pymc_wendy.ODEModel.observing`). The weak form, fitted to the equations of
        the observed states, then has no boundary row; every forward solve starts from
        ``u0`` with this model.
    """

    t0: float
    u0: np.ndarray
    system: Any = None

    def solved_model(self, model):
        """The model a forward solve from this state solves: :attr:`system`, else ``model``."""
        return model if self.system is None else self.system


class LatentInitialState(NamedTuple):
    """A known initial state of every state of ``system`` (the model given, observing the
    measured states), handed on with the equations of the observed states that replace it
    (:func:`~pymc_wendy.model.input_output.eliminate_hidden`); :func:`as_initial_state`
    reads it against the data's time axis."""

    values: Any
    system: Any


def as_initial_state(
    initial_state: Any, t0: Any, data: ObservedData, states: Sequence[str]
) -> InitialState | None:
    """Read a known initial state and its time against the data's time axis.

    Parameters
    ----------
    initial_state : array_like, mapping or None
        ``D`` values in the state order, or a mapping (dict, pandas Series) from every state
        name to its value. None: no known initial state (``t0`` must then be None too).
    t0 : float, datetime, duration or None
        When the state is known, in the units of the data's time axis (a datetime or duration
        for such axes). Default: the first time point of the data. It may lie before the
        first observation (a dose at time 0, first sample later), not after it.
    data : ObservedData
        The data (:func:`as_data`).
    states : sequence of str
        The model's state names.

    Returns
    -------
    InitialState or None
    """
    if initial_state is None:
        if t0 is not None:
            raise ValueError("t0 was given without initial_state: t0 is when it is known")
        return None
    system = None
    if isinstance(initial_state, LatentInitialState):
        initial_state, system = initial_state
        states = system.states
    D = len(states)
    if isinstance(initial_state, dict) or _is_pandas(initial_state, "Series"):
        keys = list(initial_state.keys())
        values = [initial_state[k] for k in keys]
        order = _columns_by_name(
            keys, states, "initial_state names",
            hint="every state's initial value is needed",
        )  # fmt: skip
        initial_state = values if order is None else [values[i] for i in order]
    try:
        u0 = np.asarray(initial_state, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"initial_state must be {D} numbers; got {initial_state!r}") from exc
    if u0.shape != (D,):
        raise ValueError(
            f"initial_state must have one value per state ({D}: {list(states)}); got shape "
            f"{u0.shape}"
        )
    if not np.all(np.isfinite(u0)):
        raise ValueError(f"initial_state must be finite; got {u0}")
    first = float(data.t[0])
    if t0 is None:
        time = first
    else:
        time = _time_point(t0, data)
        if time > first:
            raise ValueError(
                f"t0 = {t0} is after the first observation (at {first:g} on the data's time "
                "axis); the known state must come at or before the data"
            )
    return InitialState(time, u0, system)


def _time_point(t0: Any, data: ObservedData) -> float:
    """One time point on the float axis of ``data`` (datetimes counted from its origin)."""
    arr = np.asarray(t0)
    if arr.ndim != 0:
        raise ValueError(f"t0 must be one time point; got {t0!r}")
    if data.origin is None:
        if arr.dtype.kind in "mM" or hasattr(t0, "year"):
            raise ValueError(f"t0 = {t0!r} is a datetime, but the data's time axis is numeric")
        try:
            time = float(arr)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"t0 must be a number; got {t0!r}") from exc
    else:
        origin = np.asarray(data.origin)
        try:
            value = (
                arr.astype(origin.dtype)
                if arr.dtype.kind in "mM"
                else np.asarray(t0, dtype=origin.dtype)
            )
            time = float((value - origin) / _unit_step(data.time_unit))
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"t0 = {t0!r} must be a time point of the data's kind ({origin.dtype})"
            ) from exc
    if not np.isfinite(time):
        raise ValueError(f"t0 must be finite; got {t0!r}")
    return time
