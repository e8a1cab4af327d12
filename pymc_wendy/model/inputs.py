"""Known forcing inputs ``w(t)`` and their exact integrals against the test functions.

A model declared with ``inputs=[...]`` (:class:`~pymc_wendy.ODEModel`) uses each input only
through ``int phi_k(t) w(t) dt``: the weak form never samples ``w`` on the data grid, so a
pulse that falls between two observations acts with its full area. :class:`Input` holds the
input (values on a grid, a callable, or a pulse) with the points where it or its derivative
jumps; :meth:`Input.integrate` splits the data span at those points and at the edges of the
test functions' supports and applies Gauss-Legendre quadrature on every piece, where the
integrand is smooth, so the integrals are exact to rounding for piecewise-polynomial inputs
and spectrally accurate for smooth ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from pymc_wendy._validation import check_times

__all__ = ["Input", "as_inputs"]

#: Gauss-Legendre nodes per smooth piece (exact for polynomials of degree 2 * 48 - 1).
_NODES = 48


def _pulse(times, start: float, end: float, height: float) -> np.ndarray:
    times = np.asarray(times, dtype=float)
    return np.where((times >= start) & (times <= end), height, 0.0)


class Input:
    """A known input ``w(t)`` of a forced model.

    Parameters
    ----------
    values : callable or array_like
        A vectorised callable ``w(times) -> values`` (one value per time, the shape of
        ``times``; a single value is a constant input; other shapes, and a callable that fails
        on an array of times, are errors naming the input), or values at the times ``t``.
    t : array_like, optional
        Strictly increasing times of ``values`` (required for values, not for a callable).
    kind : {"linear", "constant"}
        How values on a grid are read between the grid times: piecewise linear, or held
        constant from each time to the next (zero-order hold, the last value at the last time).
    breakpoints : sequence of float, optional
        Times where a callable or one of its derivatives jumps (pulse edges, switching
        times). Integration splits there; without them a discontinuity inside a piece is
        integrated to quadrature accuracy only. Grid times are breakpoints automatically.
    domain : (float, float), optional
        Where a callable is defined (default: everywhere). Data outside it are an error.
    name : str, optional
        A label for messages.

    Examples
    --------
    >>> pulse = Input.pulse(14.0, 15.0)          # 1 on [14, 15], 0 elsewhere
    >>> float(pulse(np.array([14.5]))[0])
    1.0
    >>> ramp = Input([0.0, 2.0], t=[0.0, 10.0])  # linear from 0 to 2 on [0, 10]
    """

    def __init__(
        self,
        values: Callable | Sequence[float] | np.ndarray,
        t=None,
        *,
        kind: str = "linear",
        breakpoints: Sequence[float] = (),
        domain: tuple[float, float] | None = None,
        name: str | None = None,
    ):
        if kind not in ("linear", "constant"):
            raise ValueError(f"kind must be 'linear' or 'constant'; got {kind!r}")
        self.kind = kind
        self.name = name
        bp = np.sort(np.asarray(breakpoints, dtype=float).ravel())
        if not np.all(np.isfinite(bp)):
            raise ValueError("breakpoints must be finite")
        if callable(values):
            if t is not None:
                raise ValueError("give t only with values on a grid, not with a callable")
            self._fn = values
            self.t = None
            self.values = None
            lo, hi = (-np.inf, np.inf) if domain is None else (float(domain[0]), float(domain[1]))
            if not lo < hi:
                raise ValueError(f"domain must be (start, end) with end > start; got {domain!r}")
            self.domain = (lo, hi)
            self.breakpoints = bp
            return
        if t is None:
            raise ValueError("values on a grid need their times t")
        if domain is not None:
            raise ValueError("the domain of values on a grid is the grid itself")
        self.t = check_times(t)
        v = np.asarray(values, dtype=float)
        if v.shape != self.t.shape:
            raise ValueError(f"values must have one entry per time ({self.t.size}); got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("input values contain NaN or infinite values")
        self.values = v
        self._fn = None
        self.domain = (float(self.t[0]), float(self.t[-1]))
        self.breakpoints = np.union1d(bp, self.t)

    @classmethod
    def pulse(cls, start: float, end: float, height: float = 1.0) -> Input:
        """``height`` on ``[start, end]``, zero elsewhere (defined on the whole line)."""
        start, end, height = float(start), float(end), float(height)
        if not (np.isfinite(start) and np.isfinite(end) and end > start):
            raise ValueError(f"a pulse needs finite start < end; got ({start}, {end})")

        w = functools.partial(_pulse, start=start, end=end, height=height)  # picklable
        return cls(w, breakpoints=(start, end), name=f"pulse[{start:g}, {end:g}]")

    def __call__(self, times) -> np.ndarray:
        """Input values at ``times`` (an error outside the domain)."""
        times = np.asarray(times, dtype=float)
        self.check_covers(float(np.min(times)), float(np.max(times)), "the requested times")
        if self._fn is not None:
            out = self._evaluate(times)
            if not np.all(np.isfinite(out)):
                raise ValueError(f"{self._label()} returned non-finite values")
            return out
        if self.kind == "linear":
            return np.interp(times, self.t, self.values)
        idx = np.clip(np.searchsorted(self.t, times, side="right") - 1, 0, self.t.size - 1)
        return self.values[idx]

    def _evaluate(self, times: np.ndarray) -> np.ndarray:
        """The callable at ``times`` as one float per time, or an error naming the input.

        A single value is a constant input; an array with the times' values in another
        layout of length-one axes (a column ``(n, 1)``) is reshaped; anything else (``(n, 2)``:
        two inputs in one callable) is an error, not a numpy broadcast.
        """
        what = f"{self._label()} (a callable)"
        try:
            out = np.asarray(self._fn(times), dtype=float)
        except (TypeError, ValueError) as exc:
            # a function written for one scalar time fails on an array: say so
            raise ValueError(
                f"{what} failed on times of shape {times.shape} ({type(exc).__name__}: "
                f"{exc}); it must be vectorised, w(times) -> one value per time (wrap a "
                "scalar function with np.vectorize)"
            ) from exc
        if out.shape == times.shape:
            return out
        if out.size == 1:
            return np.full(times.shape, out.item())
        if out.size == times.size and np.squeeze(out).shape == np.squeeze(times).shape:
            return out.reshape(times.shape)
        raise ValueError(
            f"{what} returned shape {out.shape} for times of shape {times.shape}; it must "
            f"return one value per time (shape {times.shape}); a model with several inputs "
            "takes one callable per input name, inputs={name: w, ...}"
        )

    def _label(self) -> str:
        return f"input {self.name!r}" if self.name else "the input"

    def check_covers(self, lo: float, hi: float, what: str) -> None:
        """Raise a clear error if ``[lo, hi]`` (the span of ``what``) leaves the input's domain."""
        a, b = self.domain
        tol = 1e-12 * max(1.0, abs(lo), abs(hi))
        if lo < a - tol or hi > b + tol:
            raise ValueError(
                f"{self._label()} is defined on [{a:g}, {b:g}] but {what} span "
                f"[{lo:g}, {hi:g}]; give the input on a grid (or domain) that covers them"
            )

    def integrate(self, test_functions, derivative: int = 0) -> np.ndarray:
        """``int phi_k^(derivative)(t) w(t) dt`` over the data span, for every test function.

        Parameters
        ----------
        test_functions : TestFunctions
            Test functions with an analytic form (built by
            :func:`~pymc_wendy.build_test_functions`) and their time grid.
        derivative : int
            Order of the test functions' derivative.

        Returns
        -------
        ndarray, shape (K,)
        """
        tf = test_functions
        if tf.coefficients is None or tf.t is None:
            raise ValueError(
                "integrals of inputs need test functions with an analytic form and a time "
                "grid (from build_test_functions), not user matrices"
            )
        lo, hi = float(tf.t[0]), float(tf.t[-1])
        self.check_covers(lo, hi, "the data")
        edges = np.concatenate([tf.centres - tf.widths, tf.centres + tf.widths, self.breakpoints])
        if tf.n_boundary:  # the half bumps of a known initial state (test_functions.boundary)
            edges = np.concatenate([edges, tf.t[0] + tf.boundary_widths])
        cuts = np.unique(np.clip(np.concatenate([[lo, hi], edges]), lo, hi))
        x, w = np.polynomial.legendre.leggauss(_NODES)
        half = 0.5 * np.diff(cuts)
        mid = 0.5 * (cuts[:-1] + cuts[1:])
        nodes = (mid[:, None] + half[:, None] * x[None, :]).ravel()
        weights = (half[:, None] * w[None, :]).ravel()
        return tf.evaluate(nodes, derivative=derivative) @ (weights * self(nodes))

    def __repr__(self) -> str:
        if self._fn is not None:
            return f"Input({self.name or 'callable'}, breakpoints={self.breakpoints.tolist()})"
        return f"Input({self.t.size} values on [{self.t[0]:g}, {self.t[-1]:g}], {self.kind})"


