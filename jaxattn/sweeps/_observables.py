"""The observables a sweep can save (the configuration's ``observables`` list names them)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxattn.analysis import metrics

#: Observables a sweep can save, by name: functions of one configuration ``X: [n, d]``.
OBSERVABLES = {
    "diameter": lambda X, ctx: metrics.diameter(X),
    "mean_distance": lambda X, ctx: metrics.mean_distance(X),
    "cos_consensus": lambda X, ctx: metrics.cos_consensus(X),
    "first_token_consensus": lambda X, ctx: metrics.first_token_consensus(X),
    "attn_rank": lambda X, ctx: jnp.mean(metrics.numerical_rank(ctx.attention()).astype(X.dtype)),
}


@dataclasses.dataclass(frozen=True)
class Observables:
    """The observable of a sweep: a dict of the named quantities (hashable: compiled once per set)."""

    names: tuple

    def __call__(self, t, X, ctx):
        return {name: OBSERVABLES[name](X, ctx) for name in self.names}
