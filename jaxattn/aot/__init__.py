"""Ahead-of-time compilation: a driver's program for devices that are not here.

Compile on a login node, or on a laptop, for the cluster's GPU: :func:`target` gives an H100's or an H200's devices
from XLA's target descriptions (or a TPU slice's, with libtpu), :func:`compile` compiles what ``simulate``, ``solve``
or ``repeated_passes`` would run there (every backend-dependent choice taken for the target), and the
:class:`Program` it returns says what XLA made of it: its loops, the kernels a step launches, what each moves, and
the roofline bound on the target. :func:`floor` is the papers' map in the fewest lines, the program a driver's is
held against. See the GPU guide (docs/gpu.md).
"""

from jaxattn.aot._compile import compile as compile
from jaxattn.aot._compile import compile_function as compile_function
from jaxattn.aot._floor import floor as floor
from jaxattn.aot._floor import floor_observables as floor_observables
from jaxattn.aot._program import Kernel as Kernel
from jaxattn.aot._program import Loop as Loop
from jaxattn.aot._program import Program as Program
from jaxattn.aot._targets import Target as Target
from jaxattn.aot._targets import target as target

__all__ = ["Kernel", "Loop", "Program", "Target", "compile", "compile_function", "floor", "floor_observables",
           "target"]
