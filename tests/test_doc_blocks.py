"""Every ```python block of README.md and docs/*.md runs as written (issue 37).

Each page's blocks run in order in one fresh namespace, with a temporary working directory
(files the examples write land there) and matplotlib's Agg backend. A block whose run takes
long carries a marker right before it in the markdown, with its measured run time::

    <!-- doc-test: slow, about 4 min -->

(measured on a 2-core machine running other work too; the times varied 2-3x with its load).
The default (fast) selection runs each page's unmarked blocks in order; a marked block must
therefore not be needed by the unmarked blocks after it (the fast run fails if it is). A page
with marked blocks also gets a test in the ``slow`` selection (``pytest -m slow``) that runs
all its blocks in order. Code that is not meant to run (shell commands, signatures,
pseudo-code) goes in a ```bash or unlabelled fence, never in a ```python one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_MARKER_PATTERN = r"<!--\s*doc-test:\s*(?P<marker>[^>]*?)\s*-->"
_MARKER = re.compile(_MARKER_PATTERN)
#: A ```python block, optionally preceded (blank lines between allowed) by a doc-test marker.
_BLOCK = re.compile(rf"(?:{_MARKER_PATTERN}\s*)?^```python\n(?P<code>.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    code: str
    line: int  # of the opening fence, 1-based
    slow: str | None  # the marker's text when the block is marked slow


def blocks(path: Path) -> list[Block]:
    """The page's ```python blocks in order, with their slow markers."""
    text = path.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        marker = m.group("marker")
        if marker is not None and not marker.startswith("slow"):
            raise ValueError(f"{path.name}: unknown doc-test marker {marker!r}")
        fence = text.index("```python", m.start())
        line = text.count("\n", 0, fence) + 2  # the block's first code line
        out.append(Block(m.group("code"), line, marker))
    return out


def _pages_with(pred) -> list:
    params = []
    for path in PAGES:
        found = blocks(path)
        if found and pred(found):
            name = path.relative_to(ROOT).as_posix()
            params.append(pytest.param(path, id=name))
    return params


FAST = _pages_with(lambda b: any(x.slow is None for x in b))
SLOW = _pages_with(lambda b: any(x.slow is not None for x in b))


@pytest.fixture
def page_env(tmp_path, monkeypatch):
    """A temporary working directory, copies of the user registries (a page may register an
    estimator or a test-function family), and no figures left open."""
    import matplotlib.pyplot as plt

    from pymc_wendy.estimators import registry
    from pymc_wendy.weak.test_functions import families

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(families, "_REGISTRY", dict(families._REGISTRY))
    yield
    plt.close("all")


# --- what a page's results must show ----------------------------------------------------------
# A check runs right after the block it names (page, index of the ```python block), on the
# page's namespace and the output printed since the page started. The slow pages run once, in
# the slow selection, and these checks ride on that run instead of running the blocks again.


def _readme_fit(ns: dict, out: str) -> None:
    res = ns["res"]
    assert res.success
    np.testing.assert_allclose(res.x, [3, -1, -6, 1], rtol=0.1)


def _readme_scipy(ns: dict, out: str) -> None:
    """scipy's trust-exact on the same likelihood lands on pw.fit's estimate."""
    np.testing.assert_allclose(ns["opt"].x, ns["res"].x, rtol=1e-6)


def _readme_experiments(ns: dict, out: str) -> None:
    joint, single = ns["joint"], ns["res"]
    assert joint.success and joint.n_experiments == 2
    assert np.all(joint.stderr < single.stderr)
    np.testing.assert_allclose(joint.x, [3, -1, -6, 1], rtol=0.1)


def _readme_higher_order(ns: dict, out: str) -> None:
    truth = [0.05, 0.15, 0.39]
    for name in ("res", "nls", "d2l"):
        fit = ns[name]
        assert fit.success, name
        assert np.all(np.abs(fit.x - truth) < 4 * fit.stderr), name


