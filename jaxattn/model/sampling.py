"""Random models and random initial conditions.

Every random quantity comes from an explicit key. Initial condition ``i`` of a batch is drawn
from ``fold_in(key, i)``, so the numbers of condition ``i`` do not depend on how the batch is
split into chunks or shards (``start`` gives the global index of a chunk's first condition).

One key names one set of numbers in every precision: random numbers are always drawn in float32
(``jax.random``'s float32 draws do not depend on JAX's x64 mode, its float64 draws are other
numbers) and then cast to the requested dtype. Random weights are float32 numbers, so a float64
model is exactly the float32 one cast up; what is computed from the draws (tokens normalised onto
the sphere, Haar-orthogonal matrices) is computed in the requested dtype. A float32 and a float64
run from the same seed therefore start from the same model and the same tokens, up to float32
rounding, with x64 on or off.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxattn.errors import ConfigError, integer, positive_int
from jaxattn.model.params import Model, from_heads

WEIGHT_KINDS = ("gaussian", "uniform", "identity")
VALUE_KINDS = ("random", "identity", "symmetric")
INIT_KINDS = ("sphere", "gaussian", "ellipsoid")
#: The kinds that need an array (Python arguments, not command-line or configuration-file values), and which.
NEEDS_ARRAY = {"symmetric": "spectrum", "ellipsoid": "S"}


#: Conditions per block of :func:`init_tokens` by backend (other backends: 8192), as the runner's lanes.
DRAW_BLOCK = {"cpu": 64}
#: Initial conditions one key can name: condition i is drawn from ``fold_in(key, i)`` with 32-bit ``i``.
MAX_CONDITIONS = 2**32
#: The index :func:`seeded_model` folds into a seed's key for the model: initial condition ``MODEL_INDEX`` of that
#: key draws from ``fold_in(fold_in(key, MODEL_INDEX), 2^32 - 1)`` instead (an index no weight set of a model
#: reaches), so the model's key is never also drawn from as a condition's.
MODEL_INDEX = 2**31 - 1


def check_key(key: PRNGKeyArray) -> PRNGKeyArray:
    """One PRNG key (``jax.random.key(seed)`` or a raw ``uint32[2]`` key), else one clear error."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape == ():
            return key
        raise ConfigError(f"key must be one PRNG key, got a batch of keys of shape {key.shape}: call once per key "
                          "(condition i of a batch is already drawn from fold_in(key, i))")
    if isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.shape == (2,):
        return key
    raise ConfigError(f"key must be a JAX PRNG key such as jax.random.key(0), got {type(key).__name__} {key!r:.40}")


def float_dtype(dtype) -> np.dtype:
    """``dtype`` as a floating dtype JAX computes in, else one clear error (integer dtypes, float64
    without x64, which JAX would silently turn into float32). ``None``: float64 when x64 is enabled,
    else float32."""
    if dtype is None:
        dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise ConfigError(f"dtype must be a floating dtype such as float32 or float64, got {dtype!r}") from None
    if not jnp.issubdtype(dt, jnp.floating):
        raise ConfigError(f"dtype must be a floating dtype such as float32 or float64, got {dt.name}")
    if dt.itemsize == 8 and not jax.config.read("jax_enable_x64"):
        raise ConfigError("float64 needs JAX's x64 mode: call jax.config.update('jax_enable_x64', True) first")
    return dt


def _count(name: str, v, minimum: int) -> int:
    """An integer ``>= minimum`` (booleans and floats refused)."""
    return integer(name, v, minimum=minimum)


def _check_dims(d: int, heads: int) -> int:
    d, heads = positive_int("d", d), positive_int("heads", heads)
    if d % heads:
        raise ConfigError(f"d={d} is not divisible by the number of heads H={heads}")
    return d // heads


def _orthogonal(key, d: int, dtype) -> jax.Array:
    """Haar-random orthogonal matrix (QR of a Ginibre matrix with the sign fix), computed in ``dtype``
    from a float32 draw."""
    a = jax.random.normal(key, (d, d), jnp.float32).astype(dtype)
    q, r = jnp.linalg.qr(a)
    return q * jnp.sign(jnp.diag(r))[None, :]


