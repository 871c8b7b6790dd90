"""Programs written from the README alone, each checked against the loop by its test, and
every pfor in them run in the checked mode too (`vectorize.checked()`)."""

import pytest


@pytest.fixture(autouse=True)
def _checked_mode(monkeypatch):
  monkeypatch.setenv("VECTORIZE_CHECKED", "1")
