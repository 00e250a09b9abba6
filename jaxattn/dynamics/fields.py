"""Vector fields of the continuous-time models C1–C3 for one configuration ``X: [n, d]``.

Every field starts from the same attention update as the discrete models,
``u_i = Σ_h O_h Σ_j a^h_ij V_h x_j`` (:func:`jaxattn.model.attention.attend`; for one head with
``O = I`` this is ``Σ_j a_ij V x_j``), and a :class:`Flow` says what to do with it:

=================  ==================================================================================
``C1``             tokens on the ellipsoid ``E_S``: ``ẋ_i = P^S_{x_i} u_i`` (Rodríguez Abella et al.)
``C2``             tokens on the unit sphere: ``ẋ_i = P_{x_i} u_i`` (``P_x = I − x xᵀ``)
``OJA``            C2 with uniform attention ``a_ij = 1/n``: ``ẋ_i = P_{x_i} V x̄`` (multi-agent Oja flow)
``C3``             flat space, no projection: ``ẋ_i = u_i`` (Geshkovski et al.)
``C3_RESCALED``    ``z_i = e^{−tF} x_i`` with ``F = Σ_h O_h V_h``:
                   ``ż_i = e^{−tF} u_i(e^{tF} z) − F z_i``; for one head with softmax attention this is
                   ``Σ_j P_ij(t) V (z_j − z_i)`` with ``P_ij(t) = softmax_j <Q e^{tV} z_i, K e^{tV} z_j>``
=================  ==================================================================================

Any of them takes ``attention='uniform'`` or ``'unnormalised'`` (``exp(β s <Q x_i, K x_j>) / n``).
Time-varying weights: the weight set of a layered model at time ``t`` is
``schedule[floor(t / layer_time) mod depth]`` (piecewise constant, periodic for repeated passes),
or any smooth function ``weights_fn(t) -> Layers`` of one weight set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from jaxattn.dynamics.geometry import SPACES, Geometry
from jaxattn.errors import ConfigError
from jaxattn.model.attention import KERNELS, attend, probabilities
from jaxattn.model.params import Layers, Model, repeat_kv


@dataclasses.dataclass(frozen=True)
class Flow:
    """A continuous-time model (static configuration, hashable). See the module docstring."""

    space: str = "sphere"
    rescaled: bool = False
    attention: str = "softmax"
    biases: bool = False

    def __post_init__(self):
        if self.space not in SPACES:
            raise ConfigError(f"space must be one of {SPACES}, got {self.space!r}")
        if self.attention not in KERNELS:
            raise ConfigError(f"attention must be one of {KERNELS}, got {self.attention!r}")
        if self.rescaled and self.space != "flat":
            raise ConfigError("the rescaled form z = e^{-tF} x is defined for the unnormalised flow (space='flat')")


C1 = Flow(space="ellipsoid")
C2 = Flow(space="sphere")
OJA = Flow(space="sphere", attention="uniform")
C3 = Flow(space="flat")
C3_RESCALED = Flow(space="flat", rescaled=True)


def set_index(model: Model, t, layer_time=1.0) -> jax.Array:
    """Weight set of a layered model at time ``t``: ``schedule[floor(t / layer_time) mod depth]``."""
    sched = jnp.asarray(model.schedule, dtype=jnp.int32)
    k = jnp.floor(t / layer_time).astype(jnp.int32)
    return sched[jnp.mod(k, model.depth)]


def weights_at(model: Model, t, layer_time=1.0, weights_fn: Callable | None = None) -> Layers:
    """The weight set (leading axis removed) in force at time ``t``."""
    if weights_fn is not None:
        return weights_fn(t)
    if model.shared:
        return model.layers.take(model.schedule[0])
    return model.layers.take(set_index(model, t, layer_time))


def layer_matrix(lw: Layers) -> jax.Array:
    """``F = Σ_h O_h V_{g(h)}`` of one weight set, ``[d, d]`` (``g``: the GQA grouping, identity without)."""
    return jnp.einsum("hdk,hke->de", lw.o, repeat_kv(lw).v)


def field(t, X: jax.Array, lw: Layers, flow: Flow, beta, geom: Geometry) -> jax.Array:
    """``dX/dt`` for one configuration ``X: [n, d]`` with the weight set ``lw`` in force at ``t``.

    For the rescaled flow ``X`` is ``Z`` (the rescaled tokens) and ``lw`` must be the only weight set.
    """
    if flow.rescaled:
        F = layer_matrix(lw)
        E = jsl.expm(t * F)
        Einv = jsl.expm(-t * F)
        U = attend(X @ E.T, lw, beta, biases=flow.biases, kernel=flow.attention)
        return U @ Einv.T - X @ F.T
    U = attend(X, lw, beta, biases=flow.biases, kernel=flow.attention)
    return geom.project(X, U)


def attention_at(t, X: jax.Array, lw: Layers, flow: Flow, beta) -> jax.Array:
    """The attention weights ``[H, n, n]`` of the flow at ``(t, X)`` (rescaled: at ``x = e^{tF} z``)."""
    if flow.rescaled:
        X = X @ jsl.expm(t * layer_matrix(lw)).T
    return probabilities(X, lw, beta, biases=flow.biases, kernel=flow.attention)


def velocity(model: Model, X, t=0.0, *, flow: Flow = C2, beta=1.0, S=None, layer_time=1.0,
             weights_fn: Callable | None = None) -> jax.Array:
    """The vector field of ``flow`` at time ``t`` for one configuration ``X: [n, d]``, shape ``[n, d]``.

    A pure function of ``X``: ``jax.jacfwd(lambda X: velocity(model, X, ...))(X)`` linearises the flow.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=4, heads=1)
        >>> X = ja.init_tokens(jax.random.key(1), 1, 5, 4)[0]
        >>> v = ja.velocity(model, X, flow=ja.C2)
        >>> v.shape, bool(np.allclose((v * X).sum(-1), 0.0, atol=1e-6))   # tangent to the sphere
        ((5, 4), True)
        >>> jac = jax.jit(jax.jacfwd(lambda Y: ja.velocity(model, Y)))   # the linearised flow
        >>> jac(X).shape
        (5, 4, 5, 4)
    """
    from jaxattn.dynamics.geometry import geometry

    X = jnp.asarray(X)
    geom = geometry(flow.space, S, X.shape[-1], X.dtype)
    lw = weights_at(model, jnp.asarray(t, X.dtype), layer_time, weights_fn)
    return field(jnp.asarray(t, X.dtype), X, lw, flow, jnp.asarray(beta, X.dtype), geom)
