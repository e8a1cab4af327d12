"""Execute the notebooks in place, so that they are committed with their outputs.

Run:  .venv/bin/pip install -e ".[notebooks]" && .venv/bin/python scripts/run_notebooks.py [names]

Each notebook runs top to bottom in a fresh kernel (this environment's Python) from the
``notebooks`` directory; its outputs (tables, printed results, figures) replace the old ones.
A notebook that fails is left unchanged and the script exits with status 1 after the others.
``tests/test_notebooks.py`` checks that every code cell of a committed notebook has run.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


#: what a kernel without ipywidgets prints on importing tqdm: about the environment, not results
_WIDGETS_WARNING = re.compile(r".*TqdmWarning: IProgress not found.*\n(  from .autonotebook.*\n)?")


def _noise(output) -> bool:
    """An empty display (a finished progress bar) or stream, or rich's 'install ipywidgets'
    warning."""
    if output.get("output_type") == "stream":
        return not output.text
    if output.get("output_type") != "display_data" or "image/png" in output.get("data", {}):
        return False
    text = "".join(output.get("data", {}).get("text/plain", ""))
    return not text.strip() or "ipywidgets" in text


def tidy(nb) -> None:
    """Drop progress-bar noise and merge consecutive stream outputs of the same stream."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.outputs:
            if out.output_type == "stream":
                out.text = _WIDGETS_WARNING.sub("", out.text)
        for out in (o for o in cell.outputs if not _noise(o)):
            prev = merged[-1] if merged else None
            if (
                prev is not None
                and out.output_type == "stream" == prev.output_type
                and out.name == prev.name
            ):
                prev.text += out.text
            else:
                merged.append(out)
        cell.outputs = merged


def run(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=1800, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        client.execute()
    except Exception as exc:  # report, keep the committed version, go on with the others
        print(f"{path.name}: FAILED after {time.perf_counter() - t0:.0f} s: {exc}", flush=True)
        return False
    tidy(nb)
    nbformat.write(nb, path)
    print(f"{path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    return True


def main(names: list[str]) -> int:
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if names:
        paths = [p for p in paths if any(n in p.name for n in names)]
    ok = [run(p) for p in paths]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