def as_inputs(names: Sequence[str], inputs, t: np.ndarray) -> dict[str, Input]:
    """Map a model's input names to :class:`Input` objects, with clear errors.

    ``inputs`` is a mapping from names to an :class:`Input`, a callable (no breakpoints) or an
    array of values on the data times ``t`` (piecewise linear); a single model input may be
    given without the mapping.
    """
    names = tuple(names)
    if not names:
        if inputs is not None and len(inputs):
            raise ValueError("the model has no inputs, but inputs were given")
        return {}
    if inputs is None:
        raise ValueError(f"the model has inputs {list(names)}: give their values with inputs=")
    if not isinstance(inputs, Mapping):
        if len(names) != 1:
            raise ValueError(f"give inputs as a mapping of the names {list(names)} to values")
        inputs = {names[0]: inputs}
    missing = [n for n in names if n not in inputs]
    extra = sorted(set(inputs) - set(names))
    if missing or extra:
        raise ValueError(
            f"inputs must give exactly the model's inputs {list(names)}; "
            f"missing {missing}, unknown {extra}"
        )
    out = {}
    for n in names:
        v = inputs[n]
        if isinstance(v, Input):
            obj = v
        elif callable(v):
            obj = Input(v)
        else:
            obj = Input(v, t)
        if obj.name is None:
            obj.name = n
        out[n] = obj
    return out
