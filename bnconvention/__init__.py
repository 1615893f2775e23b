"""bnconvention: declare, stamp, validate and audit BatchNorm fitting conventions."""

from bnconvention._version import __version__

__all__ = ["__version__"]
