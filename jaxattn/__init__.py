"""jaxattn: transformers as dynamical systems, simulated fast in JAX.

Conventions (MATH.md §0): a configuration is ``X: [n, d]`` (row i = token i), a batch
``[B, n, d]``; weights are stored in the column convention (``nn.Linear.weight`` orientation):
per head ``Q, K, V: [H, d_h, d]`` and ``O: [H, d, d_h]``, so ``F = Σ_h O_h V_h``.

Main entry points: :func:`load` / :func:`convert` (Hugging Face checkpoints), :func:`simulate`
(batched discrete dynamics D1–D6), :func:`sweep` (chunked, resumable), :func:`spectrum`,
:func:`alignment`, :func:`steer`, :func:`hidden_states` (faithful forward pass).
"""

from . import metrics, nn
from .attention import allowed, attend, probabilities
from .checkpoints import builtin_path, convert, load, load_any, save
from .discrete import D1, D3, D4, D5, FAITHFUL, Dynamics, Simulation, block, layer_index, simulate, step
from .errors import CheckpointError, ConfigError, JaxattnError
from .experiments.power_method import StudyConfig, alignment, run_study
from .faithful import embed, forward, hidden_states
from .metrics import alignment_observables, alignment_tables, consensus_observables
from .params import Embeddings, Layers, Model, from_heads, parse_mask, validate
from .sampling import init_tokens, random_model, symmetric_with_spectrum
from .spectral import Spectrum, cumulative_products, layer_matrices, lyapunov_exponents, spectrum
from .steering import precompensate, steer
from ._sweep import sweep

__version__ = "0.1.0"

__all__ = [
    "D1", "D3", "D4", "D5", "FAITHFUL", "Dynamics", "Simulation", "block", "layer_index", "simulate", "step", "sweep",
    "allowed", "attend", "probabilities", "metrics", "nn",
    "builtin_path", "convert", "load", "load_any", "save",
    "CheckpointError", "ConfigError", "JaxattnError",
    "StudyConfig", "alignment", "run_study", "embed", "forward", "hidden_states",
    "alignment_observables", "alignment_tables", "consensus_observables",
    "Embeddings", "Layers", "Model", "from_heads", "parse_mask", "validate",
    "init_tokens", "random_model", "symmetric_with_spectrum",
    "Spectrum", "cumulative_products", "layer_matrices", "lyapunov_exponents", "spectrum",
    "precompensate", "steer", "__version__",
]
