"""The SSR worker of this scheduler process, if any (kept import-free so hooks stay cheap)."""

WORKER = None
