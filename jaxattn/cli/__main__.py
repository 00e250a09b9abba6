"""``python -m jaxattn.cli``: the same as the ``jaxattn`` command."""

from jaxattn.cli import main

raise SystemExit(main())
