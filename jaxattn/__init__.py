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
"""

from importlib import metadata as _metadata

from jaxattn.analysis import clusters, metrics, observables, stability
from jaxattn.analysis.gradients import (
    CriticalBeta,
    GradientSteer,
    batch_observable,
    beta_grid,
    critical_beta,
    gradient_steer,
    layer_sensitivity,
    unshared,
)
from jaxattn.analysis.observables import alignment_observables, alignment_tables
from jaxattn.analysis.spectral import Spectrum, cumulative_products, layer_matrices, lyapunov_exponents, spectrum
from jaxattn.analysis.steering import precompensate, steer
from jaxattn.dynamics import Context, geometry, prompts
from jaxattn.dynamics.continuous import Solution, solve
from jaxattn.dynamics.discrete import (
    D1,
    D2,
    D3,
    D4,
    D5,
    FAITHFUL,
    NO_FFN,
    Dynamics,
    Simulation,
    block,
    layer_index,
    simulate,
    simulate_one,
    step,
)
from jaxattn.dynamics.faithful import embed, forward, hidden_states
from jaxattn.dynamics.fields import C1, C2, C2_OJA, C3, C3_RESCALED, Flow, velocity
from jaxattn.dynamics.observables import consensus_observables
from jaxattn.dynamics.options import Batch, Save
from jaxattn.dynamics.passes import repeated_passes
from jaxattn.errors import CheckpointError, ConfigError, JaxattnError, NonFiniteWarning
from jaxattn.io.checkpoints import builtin_path, convert, load, load_any, save
from jaxattn.io.store import open_sweep
from jaxattn.model import nn
from jaxattn.model.attention import KERNELS, allowed, attend, probabilities
from jaxattn.model.forms import Form
from jaxattn.model.params import Embeddings, Layers, Model, from_heads, parse_mask, repeat_kv, validate
from jaxattn.model.rope import Rope
from jaxattn.model.sampling import init_tokens, random_model, symmetric_with_spectrum
from jaxattn.studies import plots
from jaxattn.studies.clusters import ClustersConfig
from jaxattn.studies.consensus import ConsensusConfig
from jaxattn.studies.metastability import MetastabilityConfig
from jaxattn.studies.power_method import StudyConfig, alignment, run_study
from jaxattn.studies.stability import StabilityConfig
from jaxattn.sweeps.chunked import sweep
from jaxattn.sweeps.grid import sweep_grid

try:  # one version string: the installed package's metadata (pyproject.toml)
    __version__ = _metadata.version("jaxattn")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

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
    "KERNELS",
    "NO_FFN",
    "Batch",
    "CheckpointError",
    "ClustersConfig",
    "ConfigError",
    "ConsensusConfig",
    "Context",
    "CriticalBeta",
    "Dynamics",
    "Embeddings",
    "Flow",
    "Form",
    "GradientSteer",
    "JaxattnError",
    "Layers",
    "MetastabilityConfig",
    "Model",
    "NonFiniteWarning",
    "Rope",
    "Save",
    "Simulation",
    "Solution",
    "Spectrum",
    "StabilityConfig",
    "StudyConfig",
    "__version__",
    "alignment",
    "alignment_observables",
    "alignment_tables",
    "allowed",
    "attend",
    "batch_observable",
    "beta_grid",
    "block",
    "builtin_path",
    "clusters",
    "consensus_observables",
    "convert",
    "critical_beta",
    "cumulative_products",
    "embed",
    "forward",
    "from_heads",
    "geometry",
    "gradient_steer",
    "hidden_states",
    "init_tokens",
    "layer_index",
    "layer_matrices",
    "layer_sensitivity",
    "load",
    "load_any",
    "lyapunov_exponents",
    "metrics",
    "nn",
    "observables",
    "open_sweep",
    "parse_mask",
    "plots",
    "precompensate",
    "probabilities",
    "prompts",
    "random_model",
    "repeat_kv",
    "repeated_passes",
    "run_study",
    "save",
    "simulate",
    "simulate_one",
    "solve",
    "spectrum",
    "stability",
    "steer",
    "step",
    "sweep",
    "sweep_grid",
    "symmetric_with_spectrum",
    "unshared",
    "validate",
    "velocity",
]
