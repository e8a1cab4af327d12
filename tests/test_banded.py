"""The banded covariance path (pymc_wendy/weak/banded.py) against the dense kernels.

Every catalogue problem at a small size: value, log-determinant, ``S^-1 r``, solves and the
gradient in ``p`` and in the noise variances equal ``kernels.evaluate`` /
``kernels.gradient_parts`` to 1e-10 relative, for the default (SVD-reduced, globally
supported) test functions, for un-reduced bumps (a genuine band) and for those bumps in
shuffled order, with and without per-entry noise weights.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.linalg as sla

import pymc_wendy as pw
from pymc_wendy.weak import banded, kernels
from pymc_wendy.weak.test_functions import BumpFamily
from pymc_wendy.weak.test_functions.grid import make_grid

RTOL = 1e-10
FIRST_ORDER = "FirstOrderForm"


def close(x, y, rtol: float = RTOL) -> None:
    """Largest difference within ``rtol`` of the reference's largest entry."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    assert x.shape == y.shape
    scale = max(float(np.max(np.abs(y))), 1e-300)
    assert float(np.max(np.abs(x - y))) <= rtol * scale, float(np.max(np.abs(x - y))) / scale


def bumps(t: np.ndarray, r_points: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Un-reduced unit-norm bumps of radius ``r_points`` spacings, centres every ``stride``."""
    grid = make_grid(t)
    r = r_points * grid.unit
    idx = grid.centres(r)[::stride]
    phi, dphi, _ = grid.rows(BumpFamily(9.0), r, idx, derivative=True)
    return phi, dphi


@dataclasses.dataclass
class Case:
    """Everything the kernels take for one problem: test functions, data, derivatives."""

    name: str
    phi: np.ndarray
    dphi: np.ndarray
    X: np.ndarray
    F: np.ndarray
    Ju: np.ndarray
    Jp: np.ndarray
    Jup: np.ndarray
    s2: np.ndarray
    diag: float
    Jpp: np.ndarray | None = None
    Jupp: np.ndarray | None = None

    def with_test_functions(self, phi: np.ndarray, dphi: np.ndarray) -> Case:
        return dataclasses.replace(self, phi=phi, dphi=dphi)

    @property
    def b(self) -> np.ndarray:
        return self.dphi @ self.X


def _case(name: str) -> Case:
    prob = dataclasses.replace(pw.get_problem(name), observed=None)  # every state measured
    # at least 65 points: on fewer the local bumps' band is half of S (hes1's 33)
    data = prob.simulate(n_points=max(min(prob.n_points, 129), 65), noise_ratio=0.1, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lik = pw.WeakLikelihood(prob.model, data.t, data.U, noise=prob.noise, inputs=prob.inputs)
    form = lik.form
    p = prob.p_true * 1.05
    if type(form).__name__ == FIRST_ORDER:
        F, Ju, Jp, Jup, Jpp, Jupp = form.derivs(p, "f", "f_u", "f_p", "f_up", "f_pp", "f_upp")
    else:
        # higher-order / forced models run operator_kernels, not kernels: the kernels are
        # array functions, so their test functions are checked with generic derivative arrays
        rng = np.random.default_rng(0)
        M1, D, J = form.X.shape[0], form.X.shape[1], prob.model.n_params
        F, Ju = rng.standard_normal((M1, D)), rng.standard_normal((M1, D, D))
        Jp, Jup = rng.standard_normal((M1, D, J)), rng.standard_normal((M1, D, D, J))
    return Case(name, lik.phi, lik.dphi, form.X, F, Ju, Jp, Jup, lik.sigma**2, lik.ridge_diag)


@pytest.fixture(scope="module", params=pw.list_problems())
def case(request) -> Case:
    return _case(request.param)


def _compare(case: Case, weights: np.ndarray | None, shuffle: bool = False) -> banded.LocalRows:
    phi, dphi = case.phi, case.dphi
    if shuffle:
        perm = np.random.default_rng(3).permutation(phi.shape[0])
        phi, dphi = phi[perm], dphi[perm]
    b = dphi @ case.X
    args = (b, case.F, case.Ju, case.s2, 1e-10, case.diag, weights)
    ev = kernels.evaluate(phi, dphi, *args)
    rows = banded.local_rows(phi, dphi)
    evb = banded.evaluate(None, None, *args, rows=rows)
    assert abs(evb.nll - ev.nll) <= RTOL * abs(ev.nll)
    assert abs(evb.logdet - ev.logdet) <= RTOL * abs(ev.logdet)
    close(evb.r, ev.r)
    close(evb.a, ev.a)
    close(evb.La, ev.La)
    # a solve with several right-hand sides, state-major rows
    R = np.random.default_rng(4).standard_normal((ev.r.size, 3))
    close(evb.solve(R), kernels.solve_covariance(ev.C, R))
    for logdet in (True, False):
        g, gs, B = kernels.gradient_parts(ev, phi, case.Jp, case.Jup, 1e-10, logdet)
        gb, gsb, Bb = banded.gradient_parts(evb, None, case.Jp, case.Jup, 1e-10, logdet)
        close(gb, g)
        close(gsb, gs)
        close(Bb, B)
        gp, none, _ = banded.gradient_parts(evb, None, case.Jp, case.Jup, 1e-10, logdet, False)
        assert none is None
        close(gp, g)
        if case.Jpp is not None:  # the Newton model (no trace terms) of the Hessian
            derivs = (case.Jp, case.Jup, case.Jpp, case.Jupp, B)
            H = kernels.hessian(ev, phi, *derivs, logdet=logdet, exact=False)
            close(banded.hessian(evb, None, *derivs, logdet=logdet, exact=False), H)
    return rows


def _weights(case: Case) -> np.ndarray:
    w = np.random.default_rng(2).uniform(0.5, 2.0, size=case.X.shape)
    w[0] = 0.0  # a known (noise-free) time point, as with an initial state
    return w


def test_default_test_functions(case):
    """SVD-reduced rows span the grid: the band is the whole matrix, still exact."""
    rows = _compare(case, None)
    assert rows.w == rows.K - 1 and rows.band_fraction(case.X.shape[1]) == 1.0
    _compare(case, _weights(case))


@pytest.mark.parametrize("shuffle", [False, True])
def test_local_bumps(case, shuffle):
    """Un-reduced bumps (radius 4 spacings, centre every 2): a band of w = 3."""
    local = case.with_test_functions(*bumps(np.arange(case.X.shape[0], dtype=float), 4, 2))
    rows = _compare(local, _weights(case), shuffle=shuffle)
    assert rows.w == 3 and rows.ordered is not shuffle
    assert rows.band_fraction(case.X.shape[1]) < 0.5
    _compare(local, None, shuffle=shuffle)


def test_covariance_band_is_the_dense_band():
    case = _case("lorenz")
    phi, dphi = bumps(np.linspace(0, 1, case.X.shape[0]), 5, 3)
    rows = banded.local_rows(phi, dphi)
    D = case.X.shape[1]
    v = case.s2[None, :] * _weights(case)
    ab = banded.covariance_band(rows, case.Ju, v, diag=0.5)
    S = kernels._covariance(phi, dphi, case.Ju, v) + 0.5 * np.eye(rows.K * D)
    # the dense matrix in the interleaved order p D + d
    perm = (np.arange(D)[None, :] * rows.K + rows.order[:, None]).ravel()
    Si = S[np.ix_(perm, perm)]
    n, bw = Si.shape[0], rows.bandwidth(D)
    assert bw == (rows.w + 1) * D - 1
    for q in range(bw + 1):
        close(ab[q, : n - q], np.diagonal(Si, -q), 1e-13)
    assert np.all(Si[np.abs(np.subtract.outer(np.arange(n), np.arange(n))) > bw] == 0)


def test_selected_inverse_is_the_dense_inverse_in_the_band():
    rng = np.random.default_rng(0)
    n, bw = 40, 5
    A = rng.standard_normal((n, n)) * (np.abs(np.subtract.outer(range(n), range(n))) <= bw)
    S = A @ A.T
    S = np.where(np.abs(np.subtract.outer(range(n), range(n))) <= bw, S, 0.0) + n * np.eye(n)
    ab = np.array([np.concatenate([np.diagonal(S, -q), np.zeros(q)]) for q in range(bw + 1)])
    cb = sla.cholesky_banded(ab, lower=True)
    Z = banded.selected_inverse(cb)
    Sinv = np.linalg.inv(S)
    for q in range(bw + 1):
        close(Z[q, : n - q], np.diagonal(Sinv, -q), 1e-12)


def test_selected_inverse_of_a_weak_covariance():
    case = _case("fitzhugh_nagumo")
    rows = banded.local_rows(*bumps(np.arange(case.X.shape[0], dtype=float), 8, 4))
    ab = banded.covariance_band(rows, case.Ju, case.s2, case.diag)
    Z = banded.selected_inverse(sla.cholesky_banded(ab, lower=True))
    n = ab.shape[1]
    S = np.zeros((n, n))
    for q in range(ab.shape[0]):
        S += np.diag(ab[q, : n - q], -q) + (np.diag(ab[q, : n - q], q) if q else 0)
    Sinv = np.linalg.inv(S)
    for q in range(ab.shape[0]):
        close(Z[q, : n - q], np.diagonal(Sinv, -q), 1e-9)


def test_exact_hessian_stays_dense():
    case = _case("logistic")
    evb = banded.evaluate(case.phi, case.dphi, case.b, case.F, case.Ju, case.s2, 1e-10, case.diag)
    _, _, B = banded.gradient_parts(evb, None, case.Jp, case.Jup, 1e-10)
    with pytest.raises(ValueError, match="dense path"):
        banded.hessian(evb, None, case.Jp, case.Jup, case.Jpp, case.Jupp, B)


def test_not_positive_definite():
    case = _case("lotka_volterra")
    rows = banded.local_rows(case.phi, case.dphi)
    args = (case.b, case.F, case.Ju)
    with pytest.raises(kernels.CovarianceError, match="not positive definite"):
        banded.evaluate(None, None, *args, np.zeros(2), 0.0, 0.0, rows=rows)
    with pytest.raises(kernels.CovarianceError):
        banded.evaluate(None, None, *args, -case.s2, 1e-10, case.diag, rows=rows)
    # the same point fails on the dense path
    with pytest.raises(kernels.CovarianceError):
        kernels.evaluate(case.phi, case.dphi, *args, -case.s2, 1e-10, case.diag)


def test_local_rows_round_trip_and_windows():
    t = np.linspace(0.0, 2.0, 201)
    phi, dphi = bumps(t, 10, 4)
    rows = banded.local_rows(phi, dphi)
    assert rows.ordered and rows.width == 19  # the bump vanishes at both ends of its support
    # two supports of 19 points at centres 4 q apart share a point while 4 q <= 18
    assert rows.w == 4
    back = rows.to_dense()
    close(back[0], phi, 0.0)
    close(back[1], dphi, 0.0)
    perm = np.random.default_rng(0).permutation(phi.shape[0])
    shuffled = banded.local_rows(phi[perm], dphi[perm])
    assert not shuffled.ordered and shuffled.w == rows.w
    np.testing.assert_array_equal(perm[shuffled.order], np.arange(phi.shape[0]))
    # windows given directly give the same rows
    again = banded.LocalRows.from_windows(rows.start, rows.phi, rows.dphi, t.size)
    assert again.w == rows.w
    np.testing.assert_array_equal(again.phi, rows.phi)
    assert 0 < rows.band_fraction(2) < 0.2


def test_mixed_radii_bandwidth():
    """Bumps of two radii ordered by centre: the wide ones set the bandwidth."""
    t = np.arange(101, dtype=float)
    narrow, dnarrow = bumps(t, 3, 3)
    wide, dwide = bumps(t, 12, 6)
    phi, dphi = np.vstack([narrow, wide]), np.vstack([dnarrow, dwide])
    rows = banded.local_rows(phi, dphi)
    nz = ((rows.to_dense()[0] != 0) | (rows.to_dense()[1] != 0))[rows.order]
    overlap = (nz.astype(int) @ nz.T.astype(int)) > 0
    k, ell = np.nonzero(overlap)
    assert rows.w == int(np.max(np.abs(k - ell)))


def test_known_initial_state():
    """A known initial state adds a half bump at t0 and a noise-free first row (weights)."""
    prob = pw.get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=0)
    lik = pw.WeakLikelihood(prob.model, data.t, data.U, initial_state=prob.u0)
    form = lik.form
    assert lik.test_functions.n_boundary == 1 and form.weights is not None
    derivs = form.derivs(prob.p_true * 1.05, "f", "f_u", "f_p", "f_up", "f_pp", "f_upp")
    F, Ju, Jp, Jup, Jpp, Jupp = derivs
    case = Case("lv0", lik.phi, lik.dphi, form.X, F, Ju, Jp, Jup, lik.sigma**2, lik.ridge_diag)
    case.Jpp, case.Jupp = Jpp, Jupp
    _compare(case, form.weights)
    _compare(case, form.weights, shuffle=True)
