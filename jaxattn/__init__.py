"""jaxattn: transformers as dynamical systems, simulated fast in JAX.

Conventions: a configuration is ``X: [n, d]`` (row i = token i), a batch
``[B, n, d]``; weights are stored in the column convention (``nn.Linear.weight`` orientation):
per head ``Q, K, V: [H, d_h, d]`` and ``O: [H, d, d_h]``, so ``F = Σ_h O_h V_h``.

Main entry points: :func:`load` / :func:`convert` (Hugging Face checkpoints), :func:`simulate`
(batched discrete dynamics D1–D6), :func:`solve` (continuous-time flows C1–C3 with diffrax),
:func:`sweep` (chunked, resumable) — what they save in a :class:`Save`, how their batch runs in a
:class:`Batch` —, :func:`spectrum`,
:func:`alignment`, :func:`steer`, :func:`hidden_states` (faithful forward pass), and movies of trajectories
(:func:`plots.movie`).

This face holds what a study uses every day; the pieces below it stay in their modules (e.g. the attention of one
layer, :func:`jaxattn.model.attention.probabilities`; one step of a map, :func:`jaxattn.dynamics.discrete.step`;
parameter pytrees, :mod:`jaxattn.model.params`; the studies' runners, ``jaxattn.studies.<study>.run``).
"""

from importlib import metadata as _metadata

from jaxattn import aot as aot
from jaxattn.analysis import metrics as metrics
from jaxattn.analysis import observables as observables
from jaxattn.analysis.alignment import alignment as alignment
from jaxattn.analysis.gradients import beta_grid as beta_grid
from jaxattn.analysis.gradients import critical_beta as critical_beta
from jaxattn.analysis.gradients import gradient_steer as gradient_steer
from jaxattn.analysis.gradients import layer_sensitivity as layer_sensitivity
from jaxattn.analysis.spectral import Spectrum as Spectrum
from jaxattn.analysis.spectral import layer_matrices as layer_matrices
from jaxattn.analysis.spectral import spectrum as spectrum
from jaxattn.analysis.steering import steer as steer
from jaxattn.dynamics.continuous import Solution as Solution
from jaxattn.dynamics.continuous import solve as solve
from jaxattn.dynamics.discrete import D1 as D1
from jaxattn.dynamics.discrete import D2 as D2
from jaxattn.dynamics.discrete import D3 as D3
from jaxattn.dynamics.discrete import D4 as D4
from jaxattn.dynamics.discrete import D5 as D5
from jaxattn.dynamics.discrete import FAITHFUL as FAITHFUL
from jaxattn.dynamics.discrete import NO_FFN as NO_FFN
from jaxattn.dynamics.discrete import Dynamics as Dynamics
from jaxattn.dynamics.discrete import Simulation as Simulation
from jaxattn.dynamics.discrete import simulate as simulate
from jaxattn.dynamics.discrete import simulate_one as simulate_one
from jaxattn.dynamics.faithful import hidden_states as hidden_states
from jaxattn.dynamics.fields import C1 as C1
from jaxattn.dynamics.fields import C2 as C2
from jaxattn.dynamics.fields import C2_OJA as C2_OJA
from jaxattn.dynamics.fields import C3 as C3
from jaxattn.dynamics.fields import C3_RESCALED as C3_RESCALED
from jaxattn.dynamics.fields import Flow as Flow
from jaxattn.dynamics.fields import velocity as velocity
from jaxattn.dynamics.options import Batch as Batch
from jaxattn.dynamics.options import Save as Save
from jaxattn.dynamics.passes import repeated_passes as repeated_passes
from jaxattn.errors import CheckpointError as CheckpointError
from jaxattn.errors import ConfigError as ConfigError
from jaxattn.errors import JaxattnError as JaxattnError
from jaxattn.errors import NonFiniteWarning as NonFiniteWarning
from jaxattn.io.checkpoints import convert as convert
from jaxattn.io.checkpoints import load as load
from jaxattn.io.checkpoints import load_any as load_any
from jaxattn.io.checkpoints import save_checkpoint as save_checkpoint
from jaxattn.io.store import open_sweep as open_sweep
from jaxattn.model.params import Model as Model
from jaxattn.model.sampling import init_tokens as init_tokens
from jaxattn.model.sampling import random_model as random_model
from jaxattn.studies import plots as plots
from jaxattn.studies.clusters import ClustersConfig as ClustersConfig
from jaxattn.studies.consensus import ConsensusConfig as ConsensusConfig
from jaxattn.studies.metastability import MetastabilityConfig as MetastabilityConfig
from jaxattn.studies.power_method import PowerMethodConfig as PowerMethodConfig
from jaxattn.studies.stability import StabilityConfig as StabilityConfig
from jaxattn.sweeps.chunked import sweep as sweep
from jaxattn.sweeps.grid import sweep_grid as sweep_grid

try:  # one version string: the installed package's metadata (pyproject.toml)
    __version__ = _metadata.version("jaxattn")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# The face (tests/test_face.py holds it to at most 60 names): drivers, their options and results, models and
# checkpoints, analysis, the studies' configurations (each study runs as jaxattn.studies.<study>.run(out_dir, config,
# ...)), errors.
__all__ = [
    "C1",
    "C2",
    "C2_OJA",
    "C3",
    "C3_RESCALED",
    "D1",
    "D2",
    "D3",
    "D4",
    "D5",
    "FAITHFUL",
    "NO_FFN",
    "Batch",
    "CheckpointError",
    "ClustersConfig",
    "ConfigError",
    "ConsensusConfig",
    "Dynamics",
    "Flow",
    "JaxattnError",
    "MetastabilityConfig",
    "Model",
    "NonFiniteWarning",
    "PowerMethodConfig",
    "Save",
    "Simulation",
    "Solution",
    "Spectrum",
    "StabilityConfig",
    "__version__",
    "alignment",
    "aot",
    "beta_grid",
    "convert",
    "critical_beta",
    "gradient_steer",
    "hidden_states",
    "init_tokens",
    "layer_matrices",
    "layer_sensitivity",
    "load",
    "load_any",
    "metrics",
    "observables",
    "open_sweep",
    "plots",
    "random_model",
    "repeated_passes",
    "save_checkpoint",
    "simulate",
    "simulate_one",
    "solve",
    "spectrum",
    "steer",
    "sweep",
    "sweep_grid",
    "velocity",
]
