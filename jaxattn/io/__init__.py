"""Storage: Hugging Face checkpoints to canonical safetensors (one adapter per family), run directories,
and the verified chunk store of sweeps."""
