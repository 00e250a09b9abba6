"""Model and weights: parameter pytrees, attention, norms and activations, random models and initial tokens."""
