"""The pytensor Op: compiled kernels against the numpy reference, verify_grad, native numba."""

import sys
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from conftest import run_twice_with_cache

from pymc_wendy.backends import kernel_cache, numba_kernels
from pymc_wendy.backends.op import WeakLogLikelihoodOp, weak_loglik
from pymc_wendy.model.observation import NegativeBinomial
from pymc_wendy.problems import get_problem
from pymc_wendy.weak.likelihood import WeakLikelihood

CASES = [
    ("logistic", "normal"),
    ("lotka_volterra", "normal"),
    ("lotka_volterra", "lognormal"),
    ("fitzhugh_nagumo", "normal"),
    ("hindmarsh_rose", "normal"),
    ("goodwin_2d", "normal"),  # not linear in the parameters: general path only
    ("sir_tdi", "lognormal"),
]


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{z}" for n, z in CASES])
def case(request):
    name, noise = request.param
    prob = get_problem(name)
    data = prob.simulate(n_points=129, noise_ratio=0.05, noise=noise, seed=3)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise)
    rng = np.random.default_rng(4)
    p = data.p_true * (1 + 0.02 * rng.standard_normal(data.p_true.size))
    return lik, p


KERNEL_CASES = [
    (name, noise, linear, infer)
    for name, noise in [("lotka_volterra", "lognormal"), ("fitzhugh_nagumo", "normal")]
    for linear in ["auto", "general"]
    for infer in [False, True]
] + [("goodwin_2d", "normal", "auto", infer) for infer in [False, True]]


@pytest.mark.parametrize(("name", "noise", "linear", "infer_sigma"), KERNEL_CASES)
def test_compiled_kernel_matches_numpy_reference(name, noise, linear, infer_sigma):
    prob = get_problem(name)
    data = prob.simulate(n_points=129, noise_ratio=0.05, noise=noise, seed=3)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise, linear=linear)
    p = data.p_true * 1.02
    s2 = (1.3 * lik.sigma) ** 2
    kernel = kernel_cache.make_kernel(lik, infer_sigma=infer_sigma, want_grad=True)
    nll, gp, gs = kernel(p, s2, 0.0)
    if infer_sigma:
        ref, ref_gp, ref_gs = lik.nll_grad_sigma2(p, np.sqrt(s2))
        np.testing.assert_allclose(gs, ref_gs, rtol=1e-7, atol=1e-9 * np.abs(ref_gs).max())
    else:
        ref, ref_gp = lik.nll_grad(p)
    assert nll == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-7, atol=1e-9 * np.abs(ref_gp).max())
    if infer_sigma:
        value_only = kernel_cache.make_kernel(lik, infer_sigma=infer_sigma, want_grad=False)
        assert value_only(p, s2, 0.0)[0] == pytest.approx(nll, rel=1e-12)


@pytest.mark.parametrize(
    ("name", "linear"),
    [
        ("lotka_volterra", "auto"),
        ("goodwin_2d", "auto"),
        pytest.param("head_acceleration", "general", marks=pytest.mark.slow),
    ],
)
def test_one_compiled_kernel_serves_every_data_set_with_its_own_data(name, linear):
    # the kernel is compiled per model structure and reads each data set's packed buffer:
    # two data sets of different sizes (different test functions) through one kernel must
    # each give their own numpy reference values, in compiled pytensor functions
    prob = get_problem(name)
    x = pt.dvector("p")
    kernels, values = [], []
    for n, seed in [(101, 1), (151, 2)]:
        data = prob.simulate(n_points=n, noise_ratio=0.05, seed=seed)
        lik = WeakLikelihood(prob.model, data.t, data.U, linear=linear, inputs=data.inputs)
        kind, _ = numba_kernels.kernel_inputs(lik, infer_sigma=False)
        kernels.append(kernel_cache.kernel_for(lik, kind, infer_sigma=False, want_grad=True))
        out = weak_loglik(lik, x)
        fn = pytensor.function([x], [out, pytensor.grad(out, x)], mode="NUMBA")
        p = data.p_true * 1.02
        value, grad = fn(p)
        ref, ref_gp = lik.nll_grad(p)
        assert -value == pytest.approx(ref, rel=1e-10)
        np.testing.assert_allclose(-grad, ref_gp, rtol=1e-7, atol=1e-9 * np.abs(ref_gp).max())
        values.append(float(value))
    assert kernels[0].terms is kernels[1].terms and kernels[0].entry is kernels[1].entry
    assert values[0] != pytest.approx(values[1], rel=1e-3)


