"""Storage: Hugging Face checkpoints to canonical safetensors (one adapter per family), run directories,
and the verified chunk store of sweeps."""

# The face of the private config-file reader (the command line and the sweeps read config files with it).
from jaxattn.io._configfile import load_config as load_config
