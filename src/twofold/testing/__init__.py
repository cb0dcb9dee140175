"""Test support for twofold: reusable `hypothesis` strategies for every protocol value.

This package is for tests only. It imports `hypothesis`, a test-only dependency (the `test`
extra); nothing in the runtime packages may import it.
"""
