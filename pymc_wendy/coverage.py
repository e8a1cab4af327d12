"""The coverage studies of earlier releases' ``pymc_wendy.coverage``, now
:mod:`pymc_wendy.studies.coverage` (also ``pw.coverage``): ``import pymc_wendy.coverage``
gives that module itself, so code written against the old path keeps working."""

import sys

from pymc_wendy.studies import coverage as _coverage

sys.modules[__name__] = _coverage
