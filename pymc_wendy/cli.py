"""Command-line entry point: ``pymc-wendy demo`` fits an embedded default problem with PyMC;
``pymc-wendy coverage`` runs a coverage study (:mod:`pymc_wendy.studies.coverage`).

Nothing heavy (numpy, pymc, pytensor, numba, arviz) is imported before the arguments are
parsed: ``--help``, ``--version`` and argument errors answer at once
(``benchmarks/cli_startup.py``). The names the options accept are therefore listed here
(:data:`_PROBLEMS`, :data:`_ESTIMATORS` ...) rather than read from the library, and
``tests/test_cli.py`` checks that they agree with it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
import warnings

PROG = "pymc-wendy"

#: exit codes; the epilog of ``--help`` and README.md ("Command line") say the same
EXIT_OK = 0
EXIT_FAILED = 1  # a run-time error (one line on stderr), or demo's posterior failed its checks
EXIT_USAGE = 2  # a bad command line (argparse's own code)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

#: errors of the library and of the user's settings or files: one line on stderr, not a
#: traceback (``--debug`` shows it); anything else is a bug and keeps its traceback
_USER_ERRORS = (ValueError, TypeError, RuntimeError, OSError, ArithmeticError)

#: the benchmark problems, as :func:`pymc_wendy.list_problems` lists them
_PROBLEMS = (
    "logistic", "lotka_volterra", "fitzhugh_nagumo", "hindmarsh_rose", "protein_transduction",
    "lorenz", "goodwin_2d", "goodwin_3d", "sir_tdi", "head_acceleration", "pk_oral",
    "pk_iv_doses", "pk_oral_doses", "pk_two_compartment", "sir", "fitzhugh_nagumo_v", "hes1",
)  # fmt: skip
#: coverage methods (:mod:`pymc_wendy.studies.coverage.methods`): the estimators of ``fit``
#: with their covariance kinds, the default first (:mod:`pymc_wendy.estimators.registry`) ...
_ESTIMATORS = {
    "mle": ("hessian", "sandwich", "gls"),
    "irls": ("gls", "hessian", "sandwich"),
    "wls": ("sandwich", "gls", "hessian"),
    "oels": ("oe",),
    "hybrid": ("hessian", "oe", "sandwich", "gls"),
    "deq": ("deq",),
    "oc": ("oc",),
    "data2ld": ("data2ld",),
}
#: ... the Bayesian ones (no covariance kinds) ...
_BAYES = ("nuts", "sft", "laplace", "forward")
#: ... and the bias corrections (:mod:`pymc_wendy.weak.bias`) and the estimators they apply to
_CORRECTIONS = ("profile", "analytic", "auto")
_CORRECTABLE = ("mle", "nuts", "sft", "laplace")

_EPILOG = f"""\
exit codes:
  {EXIT_OK}    success
  {EXIT_FAILED}    an error while running: a one-line message on stderr,
       "{PROG} <command>: error: ..." (--debug shows the traceback);
       or, for demo, a posterior that failed its checks: an R-hat not below
       1.01 (R-hat is undefined with --chains 1, so that always ends with 1)
       or at least one divergence in the NUTS run that drew it, or, for a
       reweighted exact posterior, a Pareto k above its threshold, or a weak
       posterior that the check against the exact one found off or could not
       verify
  {EXIT_USAGE}    a bad command line (an unknown option, a value out of range)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); a coverage study with --store keeps its
       finished runs, and the same command resumes it
