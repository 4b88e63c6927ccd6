"""Test support shipped with the package: throwaway MariaDB servers and in-memory fakes.

Fakes here stand in for Ray-backed services in unit tests of pure logic only;
integration tests use the real parts.
"""
