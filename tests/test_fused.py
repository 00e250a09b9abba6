"""The attention of a few tokens in one kernel (jaxattn.model.fused): Pallas' interpreter runs on this CPU the kernel an
NVIDIA GPU compiles through Triton, checked against a NumPy softmax, against the XLA arrangement it replaces inside
``attend`` (forms, masks, biases, grouped-query heads), and through ``grad`` and ``jacfwd``. The compile tier
(tests/test_compile.py) holds what it does to W1's H100 program. On an NVIDIA GPU (``make gpu-check``'s suite stage)
the same tests run the kernel Triton compiled."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.model import attention, forms, fused
from jaxattn.model.backend import arranged_as


def numpy_attention(q, k, v, heads, bias=None):
    """Per head ``softmax(q_h k_hᵀ + bias) v_h`` in float64 NumPy, heads side by side in the columns."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    n, hd = q.shape
    w = hd // heads
    out = np.empty((n, hd))
    for h in range(heads):
        c = slice(h * w, (h + 1) * w)
        s = q[:, c] @ k[:, c].T + (0.0 if bias is None else np.asarray(bias, np.float64))
        e = np.exp(s - s.max(1, keepdims=True))
        out[:, c] = (e / e.sum(1, keepdims=True)) @ v[:, c]
    return out


def _qkv(n, hd, seed=0, B=None):
    rng = np.random.default_rng(seed)
    shape = (n, hd) if B is None else (B, n, hd)
    return [jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(3)]


@pytest.mark.parametrize("mask", [None, "causal", "window"])
@pytest.mark.parametrize("n,heads,width", [(16, 1, 16), (32, 4, 16), (64, 2, 32)])
def test_the_kernel_is_the_softmax_attention_of_every_head(n, heads, width, mask):
    """The kernel (Pallas' interpreter on a CPU, Triton on an NVIDIA GPU) against NumPy in float64, from the same
    float32 inputs."""
    q, k, v = _qkv(n, heads * width, seed=n + heads)
    ok = {None: None, "causal": attention.allowed(n, 1.0, 0), "window": attention.allowed(n, 0.0, 3)}[mask]
    bias = None if ok is None else jnp.where(ok, 0.0, -jnp.inf).astype(jnp.float32)
    got = np.asarray(jax.jit(lambda q, k, v: fused.softmax_attention(q, k, v, heads, bias=bias))(q, k, v))
    want = numpy_attention(q, k, v, heads, bias)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(fused.reference(q, k, v, bias, heads)), want, rtol=2e-5, atol=2e-5)


def test_a_batch_is_one_program_per_configuration_under_nested_vmaps():
    """``vmap`` over conditions, and over a sweep's second axis, gives each configuration its own program."""
    q, k, v = _qkv(32, 32, B=6)
    q2, k2, v2 = (a.reshape(2, 3, 32, 32) for a in (q, k, v))
    f = jax.vmap(jax.vmap(lambda q, k, v: fused.softmax_attention(q, k, v, 2)))
    got = np.asarray(jax.jit(f)(q2, k2, v2)).reshape(6, 32, 32)
    for b in range(6):
        np.testing.assert_allclose(got[b], numpy_attention(q[b], k[b], v[b], 2), rtol=2e-5, atol=2e-5)


def test_an_overflowing_score_is_nan_never_a_finite_weight():
    """Scores that overflow float32 give NaN rows (``inf - inf``), as XLA's softmax does: a blown-up run is read
    as NaN, never as consensus."""
    q, k, v = _qkv(16, 16)
    q = q.at[3].set(3e38)
    got = np.asarray(fused.softmax_attention(q, k * 1e3, v, 1))
    assert np.isnan(got[3]).all()
    assert np.isfinite(np.delete(got, 3, axis=0)).all()


@pytest.mark.parametrize("n,width,dtype,precision,ok", [
    (32, 16, jnp.float32, None, True), (128, 128, jnp.float32, "highest", True),
    (32, 16, jnp.float32, "tensorfloat32", True), (32, 16, jnp.float32, "bfloat16", False),
    (8, 16, jnp.float32, None, False), (24, 16, jnp.float32, None, False), (256, 16, jnp.float32, None, False),
    (32, 8, jnp.float32, None, False), (32, 2, jnp.float32, None, False), (32, 16, jnp.float64, None, False)])
def test_the_kernel_applies_only_where_triton_takes_it_exactly(n, width, dtype, precision, ok):
    """Powers of two from 16 to 128 (Triton's blocks, its smallest product), float32 at full or TF32 precision; the
    rest (float64, bfloat16 rounding, the papers' d = 2 sphere) stays with XLA, and the kernel refuses it."""
    assert fused.applies(n, 2, width, dtype, precision) is ok
    if not ok:
        q = jnp.zeros((n, 2 * width), dtype)
        with pytest.raises(ValueError, match="does not take"), jax.default_matmul_precision(precision or "highest"):
            fused.softmax_attention(q, q, q, 2, precision=precision)


