"""twofold: a compute replica split into a maintenance and an interactive runtime behind one
protocol. See `docs/architecture.md`."""

__version__ = "0.1.0"
