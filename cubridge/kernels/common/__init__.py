"""Shared pieces of the kernel library: the hook contract types, the default
hooks, architecture primitives, the generated wgmma wrappers and the spec of
standard attention that the entries compute with their default hooks."""
