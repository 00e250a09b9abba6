"""One optimiser step of optax, whatever dtype promotion the caller runs under."""

from __future__ import annotations

from typing import Any

import jax


def optax_step(opt: Any, grad: Any, state: Any, params: Any) -> tuple[Any, Any]:
    """``optax.apply_updates`` after ``opt.update``: the new parameters and state. optax's Adam raises a Python float
    to an int32 power (its bias correction), which ``jax.numpy_dtype_promotion('strict')`` refuses: optax's own
    arithmetic runs under JAX's standard promotion, so a caller who turned strict promotion on can still steer."""
    import optax

    with jax.numpy_dtype_promotion("standard"):
        upd, state = opt.update(grad, state, params)
        return optax.apply_updates(params, upd), state
