"""The harness the part-by-part tick profilers share (``profile_publication.py``,
``profile_tick_writes.py``): CPU milliseconds (``time.process_time``) summed per named part of a
tick, and ``bench_tick.py`` run with a profiler's wrappers installed once the benchmark's
database is open (Django is set up by then)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from functools import wraps

from benchmarks import bench_tick

cpu_ms: dict[str, float] = defaultdict(float)


def timed(name: str | Callable[[tuple], str], function):
    """``function`` with its CPU time added to ``cpu_ms[name]`` (``name(args)`` when callable)."""

    @wraps(function)
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            key = name(args) if callable(name) else name
            cpu_ms[key] += (time.process_time() - started) * 1000

    return wrapper


def time_functions(*modules_and_names: tuple[object, tuple[str, ...]]) -> None:
    """Wrap each named function of each module with :func:`timed` (names a tree lacks are left
    out, so a profiler runs on an older tree too)."""
    for module, names in modules_and_names:
        for name in names:
            if hasattr(module, name):
                setattr(module, name, timed(name, getattr(module, name)))


def run_bench_tick(install: Callable[[], None]) -> None:
    """``bench_tick.main()`` (its flags) with ``install()`` run once its database is open."""
    original_open = bench_tick.open_bench_database

    def open_and_install(*args, **kwargs):
        url = original_open(*args, **kwargs)
        install()
        return url

    bench_tick.open_bench_database = open_and_install
    bench_tick.main()


def time_methods(cls: type, names: tuple[str, ...]) -> None:
    """Wrap each named method of ``cls`` with :func:`timed`, as ``Class.method``."""
    for name in names:
        if hasattr(cls, name):
            setattr(cls, name, timed(f"{cls.__name__}.{name}", getattr(cls, name)))
