"""Provides the GPU tests' fixtures: the integration tests' environment (records and sockets in the test's own
directory) and the folder where benchmarks/gpu_acceptance.py keeps what the tests recorded."""

from __future__ import annotations

from tests.integration.conftest import env  # noqa: F401 - the same fixture, for tests/gpu
