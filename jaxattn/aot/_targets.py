"""Devices to compile for that need not be here: an H100 or an H200 from XLA's target descriptions, a TPU slice.

XLA compiles a GPU program from a *target description* (the device's multiprocessors, clock, shared memory,
registers, memory and bandwidth) without the device: ``jax.experimental.topologies`` turns one into devices that a
program can be lowered and compiled for, through the CUDA plugin of jax's own version (``jax-cuda13-plugin`` and
``jax-cuda13-pjrt``; no driver, no NVIDIA libraries). The plugin's version check needs a driver: in a process without
a GPU it is skipped where ``JAX_PLATFORMS=cpu`` or ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` is set before JAX starts
(without either the plugin does not register, and no GPU target can be made). A TPU slice comes from libtpu
(``jax[tpu]``) by its topology name.
"""

from __future__ import annotations

import dataclasses
import os
import re
from importlib import resources
from pathlib import Path

import jax

from jaxattn.dynamics import Target as _RunTarget
from jaxattn.errors import ConfigError

#: The GPU targets kept with the package: name -> target description file (``jaxattn/aot/targets``).
GPUS = {"h100": "h100.txtpb", "h200": "h200.txtpb"}
#: TPU targets by name -> (topology name, a chip's float32 FLOP/s, bytes/s of memory bandwidth, bytes of memory per
#: chip): the published figures of a v5e chip (197 TFLOP/s in bfloat16; a float32 product at full precision takes six
#: bfloat16 passes, 819 GB/s, 16 GiB).
TPUS = {"v5e:2x2": ("v5e:2x2", 197e12 / 6, 819e9, 16 * 2**30)}


@dataclasses.dataclass(frozen=True)
class Target:
    """Devices to compile for (:func:`target`) and the figures a roofline needs.

    Attributes:
        name: ``'h100'``, ``'h200'``, ``'tpu:v5e:2x2'``, or the path of a target description.
        platform: ``'gpu'`` or ``'tpu'``: every choice of a run that depends on the backend is taken for it.
        devices: the target's devices, for ``Batch(devices=target.devices)``.
        memory: bytes of memory per device.
        peak_flops: float32 FLOP/s of one device (multiprocessors × FP32 units × 2 × clock, from the description).
        bandwidth: bytes/s of device memory.
        cores: multiprocessors (GPU) or chips (TPU).
        shared_memory: bytes of shared memory a block may opt into (GPU; 0 on a TPU).
        registers: 32-bit registers per multiprocessor (GPU; 0 on a TPU).
    """

    name: str
    platform: str
    devices: tuple
    memory: int
    peak_flops: float
    bandwidth: float
    cores: int
    shared_memory: int = 0
    registers: int = 0

    def run_target(self) -> _RunTarget:
        return _RunTarget(self.platform, self.devices, self.memory)

    def __repr__(self) -> str:
        return (f"Target({self.name!r}: {len(self.devices)} {self.platform} device(s), {self.peak_flops / 1e12:.1f} "
                f"TFLOP/s float32, {self.bandwidth / 1e12:.2f} TB/s, {self.memory / 2**30:.0f} GiB)")


def _field(text: str, name: str) -> float:
    m = re.search(rf"\b{name}:\s*([0-9.]+)", text)
    if not m:
        raise ConfigError(f"the target description has no {name}")
    return float(m.group(1))


def _gpu(name: str, text: str) -> Target:
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # the plugin's check needs a driver
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(platform="cuda", target_config=text, topology="1x1x1")
    except Exception as e:  # no CUDA plugin of this jax version, or a description XLA does not read
        raise ConfigError(f"cannot compile for the GPU target {name!r} here: {str(e).splitlines()[0][:200]} (it "
                          f"needs jax-cuda13-plugin and jax-cuda13-pjrt {jax.__version__}, which make gpu-compile "
                          "installs into .venv-gpu, registered when JAX starts: without a GPU set JAX_PLATFORMS=cpu "
                          "or JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 before it does)") from None
    cores = int(_field(text, "core_count"))
    flops = cores * _field(text, "fpus_per_core") * 2 * _field(text, "clock_rate_ghz") * 1e9
    return Target(name, "gpu", tuple(topo.devices), int(_field(text, "device_memory_size")), flops,
                  _field(text, "memory_bandwidth"), cores, int(_field(text, "shared_memory_per_block_optin")),
                  int(_field(text, "registers_per_core_limit")))


def _tpu(name: str) -> Target:
    from jax.experimental import topologies

    topology, flops, bandwidth, memory = TPUS[name]
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as e:
        raise ConfigError(f"cannot compile for the TPU target {name!r} here: {str(e).splitlines()[0][:200]} (it "
                          f"needs libtpu, pip install 'jax[tpu]=={jax.__version__}'; several processes at once need "
                          "ALLOW_MULTIPLE_LIBTPU_LOAD=1 set before JAX starts)") from None
    return Target(f"tpu:{name}", "tpu", tuple(topo.devices), memory, flops, bandwidth, len(topo.devices))


def target(name: str) -> Target:
    """The devices of a target to compile for: ``'h100'`` or ``'h200'`` (descriptions kept with the package),
    ``'tpu:v5e:2x2'``, or the path of an XLA GPU target description (a ``.txtpb`` file).

    Examples:
        >>> import jaxattn as ja
        >>> ja.aot.target("a100")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        jaxattn.errors.ConfigError: unknown target 'a100': one of h100, h200, tpu:v5e:2x2, or the path of an XLA GPU ...
    """
    if name in GPUS:
        text = resources.files("jaxattn.aot").joinpath("targets", GPUS[name]).read_text()
        return _gpu(name, text)
    if name.startswith("tpu:") and name[4:] in TPUS:
        return _tpu(name[4:])
    path = Path(name)
    if path.suffix == ".txtpb" and path.is_file():
        return _gpu(str(path), path.read_text())
    raise ConfigError(f"unknown target {name!r}: one of {', '.join(GPUS)}, "
                      f"{', '.join('tpu:' + t for t in TPUS)}, or the path of an XLA GPU target description (.txtpb)")
