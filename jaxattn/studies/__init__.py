"""One module per study of the papers; each composes the library's pieces."""

from jaxattn.studies.power_method import StudyConfig, run_study

__all__ = ["StudyConfig", "run_study"]
