"""Dynamics: token spaces (geometry), prompts as initial conditions, discrete maps, the faithful forward
pass of real architectures, vector fields, the diffrax solver, repeated passes, the batched runner shared
by maps and flows, and the fused Pallas kernel."""
