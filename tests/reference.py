"""Plain NumPy reference for the discrete models (loops, no JAX), written from the equations of docs/models.md alone.

Weights follow the column convention: Q_h, K_h, V_h are [d_h, d], O_h is [d, d_h],
and token x_i is a column vector. Nothing here imports jaxattn.
"""

import math

import numpy as np


def mask_ok(i, j, causal, window):
    if causal and j > i:
        return False
    return not (window and abs(i - j) >= window)


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


# ---------------------------------------------------------------- FFN, affine LayerNorm and the whole block
def gelu(x, kind="gelu"):
    """Scalar GELU: the erf form ('gelu') or the tanh approximation ('gelu_new')."""
    if kind == "gelu":
        return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
    if kind in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "relu":
        return max(x, 0.0)
    raise ValueError(kind)


def layer_norm(y, w, b, eps):
    """Affine LayerNorm of one token: (y - mean) / sqrt(biased variance + eps) * w + b, by loops."""
    d = len(y)
    mu = sum(y) / d
    var = sum((t - mu) ** 2 for t in y) / d
    return np.array([(y[i] - mu) / math.sqrt(var + eps) * w[i] + b[i] for i in range(d)])


def ffn(y, w, act="gelu", biases=True):
    """W2 act(W1 y + b1) + b2 for one token, with W1: [m, d], W2: [d, m] (biases only when asked)."""
    m, d = w["w1"].shape
    h = np.zeros(m)
    for r in range(m):
        h[r] = sum(w["w1"][r, c] * y[c] for c in range(d)) + (w["b1"][r] if biases else 0.0)
        h[r] = gelu(h[r], act)
    out = np.zeros(d)
    for r in range(d):
        out[r] = sum(w["w2"][r, c] * h[c] for c in range(m)) + (w["b2"][r] if biases else 0.0)
    return out


def general_step(X, w, *, post=True, alpha=1.0, beta=1.0, norm="l2", use_ffn=False, biases=False, pre_ln=False,
                 drop_ln2=False, eps=1e-12, act="gelu"):
    """One block with the pieces between D1 and the faithful transformer block.

    post-norm: y = N1(x + α Attn(x)); with the FFN x' = N2(y + FFN(y)).
    pre-norm:  y = x + α Attn(N1(x) if pre_ln else x); x' = y + FFN(N2(y)) with the FFN, N2(y) without
    (unless drop_ln2). N is L2 ('l2') or the weight set's affine LayerNorm ('layernorm')."""
    def N(y, which):
        if norm == "layernorm":
            return layer_norm(y, w[f"ln{which}_w"], w[f"ln{which}_b"], eps)
        return normalize(y, norm)

    n = X.shape[0]
    H = np.array([N(X[i], 1) for i in range(n)]) if (not post and pre_ln) else X
    upd, _ = attention_update(H, w, beta, biases)
    Y = np.empty_like(X)
    for i in range(n):
        if post:
            y = N(X[i] + alpha * upd[i], 1)
            if use_ffn:
                y = N(y + ffn(y, w, act, biases), 2)
        else:
            y = X[i] + alpha * upd[i]
            if use_ffn:
                y = y + ffn(N(y, 2), w, act, biases)
            elif not drop_ln2:
                y = N(y, 2)
        Y[i] = y
    return Y


def general_simulate(X0, weight_sets, schedule, steps, **kw):
    """Trajectory [steps+1, n, d] of :func:`general_step`."""
    X = np.array(X0, dtype=np.float64)
    out = [X]
    for k in range(steps):
        X = general_step(X, weight_sets[schedule[k % len(schedule)]], **kw)
        out.append(X)
    return np.stack(out)