"""


def demo(
    problem: str = "fitzhugh_nagumo",
    n_points: int = 513,
    noise_ratio: float = 0.1,
    seed: int = 0,
    draws: int = 1000,
    tune: int | None = None,
    chains: int = 4,
    output: str | None = "pymc_wendy_demo.png",
    predictive_draws: int = 200,
    test_functions: str = "local",
) -> int:
    """Simulate data; compute the MAP (= WENDy-MLE); sample with ``pw.sample``'s defaults (NUTS
    on the weak likelihood, the check against the exact posterior, the correction where they
    differ); compare with the truth.

    The weak stage uses local test functions by default: ``pw.sample`` checks its draws
    against the forward-solve posterior and corrects them where they differ, so the cheapest
    weak stage that is a good proposal gives the same final posterior (FitzHugh-Nagumo, 513
    points: the demo in 35 s against 82 s with the SVD test functions, the final posterior
    means within 0.04 sd of each other, ``docs/forward.md``). Prints the ArviZ summary with
    the true values and whether each lies in its 95 % interval, and writes a plot of the
    data with posterior predictive bands to ``output``. Returns 0 when the returned
    posterior passed its checks (:func:`_print_sampling`), 1 otherwise (also with one chain,
    where R-hat is undefined).
    """
    import numpy as np
    import pymc as pm

    from pymc_wendy.bayes.distribution import WeakODELikelihood
    from pymc_wendy.bayes.sampling import initial_values, sample
    from pymc_wendy.problems.catalogue import get_problem

    if output:
        _check_writable(output)  # before a minute of sampling, not after it
    prob = get_problem(problem)
    data = prob.simulate(n_points=n_points, noise_ratio=noise_ratio, seed=seed)
    print(f"problem: {prob.name} ({prob.reference})")
    print(
        f"data: {data.t.size} points on [{data.t[0]:g}, {data.t[-1]:g}], "
        f"{noise_ratio:.0%} {data.noise} noise, seed {seed}"
    )
    ode, term, columns, twins = _demo_term(prob, data)
    t0 = time.perf_counter()
    with pm.Model(coords={"param": ode.params}) as model:
        p, prior = _demo_prior(prob)
        # local test functions use the trapezoid rule, which cannot cross a dose's jump, and
        # have no second derivatives for the equations of observed states (hidden ones)
        if data.inputs or len(columns) < prob.model.n_states:
            test_functions = "svd"
        U = WeakODELikelihood(
            "U", ode=ode, params=p, t=data.t, noise=data.noise,
            test_functions="local" if test_functions == "local" else None, **term,
        )  # fmt: skip
    lik = U.owner.op.likelihood
    print(
        f"weak likelihood: K = {lik.K} {test_functions} test functions, noise estimate sigma = "
        f"{np.array2string(lik.sigma, precision=4)} (true "
        f"{np.array2string(data.sigma, precision=4)}); set-up {time.perf_counter() - t0:.2f} s"
    )

    t0 = time.perf_counter()
    start = initial_values(model)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        map_point = pm.find_MAP(
            initvals=start, progressbar=False, jitter=False, return_inferencedata=False
        )
    p_map = np.asarray(map_point["p"])
    err = np.linalg.norm(p_map - data.p_true) / np.linalg.norm(data.p_true)
    print(f"MAP ({prior}; WENDy-MLE start): {time.perf_counter() - t0:.2f} s, "
          f"relative coefficient error {err:.2%}")  # fmt: skip

    t0 = time.perf_counter()
    tuning = {} if tune is None else {"tune": tune}  # None: pw.sample's (300 when whitened)
    with model:
        idata = sample(
            draws, chains=chains, random_seed=seed, initvals=start, progressbar=True, **tuning
        )
    ok = _print_sampling(idata, chains, draws, tune, time.perf_counter() - t0)
    truth = data.p_true if twins is None else _nearest_twin(idata, twins)
    _print_summary(idata, truth, p_map, stats_only=idata.attrs.get("route") == "importance")

    if output:
        kept = lik.observed.kept  # rows outside the equations' domain are left out (log I)
        _predictive_plot(model, idata, data, columns, kept, predictive_draws, seed, output)
    return EXIT_OK if ok else EXIT_FAILED


def _demo_prior(prob):
    """The demo's prior of ``p`` (in the model context) and what it is, in words.

    N(0, 10) where the problem has no box. Where it has one (the papers' search box, which
    ``pw.fit`` takes as ``bounds``): log-normal, wide (a factor e^2 either way) around the
    box's geometric centre when the box is positive; else normal around its centre with its
    width as sd. N(0, 10) put Goodwin 2D's ``p1 = 72`` and Hindmarsh-Rose's ``p6 = 50`` 5-7
    prior sds out, and the MAP of Goodwin 2D from the prior's centre was a spurious mode
    with ``p1 = -61``; uniform on the box cut the posterior at true values on its edge
    (Goodwin 2D's ``p2 = 1`` in ``[1, 3]``); normal on a positive box put ``pk_iv_doses``'s
    prior centre at ``V = 500`` (truth 10) and admitted negative volumes, and its NUTS run
    stuck. Input-output equations (``twins`` given) have positive boxes: their coefficients
    are symmetric functions of the rate constants, and N(0, 10) admits unphysical twins with
    negative rates."""
    import numpy as np
    import pymc as pm

    if prob.bounds is None:
        return pm.Normal("p", 0.0, 10.0, dims="param"), "N(0, 10) priors"
    lo, hi = (np.asarray(b, dtype=float) for b in zip(*prob.bounds, strict=True))
    if np.all(lo > 0):
        p = pm.LogNormal("p", np.log(np.sqrt(lo * hi)), 2.0, dims="param")
        return p, "log-normal priors around the box's geometric centre"
    return pm.Normal(
        "p", (lo + hi) / 2, hi - lo, dims="param"
    ), "normal priors, box centre and width"


def _nearest_twin(idata, twins):
    """The parameter vector equivalent to the truth nearest the posterior mean, said: the
    data of the observed state cannot tell the truth from its twins (flip-flop)."""
    import numpy as np

    if len(twins) == 1:
        return twins[0]
    mean = idata.posterior["p"].mean(("chain", "draw")).values
    truth = twins[np.argmin(np.max(np.abs(np.log(mean / twins)), axis=1))]
    print(f"the observed state determines the parameters up to {len(twins)} equivalent "
          f"vectors (the same curve for any doses); compared with the nearest, "
          f"{np.array2string(truth, precision=4)}")  # fmt: skip
    return truth


def _demo_term(prob, data):
    """``(ode, WeakODELikelihood arguments, observed columns, twins)`` for the demo: the
    model itself where every state is observed, or where its hidden states are eliminated
    by the likelihood (``twins`` None); a linear model observed in one state at rest, its
    input-output equation (``pw.input_output``) from the rest state, and the parameter
    vectors equivalent to the truth for it."""
    import numpy as np

    from pymc_wendy.model.input_output import input_output

    ode = prob.model
    observed = prob.observed or ode.states
    columns = [ode.states.index(s) for s in observed]
    io = None
    if len(observed) == 1 < ode.n_states and not np.any(prob.u0):
        io = input_output(ode, observed[0])
    if io is None or io.characteristic is None:
        # every state observed, or hidden ones the likelihood eliminates itself (the NaN
        # columns of data.U: docs/hidden_states.md)
        term = {"observed": data.U, "inputs": data.inputs or None}
        return ode, term, columns, None
    j = ode.states.index(observed[0])
    term = {
        "observed": data.U[:, [j]], "inputs": io.inputs(data.inputs),
        "initial_state": np.zeros(len(io.model.companion_states)), "t0": float(data.t[0]),
    }  # fmt: skip
    return io.model, term, [j], io.equivalent(prob.p_true)


def _print_sampling(idata, chains: int, draws: int, tune: int | None, t_total: float):
    """What ``pw.sample`` did: the weak NUTS run, the check, the correction (if any), each
    with its time. Returns whether the returned posterior passed its checks: the importance
    weights' Pareto ``k`` (both) at most the threshold for a reweighted one, else R-hat below
    1.01 and no divergences in the NUTS run that drew it."""
    import arviz as az

    corrected = bool(idata.posterior.attrs.get("corrected"))
    weak = idata.weak_posterior if corrected else idata.posterior
    stats = idata.weak_sample_stats if corrected else idata.sample_stats
    if tune is None:
        from pymc_wendy.bayes.sampling import WHITENED_TUNE

        tune = WHITENED_TUNE if weak.attrs.get("whitened") else 1000
    divergences = int(stats["diverging"].sum())
    ess = float(az.ess(weak.to_dataset())["p"].min())
    check = idata["weak_check"].attrs
    t_exact = idata.attrs.get("time_s", 0.0) if corrected else 0.0
    t_sample = t_total - check["time_s"] - t_exact
    print(f"\nNUTS on the weak likelihood ({weak.attrs.get('inference_library', 'pymc')}): "
          f"{chains} chains x {draws} draws after {tune} tuning steps in {t_sample:.1f} s "
          f"(incl. compilation); min ESS {ess:.0f} ({ess / t_sample:.1f}/s); "
          f"{divergences} divergences")  # fmt: skip
    print(f"check against the exact (forward-solve) posterior: {check['verdict']} "
          f"({check['time_s']:.1f} s){': ' + check['note'] if check['note'] else ''}")  # fmt: skip
    if not corrected:
        if check["verdict"] in ("differs", "failed"):
            # the weak posterior, and it is off or could not be verified: not a pass however
            # well NUTS mixed (Goodwin 2D at a spurious mode ended with exit 0)
            print("the result is the weak posterior, which the check found off or could not "
                  "verify: this run does not pass")  # fmt: skip
            return False
        return float(az.rhat(weak.to_dataset())["p"].max()) < 1.01 and divergences == 0
    a = idata.attrs
    print(f"corrected to the exact posterior ({a['route']} route, Pareto k "
          f"{a['pareto_k']:.2f}, importance ESS {a['importance_ess']:.0f}, "
          f"{a['n_forward_solves']} forward solves) in {t_exact:.1f} s")  # fmt: skip
    if a["route"] == "importance":
        return max(a["pareto_k"], a["pareto_k_variance"]) <= a["khat_threshold"]
    rhat = float(az.rhat(idata.posterior.to_dataset())["p"].max())
    return rhat < 1.01 and int(idata.sample_stats["diverging"].sum()) == 0


def _print_summary(idata, p_true, p_map, stats_only: bool = False) -> None:
    """The ArviZ summary beside the truth and the MAP, and which truths are covered
    (``stats_only``: resampled importance draws, whose ESS and R-hat mean nothing)."""
    import arviz as az
    import numpy as np

    kind = "stats" if stats_only else "all"
    summary = az.summary(idata, ci_prob=0.95, kind=kind, var_names=["p"])
    post = idata.posterior["p"]
    lo = post.quantile(0.025, dim=("chain", "draw")).values
    hi = post.quantile(0.975, dim=("chain", "draw")).values
    summary.insert(0, "true", p_true)
    summary.insert(1, "MAP", p_map)
    summary["in 95%"] = np.where((lo <= p_true) & (p_true <= hi), "yes", "no")
    with _pandas_width():
        print(summary.to_string())
    covered = int((summary["in 95%"] == "yes").sum())
    print(f"{covered}/{len(summary)} true values inside their 95 % credible intervals")


def _check_writable(output: str) -> None:
    """A ``ValueError`` naming ``output`` when its folder does not exist or cannot be
    written (issue 54, defect 11: the demo failed after sampling)."""
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"--output {output}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (
        os.path.exists(output) and not os.access(output, os.W_OK)
    ):
        raise ValueError(f"--output {output}: cannot write there")


def _predictive_plot(model, idata, data, columns, kept, n_draws, seed, output) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import pymc as pm

    from pymc_wendy.studies.plots import plot_predictive

    post = idata.posterior.to_dataset()
    step = max(1, post.sizes["chain"] * post.sizes["draw"] // n_draws)
    thinned = post.isel(draw=slice(None, None, step))
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        # a draw whose solve fails (a far-off draw whose trajectory diverges) is NaN by design:
        # counted once below rather than warned about draw by draw
        warnings.filterwarnings("ignore", "predictive draw: the ODE solve failed", RuntimeWarning)
        pp = pm.sample_posterior_predictive(thinned, random_seed=seed, progressbar=False)
    U = pp.posterior_predictive["U"]
    states = [data.states[j] for j in columns]
    fig = plot_predictive(
        data.t[kept],
        data.U[kept][:, columns],
        U,
        truth=data.U_true[kept][:, columns],
        states=states,
    )
    fig.suptitle(f"{data.problem}: data and 90 % posterior predictive band")
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    n_pp = thinned.sizes["chain"] * thinned.sizes["draw"]
    n_failed = int(np.isnan(U.values).reshape(n_pp, -1).any(axis=1).sum())
    failed = f", {n_failed} failed to solve (left out of the band)" if n_failed else ""
    print(f"posterior predictive plot ({n_pp} draws{failed}, "
          f"{time.perf_counter() - t0:.1f} s): {os.path.abspath(output)}")  # fmt: skip


class _pandas_width:
    """Wide enough console output for the summary table."""

    def __enter__(self):
        import pandas as pd

        self._ctx = pd.option_context("display.width", 200, "display.max_columns", 30)
        self._ctx.__enter__()

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def _run_study(args: argparse.Namespace):
    from pymc_wendy.studies.coverage import run_coverage

    kwargs = {
        "methods": args.methods,
        "noise_ratios": args.noise,
        "n_points": args.points,
        "n_datasets": args.datasets,
        "level": args.level,
        "seed": args.seed,
        "store": args.store,
        "max_workers": args.workers,
    }
    if not args.dask:
        return run_coverage(args.problem, **kwargs)
    try:
        from distributed import Client
    except ImportError as exc:
        raise RuntimeError(
            f"--dask needs Dask's distributed package ({exc}): pip install 'pymc-wendy[dask]'"
        ) from exc
    with Client(args.dask) as client:
        return run_coverage(args.problem, executor=client.get_executor(), **kwargs)


def _coverage(args: argparse.Namespace) -> int:
    from pymc_wendy.studies.coverage import open_coverage, summarize, to_table

    if args.report:
        ds = open_coverage(args.store)
        print(f"{ds.attrs['n_done']} of {ds.attrs['n_runs']} runs stored")
    else:
        if not args.store:
            _warn(
                "coverage",
                "without --store the finished runs are not kept (an interrupted "
                "study starts again from nothing); keep them, and resume, with --store DIR",
            )
        ds = _run_study(args)
    table = to_table(summarize(ds), ["coverage", "rel_bias", "rel_mse", "coef_error_mean"])
    with _pandas_width():
        print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    if args.table:
        table.to_csv(args.table)
    return _failures(ds)


def _failures(ds) -> int:
    """Say on stderr how many finished runs failed and the commonest reason: an error (exit
    1) when every one did, since the table is then all NaN; a warning when some did."""
    import numpy as np

    success = np.asarray(ds["success"].values, dtype=float).ravel()
    done = ~np.isnan(success)
    failed = done & (success == 0)
    if not failed.any():
        return EXIT_OK
    messages = np.asarray(ds["message"].values).ravel()[failed]
    reasons, counts = np.unique(messages, return_counts=True)
    reason = reasons[np.argmax(counts)] or "no message"
    what = f"{failed.sum()} of {done.sum()} finished runs failed; the commonest reason " + (
        f"({counts.max()} runs): {reason}"
    )
    if failed.sum() == done.sum():
        print(f"{PROG} coverage: error: {what}", file=sys.stderr)
        return EXIT_FAILED
    _warn("coverage", what)
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    return demo(
        args.problem, args.points, args.noise, args.seed, args.draws, args.tune,
        args.chains, args.output or None, test_functions=args.test_functions,
    )  # fmt: skip


def _warn(command: str, message: str) -> None:
    print(f"{PROG} {command}: warning: {message}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (a multi-line message joined with spaces)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


# --- argument types: a bad value is an argparse error (exit 2) ------------------------------


def _whole_number(text: str, minimum: int) -> int:
    """An option's value as an integer of at least ``minimum``; an argparse error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number; got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}; got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _natural(text: str) -> int:
    """A non-negative integer: a seed, a number of tuning steps."""
    return _whole_number(text, 0)


def _positive_float(text: str) -> float:
    """An option's value as a positive finite number; an argparse error otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
    if not (0 < value and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive finite number; got {text!r}")
    return value


def _level(text: str) -> float:
    """An interval level: a number strictly between 0 and 1."""
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a level between 0 and 1; got {text!r}")
    return value


def _list_of(parse, what: str):
    """An argparse type for a non-empty comma-separated list, each entry read by ``parse``."""

    def parse_list(text: str) -> list:
        entries = [e.strip() for e in text.split(",")]
        if not text.strip() or not all(entries):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {what} with no empty entries; got {text!r}"
            )
        return [parse(e) for e in entries]

    return parse_list


def _methods_text() -> str:
    """The valid method names, in one line."""
    fits = ", ".join(f"{name}[-{'|'.join(kinds)}]" for name, kinds in _ESTIMATORS.items())
    return (
        f"{fits}, {', '.join(_BAYES)}; a bias correction ({_or(_CORRECTIONS)}) after "
        f"{_or(_CORRECTABLE)} with '+', e.g. mle+analytic-sandwich, nuts+profile"
    )


def _or(names) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _method(text: str) -> str:
    """A coverage method name (``estimator[+correction][-covariance]``), checked here so that
    a typo is an argparse error that lists the valid names. The same grammar as
    :func:`pymc_wendy.studies.coverage.methods.parse_methods`, which checks it again."""
    base, _, kind = text.strip().lower().partition("-")
    base, plus, correction = base.partition("+")
    known = base in _ESTIMATORS or base in _BAYES
    bad_correction = plus and (base not in _CORRECTABLE or correction not in _CORRECTIONS)
    bad_kind = kind and (base in _BAYES or kind not in _ESTIMATORS.get(base, ()))
    if not known or bad_correction or bad_kind:
        raise argparse.ArgumentTypeError(
            f"invalid method {text!r}: the methods are {_methods_text()}"
        )
    return text


_PROBLEM_HELP = f"benchmark problem: {', '.join(_PROBLEMS)} (default: %(default)s)"
_DEBUG_HELP = "on an error, show the full traceback instead of one line (default: off)"

#: the options of ``demo`` and ``coverage`` (``add_argument`` keywords); every help says the
#: default, and ``tests/test_cli.py`` checks that it does
_DEMO_OPTIONS: dict[str, dict] = {
    "--problem": dict(
        default="fitzhugh_nagumo", choices=_PROBLEMS, metavar="NAME", help=_PROBLEM_HELP
    ),
    "--points": dict(
        type=_positive_int, default=513, metavar="N",
        help="number of time points (default: %(default)s)",
    ),
    "--noise": dict(
        type=_positive_float, default=0.1, metavar="RATIO",
        help="noise ratio (default: %(default)s)",
    ),
    "--seed": dict(
        type=_natural, default=0, help="seed of the data and the sampler (default: %(default)s)"
    ),
    "--draws": dict(
        type=_positive_int, default=1000, metavar="N",
        help="draws per chain (default: %(default)s)",
    ),
    "--tune": dict(
        type=_natural, default=None, metavar="N",
        help="tuning steps per chain (default: %(default)s, pw.sample's: 300 in whitened "
        "coordinates)",
    ),
    "--chains": dict(
        type=_positive_int, default=4, metavar="N", help="number of chains (default: %(default)s)"
    ),
    "--output": dict(
        default="pymc_wendy_demo.png", metavar="FILE",
        help="plot file, '' for none (default: %(default)s)",
    ),
    "--test-functions": dict(
        default="local", choices=("local", "svd"), metavar="KIND",
        help="test functions of the weak stage: local (cheap; the result is checked "
        "against the exact posterior and corrected where it differs) or svd (the weak "
        "likelihood's own default, the most information per test function) (default: "
        "%(default)s)",
    ),
}  # fmt: skip
# lists are parsed strictly: an empty list or entry, or 100.7 points, is an error (exit 2)
_COVERAGE_OPTIONS: dict[str, dict] = {
    "--problem": dict(default="logistic", choices=_PROBLEMS, metavar="NAME", help=_PROBLEM_HELP),
    "--methods": dict(
        type=_list_of(_method, "method names"), default="mle-hessian,mle-sandwich",
        metavar="LIST",
        help="comma-separated methods, estimator[+correction][-covariance]: "
        f"{_methods_text()} (default: %(default)s)",
    ),
    "--noise": dict(
        type=_list_of(_positive_float, "positive numbers"), default="0.05,0.1,0.2",
        metavar="LIST", help="comma-separated noise ratios (default: %(default)s)",
    ),
    "--points": dict(
        type=_list_of(_positive_int, "whole numbers"), default="513", metavar="LIST",
        help="comma-separated numbers of time points (default: %(default)s)",
    ),
    "--datasets": dict(
        type=_positive_int, default=100, metavar="N",
        help="data sets per noise ratio and number of points (default: %(default)s)",
    ),
    "--level": dict(
        type=_level, default=0.95, help="nominal level of the intervals (default: %(default)s)"
    ),
    "--seed": dict(
        type=_natural, default=0,
        help="study seed; each data set's seed derives from it (default: %(default)s)",
    ),
    "--store": dict(
        default=None, metavar="DIR",
        help="directory to keep finished runs in and resume from (default: none, nothing is "
        "kept)",
    ),
    "--workers": dict(
        type=_positive_int, default=None, metavar="N",
        help="local worker processes (default: one per core)",
    ),
    "--dask": dict(
        default=None, metavar="ADDRESS",
        help="address of a Dask scheduler to run on (default: none, run locally)",
    ),
    "--table": dict(
        default=None, metavar="FILE",
        help="also write the summary table to this CSV file (default: none)",
    ),
    "--report": dict(
        action="store_true", help="summarise what --store holds and run nothing (default: off)"
    ),
}  # fmt: skip


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked for
    (:mod:`importlib.metadata` alone costs tens of milliseconds)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        kwargs.setdefault("help", "show the installed version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        try:
            version = metadata.version("pymc-wendy")
        except metadata.PackageNotFoundError:  # run from a source tree that is not installed
            import pymc_wendy

            version = pymc_wendy.__version__
        print(f"{PROG} {version}")
        parser.exit(EXIT_OK)


def _add_command(sub, common, name: str, options: dict[str, dict], **kwargs) -> None:
    command = sub.add_parser(
        name, parents=[common], epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs,
    )  # fmt: skip
    for flag, keywords in options.items():
        command.add_argument(flag, **keywords)


def _parser() -> argparse.ArgumentParser:
    # --debug is accepted before and after the command; after it, its default is SUPPRESS so
    # that the subcommand does not reset a --debug given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Weak-form ODE inference (WENDy) for PyMC",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--debug", action="store_true", default=False, help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,coverage}")
    _add_command(
        sub, common, "demo", _DEMO_OPTIONS,
        help="MAP and NUTS posterior for a simulated benchmark problem",
        description="Simulate a benchmark problem, fit it (MAP = WENDy-MLE), sample its\n"
        "weak posterior with NUTS, compare with the truth and plot the posterior\n"
        "predictive band.",
    )  # fmt: skip
    _add_command(
        sub, common, "coverage", _COVERAGE_OPTIONS,
        help="coverage/accuracy study over many simulated data sets (resumable with --store)",
        description="Apply estimators to many simulated data sets of a benchmark problem\n"
        "and report the coverage of their intervals, their bias and their error.",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (:data:`EXIT_OK` ..., the epilog)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "coverage" and args.report and not args.store:
        parser.error("--report reads a study: give its --store")
    run = {"demo": _demo, "coverage": _coverage}[args.command]
    try:
        return run(args)
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        kept = f"; the finished runs are in {args.store}" if getattr(args, "store", None) else ""
        print(f"{PROG} {args.command}: interrupted{kept}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _USER_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
