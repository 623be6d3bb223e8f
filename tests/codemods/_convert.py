"""Helpers for the per-rule tables: convert a snippet, compare, check idempotence."""

from __future__ import annotations

import textwrap

from accelify.pipeline import convert_source

IMPORT = "from accelify.runtime import Accelerator\n"


def dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def converted(before: str, **kwargs: object) -> str:
    """The conversion of ``before`` (dedented); fails the test if the pipeline failed."""
    result = convert_source(dedent(before), **kwargs)  # type: ignore[arg-type]
    assert result.status != "failed", result.error
    return result.new


def assert_converts(before: str, after: str, **kwargs: object) -> None:
    """``before`` converts to exactly ``after``, and ``after`` converts to itself."""
    new = converted(before, **kwargs)
    assert new == dedent(after), f"got:\n{new}"
    again = convert_source(new, **kwargs)  # type: ignore[arg-type]
    assert again.status == "unchanged" and again.new == new


def assert_unchanged(code: str) -> None:
    """A near-miss: nothing in ``code`` changes."""
    result = convert_source(dedent(code))
    assert result.status in ("unchanged", "skipped"), result.new
    assert result.new == dedent(code)


def codes(code: str) -> list[str]:
    """The warning codes the conversion of ``code`` reports, with their lines (``ACC001:3``)."""
    return [f"{w.code}:{w.line}" for w in convert_source(dedent(code)).warnings]
