"""One module per study of the papers; each composes the library's pieces and has the same public shape,
``Config`` and ``run`` (see :mod:`jaxattn.studies.skeleton`): e.g. ``jaxattn.studies.power_method.run(out_dir,
jaxattn.PowerMethodConfig(...), model=model)``."""

from jaxattn.studies import clusters, consensus, metastability, power_method, stability

#: The studies by command name (``jaxattn analyze`` runs the power-method study).
STUDIES = {"analyze": power_method, "consensus": consensus, "clusters": clusters, "stability": stability,
           "metastability": metastability}

__all__ = ["STUDIES", "clusters", "consensus", "metastability", "power_method", "stability"]
