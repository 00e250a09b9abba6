"""``jaxattn spectrum MODEL``: the spectra of a model's layer matrices."""

from __future__ import annotations

from jaxattn.analysis.spectral import spectrum
from jaxattn.cli._shared import check_number, named_model
from jaxattn.cli._study import command
from jaxattn.errors import JaxattnError
from jaxattn.studies.power_method import spectrum_rows


def register(sub):
    p = command(sub, "spectrum", help="print the spectra of a model's layer matrices",
                description="Eigenvalues of every layer matrix F = Σ_h O_h V_h (float64), the case analysis "
                            "(1 real dominant, 2 complex pair, 3 near-degenerate) and the spectral gaps.")
    p.add_argument("model", help="'minilm', a converted .safetensors file or a checkpoint folder")
    p.add_argument("--order", choices=["real", "modulus", "step"], default="real",
                   help="which eigenvalue is principal: 'real' the largest real part (what matters with the skip "
                        "connection), 'modulus' the largest |λ|, 'step' the largest |1 + αλ| (one D1 step) [real]")
    p.add_argument("--alpha", type=float, help="step size α of --order step [1.0]")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    if args.alpha is not None:  # refused rather than recorded: it would change nothing, or order by NaN
        check_number("alpha", args.alpha)
        if args.alpha <= 0:  # a step size: |1 + αλ| with α <= 0 orders by no step of D1
            raise JaxattnError(f"--alpha: must be > 0, got {args.alpha:g}")
        if args.order != "step":
            raise JaxattnError(f"--alpha only applies to --order step (--order {args.order} does not depend on α)")
    alpha = 1.0 if args.alpha is None else args.alpha
    model = named_model(args.model, "spectrum", "a random model's spectra are in `jaxattn analyze random --d ... "
                        "--heads ...` (spectrum.csv)")
    rows = spectrum_rows(spectrum(model, order=args.order, alpha=alpha), alpha)
    print(model.summary())
    print(f"{'set':>4} {'case':>4} {'Re λ1':>10} {'Im λ1':>10} {'Re λ2':>10} {'gap':>10} "
          f"{'|<v1,v2>|':>10} {'radius':>10}")
    for r in rows:
        print(f"{r['weight_set']:>4} {r['case']:>4} {r['lambda1_re']:>10.4g} {r['lambda1_im']:>10.4g} "
              f"{r['lambda2_re']:>10.4g} {r['gap']:>10.4g} {r['v1_v2_collinearity']:>10.3f} "
              f"{r['spectral_radius']:>10.4g}")
    return 0
