"""Test configuration: quiet TensorFlow logs; the `unchecked` marker.

The whole suite also runs under the checked mode (`VECTORIZE_CHECKED=1 pytest tests`), which
emits a check beside every conversion. A test that inspects what pfor emits (counts its
ops, looks for a loop or an assertion) or sets the checked mode itself is marked
`unchecked`: the variable is cleared for it.
"""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "unchecked: inspects the graph pfor emits, or sets the checked mode itself; "
      "run without VECTORIZE_CHECKED")


@pytest.fixture(autouse=True)
def _unchecked_when_marked(request, monkeypatch):
  if request.node.get_closest_marker("unchecked"):
    monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)
