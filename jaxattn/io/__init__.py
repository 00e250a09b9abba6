"""Storage: Hugging Face checkpoints to canonical safetensors (one adapter per family), run directories,
the verified chunk store of sweeps, and trajectory files for movies."""

# The face of the private config-file reader (the command line and the sweeps read config files with it), and of
# the one handling of a full disk that every writer shares (the stores, the chunk loop, the command line).
from jaxattn.io._atomic import AGAIN as AGAIN
from jaxattn.io._atomic import RESUME as RESUME
from jaxattn.io._atomic import STUDY as STUDY
from jaxattn.io._atomic import full_disk as full_disk
from jaxattn.io._configfile import load_config as load_config
