"""Dispatch planes: where invocations live. See `base.Plane` for the contract."""

from .base import Plane
from .default import default_plane, reset_default_plane
from .dispatch import Dispatch
from .http import HttpDispatch

__all__ = ["Dispatch", "HttpDispatch", "Plane", "default_plane", "reset_default_plane"]
