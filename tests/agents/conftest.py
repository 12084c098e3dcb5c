"""The history tests' real redis-server, for agent tests that run on every backend."""

from tests.history.conftest import redis_server

__all__ = ["redis_server"]