_SECOND_PROCESS = """
import numpy as np
from pymc_wendy.backends import kernel_cache
from pymc_wendy.problems import get_problem
from pymc_wendy.weak.likelihood import WeakLikelihood

prob = get_problem("logistic")
data = prob.simulate(n_points=51, noise_ratio=0.05, seed=1)
lik = WeakLikelihood(prob.model, data.t, data.U, linear="general")
kernel = kernel_cache.kernel_for(lik, "general", infer_sigma=False, want_grad=True)
value, grad, _ = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)(
    data.p_true * 1.1, np.zeros(0), 0.0
)
hits = kernel.terms.cache_hits + kernel.entry.cache_hits
print(hits, repr(value), repr(float(grad[0])))
"""


@pytest.mark.slow
def test_the_compiled_kernel_is_loaded_from_disk_in_a_second_process(tmp_path):
    # the generated kernel module and numba's machine code stay in the cache directory: a
    # second process with the same model structure loads them instead of compiling
    runs = run_twice_with_cache(_SECOND_PROCESS, tmp_path)
    assert runs[0][0] == "0" and runs[1][0] == "2", runs  # the terms and the kernel
    assert runs[0][1:] == runs[1][1:]
    assert len(list(tmp_path.glob("pymc_wendy_terms_*.py"))) == 1
    assert len(list(tmp_path.glob("pymc_wendy_kernel_*.py"))) == 1


def test_an_unwritable_kernel_cache_falls_back_to_a_temporary_directory(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PYMC_WENDY_CACHE_DIR", str(blocker / "kernels"))
    monkeypatch.setattr(kernel_cache, "_KERNELS", {})
    prefixes = (
        "pymc_wendy._generated.pymc_wendy_kernel_",
        "pymc_wendy._generated.pymc_wendy_terms_",
    )
    for name in [m for m in sys.modules if m.startswith(prefixes)]:
        monkeypatch.delitem(sys.modules, name)
    prob = get_problem("logistic")
    data = prob.simulate(n_points=51, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, sigma=data.sigma)
    value, _, _ = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)(
        data.p_true, np.zeros(0), 0.0
    )
    assert value == pytest.approx(lik.nll(data.p_true), rel=1e-10)
    assert not (blocker / "kernels").exists()


def test_generated_kernels_do_not_read_the_library_files_again(monkeypatch):
    # a study once ran on while its library was edited: inspect.getsource re-read the changed
    # file with the old line numbers and wrote a broken kernel module; the templates' sources
    # are now read at import
    import inspect
    import linecache

    prob = get_problem("logistic")
    data = prob.simulate(n_points=51, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, sigma=0.1, linear="general")
    spec = lik.form.kernel_spec()
    before = [
        kernel_cache._terms_source("general", spec, True),
        kernel_cache._entry_source("general"),
    ]

    def boom(*args, **kwargs):
        raise AssertionError("a library file was read after import")

    monkeypatch.setattr(inspect, "getsource", boom)
    monkeypatch.setattr(linecache, "getlines", boom)
    after = [
        kernel_cache._terms_source("general", spec, True),
        kernel_cache._entry_source("general"),
    ]
    assert after == before
    for source in after:
        compile(source, "<kernel>", "exec")


