"""Coverage studies: every code path on small studies (a few data sets each)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import pymc_wendy as pw
from pymc_wendy.studies import coverage as cov
from pymc_wendy.studies.coverage import pool as cov_pool
from pymc_wendy.studies.coverage.runners import data_seed

SMALL = {
    "noise_ratios": [0.05, 0.1],
    "n_points": [129],
    "n_datasets": 3,
    "progress": False,
}


@pytest.fixture(scope="module")
def serial_study():
    return cov.run_coverage(
        "logistic", methods=["mle", "mle-sandwich", "irls"], max_workers=1, **SMALL
    )


def test_study_layout_and_reproducibility(serial_study):
    ds = serial_study
    assert list(ds["estimator"].values) == ["mle-hessian", "mle-sandwich", "irls-gls"]
    assert ds["estimate"].dims == ("estimator", "noise_ratio", "n_points", "dataset", "param")
    assert ds.attrs["n_done"] == ds.attrs["n_runs"] == 3 * 2 * 1 * 3
    assert bool(ds["success"].all())
    # methods sharing an estimator share the fit; their intervals differ
    np.testing.assert_array_equal(
        ds["estimate"].sel(estimator="mle-hessian"), ds["estimate"].sel(estimator="mle-sandwich")
    )
    assert not np.allclose(
        ds["interval"].sel(estimator="mle-hessian"), ds["interval"].sel(estimator="mle-sandwich")
    )
    # every run can be reproduced on its own from the documented seed
    prob = pw.get_problem("logistic")
    seed = data_seed(0, 0.1, 129, 2)
    data = prob.simulate(n_points=129, noise_ratio=0.1, seed=seed)
    res = pw.fit(prob.model, data.t, data.U, bounds=prob.bounds)
    run = ds.sel(estimator="mle-sandwich", noise_ratio=0.1, n_points=129, dataset=2)
    np.testing.assert_allclose(run["estimate"], res.x, rtol=1e-10)
    np.testing.assert_allclose(run["interval"], res.conf_int(0.95, "sandwich"), rtol=1e-10)
    covered = (run["interval"][:, 0] <= 1.0) & (1.0 <= run["interval"][:, 1])
    np.testing.assert_array_equal(run["covered"], covered)
    # forward-simulation error from the true u0 (Table 1 eq. 13)
    U = pw.solve(prob.model, res.x, prob.u0, data.t)
    expected = np.linalg.norm(U - data.U_true) / np.linalg.norm(data.U_true)
    assert run["fsim_error"] == pytest.approx(expected, rel=1e-6)


def test_summary_matches_hand_computation(serial_study):
    s = cov.summarize(serial_study)
    est = serial_study["estimate"].sel(estimator="irls-gls", noise_ratio=0.05, n_points=129).values
    err = est - 1.0
    got = s.sel(estimator="irls-gls", noise_ratio=0.05, n_points=129)
    np.testing.assert_allclose(got["rel_bias"], err.mean(0))
    np.testing.assert_allclose(got["rel_mse"], (err**2).mean(0))
    np.testing.assert_allclose(got["rel_variance"], err.var(0))  # eq. 16: ddof = 0
    np.testing.assert_allclose(got["bias_se"], err.std(0, ddof=1) / np.sqrt(3))
    c = serial_study["covered"].sel(estimator="irls-gls", noise_ratio=0.05, n_points=129)
    np.testing.assert_allclose(got["coverage"], c.values.mean(0))
    lo, hi = np.moveaxis(
        serial_study["interval"].sel(estimator="irls-gls", noise_ratio=0.05, n_points=129).values,
        -1,
        0,
    )
    z = err / ((hi - lo) / 2 / 1.959963984540054)
    np.testing.assert_allclose(got["zscore_mean"], z.mean(0))
    np.testing.assert_allclose(got["zscore_sd"], z.std(0, ddof=1))
    np.testing.assert_allclose(got["zscore_sd_se"], z.std(0, ddof=1) / 2)  # sqrt(2 (3 - 1))
    table = cov.to_table(s, ["rel_bias", "coverage", "coef_error_mean"])
    assert {"rel_bias", "rel_bias_se", "coverage", "coef_error_mean"} <= set(table.columns)
    assert len(table) == 3 * 2 * 1 * 2  # method x noise x points x param


def test_zscores_tell_calibrated_from_narrow_intervals():
    """Synthetic study, estimates N(p*, sd) with per-run sd: intervals of the right width give
    z-scores with sd 1 and 95 % coverage; half as wide, sd 2 and about 68 % coverage."""
    rng = np.random.default_rng(1)
    n, truth = 4000, np.array([1.0, -2.0])
    sd = rng.uniform(0.05, 0.2, size=(n, 2))
    est = truth + sd * rng.normal(size=(n, 2))
    half = 1.959963984540054 * np.stack([sd, sd / 2])  # calibrated, too narrow
    interval = np.stack([est - half, est + half], axis=-1)[:, None, None]
    dims = ("estimator", "noise_ratio", "n_points", "dataset")
    covered = (interval[..., 0] <= truth) & (truth <= interval[..., 1])
    zeros = np.zeros((2, 1, 1, n))
    ds = xr.Dataset(
        {
            "estimate": ((*dims, "param"), np.broadcast_to(est, (2, 1, 1, n, 2))),
            "interval": ((*dims, "param", "bound"), interval),
            "covered": ((*dims, "param"), covered.astype(float)),
            **{v: (dims, zeros) for v in ("coef_error", "fsim_error", "fsim_failed")},
            "success": (dims, zeros + 1),
            "wall_time": (dims, zeros),
        },
        coords={
            "estimator": ["calibrated", "narrow"],
            "noise_ratio": [0.1],
            "n_points": [129],
            "param": ["a", "b"],
            "bound": ["lower", "upper"],
            "truth": ("param", truth),
        },
        attrs={"level": 0.95},
    )
    s = cov.summarize(ds).squeeze(["noise_ratio", "n_points"])
    for name, sd_z, c in (("calibrated", 1.0, 0.95), ("narrow", 2.0, 0.6827)):
        got = s.sel(estimator=name)
        assert np.all(np.abs(got["zscore_sd"] - sd_z) < 4 * got["zscore_sd_se"])
        assert np.all(np.abs(got["zscore_mean"]) < 4 * got["zscore_mean_se"])
        assert np.all(np.abs(got["coverage"] - c) < 4 * got["coverage_se"])


def test_interrupt_resume_and_extend(tmp_path, monkeypatch, serial_study):
    store = tmp_path / "study"
    calls = []
    real = cov_pool.run_task

    def flaky(task):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(task.key)
        return real(task)

    monkeypatch.setattr(cov_pool, "run_task", flaky)
    kwargs = {"methods": ["mle", "mle-sandwich", "irls"], "max_workers": 1, "store": store}
    with pytest.raises(KeyboardInterrupt):
        cov.run_coverage("logistic", **kwargs, **SMALL)
    lines = (store / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 4  # finished runs were kept
    # the store can be read while the study is unfinished, without its settings
    part = cov.open_coverage(store)
    # (4 runs: mle and irls on the first two data sets; one mle fit gives two intervals)
    assert list(part.estimator.values) == ["mle-hessian", "mle-sandwich", "irls-gls"]
    assert part.attrs["n_done"] == 6 and part.sizes["dataset"] == 2
    first = {"estimator": "mle-hessian", "noise_ratio": [0.05], "dataset": [0, 1]}
    xr.testing.assert_allclose(part["estimate"].sel(first), serial_study["estimate"].sel(first))
    # a line cut short by a crash is skipped with a warning (that run is redone)
    with (store / "runs.jsonl").open("a") as fh:
        fh.write(lines[0][: len(lines[0]) // 2])
    calls.clear()
    monkeypatch.setattr(cov_pool, "run_task", lambda t: (calls.append(t.key), real(t))[1])
    with pytest.warns(RuntimeWarning, match="line 5: cut short or not JSON.*runs.damaged.jsonl"):
        ds = cov.run_coverage("logistic", **kwargs, **SMALL)
    # the damaged line is kept aside, so reading the store later does not warn again
    assert (store / "runs.damaged.jsonl").read_text() == lines[0][: len(lines[0]) // 2] + "\n"
    assert len(calls) == 2 * 2 * 3 - 4  # only the rest ran (2 estimators x 2 noise x 3 sets)
    xr.testing.assert_allclose(
        ds.drop_vars(["wall_time", "message"]),
        serial_study.drop_vars(["wall_time", "message"]),
    )
    saved = xr.open_dataset(store / "results.nc", engine="h5netcdf")
    np.testing.assert_allclose(saved["estimate"], ds["estimate"])
    saved.close()
    xr.testing.assert_identical(cov.open_coverage(store), ds)
    # extending: more data sets and a new interval kind of a finished estimator
    calls.clear()
    more = {**SMALL, "n_datasets": 4}
    ds4 = cov.run_coverage("logistic", **{**kwargs, "methods": ["mle-gls", "irls"]}, **more)
    assert len(calls) == 2 * 2 * 4 - 2 * 3  # mle refits all 4 for the gls interval; irls 1 new
    assert ds4.attrs["n_done"] == ds4.attrs["n_runs"]
    opened = cov.open_coverage(store)  # every interval kind ever stored, first-stored order
    assert list(opened.estimator.values) == ["mle-hessian", "mle-sandwich", "mle-gls", "irls-gls"]
    xr.testing.assert_equal(opened.sel(estimator=["mle-gls", "irls-gls"]), ds4)
    # different settings in the same store are refused
    with pytest.raises(ValueError, match="different settings"):
        cov.run_coverage("logistic", **{**kwargs, "store": store}, level=0.9, **SMALL)


def test_dask_executor_gives_the_same_runs(serial_study):
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        ds = cov.run_coverage(
            "logistic",
            methods=["mle", "mle-sandwich", "irls"],
            executor=client.get_executor(),
            **SMALL,
        )
    xr.testing.assert_allclose(
        ds.drop_vars(["wall_time", "message"]),
        serial_study.drop_vars(["wall_time", "message"]),
    )


def test_default_process_pool(monkeypatch):
    # one run per worker before the pool is replaced: 5 runs go through 3 pools, and give
    # the same results as in this process
    monkeypatch.setattr(cov_pool, "_TASKS_PER_WORKER", 1)
    kwargs = {"methods": ["wls"], "noise_ratios": [0.1], "n_points": [65], "n_datasets": 5}
    ds = cov.run_coverage("logistic", max_workers=2, progress=True, **kwargs)
    assert ds.attrs["n_done"] == 5 and bool(ds["success"].all())
    serial = cov.run_coverage("logistic", max_workers=1, progress=False, **kwargs)
    np.testing.assert_allclose(ds["estimate"], serial["estimate"], rtol=1e-10)


@pytest.mark.slow
def test_bayesian_methods():
    ds = cov.run_coverage(
        "logistic",
        methods=["nuts", "laplace", "forward"],
        noise_ratios=[0.1],
        n_points=[129],
        n_datasets=1,
        max_workers=1,
        progress=False,
        sample_options={"draws": 300, "tune": 300},
    )
    for m in ("nuts", "laplace", "forward"):
        run = ds.sel(estimator=m).squeeze()
        lo, hi = run["interval"].sel(bound="lower"), run["interval"].sel(bound="upper")
        assert (
            bool(run["success"]) and np.all(lo < run["estimate"]) and np.all(run["estimate"] < hi)
        )
        assert np.all(np.abs(run["estimate"] - 1) < 0.1)
    # the two agree (posterior close to Gaussian at 10 % noise)
    np.testing.assert_allclose(
        ds["interval"].sel(estimator="nuts"), ds["interval"].sel(estimator="laplace"), rtol=0.05
    )


def test_true_sigma_is_the_one_that_generated_each_data_set():
    """``fit_options={"sigma": "true"}``: the frequentist fit is the fit with the data set's
    generating noise level, and the forward method's model then has no noise variable."""
    from pymc_wendy.studies.coverage import bayesian, runners

    kwargs = dict(noise_ratios=[0.1], n_points=[65], n_datasets=1, max_workers=1, progress=False)
    ds = cov.run_coverage("logistic", methods=["mle"], fit_options={"sigma": "true"}, **kwargs)
    prob = pw.get_problem("logistic")
    d = prob.simulate(n_points=65, noise_ratio=0.1, seed=data_seed(0, 0.1, 65, 0))
    res = pw.fit(prob.model, d.t, d.U, sigma=d.sigma, bounds=prob.bounds)
    np.testing.assert_allclose(ds["estimate"].values.ravel(), res.x, rtol=1e-8)
    estimated = cov.run_coverage("logistic", methods=["mle"], **kwargs)
    assert not np.allclose(estimated["estimate"].values.ravel(), res.x, rtol=1e-8)

    task = runners.Task(prob, "forward", (), 0.1, 65, 0, 1, 0.95, {"sigma": "true"})
    resolved = runners._with_true_sigma(task, d)
    np.testing.assert_array_equal(resolved.fit_options["sigma"], d.sigma)
    assert bayesian._given_sigma(resolved.fit_options["sigma"])
    model = bayesian._posterior_model(resolved, [d], [None], False, infer_sigma=False)
    assert [v.name for v in model.free_RVs] == ["p"]
    several = runners._with_true_sigma(task, [d, d])
    assert len(several.fit_options["sigma"]) == 2


