"""The notebooks run top to bottom (code cells executed in order, figures not shown), and are
committed with their outputs (``scripts/run_notebooks.py``)."""

import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _tempering(ns: dict) -> None:
    """What 03_tempering tells its reader: plain NUTS keeps the chains started in the spurious
    mode there, and sample_sft's top rung leaves it (the longer run of docs/tempering.md
    checks that the chains then agree)."""
    import arviz as az

    p2 = ns["nuts"].posterior["p"].values[..., 1]
    assert float(az.rhat(ns["nuts"])["p"].max()) > 1.1
    assert (p2 > 20).mean() == pytest.approx(0.5, abs=0.05)  # two chains of four stay
    assert not (ns["idata"].posterior["p"].values[..., 1] > 20).any()


#: what a notebook's run must show, by notebook name, given its namespace at the end
_CHECKS = {"03_tempering": _tempering}


# a notebook shows its reader the library's warnings (divergences of a short series' weak
# posterior, a weak posterior that differs from the exact one) as part of its story
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_wendy.DivergenceWarning")
@pytest.mark.filterwarnings("ignore::pymc_wendy.WeakPosteriorWarning")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {"__name__": "__main__"}
    for cell in cells:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            exec(compile(source, f"{path.name}", "exec"), namespace)  # noqa: S102
    if path.stem in _CHECKS:
        _CHECKS[path.stem](namespace)
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_with_its_outputs(path):
    """A reader on GitHub sees the results: every code cell ran, top to bottom, in one kernel."""
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    counts = [c.get("execution_count") for c in code]
    assert None not in counts, (
        f"{path.name}: {counts.count(None)} code cells have not run; regenerate the outputs with "
        f"python scripts/run_notebooks.py {path.stem}"
    )
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: cells ran out of order"
    assert any(c.get("outputs") for c in code), f"{path.name}: no outputs at all"