def test_a_generated_module_that_fails_to_import_is_not_left_half_loaded(tmp_path, monkeypatch):
    from pymc_wendy import _codecache

    monkeypatch.setenv("PYMC_WENDY_CACHE_DIR", str(tmp_path))
    source = "x = 1\n  y = 2\n"
    for _ in range(2):  # the second call raises the same error, not a missing attribute
        with pytest.raises(IndentationError):
            _codecache.load_module(source, "pymc_wendy_test_broken_")
    assert not [m for m in sys.modules if m.startswith(f"{_codecache.PACKAGE}.pymc_wendy_test_")]


@pytest.mark.parametrize("writable", [True, False])
def test_a_generated_function_unpickles_in_a_fresh_process(tmp_path, monkeypatch, writable):
    """numba pickles a compiled function by its module's name; PyMC's chain processes under
    "spawn" or "forkserver" (the default on macOS) must import the generated module by that
    name, also when the cache directory could not be written and a temporary one was used."""
    import subprocess

    import cloudpickle

    from pymc_wendy import _codecache

    cache = tmp_path / "cache" if writable else tmp_path / "a_file" / "kernels"
    if not writable:
        (tmp_path / "a_file").write_text("not a directory")
    monkeypatch.setenv("PYMC_WENDY_CACHE_DIR", str(cache))
    monkeypatch.setenv("_PYMC_WENDY_FALLBACK_DIRS", "")
    lines = [*_codecache.IMPORTS, *_codecache.jitted("twice", "def f(x):\n    return 2.0 * x")]
    source = "\n".join(lines) + f"\n# {writable}\n"
    twice = _codecache.load_module(source, "pymc_wendy_test_pickle_").twice
    assert twice(1.5) == 3.0
    script = "import sys, cloudpickle; print(cloudpickle.loads(sys.stdin.buffer.read())(1.5))"
    run = subprocess.run(
        [sys.executable, "-c", script], input=cloudpickle.dumps(twice), capture_output=True
    )
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert run.stdout.split() == [b"3.0"]


def _verify_grad(lik, p, mode):
    rng = np.random.default_rng(5)
    # relative coordinates keep finite differences well scaled for parameters of any size
    pytensor.gradient.verify_grad(
        lambda x: weak_loglik(lik, p * (1 + x)), [np.zeros_like(p)], rng=rng, mode=mode
    )
    s = lik.sigma
    pytensor.gradient.verify_grad(
        lambda x, z: weak_loglik(lik, p * (1 + x), s * (1.2 + z)),
        [np.zeros_like(p), np.zeros_like(s)],
        rng=rng,
        mode=mode,
    )


def test_verify_grad_parameters_and_noise_scales(case):
    # the pullback wiring is backend-independent; the Python path compiles in milliseconds
    _verify_grad(*case, mode="FAST_COMPILE")


@pytest.mark.parametrize("name", ["goodwin_2d"])
def test_verify_grad_native_numba(name):
    prob = get_problem(name)
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=3)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    _verify_grad(lik, data.p_true * 1.01, mode=None)


def test_numba_and_python_implementations_agree(case):
    lik, p = case
    x, s = pt.dvector("p"), pt.dvector("sigma")
    out = weak_loglik(lik, x, s)
    grads = pytensor.grad(out, [x, s])
    args = (p, 0.9 * lik.sigma)
    native = pytensor.function([x, s], [out, *grads])(*args)
    python = pytensor.function([x, s], [out, *grads], mode="FAST_COMPILE")(*args)
    for a, b in zip(native, python, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10 * np.abs(b).max())


def test_value_and_gradient_share_one_node_and_value_only_is_rewritten():
    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    x = pt.dvector("p")
    out = weak_loglik(lik, x)
    both = pytensor.function([x], [out, pytensor.grad(out, x)])
    nodes = [n for n in both.maker.fgraph.apply_nodes if isinstance(n.op, WeakLogLikelihoodOp)]
    assert len(nodes) == 1 and nodes[0].op.compute_grad
    value = pytensor.function([x], out)
    nodes = [n for n in value.maker.fgraph.apply_nodes if isinstance(n.op, WeakLogLikelihoodOp)]
    assert len(nodes) == 1 and not nodes[0].op.compute_grad
    assert value(data.p_true) == pytest.approx(both(data.p_true)[0], rel=1e-12)


