"""A long-lived process (a notebook, a sweep over many shapes) keeps every program JAX compiles, each a few MiB and
dozens of memory maps, for as long as the process lives: a new shape must cost the run's own program, not a handful
of small ones around it (``benchmarks/shape_memory.py`` measures the memory and the maps; ``docs/faq.md`` says when
to call ``jax.clear_caches()``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import jax
import numpy as np
import pytest

import jaxattn as ja


@contextlib.contextmanager
def compiled() -> Iterator[list[str]]:
    """The programs compiled inside the block, by name (``jit(_run)``), as ``jax.log_compiles`` reports them (a
    program found in the persistent compilation cache is reported too: it is kept in memory all the same)."""
    names: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Compiling "):
                names.append(message.split()[1])

    handler = Seen(level=logging.DEBUG)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            yield names
    finally:
        logger.removeHandler(handler)


@pytest.mark.e2e
@pytest.mark.parametrize("batch", [8, 5])  # a whole lane block; a batch padded to it
def test_a_new_shape_compiles_the_run_alone(batch):
    """``ja.simulate`` at a new shape compiled five to seven programs, where a plain ``jax.jit`` compiles one: the
    check of X0's values, the padding of the batch (two), the removal of the padding (one per output) and the
    count of non-finite conditions (two). Now the padding is inside the run's program and the checks read host
    memory in place: one program per new shape (on a CPU; an accelerator reduces its arrays where they live)."""
    model = ja.random_model(jax.random.key(0), d=6, heads=2, depth=2)
    ja.simulate(model, ja.init_tokens(jax.random.key(1), 3, 4, 6), 2)  # what every call shares (its scalars)
    X0 = ja.init_tokens(jax.random.key(2), batch, 13 + batch, 6)  # shapes no other test runs
    with compiled() as names:
        res = ja.simulate(model, X0, 2, batch=ja.Batch(size=8))
    assert names == ["jit(_run)"], names
    assert res.final.shape == (batch, 13 + batch, 6) and bool(np.all(np.asarray(res.ok)))


@pytest.mark.e2e
def test_padding_inside_the_program_changes_no_bit():
    """Conditions padded to a block inside the run's program give the bits of the same conditions in a whole
    block (a condition's numbers do not depend on its batch at a fixed width)."""
    model = ja.random_model(jax.random.key(0), d=6, heads=2, depth=3)
    X0 = ja.init_tokens(jax.random.key(3), 8, 5, 6)
    whole = ja.simulate(model, X0, 3, batch=ja.Batch(size=8))
    part = ja.simulate(model, X0[:5], 3, batch=ja.Batch(size=8))
    assert np.asarray(part.final).tobytes() == np.asarray(whole.final)[:5].tobytes()
    for k in whole.observables:
        assert np.asarray(part.observables[k]).tobytes() == np.asarray(whole.observables[k])[:5].tobytes()


@pytest.mark.e2e
def test_non_finite_conditions_are_still_counted_and_flagged():
    """The count of non-finite conditions now read in place on the host: the same warning, the same flags."""
    model = ja.random_model(jax.random.key(0), d=6, heads=2, depth=2)
    X0 = ja.init_tokens(jax.random.key(4), 4, 3, 6)
    with pytest.warns(ja.NonFiniteWarning, match="^4 of 4 conditions reached non-finite states"):
        res = ja.simulate(model, X0, 2, alpha=1e30, beta=1e30, dynamics=ja.Dynamics(norm="none"))
    assert not np.asarray(res.ok).any()
