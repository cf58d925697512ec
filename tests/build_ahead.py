"""Compile tests' builds started together: a module fixture hands each selected
test of one test function its build's Future (cubridge.build.jobs runs nvcc on
every core), so a module of compile checks takes about its slowest builds'
time instead of their sum. Only the tests this session selected are built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from cubridge.build.jobs import start_builds


def builds_ahead(request, test_name: str,
                 make_build: Callable[[Mapping[str, Any]], Callable[[], Any]]
                 ) -> dict[str, Future]:
    """{callspec id: Future} for the selected tests named `test_name` in the
    requesting module. `make_build(params)` runs here, on this thread (tracing and
    header generation stay off the pool); the build it returns runs on the pool."""
    items = [item for item in request.session.items
             if item.module is request.module and item.originalname == test_name]
    builds = [make_build(item.callspec.params) for item in items]
    return dict(zip((item.callspec.id for item in items), start_builds(builds), strict=True))
