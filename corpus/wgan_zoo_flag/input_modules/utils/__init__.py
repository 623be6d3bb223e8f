"""Data helpers."""
