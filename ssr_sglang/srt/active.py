"""The draft manager of this scheduler process, if it serves SSR (kept import-free so hooks stay cheap)."""

MANAGER = None
