"""Dynamics: token spaces (geometry), prompts as initial conditions, discrete maps, the faithful forward
pass of real architectures, vector fields, the diffrax solver, repeated passes, the batched runner shared
by maps and flows."""

# The face of the private runner module: what the layers above (analysis, sweeps, studies), the
# package face and the scripts use of them (``import jaxattn.dynamics._runner`` is for this folder only).
from jaxattn.dynamics._runner import DTYPES as DTYPES
from jaxattn.dynamics._runner import SIMULATION_DTYPES as SIMULATION_DTYPES
from jaxattn.dynamics._runner import Context as Context
from jaxattn.dynamics._runner import check_scalar as check_scalar
from jaxattn.dynamics._runner import default_lanes as default_lanes
from jaxattn.dynamics._runner import lanes_for as lanes_for
from jaxattn.dynamics._runner import memory_limit as memory_limit
from jaxattn.dynamics._runner import mesh_of as mesh_of
from jaxattn.dynamics._runner import named_dtype as named_dtype
from jaxattn.dynamics._runner import replicate as replicate
from jaxattn.dynamics._runner import resolve_dtype as resolve_dtype
from jaxattn.dynamics._runner import traced as traced
from jaxattn.dynamics._runner import working_bytes as working_bytes

# the target a run is compiled for ahead of time (jaxattn.aot): its devices and the choices taken for them
from jaxattn.dynamics._target import Compiled as Compiled
from jaxattn.dynamics._target import Target as Target
from jaxattn.dynamics._target import compiling_for as compiling_for
