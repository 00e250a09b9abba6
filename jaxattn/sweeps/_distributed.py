"""Several cooperating processes (``jax.distributed``): their index, count and coordinator, checked."""

from __future__ import annotations

import os

from jaxattn.errors import ConfigError


def distributed_from_env(process_id=None, num_processes=None, coordinator=None) -> tuple[int, int, str | None]:
    """Process index, count and coordinator from the arguments, else the environment
    (``JAXATTN_PROCESS_ID`` / ``JAXATTN_NUM_PROCESSES`` / ``JAXATTN_COORDINATOR``, or Slurm's
    ``SLURM_PROCID`` / ``SLURM_NTASKS``)."""
    if num_processes is None:
        num_processes = _env_int("JAXATTN_NUM_PROCESSES", "SLURM_NTASKS", 1)
    if process_id is None:
        process_id = _env_int("JAXATTN_PROCESS_ID", "SLURM_PROCID", 0)
    coordinator = coordinator or os.environ.get("JAXATTN_COORDINATOR")
    if num_processes < 1:
        raise ConfigError(f"the number of processes must be at least 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise ConfigError(f"process id {process_id} is outside 0..{num_processes - 1}")
    if num_processes > 1 and not coordinator:
        raise ConfigError("several processes need a coordinator address host:port "
                          "(--coordinator or JAXATTN_COORDINATOR)")
    if coordinator:
        _check_address(coordinator)
    return process_id, num_processes, coordinator


def _env_int(name: str, fallback: str, default: int) -> int:
    """An integer from ``$name`` (else ``$fallback``, else ``default``); a non-integer is one clear error."""
    var = name if name in os.environ else fallback
    raw = os.environ.get(var)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"${var} must be an integer, got {raw!r}") from None


def _check_address(address: str) -> None:
    """A coordinator address is ``host:port`` with a port in 1..65535 (jax.distributed fails obscurely otherwise)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"coordinator address must be host:port (e.g. node0:1234), got {address!r}")
