"""The dynamic-metastability study behind ``jaxattn metastability`` (see docs/metastability.md).

On the sphere with ``Q = K = V = I`` (one head, output ``I``, score scale 1) the tokens of the flow C2,
``ẋ_i = P_{x_i} Σ_j softmax_j(β ⟨x_i, x_j⟩) x_j``, gather into a few point clusters, stay near that
configuration for a long time, then merge, cluster by cluster, until one is left. The interaction energy
``E = (1/(2βn²)) Σ_ij exp(β(⟨x_i, x_j⟩ − 1))`` (:mod:`jaxattn.analysis.energy`) never decreases along the
flow; drawn against the logarithm of time it is a staircase, one step per merge. This study integrates
``num`` random initial conditions (uniform on the sphere) for every ``(n, d, β)`` of a grid, saves the
states on a logarithmic time grid and measures, per condition:

* the energy over time, ``2βE ∈ (0, 1]`` (1: a single cluster);
* the number of clusters over time: single linkage at distance ``tol`` (tokens joined by a chain of
  steps shorter than ``tol`` share a cluster);
* the plateaus of the energy (:func:`jaxattn.analysis.plateaus.plateaus`: ``2βE`` constant to within
  ``flat_tol · 2/n²`` — ``2/n²`` is the least a merge of two tokens adds — for at least a factor
  ``min_ratio`` in time); a plateau is *metastable* when the configuration at its last saved time has
  between 2 and ``n − 1`` clusters; its dwell time is its length, censored when it lasts to ``t1``;
* at each metastable plateau (the state at its middle saved time), the kind of critical point of ``E``
  (:func:`jaxattn.analysis.energy.classify`: a strict saddle has a positive and a negative direction of the
  Riemannian Hessian, common rotations removed); the single-cluster final states are classified too, as
  a control (they should be local maxima, not saddles);
* the time to a single cluster, and the metastable time: from the start of the first metastable plateau
  to a single cluster (censored at ``t1``).

It reports the staircase (``2βE`` against ``τ = ln(1 + t)/β``, median and quantiles), the dwell times
against ``β`` (Kaplan–Meier medians, a fitted exponential growth rate with a bootstrap interval), the
fraction of plateaus that are strict saddles, the number of clusters at the first metastable plateau
against ``β`` (a fitted exponent; on the circle next to the most unstable Fourier mode of the uniform
state, ``k* = argmax_k k² I_k(β)``, from the linearisation of the mean-field equation), a movie, and the
claims they check (:func:`claims`). ``dynamics = 'D1'`` runs the map
``x_i ← N(x_i + α Σ_j softmax_j(β⟨x_i, x_j⟩) x_j)`` instead, time ``k α`` after ``k`` steps.
"""

from jaxattn.studies.metastability._claims import PAPER, claims
from jaxattn.studies.metastability._config import DYNAMICS, Config, MetastabilityConfig
from jaxattn.studies.metastability._report import TABLES, load_tables
from jaxattn.studies.metastability._study import condition_summary, d1_steps, run, time_grid, trajectories
from jaxattn.studies.metastability._tables import linear_mode

__all__ = ["DYNAMICS", "PAPER", "TABLES", "Config", "MetastabilityConfig", "claims", "condition_summary", "d1_steps",
           "linear_mode", "load_tables", "run", "time_grid", "trajectories"]
