r"""Doses at known times: boluses (an amount given at once) and infusions (at a constant rate).

A dose is a known input of the model (:class:`~pymc_wendy.ODEModel` ``inputs=[...]``), and the
right-hand side says where it goes and in which units, like any other input::

    ode = pw.ODEModel(
        lambda t, u, p, w: [-p[0] * u[0] + w[0], p[0] * u[0] / p[2] - p[1] * u[1]],
        states=["gut", "C"], params=["ka", "ke", "V"], inputs=["dose"],
    )

So a bioavailability, a volume or a unit conversion is a coefficient the model writes
(``F * dose / V``), not an option of the doses. As a function of time the doses are

.. math:: w(t) = \sum_i A_i\,\delta(t - \tau_i) + \sum_j R_j\,1[s_j \le t < e_j],

boluses ``A_i`` at ``tau_i`` and infusions at rate ``R_j = A_j / (e_j - s_j)``. The weak form
uses the input only through ``int phi(t) w(t) dt``, which for a bolus is ``A_i phi(tau_i)``:
exact, with no smoothing of the jump (:meth:`Doses.integrate`). The state the bolus goes into
jumps by ``coefficient * A_i`` at ``tau_i``; the data then jump too, and the test functions
are integrated with each side of the jump interpolated separately
(:class:`~pymc_wendy.weak.test_functions.quadrature.ProductRule`). Forward solves restart at
every dose and apply the jump (:func:`~pymc_wendy.solve`).

Convention: the state *at* a bolus time is the value just before the dose (a sample taken at
a dose time is a trough), and a known ``initial_state`` at a dose time is the pre-dose state.
"""

from __future__ import annotations

import functools

import numpy as np

from pymc_wendy.model.inputs import Input

__all__ = ["Doses"]


def _infusion_rate(times, starts, ends, rates) -> np.ndarray:
    times = np.asarray(times, dtype=float)
    on = (times[..., None] >= starts) & (times[..., None] < ends)
    return np.sum(np.where(on, rates, 0.0), axis=-1)


