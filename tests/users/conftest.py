"""Programs written from the README alone, each checked against the loop by its test, and
every program's pfor run in the checked mode too (`vectorize.checked()`), in one of its modes.

A program parametrized over modes (eager, tf.function, XLA, a run-time n) is checked in the
first of them: the checked mode compares the same vectorized ops with the same loop whatever
the mode, and each mode's answer is compared with the loop by the test itself. Checking every
mode again doubled the users' tests' time (the README's test command has a 20-minute budget).
"""

import pytest

MODE_PARAMS = ("mode",)
_LATER_MODES = set()   # node ids of a program's modes after its first


def _program_key(item):
  """The test function and its parameters other than the mode: one program."""
  spec = getattr(item, "callspec", None)
  params = {} if spec is None else spec.params
  others = tuple(sorted((k, repr(v)) for k, v in params.items() if k not in MODE_PARAMS))
  return item.module.__name__, item.originalname, others


def pytest_collection_modifyitems(config, items):
  del config
  seen = set()
  for item in items:
    if not item.nodeid.startswith("tests/users/"):
      continue
    key = _program_key(item)
    if key in seen:
      _LATER_MODES.add(item.nodeid)
    seen.add(key)


@pytest.fixture(autouse=True)
def _checked_mode(request, monkeypatch):
  """On, except for a test marked `unchecked` (one that checks pfor's own variable state:
  the checked mode leaves the loop's) and for a program's modes after its first."""
  node = request.node
  if not (node.get_closest_marker("unchecked") or node.nodeid in _LATER_MODES):
    monkeypatch.setenv("VECTORIZE_CHECKED", "1")
