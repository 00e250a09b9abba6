"""The unnormalised kernel's blow-up, tabulated: the study behind the reproductions page's blow-up table.

The computation is :mod:`jaxattn.analysis.blowup`; this module runs it for the initial distributions the
clustering studies use and writes ``blowup.csv``, ``single_token.csv``, ``paper_setting.csv`` and
``blowup.png`` (atomically; float64 in a scope, the caller's JAX setting unchanged).
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.blowup import (
    CHECKS,
    blowup_times,
    comparison_bound,
    initial_tokens,
    paper_setting,
    single_token_time,
)
from jaxattn.analysis.stats import wilson
from jaxattn.io.results import atomic_write_text
from jaxattn.studies import plots
from jaxattn.studies.skeleton import csv_text

#: (name, V, initial distribution) of the blow-up table, d = 2.
SETTINGS = (
    ("V=I", "identity", "gaussian"),
    ("V=I", "identity", "uniform1"),
    ("V=I", "identity", "uniform5"),
    ("V=I", "identity", "sphere"),
    ("V=I", "identity", "small"),
    ("V=-I", "minus_identity", "gaussian"),
)


def _V(kind: str, d: int) -> np.ndarray:
    return {"identity": np.eye(d), "minus_identity": -np.eye(d)}[kind]


def study(out: Path, num: int = 256, n: int = 20, d: int = 2, beta: float = 1.0, t_max: float = 20.0,
          seed: int = 0, reduced: bool = False, figures: bool = True) -> list[dict]:
    """Blow-up times of the unnormalised flow for every setting of :data:`SETTINGS` (``num`` draws of ``n``
    tokens in dimension ``d``) at two tolerances and two score caps, the comparison bound, the one-token
    closed form, and the paper's own setting with the softmax kernel (its code normalises the rows):
    ``blowup.csv``, ``single_token.csv``, ``paper_setting.csv``, ``blowup.png``."""
    with jax.enable_x64(True):  # float64 for this call only: the caller's setting stays
        return _study(out, num=num, n=n, d=d, beta=beta, t_max=t_max, seed=seed, reduced=reduced, figures=figures)


def _study(out: Path, num: int, n: int, d: int, beta: float, t_max: float, seed: int, reduced: bool,
           figures: bool) -> list[dict]:
    out = Path(out)
    rows, times = [], {}
    key = jax.random.key(seed)
    for idx, (vname, vkind, init) in enumerate(SETTINGS):
        x0 = initial_tokens(jax.random.fold_in(key, idx), init, num, n, d)
        V = _V(vkind, d)
        (rtol_a, cap_a), (rtol_b, cap_b) = CHECKS
        t_a = blowup_times(x0, V, beta=beta, t_max=t_max, score_cap=cap_a, rtol=rtol_a)
        t_b = blowup_times(x0, V, beta=beta, t_max=t_max, score_cap=cap_b, rtol=rtol_b)
        blown = np.isfinite(t_b)
        times[init if vkind == "identity" else ""] = t_b
        failed = int(np.isnan(t_b).sum())
        both = np.isfinite(t_a) & blown
        rel = float(np.max(np.abs(t_a[both] - t_b[both]))) if both.any() else float("nan")
        u0 = np.max(np.sum(np.asarray(x0) ** 2, -1), -1)  # the largest initial squared norm per draw
        bounds = np.array([comparison_bound(float(u), n, beta) for u in u0]) if vkind == "identity" else \
            np.full(num, np.inf)
        within = blown & np.isfinite(bounds)
        lo, hi = wilson(int(blown.sum()), num)
        frac_before = {h: float(np.mean(t_b < h)) for h in (1.0, 5.0, 15.0)}
        rows.append({
            "setting": f"{vname}, {init}", "V": vname, "init": init, "n": n, "d": d, "beta": beta, "draws": num,
            "t_max": t_max, "blown_up": int(blown.sum()), "fraction": blown.mean(), "ci_low": lo, "ci_high": hi,
            "solver_failures": failed,
            "t_median": float(np.median(t_b[blown])) if blown.any() else float("inf"),
            "t_min": float(t_b[blown].min()) if blown.any() else float("inf"),
            "t_max_seen": float(t_b[blown].max()) if blown.any() else float("inf"),
            "before_1": frac_before[1.0], "before_5": frac_before[5.0], "before_15": frac_before[15.0],
            "bound_applies": float(np.mean(np.isfinite(bounds))),
            "bound_holds": float(np.mean(t_b[within] <= bounds[within] * (1 + 1e-6))) if within.any() else float("nan"),
            "solver_abs_diff": rel,
        })
    atomic_write_text(out / "blowup.csv", csv_text(rows, digits=6))

    # one token: the measured time against the closed form E1(β u0)/2 (caps included)
    single = []
    for u0 in (0.1, 0.5, 1.0, 2.0):
        x0 = jnp.zeros((1, 1, d)).at[0, 0, 0].set(math.sqrt(u0))
        meas = float(blowup_times(x0, np.eye(d), beta=beta, t_max=t_max, score_cap=CHECKS[1][1], rtol=CHECKS[1][0])[0])
        exact = single_token_time(u0, beta, score_cap=CHECKS[1][1])
        single.append({"u0": u0, "measured": meas, "closed_form": exact, "rel_error": abs(meas - exact) / exact,
                       "blowup_time": single_token_time(u0, beta)})
    atomic_write_text(out / "single_token.csv", csv_text(single, digits=6))

    # as many draws as each setting above: at a quarter of them (16 of the page's 64) even 16/16 could not confirm
    # "almost all" (the 95% interval starts at 0.806); the setting costs seconds
    paper = paper_setting(jax.random.fold_in(key, 99), num=max(num, 2), n=n)
    atomic_write_text(out / "paper_setting.csv", csv_text([paper], digits=6))
    if figures:
        _figure(out / "blowup.png", {k: v for k, v in times.items() if k}, num)
    return rows



def _figure(path: Path, times: dict[str, np.ndarray], num: int) -> None:
    """Empirical distribution of the blow-up time per initial distribution (V = I), log time axis."""
    plt = plots.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for init, t in times.items():
        t = np.sort(t[np.isfinite(t)])
        if t.size:
            ax.step(t, np.arange(1, t.size + 1) / num, where="post", label=init)
    ax.set_xscale("log")
    ax.set_xlabel("blow-up time t* (unnormalised kernel, V = I, d = 2)")
    ax.set_ylabel("fraction blown up by t*")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plots.save(fig, path, dpi=80)
