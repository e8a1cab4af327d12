"""The notebooks run top to bottom (code cells executed in order, figures not shown)."""

import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {"__name__": "__main__"}
    for cell in cells:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            exec(compile(source, f"{path.name}", "exec"), namespace)  # noqa: S102
    import matplotlib.pyplot as plt

    plt.close("all")