def test_forward_takes_no_bias_correction():
    with pytest.raises(ValueError, match="a bias correction applies to 'mle', 'nuts'"):
        cov.run_coverage("logistic", methods=["forward+auto"], execute=False)


def test_failures_do_not_stop_a_study(monkeypatch):
    def boom(*args, **kwargs):
        raise np.linalg.LinAlgError("synthetic failure")

    monkeypatch.setattr(pw.estimators, "fit", boom)
    ds = cov.run_coverage(
        "logistic", methods=["mle"], noise_ratios=[0.1], n_points=[65], n_datasets=2,
        max_workers=1, progress=False,
    )  # fmt: skip
    assert ds.attrs["n_done"] == 2 and not bool(ds["success"].any())
    assert "synthetic failure" in str(ds["message"].values[0, 0, 0, 0])
    assert np.isnan(ds["estimate"]).all() and bool(ds["fsim_failed"].all())


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown method"):
        cov.run_coverage("logistic", methods=["bogus"])
    with pytest.raises(ValueError, match="not available"):
        cov.run_coverage("logistic", methods=["oels-hessian"])
    with pytest.raises(ValueError, match="must not set"):
        cov.run_coverage("logistic", fit_options={"method": "wls"})
    with pytest.raises(ValueError, match="noise ratios"):
        cov.run_coverage("logistic", noise_ratios=[0.0])
    with pytest.raises(KeyError, match="unknown problem"):
        cov.run_coverage("nope")


