"""Every study has one public shape (``Config`` and ``run``) and leaves the caller's JAX settings as it found them."""

import inspect

import jax
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError
from jaxattn.studies import STUDIES, clusters, consensus, stability

# the smallest runs of the model-free studies (seconds)
TINY = {
    "clusters": clusters.Config(n=3, n_1d=2, t1=0.5, num=2, table_n="3", table_d="2", table_beta="1", good_d="1",
                                good_samples=10, figures=False),
    "stability": stability.Config(tokens="2", models=1, search=1, basin_num=2, basin_n=2, steps=5, t1=1.0,
                                  perturb_num=1, time="discrete", figures=False),
}


def test_every_study_has_the_same_public_shape():
    shape = inspect.signature(STUDIES["analyze"].run)
    for name, module in STUDIES.items():
        assert hasattr(module, "Config") and callable(module.Config().check), name
        sig = inspect.signature(module.run)
        assert list(sig.parameters) == list(shape.parameters), name
        assert [p.kind for p in sig.parameters.values()] == [p.kind for p in shape.parameters.values()], name
    assert STUDIES["analyze"].Config is ja.StudyConfig and STUDIES["clusters"].Config is ja.ClustersConfig


def test_model_free_studies_refuse_a_model_and_model_studies_need_one(tmp_path):
    m = ja.random_model(jax.random.key(0), 4, 1)
    for name in ("clusters", "stability"):
        with pytest.raises(ConfigError, match=f"the {name} study builds its own models"):
            STUDIES[name].run(tmp_path / name, TINY[name], model=m)
    for name in ("analyze", "consensus"):
        with pytest.raises(ConfigError, match="study runs on a model"):
            STUDIES[name].run(tmp_path / name)
    assert not any(tmp_path.iterdir())  # refused before writing anything


@pytest.fixture
def x64_off():
    """The user's default: ``jax_enable_x64`` off (the tests' conftest turns it on), restored afterwards."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("name", ["clusters", "stability"])
def test_a_float64_study_leaves_x64_as_it_was(name, x64_off, tmp_path):
    """The studies switched jax_enable_x64 on for the rest of the process; now they enable it in a scope."""
    say = []
    tables = STUDIES[name].run(tmp_path / name, TINY[name], progress=say.append)
    assert jax.config.jax_enable_x64 is False
    assert tables and say  # it ran, in float64 (the studies refuse nothing here), with its stage messages
    # and so does the earlier name
    STUDIES[name].run_study(tmp_path / f"{name}_again", TINY[name])
    assert jax.config.jax_enable_x64 is False


def test_the_float64_consensus_study_leaves_x64_as_it_was(x64_off, tmp_path):
    pytest.importorskip("transformers")
    from . import hf_models

    folder = tmp_path / "gpt2"
    hf_models.build("gpt2", folder)
    model = ja.load(ja.convert(str(folder), str(folder / "gpt2.safetensors")))
    cfg = consensus.Config(passes=1, prompts=2, tokens=3, dtype="float64", synthetic_num=2, synthetic_n=3, t1=1.0,
                           figures=False)
    tables = consensus.run(tmp_path / "c", cfg, model=model)
    assert jax.config.jax_enable_x64 is False
    assert len(tables["summary"]) == 4
