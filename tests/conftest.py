"""Strict test set-up: float64 on, strict dtype promotion, several CPU devices, offline Hugging Face,
warnings are errors for our package."""

import os
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# several CPU devices for the sharding tests (before jax is imported); subprocesses that must run on
# one device drop XLA_FLAGS from their environment
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_configure(config):
    config.addinivalue_line("markers", "strict_dtypes: run under jax_numpy_dtype_promotion='strict' (no implicit "
                                       "promotion between dtypes: a mixed expression is an error, not an upcast)")
    config.addinivalue_line("markers", "requires_cpu(reason): needs JAX's CPU backend (the eight devices forced above, "
                                       "the CPU's block width); skipped with the reason on a GPU or TPU")


def cpu_only_skips(items, backend: str) -> None:
    """Skip the tests marked ``requires_cpu`` when JAX's default backend is not the CPU (``make gpu-check``)."""
    if backend == "cpu":
        return
    for item in items:
        m = item.get_closest_marker("requires_cpu")
        if m is not None:
            why = m.args[0] if m.args else "a CPU-only feature"
            item.add_marker(pytest.mark.skip(reason=f"needs the CPU backend ({why}); this is {backend}"))


def pytest_collection_modifyitems(config, items):
    cpu_only_skips(items, jax.default_backend())


@pytest.fixture(autouse=True)
def _strict_dtypes(request):
    """Strict dtype promotion for the tests marked ``strict_dtypes``. Not global yet: the attention mask
    (``attention.allowed``: int64 positions against the int32 window) mixes integer dtypes, so every
    simulation fails under it."""
    if request.node.get_closest_marker("strict_dtypes") is None:
        yield
        return
    with jax.numpy_dtype_promotion("strict"):
        yield


@pytest.fixture
def gpt_neo_exact(monkeypatch):
    """transformers' GPT-Neo upcasts q and k to float32 even in a float64 model; this makes that
    upcast a float64 one so the HF reference is exact (only the module's own `torch.float32`)."""
    import torch
    from transformers.models.gpt_neo import modeling_gpt_neo as m

    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    proxy.float32 = torch.float64
    monkeypatch.setattr(m, "torch", proxy)
