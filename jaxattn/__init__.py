"""jaxattn: transformers as dynamical systems, simulated fast in JAX.

Conventions: a configuration is ``X: [n, d]`` (row i = token i), a batch
``[B, n, d]``; weights are stored in the column convention (``nn.Linear.weight`` orientation):
per head ``Q, K, V: [H, d_h, d]`` and ``O: [H, d, d_h]``, so ``F = Σ_h O_h V_h``.

Main entry points: :func:`load` / :func:`convert` (Hugging Face checkpoints), :func:`simulate`
(batched discrete dynamics D1–D6), :func:`solve` (continuous-time flows C1–C3 with diffrax),
:func:`sweep` (chunked, resumable), :func:`spectrum`,
:func:`alignment`, :func:`steer`, :func:`hidden_states` (faithful forward pass).
"""

from importlib import metadata as _metadata

from . import geometry, metrics, nn
from .attention import KERNELS, allowed, attend, probabilities
from .checkpoints import builtin_path, convert, load, load_any, save
from ._runner import Context
from .continuous import Solution, solve
from .discrete import D1, D3, D4, D5, FAITHFUL, NO_FFN, Dynamics, Simulation, block, layer_index, simulate, step
from .fields import C1, C2, C3, C3_RESCALED, OJA, Flow, velocity
from .errors import CheckpointError, ConfigError, JaxattnError
from .experiments.power_method import StudyConfig, alignment, run_study
from .experiments.consensus import ConsensusConfig
from .faithful import embed, forward, hidden_states
from .metrics import alignment_observables, alignment_tables, consensus_observables
from .params import Embeddings, Layers, Model, from_heads, parse_mask, validate
from .sampling import init_tokens, random_model, symmetric_with_spectrum
from .spectral import Spectrum, cumulative_products, layer_matrices, lyapunov_exponents, spectrum
from .steering import precompensate, steer
from ._sweep import sweep
from .grid import sweep_grid
from .passes import repeated_passes
from . import observables, prompts
from .store import open_sweep

try:  # one version string: the installed package's metadata (pyproject.toml)
    __version__ = _metadata.version("jaxattn")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "D1", "D3", "D4", "D5", "FAITHFUL", "NO_FFN", "Dynamics", "repeated_passes", "observables", "prompts", "Simulation", "block", "layer_index", "simulate", "step", "sweep",
    "C1", "C2", "C3", "C3_RESCALED", "OJA", "Flow", "Solution", "solve", "velocity", "Context",
    "KERNELS", "allowed", "attend", "probabilities", "geometry", "metrics", "nn",
    "builtin_path", "convert", "load", "load_any", "save",
    "CheckpointError", "ConfigError", "JaxattnError",
    "StudyConfig", "ConsensusConfig", "alignment", "run_study", "embed", "forward", "hidden_states",
    "alignment_observables", "alignment_tables", "consensus_observables",
    "Embeddings", "Layers", "Model", "from_heads", "parse_mask", "validate",
    "init_tokens", "random_model", "symmetric_with_spectrum",
    "Spectrum", "cumulative_products", "layer_matrices", "lyapunov_exponents", "spectrum",
    "precompensate", "steer", "sweep_grid", "open_sweep", "__version__",
]