def symmetric_with_spectrum(key: PRNGKeyArray, spectrum: Sequence[float] | Float[np.ndarray, " d"],
                            dtype=None) -> Float[Array, "d d"]:
    """``U diag(spectrum) Uᵀ`` with ``U`` Haar-orthogonal: a symmetric ``[d, d]`` matrix.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> S = ja.model.sampling.symmetric_with_spectrum(jax.random.key(0), [3.0, 1.0, 0.5])
        >>> S.shape, bool(np.allclose(S, S.T))
        ((3, 3), True)
        >>> np.linalg.eigvalsh(np.asarray(S, np.float64)).round(4)
        array([0.5, 1. , 3. ])
    """
    dtype = float_dtype(dtype)
    key = check_key(key)
    lam = jnp.asarray(spectrum, dtype)
    if lam.ndim != 1 or lam.shape[0] < 1:
        raise ConfigError(f"spectrum must be a non-empty list of numbers, got shape {lam.shape}")
    u = _orthogonal(key, lam.shape[0], dtype)
    return (u * lam[None, :]) @ u.T


def random_model(key: PRNGKeyArray, d: int, heads: int = 1, depth: int = 1, *, shared: bool = True,
                 weights: str = "gaussian", value: str = "random",
                 spectrum: Sequence[float] | Float[np.ndarray, " d"] | None = None, mask: str = "full",
                 scale: float | None = None, biases: bool = False, bias_std: float = 0.1, unit_output: bool = False,
                 uniform_range=(-1.0, 1.0), dtype=None) -> Model:
    """A synthetic attention-only model (the D1/D2 setting).

    Args:
        key: PRNG key.
        d: token dimension; heads: ``H`` (``d % H == 0``); depth: number of blocks.
        shared: one weight set applied ``depth`` times (time-invariant) or one per block.
        weights: ``'gaussian'`` (Ginibre, entries N(0, 1/d)), ``'uniform'`` (entries uniform in
            ``uniform_range``, as in Rodríguez Abella et al.) or ``'identity'`` (``Q_h = K_h``
            = the rows of the identity that head h owns; Geshkovski et al.'s ``Q = K = I``).
        value: ``'random'`` (as ``weights``), ``'identity'`` (layer matrix ``F = I``) or
            ``'symmetric'`` (``F = U diag(spectrum) Uᵀ``; needs ``spectrum`` of length d).
            For ``identity``/``symmetric`` the value and output blocks are built so that
            ``F = Σ_h O_h V_h`` is exactly the requested matrix.
        mask: ``'full'``, ``'causal'`` or ``'local:W'``.
        scale: score scale ``s``; default ``1/sqrt(d_h)``.
        biases: draw q/k/v/o biases with standard deviation ``bias_std``.
        unit_output: single-head D2 convention, ``O = I`` (requires ``heads == 1``).
        dtype: a floating dtype; default float64 when x64 is enabled, else float32. The random
            weights are float32 draws cast to it (see the module docstring): one key, one model.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False, mask="causal")
        >>> model.depth, model.d_model, model.schedule
        (3, 8, (0, 1, 2))
        >>> model.layers.q.shape, model.layers.o.shape          # [G, H, d_h, d], [G, H, d, d_h]
        ((3, 2, 4, 8), (3, 2, 8, 4))
        >>> shared = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)   # one set, applied 3 times
        >>> shared.layers.n_sets, shared.schedule
        (1, (0, 0, 0))
        >>> sym = ja.random_model(jax.random.key(1), d=4, value="symmetric", spectrum=[2.0, 1.0, 0.5, -1.0])
        >>> np.linalg.eigvalsh(ja.layer_matrices(sym)[0]).round(4)                  # F has the asked spectrum
        array([-1. ,  0.5,  1. ,  2. ])
    """
    key = check_key(key)
    dh = _check_dims(d, heads)
    depth = positive_int("depth", depth)
    if weights not in WEIGHT_KINDS:
        raise ConfigError(f"weights must be one of {WEIGHT_KINDS}, got {weights!r}")
    if value not in VALUE_KINDS:
        raise ConfigError(f"value must be one of {VALUE_KINDS}, got {value!r}")
    if value == "symmetric" and (spectrum is None or len(spectrum) != d):
        raise ConfigError(f"value='symmetric' needs a spectrum of length d={d}")
    if unit_output and heads != 1:
        raise ConfigError("unit_output (O = I) is the single-head model D2: use heads=1")
    G = 1 if shared else depth
    # float64 when x64 is enabled (tests, spectra), else float32; simulate casts as asked.
    dtype = float_dtype(dtype)
    f32 = jnp.float32
    sqrt_d = np.float32(np.sqrt(d))  # the random weights are float32 numbers whatever dtype

    def normal(k, shape):
        return (jax.random.normal(k, shape, f32) / sqrt_d).astype(dtype)

    def draw(k, shape):
        if weights == "gaussian":
            return normal(k, shape)
        if weights == "uniform":
            lo, hi = uniform_range
            return jax.random.uniform(k, shape, f32, lo, hi).astype(dtype)
        eye = jnp.eye(d, dtype=dtype).reshape(heads, dh, d)
        return jnp.broadcast_to(eye, shape)

    def one_set(k):
        kq, kk, kv, ko, kb, ks = jax.random.split(k, 6)
        q = draw(kq, (heads, dh, d))
        kmat = draw(kk, (heads, dh, d))
        if value == "random":
            v = draw(kv, (heads, dh, d)) if weights != "identity" else normal(kv, (heads, dh, d))
            o = jnp.eye(d, dtype=dtype)[None] if unit_output else normal(ko, (heads, d, dh))
        else:
            if value == "identity":
                f = jnp.eye(d, dtype=dtype)
            else:
                assert spectrum is not None  # value='symmetric' without one is refused above
                f = symmetric_with_spectrum(ks, spectrum, dtype)
            # Vstack = I (head h reads its own coordinates), O = F split by columns: Σ O_h V_h = F.
            v = jnp.eye(d, dtype=dtype).reshape(heads, dh, d)
            o = f.reshape(d, heads, dh).transpose(1, 0, 2)
            if unit_output:
                v, o = f[None], jnp.eye(d, dtype=dtype)[None]
        b = (jax.random.normal(kb, (3 * d + d,), f32) * f32(bias_std)).astype(dtype)
        bs = dict(bq=b[:d].reshape(heads, dh), bk=b[d:2 * d].reshape(heads, dh),
                  bv=b[2 * d:3 * d].reshape(heads, dh), bo=b[3 * d:]) if biases else {}
        return q, kmat, v, o, bs

    sets = [one_set(k) for k in jax.random.split(key, G)]
    stack = lambda i: jnp.stack([s[i] for s in sets])
    bias = {name: jnp.stack([s[4][name] for s in sets]) for name in (sets[0][4] or {})}
    schedule = (0,) * depth if shared else tuple(range(depth))
    return from_heads(stack(0), stack(1), stack(2), stack(3), schedule=schedule, masks=mask,
                      scale=scale, **bias)


