"""Command-line entry point: ``pymc-wendy demo`` fits an embedded default problem with PyMC;
``pymc-wendy coverage`` runs a coverage study (:mod:`pymc_wendy.studies.coverage`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

from pymc_wendy.problems.catalogue import get_problem, list_problems


def demo(
    problem: str = "fitzhugh_nagumo",
    n_points: int = 513,
    noise_ratio: float = 0.1,
    seed: int = 0,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    output: str | None = "pymc_wendy_demo.png",
    predictive_draws: int = 200,
) -> int:
    """Simulate data; compute the MAP (= WENDy-MLE); sample with NUTS; check against the truth.

    Prints the ArviZ summary with the true values and whether each lies in its 95 % interval,
    and writes a plot of the data with posterior predictive bands to ``output``. Returns 0
    when every R-hat is below 1.01 and there are no divergences, 1 otherwise.
    """
    import arviz as az
    import pymc as pm

    from pymc_wendy.bayes.distribution import WeakODELikelihood
    from pymc_wendy.bayes.sampling import initial_values, sample

    prob = get_problem(problem)
    data = prob.simulate(n_points=n_points, noise_ratio=noise_ratio, seed=seed)
    ode = prob.model
    print(f"problem: {prob.name} ({prob.reference})")
    print(
        f"data: {data.t.size} points on [{data.t[0]:g}, {data.t[-1]:g}], "
        f"{noise_ratio:.0%} {data.noise} noise, seed {seed}"
    )
    t0 = time.perf_counter()
    with pm.Model(coords={"param": ode.params, "state": ode.states}) as model:
        p = pm.Normal("p", 0.0, 10.0, dims="param")
        U = WeakODELikelihood("U", ode=ode, params=p, t=data.t, observed=data.U, noise=data.noise)
    lik = U.owner.op.likelihood
    print(
        f"weak likelihood: K = {lik.K} test functions, noise estimate sigma = "
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
    print(f"MAP (N(0, 10) priors; WENDy-MLE start): {time.perf_counter() - t0:.2f} s, "
          f"relative coefficient error {err:.2%}")  # fmt: skip

    t0 = time.perf_counter()
    with model:
        idata = sample(
            draws, tune=tune, chains=chains, random_seed=seed, initvals=start, progressbar=True
        )
    t_sample = time.perf_counter() - t0
    summary = az.summary(idata, ci_prob=0.95)
    post = idata.posterior["p"]
    lo = post.quantile(0.025, dim=("chain", "draw")).values
    hi = post.quantile(0.975, dim=("chain", "draw")).values
    summary.insert(0, "true", data.p_true)
    summary.insert(1, "MAP", p_map)
    summary["in 95%"] = np.where((lo <= data.p_true) & (data.p_true <= hi), "yes", "no")
    divergences = int(idata.sample_stats["diverging"].sum())
    ess = float(az.ess(idata)["p"].min())
    print(f"\nNUTS ({idata.posterior.attrs.get('inference_library', 'pymc')}): {chains} chains x "
          f"{draws} draws after {tune} tuning steps in {t_sample:.1f} s (incl. compilation); "
          f"min ESS {ess:.0f} ({ess / t_sample:.1f}/s); {divergences} divergences")  # fmt: skip
    with _pandas_width():
        print(summary.to_string())
    covered = int((summary["in 95%"] == "yes").sum())
    print(f"{covered}/{len(summary)} true values inside their 95 % credible intervals")

    if output:
        _predictive_plot(model, idata, data, ode, predictive_draws, seed, output)
    max_rhat = float(az.rhat(idata)["p"].max())
    return 0 if max_rhat < 1.01 and divergences == 0 else 1


def _predictive_plot(model, idata, data, ode, n_draws, seed, output) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import pymc as pm

    from pymc_wendy.studies.plots import plot_predictive

    post = idata.posterior.to_dataset()
    step = max(1, post.sizes["chain"] * post.sizes["draw"] // n_draws)
    thinned = post.isel(draw=slice(None, None, step))
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a failed solve is reported as NaN
        pp = pm.sample_posterior_predictive(thinned, random_seed=seed, progressbar=False)
    fig = plot_predictive(
        data.t, data.U, pp.posterior_predictive["U"], truth=data.U_true, states=ode.states
    )
    fig.suptitle(f"{ode.name}: data and 90 % posterior predictive band")
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    n_pp = thinned.sizes["chain"] * thinned.sizes["draw"]
    print(f"posterior predictive plot ({n_pp} draws, "
          f"{time.perf_counter() - t0:.1f} s): {os.path.abspath(output)}")  # fmt: skip


class _pandas_width:
    """Wide enough console output for the summary table."""

    def __enter__(self):
        import pandas as pd

        self._ctx = pd.option_context("display.width", 200, "display.max_columns", 30)
        self._ctx.__enter__()

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def _run_study(args):
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
    from distributed import Client

    with Client(args.dask) as client:
        return run_coverage(args.problem, executor=client.get_executor(), **kwargs)


def _coverage(args) -> int:
    from pymc_wendy.studies.coverage import open_coverage, summarize, to_table

    if args.report:
        ds = open_coverage(args.store)
        print(f"{ds.attrs['n_done']} of {ds.attrs['n_runs']} runs stored")
    else:
        ds = _run_study(args)
    table = to_table(summarize(ds), ["coverage", "rel_bias", "rel_mse", "coef_error_mean"])
    with _pandas_width():
        print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    if args.table:
        table.to_csv(args.table)
    return 0


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
    if not 0 < value < np.inf:
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


def _method(name: str) -> str:
    """A coverage method name, checked here so that a typo is an argparse error."""
    from pymc_wendy.studies.coverage.methods import parse_methods

    try:
        parse_methods([name])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pymc-wendy", description="Weak-form ODE inference (WENDy) for PyMC"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="MAP and NUTS posterior for a simulated benchmark problem")
    d.add_argument("--problem", default="fitzhugh_nagumo", choices=list_problems())
    d.add_argument("--points", type=_positive_int, default=513)
    d.add_argument("--noise", type=_positive_float, default=0.1, help="noise ratio (default 0.1)")
    d.add_argument("--seed", type=_natural, default=0)
    d.add_argument("--draws", type=_positive_int, default=1000)
    d.add_argument("--tune", type=_natural, default=1000)
    d.add_argument("--chains", type=_positive_int, default=4)
    d.add_argument("--output", default="pymc_wendy_demo.png", help="plot file ('' for none)")
    c = sub.add_parser(
        "coverage",
        help="coverage/accuracy study over many simulated data sets (resumable with --store)",
    )
    c.add_argument("--problem", default="logistic", choices=list_problems())
    # lists are parsed strictly: an empty list or entry, or 100.7 points, is an error (exit 2)
    c.add_argument(
        "--methods", type=_list_of(_method, "method names"), default="mle-hessian,mle-sandwich",
        help="comma-separated",
    )  # fmt: skip
    c.add_argument(
        "--noise", type=_list_of(_positive_float, "positive numbers"), default="0.05,0.1,0.2",
        help="comma-separated noise ratios",
    )  # fmt: skip
    c.add_argument(
        "--points", type=_list_of(_positive_int, "whole numbers"), default="513",
        help="comma-separated numbers of points",
    )  # fmt: skip
    c.add_argument("--datasets", type=_positive_int, default=100)
    c.add_argument("--level", type=_level, default=0.95)
    c.add_argument("--seed", type=_natural, default=0)
    c.add_argument("--store", default=None, help="directory for finished runs (resume)")
    c.add_argument(
        "--workers", type=_positive_int, default=None, help="local processes (default: cores)"
    )
    c.add_argument("--dask", default=None, help="address of a Dask scheduler to run on")
    c.add_argument("--table", default=None, help="write the summary table to this CSV file")
    c.add_argument(
        "--report", action="store_true", help="summarise what --store holds; run nothing"
    )
    args = parser.parse_args(argv)
    if args.command == "coverage" and args.report and not args.store:
        parser.error("--report reads a study: give its --store")
    if args.command == "coverage":
        try:
            return _coverage(args)
        except (ValueError, OSError) as exc:  # bad settings or store: a message, no traceback
            print(f"pymc-wendy coverage: error: {exc}", file=sys.stderr)
            return 1
    if args.command == "demo":
        return demo(
            args.problem, args.points, args.noise, args.seed, args.draws, args.tune,
            args.chains, args.output or None,
        )  # fmt: skip
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
