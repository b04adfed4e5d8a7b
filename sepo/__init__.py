"""sepo: train and audit language-model agents in strategic games with Safe Equilibrium Policy
Optimization."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("sepo")
except PackageNotFoundError:  # run from a source tree that was not installed
    __version__ = "0.1.0"
