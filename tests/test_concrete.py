"""Facts about concrete arrays read once per array object (jaxattn.model.concrete): a hit only for the very same
live arrays, never for a NumPy array or a traced value, and every refusal of bad weights or states still made."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.dynamics import _runner
from jaxattn.errors import ConfigError
from jaxattn.model import concrete, params


@pytest.fixture
def off_host(monkeypatch):
    """Arrays taken as an accelerator's: in host memory (this CPU's) nothing is kept, since such an array may share
    its buffer with a NumPy array that changes in place."""
    monkeypatch.setattr(concrete, "_in_host_memory", lambda a: False)


def _counted():
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    return calls, compute


def test_a_fact_is_read_once_per_array_and_again_for_another(off_host):
    a, b = jnp.ones(3), jnp.ones(3)  # equal values, other objects
    calls, compute = _counted()
    assert concrete.fact("k", [a], compute) == 1
    assert concrete.fact("k", [a], compute) == 1  # the same array: kept
    assert concrete.fact("k", [b], compute) == 2  # another array with the same values: read
    assert concrete.fact("other kind", [a], compute) == 3  # another fact of the same array: read
    assert concrete.fact("k", [a, b], compute) == 4  # a set of arrays is its own key
    assert concrete.fact("k", [a, b], compute) == 4
    assert len(calls) == 4


def test_a_fact_dies_with_its_array(off_host):
    a = jnp.arange(5.0)
    concrete.fact("dies", [a], lambda: True)
    before = concrete.known()
    del a
    gc.collect()
    assert concrete.known() == before - 1


def test_numpy_traced_and_deleted_arrays_are_never_kept(off_host):
    calls, compute = _counted()
    x = np.ones(3)  # mutable: its values may change between calls
    concrete.fact("np", [x], compute)
    concrete.fact("np", [x], compute)
    assert len(calls) == 2

    def f(y):
        concrete.fact("traced", [y], compute)
        return y

    jax.jit(f)(jnp.ones(2))
    jax.jit(f)(jnp.ones(2))  # traced once (jit's own cache), computed at that trace
    a = jnp.ones(4)
    a.delete()
    n = len(calls)
    concrete.fact("deleted", [a], compute)
    concrete.fact("deleted", [a], compute)
    assert len(calls) == n + 2


def test_arrays_in_host_memory_are_read_every_time():
    """On a CPU, jax.device_put may alias a NumPy buffer: NaN written into the buffer after a run must still be
    refused at the next run of the same array (it ran, and ended non-finite, while the facts were kept)."""
    model = ja.random_model(jax.random.key(0), 4, heads=1, depth=1)
    raw = np.empty(3 * 5 * 4 + 16, np.float32)  # a 64-byte aligned buffer: what the CPU client shares, not copies
    start = (-raw.ctypes.data % 64) // 4
    buf = raw[start:start + 60].reshape(3, 5, 4)
    buf[:] = np.asarray(ja.init_tokens(jax.random.key(1), 3, 5, 4))
    X0 = jax.device_put(buf)
    calls, compute = _counted()
    concrete.fact("host", [X0], compute)
    concrete.fact("host", [X0], compute)
    assert len(calls) == 2
    ja.simulate(model, X0, 2)
    buf[0, 0, :] = np.nan
    if not np.isnan(np.asarray(X0)).any():
        pytest.skip("this jaxlib copied the buffer: nothing is shared to go stale")
    with pytest.raises(ConfigError, match="non-finite"):
        ja.simulate(model, X0, 2)


@pytest.mark.parametrize("accelerator", [False, True])
def test_bad_weights_and_states_are_refused_whatever_ran_before(accelerator, request):
    """A model and states that passed stay passed; NaN put in a new array (models are immutable: ``replace``) is
    refused, however often the good ones ran before, with the facts kept (as on an accelerator) or not."""
    if accelerator:
        request.getfixturevalue("off_host")
    model = ja.random_model(jax.random.key(0), 4, heads=1, depth=1)
    X0 = ja.init_tokens(jax.random.key(1), 3, 5, 4)
    ja.simulate(model, X0, 2)
    bad = model.replace(layers=model.layers.replace(q=model.layers.q.at[0, 0, 0, 0].set(jnp.nan)))
    with pytest.raises(ConfigError, match="non-finite"):
        ja.simulate(bad, X0, 2)
    with pytest.raises(ConfigError, match="non-finite"):
        ja.simulate(model, X0.at[0, 0, 0].set(jnp.inf), 2)
    with pytest.raises(ConfigError, match="zero"):
        ja.simulate(model, X0.at[1, 2].set(0.0), 2)


def test_a_model_run_again_is_not_read_again(monkeypatch, off_host):
    """What the cache is for: on a GPU every read of a weight or state flag is a transfer that the run waits for.
    Counted here: a second call with the same model and states reads neither."""
    model = ja.random_model(jax.random.key(0), 4, heads=1, depth=1)
    X0 = ja.init_tokens(jax.random.key(1), 3, 5, 4)
    counts = {"weights": 0, "states": 0}
    real_w, real_s = params._device_flags, _runner._read_state_flags

    def weights(named):
        counts["weights"] += 1
        return real_w(named)

    def states(X):
        counts["states"] += 1
        return real_s(X)

    monkeypatch.setattr(params, "_device_flags", weights)
    monkeypatch.setattr(_runner, "_read_state_flags", states)
    first = ja.simulate(model, X0, 3)
    assert counts["states"] == 1 and counts["weights"] <= 1  # the weights may have been read when the model was made
    counts.update(weights=0, states=0)
    again = ja.simulate(model, X0, 3, beta=2.0)
    assert counts == {"weights": 0, "states": 0}
    assert not np.array_equal(first.final, again.final)  # another beta, the same cached facts
