"""Named test-function variants the benchmark scripts compare (``validation.py``,
``sample_speed.py``)."""

from __future__ import annotations


def test_functions(name: str):
    """The ``test_functions`` option of a variant: ``"default"`` (None: WENDy's SVD
    construction), ``"local"`` (local test functions) or ``"k<N>"`` (the SVD construction with
    ``Kmax = N``); ValueError for any other name."""
    if name == "default":
        return None
    if name == "local":
        return "local"
    if name.startswith("k") and name[1:].isdigit() and int(name[1:]) > 0:
        return {"Kmax": int(name[1:])}
    raise ValueError(f"unknown test-function variant {name!r}: default, local or k<N>")
