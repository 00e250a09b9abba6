"""The batched runner shared by maps (:func:`jaxattn.simulate`) and flows (:func:`jaxattn.solve`).

A *program* solves one initial condition ``X0: [n, d]`` and returns a pytree (observables, final
state, ...). It is a frozen dataclass, so it is hashable and compares by value: two calls with
equal programs share one compiled executable. The runner owns what both kinds of model need once:

* **Batching in blocks of one width.** The batch is padded to a multiple of a lane width ``lanes``
  and run as ``lax.map`` over blocks of ``lanes`` conditions, each block ``vmap``-ed. The program XLA
  compiles sees ``[lanes, n, d]`` whatever the batch size, so for a fixed ``Batch(size=...)`` the numbers of
  condition ``i`` are the same bits however the batch is split (on a CPU; a GPU once gave 1 ulp between
  one block and several, docs/gpu.md). XLA picks different kernels for different widths, which changes
  float32 results by ~1e-7: the default width follows the batch (:func:`default_lanes`: the backend's
  width, capped at the smallest power of two holding each device's share, so padding stays below 2×),
  and conditions run at other widths agree to round-off. A resumed sweep runs at the width recorded with
  it (:mod:`jaxattn.sweeps.chunked`, :mod:`jaxattn.sweeps.grid`).
* **dtype** casting of the states and of every floating parameter.
* **Observables** ``observe(t, X, ctx)``: ``t`` is the step index of a map or the time of a flow,
  ``ctx.aux`` the user's pytree of arrays, ``ctx.attention()`` the attention weights ``[H, n, n]``
  applied at this state. Maps hand the weights their step already computed; elsewhere the call
  computes them, and an observable that never calls it costs nothing (XLA removes dead code).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.dynamics._target import _TARGET, Compiled, platform
from jaxattn.dynamics.options import PRECISIONS, Batch
from jaxattn.errors import ConfigError, real
from jaxattn.model import concrete
from jaxattn.model.sampling import float_dtype

#: Conditions per vmapped block by backend (see the module docstring).
DEFAULT_LANES = {"cpu": 64, "gpu": 8192, "cuda": 8192, "rocm": 8192, "tpu": 8192}

#: The widest block of one-head maps (the papers' models) by backend, and the bytes of one step's working set such a
#: block may take. A one-head condition of a few KiB leaves a block of 64 mostly overhead per step on a CPU: wider
#: blocks, doubling while the block stays within the bytes, measured (f32, one run each, best of 5) at d = 2, n = 32
#: 1.37x faster at 1024 lanes; d = 3, n = 64 1.27x at 512; d = 16, n = 64 1.14x at 256; d = 64, n = 128 stays at
#: 64. Models with several heads keep 64 (W1, d = 64, four heads: 9% slower at 128).
WIDE_LANES = {"cpu": 1024}
WIDE_BLOCK_BYTES = {"cpu": 32 * 2**20}

#: Bytes one block of the default lane width may take by backend (the rest: 16 GiB). A fixed budget rather
#: than the device's memory, so that the default width, hence the numbers, depend only on the backend and
#: on the size of one condition: a few long prompts (repeated passes of a real model) run in narrow blocks
#: instead of being padded to thousands of lanes, while small conditions keep the full width.
LANE_BUDGET = {"cpu": 2**30}

#: Bytes of a block's working set beyond which a wider block computes no faster per condition, by backend: one
#: condition's products are then large enough to keep the device busy, and a wider block only pads a small batch with
#: more idle lanes. Measured on a CPU (2 cores, float32, repeated passes of a GPT-2-small-shaped model, seconds per
#: condition and pass against the lane width): n = 200 tokens (16 MB a condition) 0.58, 0.27, 0.21, 0.24 at 1, 4, 8
#: and 16 lanes; n = 100 0.14, 0.12, 0.12 at 8, 16, 32; n = 50 0.067, 0.056 at 32 and 64. Two prompts of 200 tokens
#: had been padded to 64 lanes: 15.4 s a pass where 8 lanes take 1.7 s. It applies to every driver: a one-head map
#: narrows from n ≈ 360 tokens (float64); at n = 1000, d = 3 (8 lanes now, 32 before) 32 conditions took 3.0 s
#: against 2.9 s (5 steps, best of 3, on a loaded host: no difference resolved). Accelerators have no entry until
#: it is measured there (the memory budget alone decides).
LANE_SATURATION = {"cpu": 3 * 2**26}


class Context(NamedTuple):
    """What an observable ``observe(t, X, ctx)`` receives besides the time and the state."""

    aux: Any
    attention: Callable[[], jax.Array]


def block_budget() -> int:
    """Bytes one block of the default lane width may take on this backend (:data:`LANE_BUDGET`)."""
    return LANE_BUDGET.get(platform(), 16 * 2**30)


def checked(observe: Callable) -> Callable:
    """``observe`` refusing, in one line naming it, a result that is not a pytree of arrays (a string, an
    object): JAX would otherwise fail deep inside its tracing with a message about its own internals."""

    def call(t, X, ctx):
        out = observe(t, X, ctx)
        for leaf in jax.tree_util.tree_leaves(out):
            if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)):
                name = getattr(observe, "__name__", repr(observe))
                raise ConfigError(f"Save(observe=...) must return an array or a pytree of arrays; {name} returned "
                                  f"a {type(leaf).__name__}")
        return out

    return call


def pow2_at_least(k: int) -> int:
    """The smallest power of two ``>= k`` (1 for ``k <= 1``)."""
    return 1 << max(int(k) - 1, 0).bit_length()


def default_lanes(condition_bytes: int | None = None, one_head_bytes: int | None = None,
                  conditions: int | None = None) -> int:
    """The default lane width (``Batch(size=None)``) for ``conditions`` conditions on one device:
    :data:`DEFAULT_LANES` of the backend, halved while a block of conditions of ``condition_bytes`` each
    (:func:`working_bytes`) would exceed :data:`LANE_BUDGET` (the memory it may take) or :data:`LANE_SATURATION`
    (the size beyond which a wider block runs no faster); ``one_head_bytes``, the working set of one step of a
    one-head map's condition, first widens it: doubled up to :data:`WIDE_LANES` while the block's steps fit
    :data:`WIDE_BLOCK_BYTES` (backends with an entry only). Then capped at the smallest power of two
    ``>= conditions``, so that a small batch is not padded to the backend's width (at d = 2, n = 32 on a CPU 64
    conditions cost 13.6 ms each in a block of 1024, 1.0 ms at 1024): fewer than twice the conditions are
    computed. ``conditions=None``: no cap, the fixed width that every default was before it followed the batch
    (what sweep stores written then resume at).

    Examples:
        >>> import jax
        >>> from jaxattn.dynamics._runner import default_lanes
        >>> default_lanes() == default_lanes(1000) if jax.default_backend() == "cpu" else True
        True
        >>> default_lanes(2**28) if jax.default_backend() == "cpu" else 1      # 256 MiB per condition
        1
        >>> default_lanes(16 * 2**20) if jax.default_backend() == "cpu" else 8   # 16 MiB: 200 tokens of GPT-2 small
        8
        >>> default_lanes(conditions=5), default_lanes(conditions=1)            # 5 conditions: one block of 8
        (8, 1)
    """
    backend = platform()
    lanes = DEFAULT_LANES.get(backend, 1024)
    if one_head_bytes:
        widest, room = WIDE_LANES.get(backend, lanes), WIDE_BLOCK_BYTES.get(backend, 0)
        while 2 * lanes <= widest and 2 * lanes * one_head_bytes <= room:
            lanes *= 2
    # the narrower of the memory budget and the width beyond which a block runs no faster
    budget = min(block_budget(), LANE_SATURATION.get(backend, block_budget()))
    while condition_bytes and lanes > 1 and lanes * condition_bytes > budget:
        lanes //= 2
    return lanes if conditions is None else min(lanes, pow2_at_least(conditions))


def lanes_for(size: int | None, condition_bytes: int | None = None, one_head_bytes: int | None = None,
              conditions: int | None = None) -> int:
    """The lane width of a :class:`~jaxattn.dynamics.options.Batch` ``size``: the size when given, else
    :func:`default_lanes` for ``conditions`` conditions per device of ``condition_bytes`` each (``one_head_bytes``,
    ``conditions=None``: see there).

    A given size is never clamped to the batch: a batch smaller than it is padded, so that for a fixed size a
    condition's numbers do not depend on the size of the batch it was run in.
    """
    return default_lanes(condition_bytes, one_head_bytes, conditions) if size is None else size


@functools.partial(jax.jit, static_argnames=("program", "lanes", "mesh", "pad"))
def _run(program, X0, params, *, lanes, mesh, pad=0):
    # the padding and its removal inside the one program: as separate operations they were four more programs
    # compiled for every new batch shape, and kept for the life of the process (benchmarks/shape_memory.py)
    B = X0.shape[0]
    if pad:  # copies of the first condition: finite, and dropped below
        X0 = jnp.concatenate([X0, jnp.broadcast_to(X0[:1], (pad, *X0.shape[1:]))])

    def local(X0, params):  # the conditions of one device, in blocks of `lanes`
        B = X0.shape[0]
        blocks = X0.reshape((B // lanes, lanes, *X0.shape[1:]))
        out = jax.lax.map(jax.vmap(lambda x: program(x, params)), blocks)
        return jax.tree_util.tree_map(lambda a: a.reshape((B, *a.shape[2:])), out)

    if mesh is None:
        out = local(X0, params)
    else:
        spec = jax.sharding.PartitionSpec(mesh.axis_names[0])
        out = jax.shard_map(local, mesh=mesh, in_specs=(spec, jax.sharding.PartitionSpec()), out_specs=spec,
                            check_vma=False)(X0, params)
    return jax.tree_util.tree_map(lambda a: a[:B], out) if pad else out


def mesh_of(devices) -> jax.sharding.Mesh | None:
    """A one-axis mesh (``'conditions'``) over ``devices``; ``None`` for a single device."""
    devices = list(devices) if devices is not None else []
    if len(devices) <= 1:
        return None
    return jax.sharding.Mesh(np.asarray(devices), ("conditions",))


def replicate(tree: Any, mesh: jax.sharding.Mesh | None) -> Any:
    """Place ``tree`` on every device of ``mesh`` once (weights of a sweep), or leave it as is."""
    if mesh is None:
        return tree
    return jax.device_put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def check_precision(precision: str) -> str:
    """XLA's setting for a precision policy name (:data:`PRECISIONS`), refused with one line otherwise."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def memory_limit() -> int:
    """Bytes one device can hold: its allocator's limit on accelerators, the physical memory on a CPU; a target's
    (:func:`compiling_for`) from its description."""
    target = _TARGET.get()
    if target is not None:
        return target.memory
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # backends without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def working_bytes(n: int, d: int, heads: int, dtype, *, hidden: int = 0, saved: int = 0,
                  key_chunk: int | None = None) -> int:
    """A rough working set of one condition in one block map: attention scores and weights
    ``[H, n, n]`` (a few copies; ``[H, n, key_chunk]`` when the attention is evaluated over key chunks), the
    states and projections ``[n, d]``, an FFN's ``[n, f]`` and the saved states. Used to size the default
    lane width and to refuse one that cannot fit (:func:`run`)."""
    keys = n if key_chunk is None else min(key_chunk, n)
    return jnp.dtype(dtype).itemsize * (3 * heads * n * keys + 8 * n * d + 2 * n * hidden + saved * n * d)


