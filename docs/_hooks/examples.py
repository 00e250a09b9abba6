"""mkdocs hook: the notebooks of ``examples/`` (jupytext percent files, outside ``docs/``) as pages of the site.

Each ``examples/NAME.py`` becomes the page ``examples/NAME/``, which mkdocs-jupyter executes and renders with its
outputs (mkdocs.yml's ``mkdocs-jupyter`` plugin). The hook runs before the plugin's own ``on_files``, which turns
the files it finds into notebook pages.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File


@event_priority(100)  # before mkdocs-jupyter (default priority) wraps the notebooks
def on_files(files, config):
    root = Path(config.config_file_path).parent
    for path in sorted((root / "examples").glob("*.py")):
        files.append(File(f"examples/{path.name}", str(root), config.site_dir, config.use_directory_urls))
    return files
