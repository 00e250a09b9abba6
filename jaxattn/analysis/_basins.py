"""Where the dynamics ends: initial conditions run to their end through :func:`jaxattn.simulate` or
:func:`jaxattn.solve` (:func:`settle`), each end state labelled (:func:`classify`), and basin fractions
with Wilson 95% intervals over many random initial conditions (:func:`basins`). This module runs the
dynamics; the rest of the stability analysis only evaluates the right-hand side."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray

from jaxattn.analysis._equilibria import System, check_configurations, padded, residual
from jaxattn.analysis.spectral import eig_sorted
from jaxattn.analysis.stats import wilson
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import Dynamics, simulate
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import positive_int
from jaxattn.model.attention import attend
from jaxattn.model.sampling import init_tokens


@dataclasses.dataclass
class Terminal:
    """What one end state is (see :func:`classify`)."""

    label: str  # e.g. 'consensus +v1', 'bipartite v2 3|2', 'clustering 3', 'polygonal', 'not converged'
    kind: str  # 'consensus' | 'bipartite' | 'clustering' | 'polygonal' | 'not converged'
    k: int  # eigen-index (1-based) for consensus / bipartite, else 0
    split: tuple  # (tokens at +v_k, tokens at -v_k) for consensus / bipartite
    clusters: int
    residual: float

    @property
    def group(self) -> str:
        """The label up to the global flip X -> −X (one attractor per antipodal pair)."""
        if self.kind == "consensus":
            return f"consensus v{self.k}"
        if self.kind == "bipartite":
            return f"bipartite v{self.k} {max(self.split)}|{min(self.split)}"
        return self.label


def _clusters(X: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Greedy clustering of the rows of ``X`` within ``tol``: (centres [m, d], assignment [n])."""
    centres: list = []
    assign = np.zeros(X.shape[0], np.int64)
    for i, x in enumerate(X):
        for c, y in enumerate(centres):
            if np.linalg.norm(x - y) < tol:
                assign[i] = c
                break
        else:
            centres.append(x)
            assign[i] = len(centres) - 1
    return np.asarray(centres), assign


@functools.partial(jax.jit, static_argnums=(0,))
def _updates(kind, model, Xs, beta):
    lw = model.layers.take(model.schedule[0])

    def one(X):
        return jnp.linalg.norm(attend(X, lw, beta, biases=kind.biases, attention=kind.attention), axis=-1).max()

    return jax.vmap(one)(Xs)


def classify(system: System, X: Float[ArrayLike, "*K n d"], *, tol: float = 1e-7, cluster_tol: float = 1e-4,
             align_tol: float = 1e-4, residual_tol: float | None = None) -> list[Terminal]:
    """Label end states ``X: [K, n, d]`` (see :class:`Terminal`).

    Not converged: residual above ``residual_tol`` (default ``tol``). Tokens closer than
    ``cluster_tol`` share a cluster; a cluster within ``align_tol`` of ``±v_k`` sits at the
    eigenvector (real eigenvectors of F, ``k`` 1-based, largest real part first). Polygonal: the
    update ``Σ_j a_ij F x_j`` is below ``tol`` for every token.
    """
    A = check_configurations(X, system.d, sphere_tol=1e-6)
    model = system.model.astype(jnp.float64)
    r = residual(system, A / np.linalg.norm(A, axis=-1, keepdims=True))
    upd = np.asarray(_updates(system.kind, model, padded(A), system.beta))[:A.shape[0]]
    lam, vec = eig_sorted(system.layer_matrix())
    real = np.abs(lam.imag) <= 1e-10 * max(np.abs(lam).max(), 1e-300)
    rtol = tol if residual_tol is None else residual_tol
    out = []
    for X1, r1, u1 in zip(A, r, upd, strict=True):
        if not r1 <= rtol:
            out.append(Terminal("not converged", "not converged", 0, (), 0, float(r1)))
            continue
        C, assign = _clusters(X1, cluster_tol)
        m = C.shape[0]
        found: tuple[int, int, int] | None = None
        for k in np.flatnonzero(real):
            v = vec[:, k].real / np.linalg.norm(vec[:, k].real)
            dots = C @ v
            if np.all(np.abs(np.abs(dots) - 1) < align_tol):
                s = np.sign(dots)[assign]
                found = (int(k) + 1, int(np.sum(s > 0)), int(np.sum(s < 0)))
                break
        if found is not None:
            kk, p, q = found
            if q == 0 or p == 0:
                out.append(Terminal(f"consensus {'+' if p else '-'}v{kk}", "consensus", kk, (p, q), m, float(r1)))
            else:
                out.append(Terminal(f"bipartite v{kk} {p}|{q}", "bipartite", kk, (p, q), m, float(r1)))
        elif u1 < tol:
            out.append(Terminal("polygonal", "polygonal", 0, (), m, float(r1)))
        else:
            out.append(Terminal(f"clustering {m}", "clustering", 0, (), m, float(r1)))
    return out