def test_no_object_mode_fallback_warning():
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    x, s = pt.dvector("p"), pt.dvector("sigma")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for out, ins in [(weak_loglik(lik, x), [x]), (weak_loglik(lik, x, s), [x, s])]:
            f = pytensor.function(ins, [out, *pytensor.grad(out, ins)])
            f(data.p_true, *([lik.sigma] if len(ins) == 2 else []))
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "object mode" in m.lower()], messages


def test_undefined_points_give_minus_infinity_not_exceptions():
    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, noise="lognormal", seed=1)
    # zero ridge, so zero noise makes S(p) exactly singular
    lik = WeakLikelihood(prob.model, data.t, data.U, noise="lognormal", ridge=0.0)
    x, s = pt.dvector("p"), pt.dvector("sigma")
    out = weak_loglik(lik, x, s)
    for mode in [None, "FAST_COMPILE"]:
        f = pytensor.function([x, s], [out, *pytensor.grad(out, [x, s])], mode=mode)
        value, gp, gs = f(data.p_true, np.zeros(2))
        assert value == -np.inf and np.all(gp == 0) and np.all(gs == 0)
        value, gp, gs = f(np.array([np.nan, 1.0, 1.0, 1.0]), lik.sigma)
        assert value == -np.inf and np.all(np.isfinite(gp))
        value, gp, gs = f(data.p_true, -lik.sigma)  # sigma enters squared: still defined
        assert np.isfinite(value)


@pytest.mark.parametrize(("linear", "test_functions"), [("auto", None), ("general", None),
                                                       ("general", "local")])  # fmt: skip
def test_parameters_whose_squares_overflow_are_an_impossible_point_not_nan(linear, test_functions):
    # S(p) holds products of parameters: at 1e160 they overflow, LAPACK factors the infinite
    # matrix without an error, and the value was NaN (a sampler must see -inf); the numpy
    # reference raises its CovarianceError as for any S that cannot be factored
    from pymc_wendy.weak.kernels import CovarianceError

    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, linear=linear, test_functions=test_functions)
    x, s = pt.dvector("p"), pt.dvector("sigma")
    out = weak_loglik(lik, x, s)
    f = pytensor.function([x, s], [out, *pytensor.grad(out, [x, s])], mode="NUMBA")
    for big in (1e160, 1e300):
        value, gp, gs = f(np.array([big, -1.0, -6.0, 1.0]), lik.sigma)
        assert value == -np.inf and np.all(gp == 0) and np.all(gs == 0)
    value, _, _ = f(np.array([1e100, -1.0, -6.0, 1.0]), lik.sigma)
    assert np.isfinite(value)  # large, but S's entries (1e200) still fit
    with pytest.raises(CovarianceError, match="overflow|not positive definite"):
        lik.nll(np.array([1e160, -1.0, -6.0, 1.0]))


def test_op_rejects_wrong_input_shapes():
    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    with pytest.raises(ValueError, match="vector of length 4"):
        WeakLogLikelihoodOp(lik, infer_sigma=False)(pt.dmatrix())
    with pytest.raises(ValueError, match="vector of length 4"):
        WeakLogLikelihoodOp(lik, infer_sigma=False)(pt.tensor(shape=(3,)))
    with pytest.raises(ValueError, match="sigma2"):
        WeakLogLikelihoodOp(lik, infer_sigma=True)(pt.dvector())
    with pytest.raises(ValueError, match="length 2"):
        weak_loglik(lik, pt.dvector(), pt.tensor(shape=(3,)))