def test_open_coverage_names_what_it_cannot_read(tmp_path):
    import dataclasses

    with pytest.raises(FileNotFoundError, match="not a coverage store"):
        cov.open_coverage(tmp_path)
    mine = dataclasses.replace(pw.get_problem("logistic"), name="my_growth")
    ds = cov.run_coverage(mine, methods=["wls"], noise_ratios=[0.1], n_points=[65], n_datasets=1,
                          max_workers=1, progress=False, store=tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match="not a benchmark problem"):
        cov.open_coverage(tmp_path)
    with pytest.raises(ValueError, match="has 4 parameters"):
        cov.open_coverage(tmp_path, problem="lotka_volterra")
    xr.testing.assert_identical(cov.open_coverage(tmp_path, problem=mine), ds)


def test_store_record_is_plain_json(tmp_path):
    cov.run_coverage(
        "logistic", methods=["wls"], noise_ratios=[0.1], n_points=[65], n_datasets=1,
        max_workers=1, progress=False, store=tmp_path,
    )  # fmt: skip
    rec = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[0])
    assert rec["estimator"] == "wls" and len(rec["estimate"]) == 2
    cfg = json.loads((tmp_path / "study.json").read_text())
    assert cfg["problem"] == "logistic" and cfg["level"] == 0.95