def run(program, X0: jax.Array, params: Any, *, batch: Batch = Batch(), condition_bytes: int | None = None,
        one_head_bytes: int | None = None) -> Any:
    """Apply ``program(X0[i], params)`` to every condition of ``X0: [B, n, d]`` under ``jit``.

    ``params`` is a pytree of arrays (weights, α, β, tolerances, ...): jit inputs, so new values do
    not recompile. ``batch`` (:class:`~jaxattn.dynamics.options.Batch`): the lane width ``size`` (``None``: the
    default for each device's share of ``B``, :func:`default_lanes`); with several ``devices`` the batch is split
    over them (``shard_map``: each device runs its own blocks of the same width, so for a given width a
    condition's numbers do not depend on the number of devices); ``precision`` the
    matrix-product policy (:data:`PRECISIONS`). ``condition_bytes``
    (:func:`working_bytes`): a lane width whose block would need more than half the device's memory is
    refused with the estimate, rather than attempted; ``one_head_bytes`` widens the default width of a one-head map
    (:func:`default_lanes`). Returns the program's pytree with a leading axis ``B``.
    """
    xla_precision = check_precision(batch.precision)
    B = X0.shape[0]
    mesh = mesh_of(batch.devices)
    share = -(-B // (1 if mesh is None else mesh.size))  # conditions per device: what the default width follows
    lanes = lanes_for(batch.size, condition_bytes, one_head_bytes, share)
    if condition_bytes is not None and lanes * condition_bytes > memory_limit() // 2:
        need, have = lanes * condition_bytes / 2**30, memory_limit() / 2**30
        raise ConfigError(f"Batch(size={lanes}) runs {lanes} conditions at once, about {need:.3g} GiB for one block "
                          f"(the device has {have:.3g} GiB): give a smaller Batch(size=...) (default "
                          f"{default_lanes(condition_bytes, one_head_bytes, share)} here)")
    width = lanes * (1 if mesh is None else mesh.size)
    with jax.default_matmul_precision(xla_precision):  # part of the compilation cache key
        if _TARGET.get() is not None:
            raise Compiled(_ahead(program, X0, params, lanes=lanes, mesh=mesh, pad=(-B) % width,
                                  devices=batch.devices), lanes)
        return _run(program, X0, params, lanes=lanes, mesh=mesh, pad=(-B) % width)


def _ahead(program, X0, params, *, lanes, mesh, pad, devices) -> Any:
    """``_run``'s program compiled for ``devices`` (a target's, which need not be this process's: a topology's
    devices of :mod:`jax.experimental.topologies`) from the shapes of its inputs alone."""
    P = jax.sharding.PartitionSpec
    if mesh is None:
        if not devices:
            raise ConfigError("compiling ahead of time needs the target's devices: Batch(devices=target.devices)")
        one = jax.sharding.Mesh(np.asarray(devices[:1]), ("conditions",))
        batched = replicated = jax.sharding.NamedSharding(one, P())
    else:
        batched = jax.sharding.NamedSharding(mesh, P(mesh.axis_names[0]))
        replicated = jax.sharding.NamedSharding(mesh, P())

    def spec(a, sharding):
        a = a if hasattr(a, "shape") and hasattr(a, "dtype") else np.asarray(a)
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    X = spec(X0, batched if mesh is not None else replicated)
    p = jax.tree_util.tree_map(lambda a: spec(a, replicated), params)
    return _run.lower(program, X, p, lanes=lanes, mesh=mesh, pad=pad).compile()


def traced(tree: Any) -> bool:
    """Whether any leaf of ``tree`` is a tracer: the call runs under ``jit``, ``vmap`` or ``grad``, so
    its values cannot be read on the host and are checked inside the program instead."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def check_states(X0, d: int, *, normalised: bool) -> jax.Array:
    """``X0`` as a real ``[B, n, d]`` array (``[n, d]`` is taken as ``B = 1``), refused with one clear
    line if it is missing, complex, non-finite, empty, of the wrong shape, or has zero-norm tokens
    where the dynamics normalise them.

    Shapes and dtypes are static facts, checked on the host in every case. The values of a traced
    ``X0`` (under ``jit``, ``vmap``, ``grad``) are checked inside the program (``equinox.error_if``):
    a bad value raises a runtime error with the same message.
    """
    if X0 is None:
        raise ConfigError("X0 is None: give initial configurations [B, n, d]")
    if not isinstance(X0, jax.Array):
        X0 = np.asarray(X0)
    if jnp.iscomplexobj(X0):
        raise ConfigError("X0 is complex: tokens must be real")
    if not (jnp.issubdtype(X0.dtype, jnp.floating) or jnp.issubdtype(X0.dtype, jnp.integer)):
        raise ConfigError(f"X0 must hold real numbers, got dtype {X0.dtype}")
    if X0.ndim == 2:
        X0 = X0[None]
    if X0.ndim != 3:
        raise ConfigError(f"X0 must be [B, n, d] or [n, d], got shape {tuple(X0.shape)}")
    if X0.shape[-1] != d:
        raise ConfigError(f"tokens have dimension {X0.shape[-1]} but the model has d={d}")
    if X0.shape[0] == 0 or X0.shape[1] == 0:
        raise ConfigError(f"X0 holds no configuration or no token (shape {tuple(X0.shape)})")
    if traced(X0):
        X0 = eqx.error_if(X0, ~jnp.all(jnp.isfinite(X0)), "X0 has non-finite values (NaN or inf)")
        if normalised:
            return eqx.error_if(X0, jnp.any(jnp.all(X0 == 0, axis=-1)),
                                "X0 has tokens that are exactly zero: they cannot be normalised onto the sphere")
        return eqx.error_if(X0, ~jnp.any(X0 != 0), "X0 is all zeros: every model stays there")
    X0 = jnp.asarray(X0)
    # read once per array (the same initial states run again, e.g. over a range of beta, are not read again)
    finite, zero_token, nonzero = concrete.fact("state flags", [X0], lambda: _read_state_flags(X0))
    if not finite:
        raise ConfigError("X0 has non-finite values (NaN or inf)")
    if normalised and zero_token:
        raise ConfigError("X0 has tokens that are exactly zero: they cannot be normalised onto the sphere")
    if not normalised and not nonzero:
        raise ConfigError("X0 is all zeros: every model stays there")
    return X0


def _read_state_flags(X0: jax.Array) -> tuple[bool, bool, bool]:
    if all(dev.platform == "cpu" for dev in X0.devices()):  # in host memory: NumPy reads it in place, and no
        a = np.asarray(X0)  # program is compiled (and kept for the life of the process) for each new shape
        return bool(np.isfinite(a).all()), bool((a == 0).all(axis=-1).any()), bool((a != 0).any())
    with jax.ensure_compile_time_eval():  # reduced where X0 lives (its device): three flags come back, not a copy
        return tuple(bool(f) for f in jax.device_get(_state_flags(X0)))  # type: ignore[return-value]


@jax.jit
def _state_flags(X0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    # finite, some token exactly zero, some value non-zero: one program per shape, not six dispatched ops
    return jnp.all(jnp.isfinite(X0)), jnp.any(jnp.all(X0 == 0, axis=-1)), jnp.any(X0 != 0)


def check_weights(model: Any) -> Any:
    """``model`` with its traced floating weights checked for finiteness inside the program (concrete
    weights are checked on the host by :func:`jaxattn.model.params.validate`)."""
    leaves = [a for a in jax.tree_util.tree_leaves(model)
              if isinstance(a, jax.core.Tracer) and jnp.issubdtype(a.dtype, jnp.floating)]
    if not leaves:
        return model
    bad = jnp.any(jnp.stack([~jnp.all(jnp.isfinite(a)) for a in leaves]))
    return eqx.error_if(model, bad, "the model has non-finite weights (NaN or inf)")


def check_scalar(name: str, v, *, positive: bool = False):
    """A finite real number (β, α, times, tolerances), refused otherwise (arrays, booleans, NaN, inf);
    with ``positive``, also > 0.

    A concrete value is checked on the host and returned as a ``float``. A traced one (the driver is
    differentiated, vmapped or jitted with respect to it) must be a scalar; its value is checked inside
    the program with ``equinox.error_if`` and the checked tracer is returned, so the check survives
    ``jit`` and names the option, never "got a tracer".
    """
    want = "finite and > 0" if positive else "finite"
    if isinstance(v, jax.core.Tracer):
        if v.ndim != 0 or not (jnp.issubdtype(v.dtype, jnp.floating) or jnp.issubdtype(v.dtype, jnp.integer)):
            raise ConfigError(f"{name} must be a real scalar, got a traced {v.dtype}{list(v.shape)} "
                              "(vmap over the option itself rather than passing an array)")
        bad = ~jnp.isfinite(v) | (v <= 0) if positive else ~jnp.isfinite(v)
        return eqx.error_if(v, bad, f"{name} must be {want}")
    return real(name, v, positive=positive)


def scalar_of(v: Any, dtype) -> Any:
    """``v`` as a scalar jit argument of ``dtype``: a NumPy scalar when concrete (it travels with the call, where
    ``jnp.asarray`` would first transfer it to the device on its own: a round trip per scalar on a GPU), the tracer
    cast otherwise. A value beyond ``dtype``'s range becomes inf, as a cast on the device makes it (the run then
    reports its non-finite conditions)."""
    if isinstance(v, jax.core.Tracer):
        return jnp.asarray(v, dtype)
    with np.errstate(over="ignore"):
        return np.asarray(v, dtype)


def cast_floats(tree: Any, dtype) -> Any:
    """Cast every floating leaf of ``tree`` to ``dtype`` (integers and booleans unchanged)."""

    def cast(a):
        a = jnp.asarray(a)
        return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) and a.dtype != dtype else a

    return jax.tree_util.tree_map(cast, tree)


#: Floating dtypes by name; every driver's ``dtype`` takes one of these names or a NumPy/JAX dtype.
DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16, "float32": jnp.float32, "float64": jnp.float64}
#: The state precisions that the commands and sweeps offer (a 16-bit state cannot resolve consensus: its
#: rounding, about 1e-3, is above the distances measured).
SIMULATION_DTYPES = ("float32", "float64")


def named_dtype(name: str) -> jnp.dtype:
    """The floating dtype called ``name`` (a key of :data:`DTYPES`: a command's or a study's ``dtype``), else one
    clear error. It does not check JAX's x64 mode: a study turns it on for a float64 run itself."""
    if not isinstance(name, str) or name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return jnp.dtype(DTYPES[name])


