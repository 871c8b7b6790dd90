"""Programs written from the README alone, each checked against the loop by its test, and
every pfor in them run in the checked mode too (`vectorize.checked()`)."""

import pytest


@pytest.fixture(autouse=True)
def _checked_mode(request, monkeypatch):
  """On, except for a test marked `unchecked` (one that checks pfor's own variable state:
  the checked mode leaves the loop's)."""
  if not request.node.get_closest_marker("unchecked"):
    monkeypatch.setenv("VECTORIZE_CHECKED", "1")
