"""The ODE model: symbolic right-hand sides, known inputs, generated code, forward solves.

The bottom layer: nothing here knows about weak forms, estimators or PyMC.
"""

from pymc_wendy.model.data import MissingDataWarning, as_data
from pymc_wendy.model.doses import Doses
from pymc_wendy.model.input_output import InputOutput, input_output
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.observation import (
    Combined,
    LogNormal,
    NegativeBinomial,
    Normal,
    Poisson,
    Proportional,
)
from pymc_wendy.model.ode import ODEDefinitionError, ODEModel
from pymc_wendy.model.simulate import SimulatedData, SimulationError, add_noise, simulate, solve
from pymc_wendy.model.total_derivative import derivative

__all__ = [
    "Combined",
    "Doses",
    "Input",
    "InputOutput",
    "LogNormal",
    "MissingDataWarning",
    "NegativeBinomial",
    "Normal",
    "ODEDefinitionError",
    "ODEModel",
    "Poisson",
    "Proportional",
    "SimulatedData",
    "SimulationError",
    "add_noise",
    "as_data",
    "derivative",
    "input_output",
    "simulate",
    "solve",
]