def test_command_line(tmp_path, capsys):
    from pymc_wendy.cli import main

    args = ["coverage", "--problem", "logistic", "--methods", "mle,mle-sandwich", "--noise",
            "0.1", "--points", "65", "--datasets", "2", "--workers", "1", "--store",
            str(tmp_path / "s"), "--table", str(tmp_path / "t.csv")]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "mle-sandwich" in out and "coverage" in out
    assert (tmp_path / "s" / "results.nc").exists() and (tmp_path / "t.csv").exists()
    # --report summarises the store (read back with open_coverage) and runs nothing
    assert main(["coverage", "--report", "--store", str(tmp_path / "s")]) == 0
    report = capsys.readouterr().out
    head, table = report.split("\n", 1)
    assert head == "4 of 4 runs stored" and out.endswith(table)  # the same summary
    with pytest.raises(SystemExit):
        main(["coverage", "--report"])
    assert "give its --store" in capsys.readouterr().err


def test_command_line_on_dask(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    from pymc_wendy.cli import main

    args = ["coverage", "--problem", "logistic", "--methods", "mle", "--noise", "0.1",
            "--points", "65", "--datasets", "2", "--workers", "1"]  # fmt: skip
    assert main([*args, "--store", str(tmp_path / "local")]) == 0
    local = capsys.readouterr().out
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        on_dask = [*args, "--store", str(tmp_path / "dask"), "--dask", cluster.scheduler_address]
        assert main(on_dask) == 0
        submitted = set(cluster.scheduler.task_prefixes)
    assert submitted == {"run_task"}, submitted  # the runs went to the cluster
    assert capsys.readouterr().out == local  # the same summary, computed on the cluster
    a, b = (cov.open_coverage(tmp_path / s) for s in ("local", "dask"))
    xr.testing.assert_allclose(a["estimate"], b["estimate"])
    assert b.attrs["n_done"] == 2


def test_plot_study(serial_study):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    s = cov.summarize(serial_study)
    fig = pw.plot_study(s, "coef_error_mean")
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) >= 3  # one line per estimator
    fig = pw.plot_study(s, "coverage")
    assert len(fig.axes[0].get_legend().get_texts()) == 3 * 2  # estimator x parameter
    with pytest.raises(KeyError, match="not a summary variable"):
        pw.plot_study(s, "nope")