def _model(name):
    key = jax.random.key(3)
    return {
        "w1-shaped": lambda: ja.random_model(key, 64, heads=4, depth=2, shared=False, dtype=jnp.float32),
        "causal-biases": lambda: ja.random_model(key, 32, heads=2, mask="causal", biases=True, dtype=jnp.float32),
        "local-window": lambda: ja.random_model(key, 32, heads=2, mask="local:4", dtype=jnp.float32),
        "sphere-d16": lambda: ja.random_model(key, 16, weights="identity", value="identity", scale=1.0,
                                              dtype=jnp.float32),
        "grouped-query": lambda: _grouped(ja.random_model(key, 64, heads=4, dtype=jnp.float32)),
    }[name]()


def _grouped(model):
    """``model`` with two key/value heads for its four query heads (grouped-query attention)."""
    lay = model.layers
    return eqx.tree_at(lambda m: (m.layers.k, m.layers.v), model, (lay.k[:, :2], lay.v[:, :2]))


def _update(model, X, arrangement, form=None, beta=1.5):
    lw = model.layers.take(0)
    form = forms.choose(model, X.shape[1]) if form is None else form
    f = jax.vmap(lambda X: attention.attend(X, lw, beta, biases=True, form=form))
    with arranged_as(arrangement):
        return jax.jit(f)(X), jax.make_jaxpr(f)(X).pretty_print()


@pytest.mark.parametrize("name", ["w1-shaped", "causal-biases", "local-window", "sphere-d16", "grouped-query"])
def test_a_gpus_attention_is_the_kernel_and_equals_xlas(name):
    """In a GPU's arrangement ``attend`` runs the kernel (its pallas_call is in the program) and gives XLA's update
    to float32 round-off; with ``Form(kernel=False)`` it does not run it."""
    model = _model(name)
    X = ja.init_tokens(jax.random.key(4), 5, 32, model.d_model).astype(jnp.float32)
    form = forms.choose(model, 32)
    assert form.scores == form.values == "heads" and form.kernel
    got, program = _update(model, X, "gpu", form)
    want, plain = _update(model, X, "cpu", form)
    assert "pallas_call" in program and "pallas_call" not in plain
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=3e-5, atol=3e-5 * float(jnp.abs(want).max()))
    off = forms.Form(**{**{f: getattr(form, f) for f in ("scores", "values", "identity", "masked")}, "kernel": False})
    xla, program = _update(model, X, "gpu", off)
    assert "pallas_call" not in program
    np.testing.assert_allclose(np.asarray(xla), np.asarray(want), rtol=3e-5, atol=3e-5 * float(jnp.abs(want).max()))


def test_float64_and_the_bilinear_form_stay_with_xla():
    """Where the kernel does not apply (float64; the papers' one full-rank head, whose bilinear form has no
    projections) a GPU's arrangement is XLA's, exact to float64 round-off."""
    model = ja.random_model(jax.random.key(5), 64, heads=4, dtype=jnp.float64)
    X = ja.init_tokens(jax.random.key(6), 3, 32, 64).astype(jnp.float64)
    got, program = _update(model, X, "gpu")
    want, _ = _update(model, X, "cpu")
    assert "pallas_call" not in program
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13, atol=1e-13)
    full = ja.random_model(jax.random.key(5), 16, dtype=jnp.float32)
    assert forms.choose(full, 32).scores == "bilinear"
    assert "pallas_call" not in _update(full, ja.init_tokens(jax.random.key(6), 2, 32, 16).astype(jnp.float32),
                                        "gpu")[1]


def test_derivatives_through_the_kernel_are_xlas():
    """``grad`` (with respect to the tokens and the weights) and ``jacfwd`` see the plain arithmetic the kernel
    replaces (its custom JVP), so they equal the CPU arrangement's to float32 round-off."""
    model = _model("causal-biases")
    lw = model.layers.take(0)
    form = forms.choose(model, 16)
    X = ja.init_tokens(jax.random.key(7), 2, 16, 32).astype(jnp.float32)
    w = jnp.asarray(np.random.default_rng(8).normal(size=X.shape), jnp.float32)

    def loss(X, lw):
        return jnp.sum(jax.vmap(lambda X: attention.attend(X, lw, 2.0, biases=True, form=form))(X) * w)

    def derivatives(arrangement):
        with arranged_as(arrangement):
            gX, gw = jax.jit(jax.grad(loss, argnums=(0, 1)))(X, lw)
            J = jax.jacfwd(lambda x: attention.attend(x, lw, 2.0, biases=True, form=form))(X[0])
        return gX, gw.q, gw.bv, J

    for got, want in zip(derivatives("gpu"), derivatives("cpu"), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4 * float(jnp.abs(want).max()))
