"""Analysis: spectra of the layer matrices, metrics and observables, steering, clusters, equilibria and
stability, confidence intervals."""
