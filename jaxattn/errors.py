"""Exceptions raised on bad input. Each carries one line that says what is wrong."""


class JaxattnError(ValueError):
    """Base class: bad input that the user can fix."""


class ConfigError(JaxattnError):
    """An impossible or inconsistent configuration (shapes, options, non-finite weights)."""


class CheckpointError(JaxattnError):
    """A checkpoint or converted file that cannot be read or converted."""