#: The width :func:`settle` and :func:`basins` compile unless given a :class:`jaxattn.Batch`.
SETTLE_BATCH = Batch(size=64)


def _silent(t, X, ctx=None):
    return jnp.zeros((), X.dtype)


def settle(system: System, X0: Float[ArrayLike, "B n d"], *, steps: int = 500, t1: float = 100.0,
           batch: Batch = SETTLE_BATCH, rtol: float = 1e-10, atol: float = 1e-12) -> Float[np.ndarray, "B n d"]:
    """End states ``[B, n, d]`` (float64) after ``steps`` maps or at time ``t1`` of the flow.

    ``batch`` (:class:`jaxattn.Batch`) as the drivers take it; maps run on the plain path (the classification
    reads float64 end states). A condition's end state does not depend on how the batch is split into calls.
    """
    X0 = jnp.asarray(X0, jnp.float64)
    if isinstance(system.kind, Dynamics):
        sim = simulate(system.model, X0, int(steps), dynamics=system.kind, alpha=system.alpha, beta=system.beta,
                       save=Save(every="last", observe=_silent), batch=dataclasses.replace(batch, path="plain"),
                       dtype=jnp.float64)
        return np.asarray(sim.final)
    assert isinstance(system.kind, Flow)
    sol = solve(system.model, X0, float(t1), flow=system.kind, beta=system.beta,
                save=Save(ts=np.asarray([float(t1)]), observe=_silent), batch=batch,
                rtol=rtol, atol=atol, dtype=jnp.float64, max_steps=200_000)
    final = np.array(sol.final)
    final[np.asarray(sol.result) != 0] = np.nan  # a failed solve is reported as not converged
    return final


@dataclasses.dataclass
class Basins:
    """Result of :func:`basins`."""

    terminals: list  # [num] Terminal
    table: list  # rows: group, count, fraction, ci_low, ci_high (most frequent first)
    num: int


def basins(system: System, num: int, n: int, key: PRNGKeyArray, *, chunk: int = 256, steps: int = 500,
           t1: float = 100.0, batch: Batch = SETTLE_BATCH, tol: float = 1e-7, progress=None,
           **classify_kw) -> Basins:
    """Run ``num`` random initial conditions (uniform on the sphere, condition ``i`` from
    ``fold_in(key, i)``) to their end, ``chunk`` at a time, and count where they end.

    The counts do not depend on ``chunk``: every condition is drawn and run the same way whatever
    call it falls in. Each row of the table gives the basin fraction with its Wilson 95% interval.
    """
    for name, v in (("num", num), ("n", n), ("chunk", chunk), ("steps", steps)):
        positive_int(name, v)
    terms: list = []
    for start in range(0, num, chunk):
        b = min(chunk, num - start)
        X0 = init_tokens(key, b, n, system.d, start=start, dtype=jnp.float64)
        final = settle(system, X0, steps=steps, t1=t1, batch=batch)
        ok = np.all(np.isfinite(final), axis=(1, 2))
        safe = np.where(ok[:, None, None], final, np.asarray(X0))
        tm = classify(system, safe / np.linalg.norm(safe, axis=-1, keepdims=True), tol=tol, **classify_kw)
        for i in np.flatnonzero(~ok):
            tm[i] = Terminal("not converged", "not converged", 0, (), 0, math.inf)
        terms += tm
        if progress:
            progress(f"{start + b}/{num} initial conditions")
    counts: dict = {}
    for t in terms:
        counts[t.group] = counts.get(t.group, 0) + 1
    table = []
    for g, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lo, hi = wilson(c, num)
        table.append({"end": g, "count": c, "fraction": c / num, "ci_low": lo, "ci_high": hi})
    return Basins(terminals=terms, table=table, num=num)
