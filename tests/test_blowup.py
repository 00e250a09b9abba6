"""The unnormalised kernel's finite-time blow-up (jaxattn.analysis.blowup) and the Q/K clouds' flow."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxattn.analysis import blowup, qk_cloud


def test_one_token_blows_up_at_the_closed_form_time():
    # u' = 2u e^u for one token: the score reaches the cap at (E1(u0) − E1(cap))/2, at any tolerance
    u0 = np.array([0.5, 1.0, 2.0])
    x0 = np.zeros((3, 1, 2))
    x0[:, 0, 0] = np.sqrt(u0)
    for rtol, cap in blowup.CHECKS:
        t = blowup.blowup_times(x0, np.eye(2), score_cap=cap, rtol=rtol)
        exact = np.array([blowup.single_token_time(u, score_cap=cap) for u in u0])
        np.testing.assert_allclose(t, exact, rtol=100 * rtol)
    # past the cap the time left is tiny: the cap changes the time by far less than the time itself
    assert blowup.single_token_time(1.0) - blowup.single_token_time(1.0, score_cap=22.0) < 1e-10


@pytest.mark.e2e
def test_comparison_bound_and_the_sign_of_v():
    x0 = np.asarray(jax.random.normal(jax.random.key(3), (4, 6, 2), jnp.float64))
    t = blowup.blowup_times(x0, np.eye(2), score_cap=22.0, rtol=1e-10)
    assert np.all(np.isfinite(t)) and np.all(t < 1.0)
    bounds = [blowup.comparison_bound(float(u), 6) for u in (x0 ** 2).sum(-1).max(-1)]
    for ti, b in zip(t, bounds, strict=True):
        assert ti <= b * (1 + 1e-6) or math.isinf(b)
    # V = -I: growth at most linear, no blow-up by t = 20
    assert np.all(np.isinf(blowup.blowup_times(x0, -np.eye(2), t_max=20.0, score_cap=22.0)))
    assert math.isinf(blowup.comparison_bound(1e-3, 20))  # below the constant: no bound


@pytest.mark.e2e
def test_rescaled_softmax_field_is_the_papers():
    key = jax.random.key(0)
    z = jax.random.normal(key, (5, 2), jnp.float64)
    V, Q = (np.asarray(m) for m in jax.random.uniform(jax.random.key(1), (2, 2, 2), jnp.float64))
    K = np.eye(2)
    t = 0.7
    E = np.asarray(jax.scipy.linalg.expm(t * jnp.asarray(V)))
    zn = np.asarray(z)
    x = zn @ E.T
    S = (x @ Q.T) @ (x @ K.T).T
    P = np.exp(S - S.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    want = np.stack([sum(P[i, j] * V @ (zn[j] - zn[i]) for j in range(5)) for i in range(5)])
    np.testing.assert_allclose(np.asarray(qk_cloud.field(t, z, (V, Q, K, 1.0))), want, rtol=1e-12, atol=1e-12)
