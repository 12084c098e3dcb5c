"""Hypothesis generators for the JSON-like data frameworks put in their messages (ids, text,
arguments, metadata), shared by the adapters' conversion tests."""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["identifiers", "json_values", "words"]

words = st.text(st.characters(codec="utf-8"), max_size=12)
identifiers = st.text("abcdefghij0123456789", min_size=1, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(identifiers, inner, max_size=3),
    max_leaves=6,
)