def _data_page_frame(ns: dict, out: str) -> None:
    """A DataFrame fit is the array fit of the same data."""
    d = ns["d"]
    ref = ns["pw"].fit(ns["P"].model, d.t, d.U)
    np.testing.assert_allclose(ns["res"].x, ref.x, rtol=1e-12)


def _data_page_initial_state_prior(ns: dict, out: str) -> None:
    """A prior on C(0) recovers the rates, without divergences, C(0) kept non-negative."""
    idata = ns["idata"]
    assert int(idata.sample_stats["diverging"].sum()) == 0
    p = idata.posterior["p"].values.reshape(-1, 3)
    assert np.all(np.abs(p.mean(0) - ns["P"].p_true) < 3 * p.std(0))
    assert float(idata.posterior["c0"].min()) >= 0.0


def _doses_page(ns: dict, out: str) -> None:
    res = ns["res"]
    assert res.success
    np.testing.assert_allclose(res.x, [1.5, 0.2, 30.0], rtol=0.15)
    assert np.all(np.abs(res.x - [1.5, 0.2, 30.0]) < 3 * res.stderr)


def _theophylline_single_subject(ns: dict, out: str) -> None:
    """The WENDy-MLE of one subject agrees with least squares on the closed-form solution
    within their combined standard errors."""
    from scipy.optimize import curve_fit

    res, one = ns["res"], ns["one"]
    assert res.success

    def closed_form(t, ka, ke, a):
        return a * ka / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t))

    nls, cov = curve_fit(closed_form, one.time, one.conc, p0=[1.5, 0.08, 10.0])
    combined = np.hypot(res.stderr, np.sqrt(np.diag(cov)))
    assert np.all(np.abs(res.x - nls) < 2 * combined)


def _readme_posterior(ns: dict, out: str) -> None:
    post = ns["idata"].posterior["p"].mean(("chain", "draw")).values
    np.testing.assert_allclose(post, [3, -1, -6, 1], rtol=0.1)
    assert ns["pp"].posterior_predictive["U"].shape[-2:] == (257, 2)


def _readme_weak_check(ns: dict, out: str) -> None:
    """pw.sample's result is checked, and corrected where the check says the weak one is off."""
    idata = ns["idata"]
    check = idata["weak_check"].attrs
    assert check["verdict"] in ("agrees", "differs")
    assert check["verdict"] in out
    if check["verdict"] == "differs":
        assert idata.posterior.attrs["corrected"] == 1 and "weak_posterior" in idata.children
        assert idata.attrs["route"] in ("importance", "nuts")


def _readme_tempering(ns: dict, out: str) -> None:
    # the example's 500 draws on 10 rungs sit at the diagnostics' thresholds (swap acceptance
    # 0.18-0.32 per pair, R-hat 1.011 in one run): this is what it must show
    idata = ns["idata"]
    assert idata.sample_stats.attrs["sampler"] == "pymc_wendy.sample_sft"
    post = idata.posterior["p"].mean(("chain", "draw")).values
    np.testing.assert_allclose(post, [3, -1, -6, 1], rtol=0.1)
    assert (idata.sample_stats["swap_accept"].values > 0).all()


def _tempering_page(ns: dict, out: str) -> None:
    """The Lotka-Volterra spurious mode: with two of four chains started in it, the hybrid
    ladder brings every chain's top rung to the WENDy-MLE mode and the chains agree (the
    R-hat criterion of 0.01 needs the 1000 draws: at 300 one run gave 1.014, every chain
    already in the right mode)."""
    import arviz as az

    model, mle, wrong = ns["model"], ns["mle"], ns["wrong"]
    logp = model.compile_logp()
    assert logp({"p": mle}) - logp({"p": wrong}) > 1000  # a deep, distinct local mode
    assert wrong[1] > 20  # p2 about 40 there, -1 at the WENDy-MLE
    draws = ns["idata"].posterior["p"].values
    assert not (draws[..., 1] > 20).any()  # no top-rung draw is left in the spurious mode
    assert float(az.rhat(ns["idata"])["p"].max()) < 1.01
    flat = draws.reshape(-1, 4)
    assert np.all(np.abs(flat.mean(0) - mle) < 3 * flat.std(0))