def _errorbars(ax):
    """``(x, y, lower, upper)`` of each errorbar series drawn on ``ax``, in drawing order."""
    out = []
    for c in ax.containers:
        data_line, _, (bars, *_) = c.lines
        x, y = data_line.get_xydata().T
        seg = np.array(bars.get_segments())  # one [[x, lo], [x, hi]] per point
        out.append((x, y, seg[:, 0, 1], seg[:, 1, 1]))
    return out


def test_plot_intervals(serial_study):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    ds = serial_study
    fig = pw.plot_intervals(ds, n_points=129, dodge=0.0)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["p1 (129 points)", "p2 (129 points)"]
    for j, ax in enumerate(axes):
        bars = _errorbars(ax)
        assert len(bars) == ds.sizes["estimator"]
        for (x, y, lo, hi), est in zip(bars, ds["estimator"].values, strict=True):
            run = ds.sel(estimator=est, n_points=129).isel(param=j)
            np.testing.assert_allclose(x, [5.0, 10.0])  # noise ratio in percent
            np.testing.assert_allclose(y, run["estimate"].values.mean(axis=-1))
            np.testing.assert_allclose(lo, run["interval"].values[..., 0].mean(axis=-1))
            np.testing.assert_allclose(hi, run["interval"].values[..., 1].mean(axis=-1))
        truth = [ln for ln in ax.lines if ln.get_label() == "truth"]
        assert len(truth) == 1 and np.all(np.asarray(truth[0].get_ydata()) == 1.0)
    labels = {t.get_text() for t in axes[0].get_legend().get_texts()}
    assert labels == {"truth", "mle-hessian", "mle-sandwich", "irls-gls"}