def dtype_of(dtype) -> jnp.dtype | None:
    """``dtype`` (a name such as ``'float64'``, a NumPy or JAX dtype, or ``None``) as a floating dtype,
    refused with one line otherwise (an integer dtype would silently run in float32)."""
    return None if dtype is None else float_dtype(dtype)


def wider_dtype(X, model) -> jnp.dtype:
    """The wider of the tokens' and the model's precisions (float32 tokens in a float64 model: float64), the one a
    single configuration's state runs in. Chosen under standard promotion, which strict promotion would refuse: the
    choice of a precision, not a mixed expression."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.promote_types(jnp.asarray(X).dtype, jnp.asarray(model.layers.q).dtype)


def resolve_dtype(dtype, X0=None) -> jnp.dtype:
    """The computation dtype of every driver: ``dtype`` if given (a name such as ``'float32'``, a NumPy or a
    JAX dtype; see :func:`dtype_of`), else that of ``X0``; float32 when ``X0`` is not floating or not given.

    Refuses float64 when JAX runs without x64 (it would silently compute in float32).
    """
    dt = dtype_of(dtype)
    if dt is None:
        dt = jnp.asarray(X0).dtype if X0 is not None else jnp.dtype(jnp.float32)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.dtype(jnp.float32)
    if dt == jnp.float64 and not jax.config.read("jax_enable_x64"):
        raise ConfigError("float64 needs JAX's x64 mode: call jax.config.update('jax_enable_x64', True) first")
    return dt
