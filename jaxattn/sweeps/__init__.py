"""Sweeps: chunked resumable runs of one configuration, and config-driven grids sharded over devices and processes,
on one chunk loop (``_chunks``)."""
