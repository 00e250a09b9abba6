"""Equilibria of the token dynamics on the product of spheres, their linearisation and stability,
and where the dynamics ends over many initial conditions: one import for the stability analysis,
each job in its own module: :mod:`jaxattn.analysis._equilibria` (the system, equilibria, residuals,
tangent bases), :mod:`jaxattn.analysis._newton` (:func:`refine`), :mod:`jaxattn.analysis._linearisation`
(:func:`linearise`), :mod:`jaxattn.analysis._closed_forms` (the single-head conditions) and
:mod:`jaxattn.analysis._basins` (running the dynamics to its end: :func:`settle`, :func:`classify`,
:func:`basins`).

A :class:`System` is a time-invariant (shared-weight) model with either a discrete map on the unit
sphere (:class:`jaxattn.Dynamics` with ``norm='l2'``: D1, D2, D3) or a flow on it
(:class:`jaxattn.Flow` with ``space='sphere'``: C2, C2_OJA). Its right-hand side is
``map(X)`` or ``f(X)`` for one configuration ``X: [n, d]``.

Equilibria
----------
With ``F = Σ_h O_h V_h`` and a real unit eigenvector ``F v = λ v``:

* consensus ``x_i = ±v`` for every token; bipartite consensus ``x_i = s_i v`` with signs
  ``s_i ∈ {±1}`` not all equal (:func:`consensus`, :func:`bipartite`, :func:`eigen_equilibria`
  enumerates every eigenvector and every sign pattern up to the global flip ``X -> −X``, which maps
  an equilibrium to one of the same stability because every model here is odd in ``X``);
* clustering: tokens sitting on a few points (:func:`clustering`);
* polygonal: the update ``Σ_j a_ij F x_j`` vanishes for every token (:func:`polygon` builds the
  regular polygon on a great circle, whose mean is zero: an equilibrium of the uniform-attention
  models D3 and C2_OJA).

For a map the consensus at ``v`` is a fixed point only when ``1 + αλ > 0`` (otherwise the step
sends ``v`` to ``−v``: a 2-cycle); bipartite consensus needs ``1 + αλ s_i c_i > 0`` for every
token (``c_i = Σ_j a_ij s_j``). :func:`residual` measures ``||map(X) − X||`` or ``||f(X)||``
(Frobenius norm); :func:`refine` polishes a near-equilibrium with Newton's method (optimistix,
linear solves by lineax's SVD, which gives minimum-norm steps where equilibria form a continuum,
as the polygons of D3 do) in tangent coordinates ``X(c) = N(X0 + B c)``.

Linearisation
-------------
:func:`linearise` differentiates the right-hand side with ``jax.jacfwd`` (the ambient Jacobian,
``[n d, n d]``) and restricts it to the tangent space of the product of spheres with an orthonormal
basis ``B_i`` of ``x_i^⊥`` per token: ``J_int = Bᵀ J B`` (``[n (d−1), n (d−1)]``). At a fixed
point of a map ``map(X) = X``, so the same basis serves both ends; at a zero of a flow the
covariant derivative equals the projected ambient one. A map is stable when the spectral radius of
``J_int`` is below 1, a flow when the largest real part is below 0.

Closed forms (the test oracle)
------------------------------
Perturb ``x_i = s_i v + δ_i`` with ``δ_i ⊥ v``. At consensus or bipartite consensus every value
``F x_j = λ s_j v`` points along ``v``, so the first-order change of the attention weights
multiplies a vector along ``v`` and the tangent projection removes it: **only the attention
matrix at the equilibrium, ``A``, enters the intrinsic Jacobian** (also with several heads, since
``V_h x_j = s_j V_h v`` and softmax rows sum to one). Let ``G = Bᵀ F B`` (its eigenvalues are
the other eigenvalues ``λ_m`` of F, since ``Bᵀ F v = 0`` makes F block triangular in ``[v, B]``).

*Map* ``x_i' = N(x_i + α u_i)``, ``u_i = Σ_j a_ij F x_j``: the unnormalised image is
``r_i v + δ_i + α Σ_j a_ij F δ_j`` with ``r_i = s_i + αλ c_i``, and ``dN(y) = P_y / ||y||``, so

    δ_i' = (δ_i + α Σ_j a_ij G δ_j) / ρ_i,        ρ_i = |r_i| = 1 + αλ s_i c_i.

At consensus (``A = 11ᵀ/n``, ``ρ = 1 + αλ_k``) the differential modes (``Σ_i δ_i = 0``) give
``1/(1 + αλ_k)`` with multiplicity ``(n−1)(d−1)`` and the common modes (``δ_i = w``) give
``(1 + αλ_m)/(1 + αλ_k)``, ``m ≠ k``. Hence only the principal consensus can be stable (it needs
``λ_1 > 0``), and for a real spectrum it is when ``α < 2/(|λ_d| − λ_1)`` in case the most negative
eigenvalue has ``|λ_d| > λ_1``.

*Flow* ``ẋ_i = P_{x_i} u_i``: ``δ̇_i = P_v δu_i − <x_i, u_i> δ_i = Σ_j a_ij G δ_j − λ s_i c_i δ_i``.
At consensus the differential modes have eigenvalue ``−λ_k`` (multiplicity ``(n−1)(d−1)``) and
the common modes ``λ_m − λ_k``: again only the principal consensus can be stable, and it is when
``λ_1 > 0`` and ``λ_1 > Re λ_m`` for every other eigenvalue, with no condition on a step.

*Bipartite consensus, one head* (the single-head analysis of the power-method paper's appendix),
``p`` tokens at ``+v`` and ``q = n − p`` at ``−v``: with ``w = β s vᵀ Qᵀ K v`` (``w = 0`` for
uniform attention) the attention is ``e^{±w}`` over ``Z_+ = p e^w + q e^{−w}`` (rows of ``+v``
tokens) or ``Z_− = p e^{−w} + q e^w``, a rank-2 matrix, and

    c_+ = (p e^w − q e^{−w}) / Z_+,   c_− = (p e^{−w} − q e^w) / Z_−,
    ρ_+ = 1 + αλ c_+,                 ρ_− = 1 − αλ c_−.

Perturbations summing to zero inside a group do not feel ``A``: eigenvalues ``1/ρ_+`` (multiplicity
``(p−1)(d−1)``) and ``1/ρ_−`` (``(q−1)(d−1)``). Group-constant perturbations along ``v_m``
give, for each ``m ≠ k``, the 2×2 matrix ``diag(1/ρ_+, 1/ρ_−)(I + αλ_m Â)`` with the row-stochastic
``Â = [[p e^w/Z_+, q e^{−w}/Z_+], [p e^{−w}/Z_−, q e^w/Z_−]]``; it is Schur stable iff
``|det| < 1`` and ``|tr| < 1 + det`` (Jury). For the flow the same blocks read ``−λ c_+``,
``λ c_−`` and ``−diag(λ c_+, −λ c_−) + λ_m Â`` (Hurwitz iff ``tr < 0 < det``).
:func:`single_head_conditions` evaluates these conditions; :func:`linearise` gives the numbers
they are checked against.

Where the dynamics ends
-----------------------
:func:`basins` draws initial conditions (condition ``i`` from ``fold_in(key, i)``), runs them in
chunks through :func:`jaxattn.simulate` or :func:`jaxattn.solve` (a fixed compiled width, so a
condition's end does not depend on the chunking), and :func:`classify` labels each end state:
consensus at ``±v_k``, bipartite consensus at ``v_k`` with its split, polygonal, clustering with
its number of clusters, or not converged (residual above the tolerance). Counts come with Wilson
95% confidence intervals.
"""

from jaxattn.analysis._basins import Basins, Terminal, basins, classify, settle
from jaxattn.analysis._closed_forms import (
    SingleHeadStability,
    consensus_eigenvalues,
    consensus_step_bound,
    single_head_conditions,
)
from jaxattn.analysis._equilibria import (
    Candidates,
    Kind,
    System,
    attention_rank,
    bipartite,
    check_configurations,
    clustering,
    consensus,
    eigen_equilibria,
    polygon,
    residual,
    sign_patterns,
    tangent_basis,
)
from jaxattn.analysis._linearisation import Linearisation, linearisation_bytes, linearise
from jaxattn.analysis._newton import Refined, refine

__all__ = [
    "Basins",
    "Candidates",
    "Kind",
    "Linearisation",
    "Refined",
    "SingleHeadStability",
    "System",
    "Terminal",
    "attention_rank",
    "basins",
    "bipartite",
    "check_configurations",
    "classify",
    "clustering",
    "consensus",
    "consensus_eigenvalues",
    "consensus_step_bound",
    "eigen_equilibria",
    "linearisation_bytes",
    "linearise",
    "polygon",
    "refine",
    "residual",
    "settle",
    "sign_patterns",
    "single_head_conditions",
    "tangent_basis",
]
