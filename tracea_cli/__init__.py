"""Tracea: diagnose the machine, tune kernels, benchmark them against vendor libraries, export the winners."""

__version__ = "0.1.0"
