"""One module per study of the papers; each composes the library's pieces and has the same public shape,
``Config`` and ``run`` (see :mod:`jaxattn.studies.skeleton`). ``StudyConfig`` and ``run_study`` are the
power-method study's names from before that shape (also ``jaxattn.StudyConfig`` / ``jaxattn.run_study``)."""

from jaxattn.studies import clusters, consensus, metastability, power_method, stability
from jaxattn.studies.power_method import StudyConfig, run_study

#: The studies by command name (``jaxattn analyze`` runs the power-method study).
STUDIES = {"analyze": power_method, "consensus": consensus, "clusters": clusters, "stability": stability,
           "metastability": metastability}

__all__ = ["STUDIES", "StudyConfig", "clusters", "consensus", "metastability", "power_method", "run_study",
           "stability"]