def _as_column(values, n: int, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim > 1 or (a.ndim == 1 and a.size not in (1, n)):
        raise ValueError(f"{name} must be one number or one per dose ({n}); got shape {a.shape}")
    a = np.broadcast_to(a.ravel() if a.ndim else a, (n,)).astype(float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contain NaN or infinite values")
    return a


def _is_time_like(values) -> bool:
    """Whether ``values`` are datetimes or durations (numpy's, pandas', Python's)."""
    arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)
    if arr.dtype.kind in "mM":
        return True
    first = arr.flat[0] if arr.dtype == object and arr.size else None
    return first is not None and any(
        hasattr(first, a) for a in ("year", "to_timestamp", "total_seconds")
    )


def _numeric_times(times, durations, origin, time_unit) -> tuple[np.ndarray, np.ndarray]:
    """Dose times and durations as numbers on the data's time axis (module doc of
    :mod:`pymc_wendy.model.data`): datetimes and durations counted from ``origin`` in
    ``time_unit``. As floats, datetimes became nanoseconds since 1970 and every dose fell
    outside the data (issue 54, defect 3)."""
    from pymc_wendy.model.data import as_times

    if not _is_time_like(times):
        if origin is not None or time_unit is not None:
            raise ValueError(
                "origin and time_unit apply to dose times given as datetimes or durations; "
                "these are numbers, on the data's time axis already"
            )
        if _is_time_like(np.atleast_1d(durations)):
            raise ValueError(
                "dose durations are timedeltas but the dose times are numbers: give the "
                "durations as numbers in the data's time unit"
            )
        return np.asarray(times, dtype=float), durations
    if origin is None:
        raise ValueError(
            "dose times are datetimes or durations: give origin=, the data's first time (for "
            "example df.index[0]), so that they are counted as the data's times are (and "
            "time_unit= if the data's unit is not the default)"
        )
    import pandas as pd  # infers the kind of a mixed list (Timestamps, Timedeltas, Periods)

    flat = np.asarray(times.to_numpy() if hasattr(times, "to_numpy") else times, dtype=object)
    t, _, unit = as_times(pd.Index([origin, *flat.ravel()]), time_unit)
    if _is_time_like(np.atleast_1d(durations)):
        d = pd.to_timedelta(np.atleast_1d(np.asarray(durations, dtype=object)).ravel())
        durations = as_times(pd.Index([pd.Timedelta(0), *d]), unit)[0][1:]
    return np.asarray(t[1:], dtype=float).reshape(flat.shape), durations


class Doses(Input):
    """Doses at known times, an input of a model: boluses and infusions.

    Parameters
    ----------
    times : array_like, shape (n,)
        Start of each dose (in the data's time units; the order does not matter, and several
        doses may share a time).
    amounts : float or array_like, shape (n,)
        Amount of each dose (>= 0), in the units the model's coefficient of the input expects.
    durations : float or array_like, shape (n,), default 0
        0 for a bolus (the amount at once), > 0 for an infusion of the amount at a constant
        rate ``amount / duration`` from ``time`` to ``time + duration``.
    name : str, optional
        A label for messages.
    origin : datetime or duration, optional
        For dose times given as datetimes or durations (``datetime64``, ``timedelta64``,
        pandas ``Timestamp`` / ``Timedelta`` / ``Period`` or an index of them): the data's
        first time (``df.index[0]``, say), from which the data's times are counted too.
        Required for such times, refused for numbers.
    time_unit : str, optional
        With ``origin``: the data's time unit, when it is not the default (days for
        datetimes, seconds for durations; :func:`pymc_wendy.fit`'s ``time_unit``).
        Durations given as timedeltas are converted to it too.

    Notes
    -----
    Pointwise, :meth:`__call__` returns the infusion rate only: a bolus has no value at a
    time. It acts through the weak form's integrals (:meth:`integrate`) and as a jump of
    the state in forward solves (:attr:`bolus_times`, :meth:`bolus_amount`). See the
    module documentation for the convention at a dose time.

    Examples
    --------
    Three oral doses of 320 mg every 12 h, and a 1-hour infusion of 500 mg at t = 36:

    >>> doses = Doses([0.0, 12.0, 24.0, 36.0], [320, 320, 320, 500], durations=[0, 0, 0, 1])
    >>> doses.bolus_times.tolist()
    [0.0, 12.0, 24.0]
    >>> float(doses(np.array([36.5]))[0])
    500.0
    """

    def __init__(
        self,
        times,
        amounts,
        *,
        durations=0.0,
        name: str | None = None,
        origin=None,
        time_unit: str | None = None,
    ):
        times, durations = _numeric_times(times, durations, origin, time_unit)
        if times.ndim > 1:
            raise ValueError(f"dose times must be one-dimensional; got shape {times.shape}")
        times = times.ravel()
        if times.size == 0:
            raise ValueError("Doses needs at least one dose time")
        if not np.all(np.isfinite(times)):
            raise ValueError("dose times contain NaN or infinite values")
        n = times.size
        amounts = _as_column(amounts, n, "dose amounts")
        durations = _as_column(durations, n, "dose durations")
        if np.any(amounts < 0):
            raise ValueError(f"dose amounts must be >= 0; got {amounts[amounts < 0].tolist()}")
        if np.any(durations < 0):
            raise ValueError(
                f"dose durations must be >= 0 (0 for a bolus); got {durations[durations < 0]}"
            )
        bolus = durations == 0
        order = np.argsort(times[bolus], kind="stable")
        #: times of the boluses, increasing (repeated for doses at the same time)
        self.bolus_times = times[bolus][order]
        #: amount of each bolus, in the order of :attr:`bolus_times`
        self.bolus_amounts = amounts[bolus][order]
        starts, ends = times[~bolus], times[~bolus] + durations[~bolus]
        rates = amounts[~bolus] / durations[~bolus]
        #: the infusions as ``(start, end, rate)`` arrays
        self.infusions = (starts, ends, rates)
        rate = functools.partial(_infusion_rate, starts=starts, ends=ends, rates=rates)
        super().__init__(
            rate, breakpoints=np.concatenate([self.bolus_times, starts, ends]), name=name
        )

    @property
    def jump_times(self) -> np.ndarray:
        """The distinct bolus times, where the states a bolus enters jump."""
        return np.unique(self.bolus_times)

    def bolus_amount(self, time: float) -> float:
        """The total bolus amount given at ``time`` (0 if none)."""
        return float(np.sum(self.bolus_amounts[self.bolus_times == time]))

    def integrate(self, test_functions, derivative: int = 0) -> np.ndarray:
        """``int phi_k^(derivative)(t) w(t) dt`` over the data span: the infusions by
        quadrature (exact: piecewise constant), each bolus in ``[t_0, t_M)`` as
        ``A_i phi_k^(derivative)(tau_i)``.

        A bolus at ``t_0`` counts in full: ``t_0``'s state is the pre-dose one (the module's
        convention), which a boundary test function at a known initial state carries.
        """
        out = (
            super().integrate(test_functions, derivative)
            if self.infusions[0].size
            else np.zeros(test_functions.K)
        )
        t = test_functions.t
        inside = (self.bolus_times >= t[0]) & (self.bolus_times < t[-1])
        if np.any(inside):
            values = test_functions.evaluate(self.bolus_times[inside], derivative=derivative)
            out = out + values @ self.bolus_amounts[inside]
        return out

    def __repr__(self) -> str:
        n_inf = self.infusions[0].size
        return f"Doses({self.bolus_times.size} boluses, {n_inf} infusions)"


def jump_times(inputs) -> np.ndarray:
    """The distinct bolus times of the :class:`Doses` among ``inputs`` (a mapping of name to
    :class:`~pymc_wendy.model.inputs.Input`; derivatives of doses too)."""
    times = [w.jump_times for w in inputs.values() if hasattr(w, "jump_times")]
    return np.unique(np.concatenate(times)) if times else np.zeros(0)


def discontinuities(model, inputs) -> dict[str, np.ndarray]:
    """Where the measured states of ``model`` jump and where they kink at bolus doses:
    ``{"breaks": ..., "kinks": ...}`` (the keywords of
    :func:`~pymc_wendy.build_test_functions`).

    A bolus is a delta in the ``q``-th derivative of a state of order ``q`` (through the
    input's ``k``-th derivative in an input-output equation,
    :class:`~pymc_wendy.model.input_output.DerivativeInput`), so derivative ``q - 1 - k`` of
    the state jumps: the state itself when that is 0, otherwise only a derivative.
    """
    names = list(model.inputs)
    jumps, kinks = [np.zeros(0)], [np.zeros(0)]
    for d, i in model.input_terms:
        w = inputs[names[i]]
        times = getattr(w, "jump_times", None)
        if times is None or not times.size:
            continue
        (jumps if model.orders[d] - 1 - getattr(w, "order", 0) <= 0 else kinks).append(times)
    breaks = np.unique(np.concatenate(jumps))
    return {"breaks": breaks, "kinks": np.setdiff1d(np.concatenate(kinks), breaks)}
