"""Vector fields of the continuous-time models C1–C3 for one configuration ``X: [n, d]``.

Every field starts from the same attention update as the discrete models,
``u_i = Σ_h O_h Σ_j a^h_ij V_h x_j`` (:func:`jaxattn.model.attention.attend`; for one head with
``O = I`` this is ``Σ_j a_ij V x_j``), and a :class:`Flow` says what to do with it:

=================  ==================================================================================
``C1``             tokens on the ellipsoid ``E_S``: ``ẋ_i = P^S_{x_i} u_i`` (Rodríguez Abella et al.)
``C2``             tokens on the unit sphere: ``ẋ_i = P_{x_i} u_i`` (``P_x = I − x xᵀ``)
``C2_OJA``         C2 with uniform attention ``a_ij = 1/n``: ``ẋ_i = P_{x_i} V x̄`` (multi-agent Oja flow)
``C3``             flat space, no projection: ``ẋ_i = u_i`` (Geshkovski et al.)
``C3_RESCALED``    ``z_i = e^{−tF} x_i`` with ``F = Σ_h F_h``, ``F_h = O_h V_h``:
                   ``ż_i = e^{−tF} u_i(e^{tF} z) − F z_i``, evaluated as ``Σ_h G_h(t) (Σ_j a^h_ij z_j − z_i)``
                   with ``G_h(t) = e^{−tF} F_h e^{tF}``;
                   for one head ``G = F``: ``ż_i = F (Σ_j a_ij z_j − z_i)``, with softmax attention
                   ``Σ_j P_ij(t) V (z_j − z_i)``, ``P_ij(t) = softmax_j <Q e^{tV} z_i, K e^{tV} z_j>``
=================  ==================================================================================

Any of them takes ``attention='uniform'`` or ``'unnormalised'`` (``exp(β s <Q x_i, K x_j>) / n``).
Time-varying weights: the weight set of a layered model at time ``t`` is
``schedule[floor(t / layer_time) mod depth]`` (piecewise constant, periodic for repeated passes),
or any smooth function ``weights_fn(t) -> Layers`` of one weight set.

The rescaled field never forms ``e^{−tF} u_i(e^{tF} z)`` and ``F z_i`` separately: both have the size
of ``‖e^{−tF}‖ ‖e^{tF}‖ ‖z‖`` and their difference lost digits as the condition number of ``e^{tF}``
grew (1.9e-9 at t = 10, 2.6e-6 at t = 15 for the clustering paper's 2-D value matrix). Since
``Σ_h G_h = F``, the identity above holds for every kernel (rows of ``a`` need not sum to one) and
only differences ``Σ_j a_ij z_j − z_i`` of rescaled tokens are formed: for one head no exponential
acts on the values at all, and for several heads only the differences between heads,
``ż_i = F w̄_i + e^{−tF} Σ_h F_h e^{tF} (w^h_i − w̄_i)`` with ``w^h_i = Σ_j a^h_ij z_j − z_i`` and
``w̄`` their mean over heads (exact when every head attends alike). ``e^{tF}`` (for the scores) and
``e^{−tF}`` (several heads, biases) come from :func:`expm`: matrix products only, so the solver
loop holds no LAPACK call (the batched LU of ``jax.scipy.linalg.expm`` inside a vmapped solve
could deadlock XLA's CPU thread pool).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.config import about, flag, plain, static
from jaxattn.dynamics._runner import wider_dtype
from jaxattn.dynamics.geometry import NEEDS_S, SPACES, Geometry, geometry
from jaxattn.dynamics.options import ATTENTION, BIASES
from jaxattn.errors import ConfigError
from jaxattn.model.attention import ATTENTIONS, attend, probabilities
from jaxattn.model.forms import Form
from jaxattn.model.params import Layers, Model, repeat_kv
from jaxattn.model.precision import full_precision


class Flow(eqx.Module):
    """A continuous-time model (static configuration, hashable). See the module docstring."""

    # each field is also a key of a sweep's configuration and an option of `jaxattn solve` (`about`)
    space: str = static("sphere", option=about("token space", choices=plain(SPACES, NEEDS_S)))
    rescaled: bool = flag(False, option=about("the rescaled form z = e^{-tF} x of the flat flow (in float64 only)"))
    attention: str = static("softmax", option=ATTENTION)
    biases: bool = flag(False, option=BIASES)

    def __check_init__(self):
        if self.space not in SPACES:
            raise ConfigError(f"space must be one of {SPACES}, got {self.space!r}")
        if self.attention not in ATTENTIONS:
            raise ConfigError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.rescaled and self.space != "flat":
            raise ConfigError("the rescaled form z = e^{-tF} x is defined for the unnormalised flow (space='flat')")


C1 = Flow(space="ellipsoid")
C2 = Flow(space="sphere")
C2_OJA = Flow(space="sphere", attention="uniform")
C3 = Flow(space="flat")
C3_RESCALED = Flow(space="flat", rescaled=True)

#: Why :func:`jaxattn.solve` runs a rescaled flow in float64 only (and a configuration with ``dynamics.rescaled``
#: refuses ``dtype = 'float32'``): the scores ``<Q e^{tF} z_i, K e^{tF} z_j>`` (and, for several heads, ``G_h(t)``)
#: grow like ``e^{tF}``, so the rounding of ``z`` soon moves the field by more than the tolerance and the adaptive
#: step shrinks until ``max_steps``, one head or several: at the default tolerances, 2,000 float32 steps bring random
#: ``d = 8`` models (1 or 4 heads) only to ``t = 6.5``–``9`` of 10, where float64 takes 49–60 steps; at the default
#: ``max_steps = 100000`` that is minutes of nothing, then every condition failed. Refused rather than detected: the
#: step shrinks rather than collapses, and when depends on the model, ``β``, the tokens and the tolerances (a floor
#: on the step would also stop stiff solves that finish), while the remedy is always the same.
RESCALED_NEEDS_FLOAT64 = ("in float32 the rounding of z, amplified by e^{tF} in the scores, soon moves the vector "
                          "field by more than the tolerance and the adaptive step shrinks until max_steps")


def set_index(model: Model, t, layer_time=1.0) -> Int[Array, ""]:
    """Weight set of a layered model at time ``t``: ``schedule[floor(t / layer_time) mod depth]``."""
    sched = jnp.asarray(model.schedule, dtype=jnp.int32)
    k = jnp.floor(t / layer_time).astype(jnp.int32)
    return sched[jnp.mod(k, model.depth)]


def weights_at(model: Model, t, layer_time=1.0, weights_fn: Callable | None = None) -> Layers:
    """The weight set (leading axis removed) in force at time ``t``."""
    if weights_fn is not None:  # in the state's precision (t carries it), or the solver's state changes dtype
        t = jnp.asarray(t)
        return jax.tree_util.tree_map(
            lambda a: a.astype(t.dtype) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating) else a, weights_fn(t))
    if model.shared:
        return model.layers.take(model.schedule[0])
    return model.layers.take(set_index(model, t, layer_time))


def layer_matrix(lw: Layers) -> Float[Array, "d d"]:
    """``F = Σ_h O_h V_{g(h)}`` of one weight set, ``[d, d]`` (``g``: the GQA grouping, identity without)."""
    return jnp.einsum("hdk,hke->de", lw.o, repeat_kv(lw).v)


#: Taylor degree of :func:`expm`, the size ``θ`` up to which it gives ``e^B`` to double precision
#: (``θ^21/21! < 2^-53``), and the most squarings it does (``α(A) ≤ θ 2^16``).
_TAYLOR_DEGREE, _THETA, MAX_SQUARINGS = 20, 1.4, 16


def expm(A: Float[Array, "*B d d"]) -> Float[Array, "*B d d"]:
    """``e^A`` of ``A: [..., d, d]`` by scaling and squaring a degree-20 Taylor polynomial.

    Matrix products only (no LAPACK custom call, unlike ``jax.scipy.linalg.expm``, whose batched LU
    inside a vmapped solver loop could deadlock XLA's CPU thread pool), a fixed number of them (so
    it is reverse-differentiable and vmaps), each matrix scaled by its own ``2^-s``. The scaling
    follows ``α = max(‖A³‖₁^{1/3}, ‖A⁴‖₁^{1/4})``, which bounds the Taylor remainder (Al-Mohy and
    Higham, 2009) and is often much smaller than ``‖A‖₁``: fewer squarings, less rounding. NaN where
    ``α > θ 2^16`` (more squarings than :data:`MAX_SQUARINGS`), like ``jax.scipy.linalg.expm``.
    """
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    A2 = A @ A
    A3, A4 = A2 @ A, A2 @ A2
    norm = lambda M, k: jnp.abs(M).sum(-2).max(-1) ** (1.0 / k)
    alpha = jax.lax.stop_gradient(jnp.maximum(norm(A3, 3), norm(A4, 4)))  # the scaling: a constant for autodiff
    s = jnp.where(alpha > _THETA, jnp.ceil(jnp.log2(jnp.maximum(alpha, _THETA) / _THETA)), 0.0)
    scale = lambda M, k: M * jnp.exp2(-k * s)[..., None, None]  # (2^-s A)^k, exactly
    powers = (eye, scale(A, 1), scale(A2, 2), scale(A3, 3))
    B4 = scale(A4, 4)
    # Paterson–Stockmeyer: T(B) = C0 + B4 (C1 + B4 (C2 + B4 (C3 + B4 (C4 + c20 B4)))), C_j = Σ_{i<4} c_{4j+i} B^i
    c = [1.0 / math.factorial(k) for k in range(_TAYLOR_DEGREE + 1)]
    block = lambda j: sum(c[4 * j + i] * powers[i] for i in range(4))
    E = block(4) + c[20] * B4
    for j in (3, 2, 1, 0):
        E = block(j) + B4 @ E

    def square(k, E):
        more = (k < s)[..., None, None]
        safe = jnp.where(more, E, 0.0)  # a finished E is not squared further: no overflow, no NaN gradient
        return jnp.where(more, safe @ safe, E)

    E = jax.lax.fori_loop(0, MAX_SQUARINGS, square, E)  # static trip count: a scan, reverse-differentiable
    return jnp.where((s > MAX_SQUARINGS)[..., None, None], jnp.nan, E)


def _rescaled(t, Z: jax.Array, lw: Layers, flow: Flow, beta) -> jax.Array:
    """``ż`` of the rescaled flow without cancellation (see the module docstring)."""
    F = layer_matrix(lw)
    heads = lw.v.shape[0]
    bias = flow.biases and (lw.bv is not None or lw.bo is not None)
    E = expm(jnp.stack([t * F, -t * F]) if heads > 1 or bias else (t * F)[None])
    A = probabilities(Z @ E[0].T, lw, beta, biases=flow.biases, attention=flow.attention)  # [H, n, n]
    W = jnp.einsum("hij,jd->hid", A, Z) - Z[None]  # w^h_i = Σ_j a^h_ij z_j − z_i: differences of rescaled tokens
    if heads == 1:
        out = W[0] @ F.T
    else:
        mean = W.mean(0, keepdims=True)
        D = (W - mean) @ E[0].T  # e^{tF} (w^h − w̄)
        mixed = jnp.einsum("hnk,hdk->nd", jnp.einsum("hnd,hkd->hnk", D, lw.v), lw.o)  # Σ_h F_h e^{tF} (w^h − w̄)
        out = mean[0] @ F.T + mixed @ E[1].T
    if bias:  # e^{−tF} (Σ_h s^h_i O_h b^v_h + b^o), s^h_i the row sums of the attention
        c = jnp.zeros_like(Z)
        if lw.bv is not None:
            c = c + jnp.einsum("hi,hdk,hk->id", A.sum(-1), lw.o, lw.bv)
        if lw.bo is not None:
            c = c + lw.bo[None, :]
        out = out + c @ E[1].T
    return out


def field(t, X: Float[Array, "n d"], lw: Layers, flow: Flow, beta, geom: Geometry,
          form: Form | None = None) -> Float[Array, "n d"]:
    """``dX/dt`` for one configuration ``X: [n, d]`` with the weight set ``lw`` in force at ``t``.

    For the rescaled flow ``X`` is ``Z`` (the rescaled tokens) and ``lw`` must be the only weight set.
    ``form``: how the attention's products are arranged (:mod:`jaxattn.model.forms`; not the rescaled flow's).
    """
    if flow.rescaled:
        return _rescaled(t, X, lw, flow, beta)
    U = attend(X, lw, beta, biases=flow.biases, attention=flow.attention, form=form)
    return geom.project(X, U)


def attention_at(t, X: Float[Array, "n d"], lw: Layers, flow: Flow, beta,
                 form: Form | None = None) -> Float[Array, "H n n"]:
    """The attention weights ``[H, n, n]`` of the flow at ``(t, X)`` (rescaled: at ``x = e^{tF} z``)."""
    if flow.rescaled:
        return probabilities(X @ expm(t * layer_matrix(lw)).T, lw, beta, biases=flow.biases, attention=flow.attention)
    return probabilities(X, lw, beta, biases=flow.biases, attention=flow.attention, form=form)


@full_precision
def velocity(model: Model, X: Float[ArrayLike, "n d"], t=0.0, *, flow: Flow = C2, beta=1.0,
             S: Float[ArrayLike, "d d"] | None = None, layer_time=1.0,
             weights_fn: Callable | None = None) -> Float[Array, "n d"]:
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
    if not isinstance(flow, Flow):  # e.g. a map (ja.D1): its step is ja.dynamics.discrete.step, not a vector field
        raise ConfigError(f"flow must be a jaxattn.Flow (C1, C2, C2_OJA, C3, C3_RESCALED or Flow(...)), got {flow!r}; "
                          "the step map of a discrete model is jaxattn.dynamics.discrete.step")
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[-1] != model.d_model:
        raise ConfigError(f"X must be one configuration [n, {model.d_model}], got shape {tuple(X.shape)} "
                          "(for a batch: jax.vmap(lambda x: velocity(model, x, ...))(X))")
    # the field in the precision of simulate_one's state, every array in it: nothing is promoted inside the field
    dt = wider_dtype(X, model)
    X, model = X.astype(dt), model.astype(dt)
    geom = geometry(flow.space, S, X.shape[-1], X.dtype)
    lw = weights_at(model, jnp.asarray(t, X.dtype), layer_time, weights_fn)
    return field(jnp.asarray(t, X.dtype), X, lw, flow, jnp.asarray(beta, X.dtype), geom)
