"""jaxattn: transformers as dynamical systems, simulated fast in JAX.

Conventions (MATH.md §0): a configuration is ``X: [n, d]`` (row i = token i), a batch
``[B, n, d]``; weights are stored in the column convention (``nn.Linear.weight`` orientation):
per head ``Q, K, V: [H, d_h, d]`` and ``O: [H, d, d_h]``, so ``F = Σ_h O_h V_h``.
"""

from . import metrics, nn
from .attention import allowed, attend, probabilities
from .discrete import D1, D3, D4, D5, FAITHFUL, Dynamics, Simulation, block, layer_index, simulate, step
from .errors import CheckpointError, ConfigError, JaxattnError
from .params import Embeddings, Layers, Model, from_heads, parse_mask, validate
from .sampling import init_tokens, random_model, symmetric_with_spectrum

__version__ = "0.1.0"

__all__ = [
    "D1", "D3", "D4", "D5", "FAITHFUL", "Dynamics", "Simulation", "block", "layer_index", "simulate", "step",
    "allowed", "attend", "probabilities", "metrics", "nn",
    "CheckpointError", "ConfigError", "JaxattnError",
    "Embeddings", "Layers", "Model", "from_heads", "parse_mask", "validate",
    "init_tokens", "random_model", "symmetric_with_spectrum", "__version__",
]
