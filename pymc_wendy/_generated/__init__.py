"""The package of generated modules: compiled kernels and forward solvers, one per model.

They live in the cache directory (:func:`pymc_wendy._codecache.cache_dir`), which is this
package's ``__path__``. numba pickles a compiled function by its module's name, so a model
sent to another process (PyMC's chain processes started with "spawn" or "forkserver", a
coverage study's workers) imports ``pymc_wendy._generated.<name>`` there from the same file.
"""

from pymc_wendy._codecache import search_path

__path__ = search_path()
