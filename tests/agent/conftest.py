"""The worker agent's tests (``scheduler/agent/``) share the execution tests' fixtures: fast
passwords, the built-in backends restored after each test, the personas and their clients."""

from tests.execution.conftest import _builtin_backends, _fast_passwords, clients, personas  # noqa: F401
