"""Every study has one public shape: ``Config`` and ``run`` (that each leaves ``jax_enable_x64`` as it found it is
tested with its command: test_clusters, test_stability, test_consensus)."""

import inspect

import jax
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError
from jaxattn.studies import STUDIES, clusters, stability

# configurations of the model-free studies (refused before they run)
TINY = {
    "clusters": clusters.Config(n=3, n_1d=2, t1=0.5, num=2, table_n=[3], table_d=[2], table_beta=[1.0], good_d=[1],
                                good_samples=10, figures=False),
    "stability": stability.Config(tokens=[2], models=1, search=1, basin_num=2, basin_n=2, steps=5, t1=1.0,
                                  perturb_num=1, time="discrete", figures=False),
}


def test_every_study_has_the_same_public_shape():
    shape = inspect.signature(STUDIES["analyze"].run)
    for name, module in STUDIES.items():
        assert hasattr(module, "Config") and callable(module.Config().check), name
        sig = inspect.signature(module.run)
        assert list(sig.parameters) == list(shape.parameters), name
        assert [p.kind for p in sig.parameters.values()] == [p.kind for p in shape.parameters.values()], name
    assert STUDIES["analyze"].Config is ja.PowerMethodConfig and STUDIES["clusters"].Config is ja.ClustersConfig


def test_model_free_studies_refuse_a_model_and_model_studies_need_one(tmp_path):
    m = ja.random_model(jax.random.key(0), 4, 1)
    for name in ("clusters", "stability"):
        with pytest.raises(ConfigError, match=f"the {name} study builds its own models"):
            STUDIES[name].run(tmp_path / name, TINY[name], model=m)
    for name in ("analyze", "consensus"):
        with pytest.raises(ConfigError, match="study runs on a model"):
            STUDIES[name].run(tmp_path / name)
    assert not any(tmp_path.iterdir())  # refused before writing anything