def test_plot_intervals_synthetic():
    """Means skip runs without a finite estimate and interval; dodging shifts x only; one
    series per estimator and number of points unless one is chosen."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    rng = np.random.default_rng(0)
    shape = (2, 3, 2, 5, 3)  # estimator, noise ratio, n_points, dataset, param
    est = 2.0 + rng.normal(size=shape)
    half = rng.uniform(0.1, 1.0, size=shape)
    interval = np.stack([est - half, est + 2 * half], axis=-1)
    est[0, 1, 0, 2, 1] = np.nan  # a failed run
    interval[1, 0, 1, 4, 0, 1] = np.nan  # a run without an interval
    truth = np.array([2.0, -1.0, 0.5])
    ds = xr.Dataset(
        {
            "estimate": (("estimator", "noise_ratio", "n_points", "dataset", "param"), est),
            "interval": (
                ("estimator", "noise_ratio", "n_points", "dataset", "param", "bound"),
                interval,
            ),
        },
        coords={
            "estimator": ["a", "b"],
            "noise_ratio": [0.01, 0.05, 0.2],
            "n_points": [257, 513],
            "dataset": np.arange(5),
            "param": ["p1", "p2", "p3"],
            "bound": ["lower", "upper"],
            "truth": ("param", truth),
        },
    )
    ok = np.isfinite(est) & np.all(np.isfinite(interval), axis=-1)

    def expected(a, c, j):
        m = ok[a, :, c, :, j]
        mean = lambda v: np.where(m, v, 0).sum(-1) / m.sum(-1)  # noqa: E731
        return (
            mean(est[a, :, c, :, j]),
            mean(interval[a, :, c, :, j, 0]),
            mean(interval[a, :, c, :, j, 1]),
        )

    fig = pw.plot_intervals(ds, n_points=513, dodge=0.5)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3
    for j, ax in enumerate(axes):
        (x0, *got0), (x1, *got1) = _errorbars(ax)
        # two series spread over half the smallest gap (4 percentage points) around each ratio
        np.testing.assert_allclose(x0, [1 - 1, 5 - 1, 20 - 1])
        np.testing.assert_allclose(x1, [1 + 1, 5 + 1, 20 + 1])
        for a, got in enumerate((got0, got1)):
            np.testing.assert_allclose(got, expected(a, 1, j))
        truth_lines = [ln for ln in ax.lines if ln.get_label() == "truth"]
        assert np.all(np.asarray(truth_lines[0].get_ydata()) == truth[j])
    # every number of points: 2 estimators x 2 numbers of points per panel, labelled as such
    fig = pw.plot_intervals(ds, params=["p2"], dodge=0.0)
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    bars = _errorbars(ax)
    assert len(bars) == 4
    np.testing.assert_allclose(bars[2][1], expected(1, 0, 1)[0])  # b, 257 points
    assert "b, 257 points" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError, match="not in the study"):
        pw.plot_intervals(ds, n_points=1025)
    with pytest.raises(KeyError, match="lacks"):
        pw.plot_intervals(ds.drop_vars("interval"))


def test_plots_say_when_matplotlib_is_missing(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # makes the import fail
    with pytest.raises(ImportError, match="plotting needs matplotlib"):
        pw.plot_intervals(None)
