"""Run by tests/test_precision.py in a process whose XLA dumps every program it compiles: each public function
that multiplies float32 matrices, called as a user would (eagerly, and under the caller's own ``jit``), and last a
control, one product at XLA's default precision in a program of its own, which the test's scan must find."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxattn as ja

key = jax.random.key(0)
d, f = 8, 16
m = ja.random_model(key, d, heads=2, depth=2, biases=True)
rng = np.random.default_rng(0)


def w(*shape):
    return jnp.asarray(rng.normal(size=shape) * 0.1, jnp.float32)


G = m.layers.q.shape[0]
full = m.replace(  # post-LN BERT-like blocks with an FFN and embeddings with ALBERT's projection
    layers=m.layers.replace(ln1_w=1 + w(G, d), ln1_b=w(G, d), ln2_w=1 + w(G, d), ln2_b=w(G, d), w1=w(G, f, d),
                            b1=w(G, f), w2=w(G, d, f), b2=w(G, d)),
    embeddings=ja.model.params.Embeddings(word=w(11, 4), position=w(6, 4), proj_w=w(d, 4), proj_b=w(d)))
X0 = ja.init_tokens(key, 3, 4, d)
X = X0[0]
ids = np.array([1, 5, 2, 7])

calls = {
    "simulate": lambda: ja.simulate(m, X0, 2),
    "simulate faithful": lambda: ja.simulate(full, X0, 2, dynamics=ja.FAITHFUL),
    "simulate_one": lambda: ja.simulate_one(m, X, 2),
    "solve": lambda: ja.solve(m, X0, 0.5),
    "repeated_passes": lambda: ja.repeated_passes(full, X0, 2),
    "forward": lambda: ja.dynamics.faithful.forward(full, X),
    "hidden_states": lambda: ja.hidden_states(full, ids),
    "embed": lambda: ja.dynamics.faithful.embed(full, ids),
    "velocity": lambda: ja.velocity(m, X),
    "step": lambda: ja.dynamics.discrete.step(X, 0, m),
    "step under jit": lambda: jax.jit(lambda x: ja.dynamics.discrete.step(x, 0, m))(X),
    "attend": lambda: ja.model.attention.attend(X, m.layers.take(0)),
    "probabilities": lambda: ja.model.attention.probabilities(X, m.layers.take(0)),
    "layer_sensitivity": lambda: ja.layer_sensitivity(m, X0),
    "alignment": lambda: ja.alignment(m, X0, 2),
    "batch_observable": lambda: jax.grad(ja.analysis.gradients.batch_observable(m, X0, 2))(1.0),
    "critical_beta": lambda: ja.critical_beta(m, X0, 0.9, steps=2, max_steps=3),
    "sweep": lambda: ja.sweep(m, num_init=3, n=4, steps=2, progress=False),
}


def deliberately_default(x):  # the control: a product at XLA's default precision, which the scan must find
    return jnp.einsum("ij,jk->ik", x, x.T)


calls["a product at XLA's default precision"] = lambda: jax.jit(deliberately_default)(X)
for name, call in calls.items():
    jax.block_until_ready(call())
    print("ran", name, flush=True)