def test_compiled_op_rejects_wrong_lengths_at_run_time():
    # shapes unknown when the graph is built are checked before the kernel reads memory
    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    x, s2 = pt.dvector("p"), pt.dvector("sigma2")
    f = pytensor.function([x, s2], WeakLogLikelihoodOp(lik, infer_sigma=True)(x, s2)[0])
    assert np.isfinite(f(data.p_true, lik.sigma**2))
    with pytest.raises(ValueError, match="wrong length"):
        f(data.p_true[:3], lik.sigma**2)
    with pytest.raises(ValueError, match="wrong length"):
        f(data.p_true, np.ones(3))


@pytest.mark.parametrize("delta", [-1, 1])
def test_terms_that_do_not_fill_their_buffer_are_an_error(monkeypatch, delta):
    # the terms are written element by element without numba's bounds checks: a layout that
    # disagrees with terms_size must stop the call, not write past the buffer
    prob = get_problem("logistic")
    data = prob.simulate(n_points=51, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, sigma=data.sigma, linear="general")
    size = kernel_cache.terms_size
    monkeypatch.setattr(kernel_cache, "terms_size", lambda *a, **k: size(*a, **k) + delta)
    kernel = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)
    with pytest.raises(ValueError, match="terms do not match"):
        kernel(data.p_true, np.zeros(0), 0.0)


def _per_entry_case(kind: str):
    """A likelihood on each compiled path with per-entry noise (counts, or proportional
    error with doses), and parameters 2 % off the truth."""
    if kind == "operator":  # doses: the operator path
        prob = get_problem("pk_iv_doses")
        data = prob.simulate(n_points=97, noise_ratio=0.1, noise="proportional", seed=2)
        lik = WeakLikelihood(prob.model, data.t, data.U, noise="proportional", inputs=data.inputs)
        return lik, data.p_true * 1.02
    lv = get_problem("lotka_volterra")
    truth = lv.simulate(noise_ratio=0.0, subsample=4)
    U = NegativeBinomial(20.0).draw(40.0 * truth.U_true, None, np.random.default_rng(0))
    tf = "local" if kind == "banded" else None
    lik = WeakLikelihood(lv.model, truth.t, U, noise=NegativeBinomial(), test_functions=tf)
    return lik, lv.p_true * np.array([1.0, 1 / 40, 1.0, 1 / 40]) * 1.02


@pytest.mark.parametrize("kind", ["general", "banded", "operator"])
def test_per_entry_noise_variances_match_the_numpy_reference_and_finite_differences(kind):
    """The Op with every entry's variance as an input (an observation model's variance
    parameters as random variables): the compiled kernel against the numpy reference, that
    against central differences, and both against the per-state path where the entries'
    variances are a noise level times the weights."""
    lik, p = _per_entry_case(kind)
    assert lik.form.kind == ("operator" if kind == "operator" else "general")
    offset, features = lik.entry_variance_terms()
    V = offset + features.sum(axis=0) * (0.05 if kind == "operator" else 1 / 15)
    x, v = pt.dvector("p"), pt.dmatrix("V")
    out = WeakLogLikelihoodOp(lik, True, per_entry=True)(x, v)
    native = pytensor.function([x, v], out)(p, V)
    nll, gp, gV = lik.nll_grad_variances(p, V)
    assert -native[0] == pytest.approx(nll, rel=1e-10)
    np.testing.assert_allclose(-native[1], gp, rtol=1e-7, atol=1e-9 * np.abs(gp).max())
    np.testing.assert_allclose(-native[2], gV, rtol=1e-7, atol=1e-9 * np.abs(gV).max())
    direction = np.random.default_rng(1).standard_normal(V.shape) * V
    h = 1e-4
    up, down = (lik.nll_grad_variances(p, V + s * h * direction)[0] for s in (1, -1))
    assert (up - down) / (2 * h) == pytest.approx(np.sum(gV * direction), rel=1e-5)
    # the same variances as sigma^2 times the likelihood's weights
    s2 = np.array([2.0, 0.5])[: V.shape[1]]
    W = lik.form.weights
    ref, ref_gp, ref_gs = lik.nll_grad_sigma2(p, np.sqrt(s2))
    nll, gp, gV = lik.nll_grad_variances(p, s2 * W)
    assert nll == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-9)
    np.testing.assert_allclose(np.sum(gV * W, axis=0), ref_gs, rtol=1e-9)


