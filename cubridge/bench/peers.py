"""The implementations the benchmark times: the peers of the one registry
(cubridge.verify.peers: what a user would run instead of our kernel,
docs/benchmark.md) and ours (cubridge.bench.ours), each as an `Impl` whose
`prepare(case)` does the one-off work and returns the call to time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cubridge.bench.case import Case
from cubridge.verify.peers import PEERS, Peer, Prepared, Unsupported, get_peer

__all__ = ["PEERS", "Impl", "Prepared", "Unsupported", "peer_impls"]


@dataclass(frozen=True)
class Impl:
    name: str
    prepare: Callable[[Case], Prepared]
    source: str = ""  # what is being timed, for the report


def _timed(peer: Peer) -> Impl:
    return Impl(peer.name, peer.prepare, peer.source)


def peer_impls(names: list[str] | None = None) -> list[Impl]:
    """The named peers (all by default), in docs/benchmark.md's order."""
    names = list(PEERS) if names is None else names
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ValueError(f"unknown peer(s) {unknown}; known: {list(PEERS)}")
    return [_timed(get_peer(n)) for n in names]