def _forward_page(ns: dict, out: str) -> None:
    """The correction takes the importance route there (the page says so) and the weak
    posterior is the wider one."""
    exact, weak = ns["exact"], ns["weak"]
    assert exact.attrs["route"] == "importance"
    assert exact.attrs["pareto_k"] <= exact.attrs["khat_threshold"]
    sd_ratio = weak.posterior["p"].std(("chain", "draw")) / exact.posterior["p"].std(
        ("chain", "draw")
    )
    assert float(sd_ratio.max()) > 1.1


def _theophylline_hierarchical(ns: dict, out: str) -> None:
    import arviz as az

    post = ns["idata"].posterior
    assert float(az.rhat(post["mu"].values[..., 1])) < 1.05  # ke: well determined
    ke = np.exp(post["mu"].values[..., 1]).mean()
    assert 0.06 < ke < 0.11  # per-subject least squares: 0.054-0.106


_CHECKS: dict[tuple[str, int], Callable[[dict, str], None]] = {
    ("README.md", 0): _readme_fit,
    ("README.md", 1): _readme_scipy,
    ("README.md", 5): _readme_experiments,
    ("README.md", 6): _readme_higher_order,
    ("docs/data.md", 0): _data_page_frame,
    ("docs/data.md", 2): _data_page_initial_state_prior,
    ("docs/doses.md", 0): _doses_page,
    ("docs/theophylline.md", 0): _theophylline_single_subject,
    ("README.md", 2): _readme_posterior,
    ("README.md", 3): _readme_weak_check,
    ("README.md", 4): _readme_tempering,
    ("docs/forward.md", 0): _forward_page,
    ("docs/tempering.md", 0): _tempering_page,
    ("docs/theophylline.md", 1): _theophylline_hierarchical,
}


def _run(path: Path, capsys, *, include_slow: bool) -> None:
    namespace: dict = {"__name__": "__main__"}
    name = path.relative_to(ROOT).as_posix()
    out = ""
    for i, block in enumerate(blocks(path)):
        if block.slow is not None and not include_slow:
            continue
        # compiled with the page's line numbers, so a traceback points into the markdown
        code = "\n" * (block.line - 1) + block.code
        exec(compile(code, str(path), "exec"), namespace)  # noqa: S102
        out += capsys.readouterr().out
        if (name, i) in _CHECKS:
            _CHECKS[name, i](namespace, out)


@pytest.mark.parametrize("path", FAST)
def test_page_fast_blocks(path, page_env, capsys):
    """The page's unmarked blocks run in order in one namespace."""
    _run(path, capsys, include_slow=False)


@pytest.mark.slow
# diagnostics the pages show and discuss: Pareto k of LOO (docs/pymc.md, docs/experiments.md)
# and the hierarchical model's divergences with the defaults (docs/theophylline.md)
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
@pytest.mark.filterwarnings("ignore::pymc_wendy.DivergenceWarning")
# the README's and docs/tempering.md's short replica-exchange runs sit at the swap-acceptance
# and R-hat thresholds of their warnings
@pytest.mark.filterwarnings("ignore::pymc_wendy.SFTWarning")
@pytest.mark.parametrize("path", SLOW)
def test_page_all_blocks(path, page_env, capsys):
    """All the page's blocks, the slow ones included, run in order in one namespace, and
    show what :data:`_CHECKS` asks of them."""
    _run(path, capsys, include_slow=True)


def test_checks_name_existing_blocks():
    for (name, i), check in _CHECKS.items():
        assert i < len(blocks(ROOT / name)), (name, i, check.__name__)


def test_markers_are_well_formed():
    """Every doc-test marker stands right before a ```python block and says how long."""
    for path in PAGES:
        text = path.read_text()
        attached = {m.start("marker") for m in _BLOCK.finditer(text) if m.group("marker")}
        for m in _MARKER.finditer(text):
            where = f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"
            assert m.start("marker") in attached, f"{where}: a marker not right before a block"
            assert re.search(r"\d", m.group("marker")), f"{where}: the marker gives no run time"