def seeded_model(seed: int, d: int, heads: int = 1, depth: int = 1, **options) -> Model:
    """The random model that a command's or a sweep's ``seed`` names: :func:`random_model` with the key
    ``fold_in(key(seed), 2^31 - 1)`` (the initial conditions draw from ``fold_in(key(seed), i)``, condition
    ``2^31 - 1`` from a key of its own: :data:`MODEL_INDEX`), drawn in
    float32 whatever the run's dtype, so one seed names one model. ``options``: :func:`random_model`'s."""
    return random_model(jax.random.fold_in(jax.random.key(seed), MODEL_INDEX), d, heads, depth, dtype=jnp.float32,
                        **options)


def init_tokens(key: PRNGKeyArray, batch: int, n: int, d: int, *, kind: str = "sphere",
                S: Float[ArrayLike, "d d"] | None = None, start: int = 0,
                dtype=jnp.float32) -> Float[Array, "batch n d"]:
    """Random initial configurations ``X0: [batch, n, d]``.

    Condition ``i`` (global index ``start + i``) uses ``fold_in(key, start + i)`` (condition ``2^31 - 1``: see
    :data:`MODEL_INDEX`); its Gaussian
    draw is float32 whatever ``dtype`` (then cast, and normalised in ``dtype``), so a seed gives the
    same tokens in float32 and float64, up to float32 rounding.

    Args:
        kind: ``'sphere'`` (uniform on the unit sphere), ``'gaussian'`` (N(0, I), the power-method
            paper's setting) or ``'ellipsoid'`` (uniform directions scaled onto ``xᵀ S x = 1``).
        S: ``[d, d]`` symmetric positive definite matrix for ``kind='ellipsoid'``.
        dtype: a floating dtype (float64 needs JAX's x64 mode).

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> X0 = ja.init_tokens(jax.random.key(1), 4, 5, 8)          # 4 configurations of 5 tokens in R^8
        >>> X0.shape, X0.dtype
        ((4, 5, 8), dtype('float32'))
        >>> bool(np.allclose(np.linalg.norm(X0, axis=-1), 1.0, atol=1e-6))
        True
        >>> tail = ja.init_tokens(jax.random.key(1), 2, 5, 8, start=2)   # conditions 2 and 3 on their own
        >>> bool((tail == X0[2:]).all())
        True
    """
    key = check_key(key)
    batch, start = _count("batch", batch, 0), _count("start", start, 0)
    n, d = _count("n", n, 1), _count("d", d, 1)
    dtype = float_dtype(dtype)
    if kind not in INIT_KINDS:
        raise ConfigError(f"init kind must be one of {INIT_KINDS}, got {kind!r}")
    if kind == "ellipsoid" and S is None:
        raise ConfigError("kind='ellipsoid' needs the matrix S")
    if start + batch > MAX_CONDITIONS:  # fold_in takes 32-bit data: condition 2^32 would repeat condition 0
        raise ConfigError(f"condition indices must stay below 2^32 = {MAX_CONDITIONS:,} (fold_in takes 32-bit "
                          f"data), got conditions {start:,}..{start + batch - 1:,}; use another key for more")
    if batch == 0:
        return jnp.zeros((0, n, d), dtype)
    S = None if S is None else jnp.asarray(S, dtype)
    # drawn in blocks of one fixed width (the last one padded), each by the same compiled program:
    # a condition's tokens are bit-identical whatever the batch size or chunking (a vmap over the
    # whole batch lets XLA vectorise the normalisation differently for different batch sizes)
    width = DRAW_BLOCK.get(jax.default_backend(), 8192)
    idx = np.arange(start, start + batch + (-batch) % width, dtype=np.uint64).astype(np.uint32)  # 32-bit, x64 or not
    blocks = [_draw(key, idx[b:b + width], S, n=n, d=d, kind=kind, dtype=dtype) for b in range(0, batch, width)]
    return (blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks))[:batch]


@functools.partial(jax.jit, static_argnames=("n", "d", "kind", "dtype"))
def _draw(key, idx, S, *, n: int, d: int, kind: str, dtype) -> jax.Array:
    """The conditions ``idx`` of one block."""

    def one(i):
        k = jax.random.fold_in(key, i)
        # the seeded model's key (seeded_model) is not drawn from as a condition's: that condition takes another
        k = jnp.where(i == MODEL_INDEX, jax.random.fold_in(k, MAX_CONDITIONS - 1), k)
        g = jax.random.normal(k, (n, d), jnp.float32).astype(dtype)
        if kind == "gaussian":
            return g
        if kind == "sphere":
            return g / jnp.linalg.norm(g, axis=-1, keepdims=True)
        return g / jnp.sqrt(jnp.einsum("nd,de,ne->n", g, S, g))[:, None]

    return jax.vmap(one)(idx)
