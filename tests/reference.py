"""Plain NumPy reference for the discrete models (loops, no JAX), written from the equations of docs/models.md alone.

Weights follow the column convention: Q_h, K_h, V_h are [d_h, d], O_h is [d, d_h],
and token x_i is a column vector. Nothing here imports jaxattn.
"""

import math

import numpy as np


def mask_ok(i, j, causal, window):
    if causal and j > i:
        return False
    if window and abs(i - j) >= window:
        return False
    return True


def attention_probs(X, Q, K, scale, beta, causal, window, bq=None, bk=None, uniform=False):
    """A[h][i][j] by explicit loops."""
    n = X.shape[0]
    H = Q.shape[0]
    A = np.zeros((H, n, n))
    for h in range(H):
        for i in range(n):
            row = np.full(n, -np.inf)
            for j in range(n):
                if not mask_ok(i, j, causal, window):
                    continue
                if uniform:
                    row[j] = 0.0
                    continue
                qi = Q[h] @ X[i] + (bq[h] if bq is not None else 0.0)
                kj = K[h] @ X[j] + (bk[h] if bk is not None else 0.0)
                row[j] = beta * scale * float(qi @ kj)
            m = row[np.isfinite(row)].max()
            e = np.where(np.isfinite(row), np.exp(row - m), 0.0)
            A[h, i] = e / e.sum()
    return A


def attention_update(X, w, beta, biases=False, uniform=False):
    """Σ_h O_h Σ_j a^h_ij (V_h x_j + b^v_h) + b^o for every token i."""
    n, d = X.shape
    H = w["q"].shape[0]
    A = attention_probs(X, w["q"], w["k"], w["scale"], beta, w["causal"], w["window"],
                        w.get("bq") if biases else None, w.get("bk") if biases else None, uniform)
    out = np.zeros((n, d))
    for i in range(n):
        for h in range(H):
            acc = np.zeros(w["v"].shape[1])
            for j in range(n):
                vj = w["v"][h] @ X[j]
                if biases and w.get("bv") is not None:
                    vj = vj + w["bv"][h]
                acc += A[h, i, j] * vj
            out[i] += w["o"][h] @ acc
        if biases and w.get("bo") is not None:
            out[i] += w["bo"]
    return out, A


def normalize(y, kind, S=None, ln=None, eps=1e-12):
    if kind == "l2":
        return y / math.sqrt(float(y @ y))
    if kind == "ellipsoid":
        return y / math.sqrt(float(y @ S @ y))
    if kind == "none":
        return y
    mu = y.mean()
    var = ((y - mu) ** 2).mean()
    out = (y - mu) / math.sqrt(var + eps)
    if ln is not None:
        out = out * ln[0] + ln[1]
    return out


def step(X, w, alpha=1.0, beta=1.0, norm="l2", S=None, biases=False, uniform=False):
    """One D1/D3/D4/D5 step: x_i <- Norm(x_i + α Σ_h O_h Σ_j a_ij V_h x_j)."""
    upd, _ = attention_update(X, w, beta, biases, uniform)
    Y = np.empty_like(X)
    for i in range(X.shape[0]):
        Y[i] = normalize(X[i] + alpha * upd[i], norm, S)
    return Y


def simulate(X0, weight_sets, schedule, steps, **kw):
    """Trajectory [steps+1, n, d]; step k uses weight_sets[schedule[k % len(schedule)]]."""
    X = np.array(X0, dtype=np.float64)
    out = [X]
    for k in range(steps):
        X = step(X, weight_sets[schedule[k % len(schedule)]], **kw)
        out.append(X)
    return np.stack(out)
