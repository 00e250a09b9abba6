"""Lay the environment this interpreter runs in over another one's packages: ``python scripts/layer_env.py BASE``.

``make gpu-compile``'s environment (``.venv-gpu``) holds only jax's CUDA plugin; everything else (jax, the project,
its dependencies) is ``.venv``'s, read through a ``.pth`` file that adds ``BASE``'s site-packages after this
environment's own (and runs their ``.pth`` files: the project's editable install), so the stack is installed once and
the plugin cannot leak into ``.venv``.
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path


def main(base: str) -> int:
    python = Path(base) / "bin" / "python"
    if not python.exists():
        print(f"layer_env.py: error: {python} does not exist", file=sys.stderr)
        return 2
    theirs = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                            capture_output=True, text=True).stdout.strip()
    mine = Path(site.getsitepackages()[0])
    (mine / "_jaxattn_base.pth").write_text(f"import site; site.addsitedir({theirs!r})\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/layer_env.py BASE_VENV", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
