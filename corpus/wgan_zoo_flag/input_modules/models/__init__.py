"""The model classes, one per module."""