@pytest.mark.parametrize("kind", ["general", "banded"])
def test_relaxed_per_entry_variances_match_the_per_state_ladder(kind):
    """The tempering ladder's relaxed rung with every entry's variance as input: compiled
    against the numpy reference, and the numpy reference with ``V = sigma^2 w`` against the
    per-state relaxed likelihood."""
    lik, p = _per_entry_case(kind)
    offset, features = lik.entry_variance_terms()
    V = offset + features[0] / 15
    x, v, a = pt.dvector("p"), pt.dmatrix("V"), pt.dscalar("alpha")
    op = WeakLogLikelihoodOp(lik, True, per_entry=True).relaxed(3.0)
    native = pytensor.function([x, v, a], op(x, v, a))
    for alpha in (0.0, 0.3):
        nll, gp, gV = lik.nll_grad_variances(p, V, alpha, 3.0)
        out = native(p, V, alpha)
        assert -out[0] == pytest.approx(nll, rel=1e-10)
        np.testing.assert_allclose(-out[1], gp, rtol=1e-7, atol=1e-9 * np.abs(gp).max())
        np.testing.assert_allclose(-out[2], gV, rtol=1e-7, atol=1e-9 * np.abs(gV).max())
        s2 = np.array([2.0, 0.5])
        ref, ref_gp, ref_gs = lik.relaxed_nll_grad_sigma2(p, s2, alpha, 3.0)
        nll, gp, gV = lik.nll_grad_variances(p, s2 * lik.form.weights, alpha, 3.0)
        assert nll == pytest.approx(ref, rel=1e-12)
        np.testing.assert_allclose(gp, ref_gp, rtol=1e-9)
        np.testing.assert_allclose(np.sum(gV * lik.form.weights, axis=0), ref_gs, rtol=1e-9)
    assert native(p, V, 1.5)[0] == -np.inf  # outside the ladder


def test_verify_grad_of_a_negative_binomial_dispersion():
    """The weak log-likelihood with ``alpha`` a tensor (``weak_loglik(noise=...)``: pytensor
    differentiates the entries' variances ``u + u^2 / alpha`` into the Op's per-entry
    gradient), natively compiled and in Python."""
    lik, p = _per_entry_case("general")
    rng = np.random.default_rng(6)
    for mode in (None, "FAST_COMPILE"):
        pytensor.gradient.verify_grad(
            lambda x, a: weak_loglik(lik, p * (1 + x), noise=NegativeBinomial(15.0 * (1 + a))),
            [np.zeros_like(p), np.zeros(2)],
            rng=rng,
            mode=mode,
        )


def test_per_entry_variances_refuse_what_they_do_not_serve():
    lik, p = _per_entry_case("general")
    with pytest.raises(ValueError, match="per-entry noise variances"):
        WeakLogLikelihoodOp(lik, False, per_entry=True)
    with pytest.raises(ValueError, match=r"per-entry variances must have shape \(257, 2\)"):
        WeakLogLikelihoodOp(lik, True, per_entry=True)(p, pt.dvector())
    with pytest.raises(ValueError, match="V must have shape"):
        lik.nll_grad_variances(p, np.ones((3, 2)))
    normal = WeakLikelihood(get_problem("logistic").model, lik.t, lik.U[:, :1] / 40)
    with pytest.raises(ValueError, match="constant variance"):
        normal.entry_variance_terms()
    # a variance that is negative or NaN is an impossible point, not an exception
    fn = pytensor.function(
        *(lambda x, v: ([x, v], WeakLogLikelihoodOp(lik, True, per_entry=True)(x, v)[0]))(
            pt.dvector(), pt.dmatrix()
        )
    )
    V = lik.entry_variance_terms()[0]
    assert fn(p, -V) == -np.inf and fn(p, V * np.nan) == -np.inf
