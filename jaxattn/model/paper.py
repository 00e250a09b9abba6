"""The clustering paper's single-head model (Geshkovski et al.): value, query and key matrices given,
output the identity, score scale 1."""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike, Float

from jaxattn.errors import ConfigError
from jaxattn.model.params import Model, from_heads


def check_value_matrix(V: Float[ArrayLike, "d d"], d: int | None = None) -> Float[np.ndarray, "d d"]:
    """``V`` as a finite real ``[d, d]`` float64 array (``d`` checked when given), else one clear line."""
    a = np.asarray(V)
    if np.iscomplexobj(a) or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ConfigError(f"V must hold real numbers, got dtype {a.dtype}")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ConfigError(f"V must be a square [d, d] matrix, got shape {a.shape}")
    if d is not None and a.shape[0] != d:
        raise ConfigError(f"V is {a.shape[0]}x{a.shape[0]} but the tokens have dimension d={d}")
    if not np.all(np.isfinite(a)):
        raise ConfigError("V has non-finite values (NaN or inf)")
    return a.astype(np.float64)


def paper_model(V: Float[ArrayLike, "d d"], Q: Float[ArrayLike, "d d"] | None = None,
                K: Float[ArrayLike, "d d"] | None = None) -> Model:
    """The clustering paper's single-head model: value ``V``, query ``Q`` and key ``K`` (default
    the identity), all ``[d, d]``, output ``O = I`` and score scale 1 (scores ``β <Q x_i, K x_j>``,
    as in the paper and its code, not BERT's ``1/√d_h``). A shared-weight :class:`jaxattn.Model`
    for :func:`jaxattn.solve` with :data:`jaxattn.C3` or :data:`jaxattn.C3_RESCALED`."""
    V = check_value_matrix(V)
    d = V.shape[0]
    eye = np.eye(d)
    Q = eye if Q is None else check_value_matrix(Q, d)
    K = eye if K is None else check_value_matrix(K, d)
    return from_heads(Q[None, None], K[None, None], V[None, None], eye[None, None], scale=1.0)
