"""The package face (``jaxattn/__init__.py``): small, every name resolves, re-exported ``X as X``, and the names
that left it (moved to their modules, or renamed) are gone rather than kept as aliases."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import jaxattn

#: Names that were on the face and left it: each now lives at the path given (relative to ``jaxattn.``), or was
#: renamed (a name of the face itself).
LEFT = {
    "save": "save_checkpoint", "StudyConfig": "PowerMethodConfig", "run_study": "studies.power_method.run",
    "KERNELS": "model.attention.ATTENTIONS", "Context": "dynamics.Context",
    "CriticalBeta": "analysis.gradients.CriticalBeta", "GradientSteer": "analysis.gradients.GradientSteer",
    "batch_observable": "analysis.gradients.batch_observable", "unshared": "analysis.gradients.unshared",
    "Embeddings": "model.params.Embeddings", "Layers": "model.params.Layers", "from_heads": "model.params.from_heads",
    "parse_mask": "model.params.parse_mask", "repeat_kv": "model.params.repeat_kv", "validate": "model.params.validate",
    "Form": "model.forms.Form", "Rope": "model.rope.Rope",
    "alignment_observables": "analysis.observables.alignment_observables",
    "alignment_tables": "analysis.observables.alignment_tables",
    "allowed": "model.attention.allowed", "attend": "model.attention.attend",
    "probabilities": "model.attention.probabilities",
    "block": "dynamics.discrete.block", "step": "dynamics.discrete.step",
    "layer_index": "dynamics.discrete.layer_index",
    "builtin_path": "io.checkpoints.builtin_path", "clusters": "analysis.clusters", "stability": "analysis.stability",
    "consensus_observables": "dynamics.observables.consensus_observables",
    "cumulative_products": "analysis.spectral.cumulative_products",
    "lyapunov_exponents": "analysis.spectral.lyapunov_exponents",
    "embed": "dynamics.faithful.embed", "forward": "dynamics.faithful.forward", "geometry": "dynamics.geometry",
    "prompts": "dynamics.prompts", "nn": "model.nn", "precompensate": "analysis.steering.precompensate",
    "symmetric_with_spectrum": "model.sampling.symmetric_with_spectrum",
}


def _resolve(path: str):
    parts = f"jaxattn.{path}".split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise AssertionError(path)


def test_the_face_is_small_and_resolves():
    assert len(jaxattn.__all__) <= 60, len(jaxattn.__all__)
    assert len(set(jaxattn.__all__)) == len(jaxattn.__all__)
    for name in jaxattn.__all__:
        assert getattr(jaxattn, name) is not None, name


def test_names_that_left_the_face_are_gone_and_live_in_their_modules():
    kept = [name for name in LEFT if hasattr(jaxattn, name)]
    assert not kept, f"still attributes of jaxattn (no aliases): {kept}"
    for name, home in LEFT.items():
        assert _resolve(home) is not None, (name, home)
        assert name not in jaxattn.__all__


def test_the_face_re_exports_as_diffrax_and_optax_do():
    """``from m import X as X`` (explicit re-exports for type checkers), one per name; nothing else is imported
    into the face but the version's metadata."""
    tree = ast.parse(Path(jaxattn.__file__).read_text())
    imported = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxattn"):
            for a in node.names:
                assert a.asname == a.name, f"from {node.module} import {a.name} as {a.asname}"
                imported[a.name] = node.module
    assert set(imported) | {"__version__"} == set(jaxattn.__all__)


def test_renamed_keywords_are_gone():
    """The attention kind is ``attention=`` everywhere (as in Dynamics and Flow); the analysis functions take a
    ``Batch`` as the drivers do."""
    import inspect

    from jaxattn.analysis import gradients
    from jaxattn.model import attention

    for fn in (attention.probabilities, attention.attend):
        params = inspect.signature(fn).parameters
        assert "attention" in params and "kernel" not in params, fn
    from jaxattn.analysis import directions, stability, steering

    for fn in (jaxattn.alignment, jaxattn.layer_sensitivity, jaxattn.critical_beta, gradients.batch_observable,
               gradients.mean_rho1, stability.settle, stability.basins, steering.entering_states,
               steering.steered_alignment, steering.steer_to_target, directions.direction_increments):
        params = inspect.signature(fn).parameters
        assert "batch" in params and "batch_size" not in params and "precision" not in params, fn
