"""The metastability study's options."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxattn.config import at_least, option, positive
from jaxattn.config import seed as seed_check
from jaxattn.errors import ConfigError
from jaxattn.studies.skeleton import check_options, refuse_inert

DYNAMICS = ("C2", "D1")


def _on_sphere(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (tokens on a sphere)"


def _several(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (clusters need several tokens)"


def _fraction(v) -> str | None:
    return None if 0 <= v < 1 else "must be in [0, 1)"


def _ratio(v) -> str | None:
    return None if v >= 1 else "must be >= 1"


@dataclasses.dataclass
class MetastabilityConfig:
    """The metastability study's options (those of ``jaxattn metastability``, see :mod:`jaxattn.config`)."""

    dims: Sequence[int] = option([2, 3, 4], "token dimensions d (tokens on the sphere S^(d-1))", check=_on_sphere)
    n: Sequence[int] = option([32], "tokens per configuration", check=_several)
    betas: Sequence[float] = option([2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0], "inverse temperatures beta", check=positive)
    num: int = option(128, "initial conditions per (n, d, beta), uniform on the sphere", check=positive)
    t1: float = option(1000.0, "final time", check=positive)
    t_min: float = option(0.1, "first saved time after 0; the saved times are logarithmic from it to t1",
                          check=positive)
    saves: int = option(100, "saved times on the logarithmic grid (and t = 0)", check=at_least(10))
    dynamics: str = option("C2", "C2: the flow on the sphere (adaptive Tsit5); D1: the map x <- N(x + alpha "
                           "sum_j a_ij x_j), time k*alpha after k steps", choices=DYNAMICS)
    alpha: float = option(1.0, "step of D1 (time per step)", check=positive)
    rtol: float = option(1e-7, "relative tolerance of C2's adaptive steps", check=positive)
    atol: float = option(1e-9, "absolute tolerance of C2's adaptive steps", check=positive)
    dtype: str = option("float64", "precision of the dynamics (the analyses run in float64)",
                        choices=("float32", "float64"))
    tol: float = option(1e-3, "single linkage: tokens joined by steps shorter than this share a cluster",
                        check=positive)
    flat_tol: float = option(0.1, "a plateau: 2*beta*E constant to within this fraction of 2/n^2 (the least a "
                             "merge of two tokens adds)", check=positive)
    min_ratio: float = option(2.0, "a plateau lasts at least this factor in time", check=_ratio)
    hessian_tol: float = option(1e-12, "a Hessian eigenvalue counts as nonzero beyond this fraction of the "
                                "largest in modulus", check=_fraction)
    classify: int = option(100, "metastable plateaus whose Hessian is classified per (n, d, beta): a random sample "
                           "when there are more", check=positive)
    boot: int = option(400, "bootstrap resamples of the confidence intervals", check=positive)
    movie: bool = option(True, "write movie.gif (and movie.mp4 where an encoder is installed): one condition per d")
    movie_beta: float = option(8.0, "the beta of the movie (one of --betas)", check=positive)
    seed: int = option(0, "random seed", check=seed_check)
    figures: bool = option(True, "write PNG figures")

    def check(self) -> MetastabilityConfig:
        """Every option checked against its declaration, then together, before any work (one line)."""
        check_options(self)
        if self.t_min >= self.t1:
            raise ConfigError(f"t_min = {self.t_min:g} must be below t1 = {self.t1:g}")
        refuse_inert(self, self.inert())
        if self.movie and float(self.movie_beta) not in [float(b) for b in self.betas]:
            raise ConfigError(f"movie_beta = {self.movie_beta:g} is not among betas "
                              f"{', '.join(f'{float(b):g}' for b in self.betas)}: give one of them")
        defaults = MetastabilityConfig.__dataclass_fields__
        if self.dynamics == "C2" and self.alpha != defaults["alpha"].default:
            raise ConfigError("alpha is the step of D1: it does nothing with dynamics = 'C2'")
        if self.dynamics == "D1" and (self.rtol, self.atol) != (defaults["rtol"].default, defaults["atol"].default):
            raise ConfigError("rtol and atol are C2's tolerances: they do nothing with dynamics = 'D1'")
        if self.dynamics == "D1" and self.t1 / self.alpha > 10_000_000:
            raise ConfigError(f"t1 / alpha = {self.t1 / self.alpha:.3g} steps of D1: at most 1e7")
        for name in ("dims", "n", "betas"):
            v = [float(x) for x in getattr(self, name)]
            if len(set(v)) < len(v):
                raise ConfigError(f"{name} repeats a value: {getattr(self, name)}")
        return self

    def inert(self) -> dict[str, str]:
        """The options that change nothing with the others, each with the reason (refused when set): the movie's
        beta without a movie."""
        return {} if self.movie else {"movie_beta": "movie = false (no movie is made)"}


#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = MetastabilityConfig
