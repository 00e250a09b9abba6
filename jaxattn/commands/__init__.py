"""Subcommands of the ``jaxattn`` command line that live in their own module.

Each module here exposes ``register(sub)``, which adds its parser to the ``argparse`` sub-parsers
and sets ``func=run`` (``run(args, cfg) -> int``); :mod:`jaxattn.cli` calls every ``register``
listed in :data:`MODULES`. A module that is not present yet is skipped.
"""

MODULES = ("solve", "sweep", "consensus", "clusters", "stability")
