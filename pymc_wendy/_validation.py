"""Input checks shared by every entry point, with errors that name the problem."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Magnitudes of time spans and data whose squares (and the products of the covariance) stay
#: inside double precision with room to spare; beyond them results would be silently wrong.
MAGNITUDE_RANGE = (1e-100, 1e100)


def check_real(x: Any, name: str) -> None:
    """Refuse boolean and complex arrays, which numpy's float conversion would turn into 0/1
    or strip of their imaginary part with only a warning."""
    kind = np.asarray(x).dtype.kind
    if kind == "b":
        raise ValueError(f"{name} is boolean (True/False); the weak form fits numbers")
    if kind == "c":
        raise ValueError(
            f"{name} is complex; the weak form fits real data: pass {name}.real, or the real "
            "and imaginary parts as separate states"
        )


def check_times(t: Any) -> np.ndarray:
    """A 1-D, finite, strictly increasing array of at least two times, as floats."""
    check_real(t, "t")
    t = np.asarray(t, dtype=float)
    if t.ndim != 1:
        raise ValueError(f"t must be a 1-D array of time points, got shape {t.shape}")
    if t.size < 2:
        raise ValueError(f"t must contain at least 2 time points, got {t.size}")
    if not np.all(np.isfinite(t)):
        raise ValueError("t contains NaN or infinite values")
    steps = np.diff(t)
    if np.any(steps <= 0):
        i = int(np.flatnonzero(steps <= 0)[0])
        raise ValueError(
            f"t must be strictly increasing (sorted, no repeats); t[{i}] = {t[i]:g} >= "
            f"t[{i + 1}] = {t[i + 1]:g}"
        )
    span = float(t[-1] - t[0])
    lo, hi = MAGNITUDE_RANGE
    if not lo <= span <= hi or not lo <= float(np.min(steps)):
        raise ValueError(
            f"t spans {span:g} with smallest step {float(np.min(steps)):g}: outside the range "
            f"[{lo:g}, {hi:g}] that double precision handles here; express t in another unit"
        )
    return t


def check_data(t: Any, U: Any, n_states: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate a time grid and a data matrix (rows = time points) and return float arrays."""
    t = check_times(t)
    check_real(U, "U")
    U = np.asarray(U, dtype=float)
    if U.ndim == 1 and n_states == 1:
        U = U[:, None]
    if U.ndim != 2:
        raise ValueError(
            f"U must be 2-D with shape (n_times, n_states), got shape {U.shape}; "
            "use U[:, None] for a single state"
        )
    if U.shape[0] != t.size:
        hint = "; rows must be time points"
        if U.shape[1] == t.size:
            hint += " (pass U.T)"
        raise ValueError(f"U has {U.shape[0]} rows but t has {t.size} time points{hint}")
    if U.shape[1] == 0:
        raise ValueError("U has no columns (states)")
    if n_states is not None and U.shape[1] != n_states:
        raise ValueError(f"U has {U.shape[1]} columns but the model has {n_states} states")
    bad = ~np.isfinite(U)
    if bad.any():
        m, d = np.argwhere(bad)[0]
        raise ValueError(
            f"U contains NaN or infinite values ({int(bad.sum())}, first at row {m}, column {d}); "
            "remove or impute them before fitting"
        )
    _check_magnitude(U)
    return t, U


def _check_magnitude(U: np.ndarray) -> None:
    """A state whose size is out of :data:`MAGNITUDE_RANGE` (all-zero states are fine)."""
    size = np.max(np.abs(U), axis=0)
    lo, hi = MAGNITUDE_RANGE
    bad = (size > hi) | ((size > 0) & (size < lo))
    if bad.any():
        d = int(np.argmax(bad))
        raise ValueError(
            f"U's column {d} has values of size {size[d]:g}: outside the range [{lo:g}, {hi:g}] "
            "that double precision handles here (their squares overflow or underflow); "
            "rescale the data (the parameters then rescale with them)"
        )


def check_positive_data(t: np.ndarray, U: np.ndarray, states) -> None:
    """Log-normal noise needs positive data: name the first offending entry otherwise."""
    if np.any(U <= 0):
        m, d = np.argwhere(U <= 0)[0]
        raise ValueError(
            f"log-normal noise needs positive data, but U has {int((U <= 0).sum())} "
            f"non-positive entries (first at row {m}, t = {t[m]:g}, state "
            f"{states[d]!r}); drop those rows or use noise='normal'"
        )


def check_vector(x, n: int, what: str, names: Sequence[str]) -> np.ndarray:
    """``x`` as ``n`` finite floats, or an error naming ``what`` and the expected ``names``."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be numbers; got {x!r}") from exc
    arr = np.atleast_1d(arr)
    if arr.shape != (n,):
        raise ValueError(f"{what} must have length {n} ({list(names)}); got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite; got {arr}")
    return arr
