"""The estimator registry: fit dispatches through it, and a registered method is a citizen."""

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.estimators import registry
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.studies.coverage.methods import parse_methods as _parse_methods


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _truth_plus_one(problem) -> FitResult:
    # a toy estimator: returns the start shifted by one, with a fixed covariance of its own
    J = problem.model.n_params
    return FitResult(
        x=problem.start + 1.0, method="shift", success=True, status="converged",
        message="toy", nit=0, nfev=0, wall_time=0.0, fun=0.0, nll=None,
        covariance_kind="toy", covariances={"toy": np.eye(J)}, **problem.common(),
    )  # fmt: skip


def test_builtin_methods_are_registered_in_order():
    assert pw.estimators.methods() == (
        "mle",
        "irls",
        "wls",
        "oels",
        "hybrid",
        "deq",
        "oc",
        "data2ld",
    )
    assert registry.kinds("mle") == ("hessian", "sandwich", "gls")
    assert registry.kinds("oels") == ("oe",)
    with pytest.raises(ValueError, match="method must be one of"):
        pw.fit(pw.get_problem("logistic").model, [0, 1, 2], [[1], [2], [3]], method="nope")


def test_a_registered_estimator_is_fitted_and_studied(clean_registry):
    toy = pw.estimators.Estimator(
        name="shift", run=_truth_plus_one, options=frozenset({"scale"}), summary="toy",
        covariance="toy", weak_likelihood=False,
    )  # fmt: skip
    assert pw.estimators.register(toy) is toy
    assert "shift" in pw.estimators.methods()
    prob = pw.get_problem("logistic")
    data = prob.simulate(n_points=65, noise_ratio=0.05, seed=0)
    res = pw.fit(prob.model, data.t, data.U, method="shift", p0=[1.0, 1.0])
    np.testing.assert_array_equal(res.x, [2.0, 2.0])
    assert res.likelihood is None  # weak_likelihood=False: none was built
    np.testing.assert_allclose(res.conf_int(0.95), [[0.04, 3.96]] * 2, atol=0.01)
    assert list(res.to_xarray()["kind"].values) == ["toy"]
    with pytest.raises(ValueError, match="unknown shift options"):
        pw.fit(prob.model, data.t, data.U, method="shift", options={"bogus": 1})
    assert _parse_methods(["shift"]) == {"shift-toy": ("shift", "toy")}
    with pytest.raises(ValueError, match="already registered"):
        pw.estimators.register(toy)
    with pytest.raises(TypeError, match="Estimator"):
        pw.estimators.register("shift")
