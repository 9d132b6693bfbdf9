"""Offline analysis, outside the runtime package."""
