"""The house's layering: no import cycle among vectorize's and the converters' modules, no
import inside a function unless listed here with why, and no converter or construct asking
the global options where it runs (they read `ctx.target`: vectorize/target.py)."""

import ast
import os
import re

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = ("vectorize", "converters")

# Imports inside functions, each with why: (module, imported module) -> reason.
_INNER_IMPORTS = {
    ("vectorize", "vectorize.helpers.private_model"):
        "PrivateModel imports Keras, which `import vectorize` does not need otherwise",
}

# The modules above a conversion, which decide its target (or run no conversion), may read
# the options; below them, converters and constructs read `ctx.target`.
_READ_OPTIONS = {
    "vectorize.options", "vectorize.target", "vectorize.engine", "vectorize.api",
    "vectorize.cache", "vectorize.program_cache", "vectorize.checked",
    "vectorize.pc.engine_bridge",
    # Asks, deep inside samplers called with no context, whether the graph being built is
    # compiled by XLA: the same question the target's `xla` was answered from.
    "vectorize.compiled_calls",
}


def _modules():
  found = {}
  for package in _PACKAGES:
    for folder, _, files in os.walk(os.path.join(_ROOT, package)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          module = os.path.relpath(path, _ROOT)[:-3].replace(os.sep, ".")
          found[module.removesuffix(".__init__")] = path
  return found


def _imports(module, path, modules):
  """[(imported module, inside a function)] of `module`'s imports of modules in `modules`."""
  tree = ast.parse(open(path).read())
  top_level = {id(node) for node in tree.body}
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      subs = [f"{node.module}.{alias.name}" for alias in node.names]
      names = [s for s in subs if s in modules] or [node.module]
    else:
      continue
    out += [(name, id(node) not in top_level) for name in names if name in modules and
            name != module]
  return out


_MODULES = _modules()
_EDGES = {m: _imports(m, p, _MODULES) for m, p in _MODULES.items()}


def _cycle():
  """One import cycle (a list of modules), or None."""
  state, stack = {}, []

  def visit(m):
    state[m] = "open"
    stack.append(m)
    for target, _ in _EDGES[m]:
      if state.get(target) == "open":
        return stack[stack.index(target):] + [target]
      if target not in state:
        found = visit(target)
        if found:
          return found
    stack.pop()
    state[m] = "done"
    return None

  for m in sorted(_MODULES):
    if m not in state:
      found = visit(m)
      if found:
        return found
  return None


def test_there_is_no_import_cycle_counting_imports_inside_functions():
  cycle = _cycle()
  assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_inside_functions_are_the_listed_ones():
  inner = {(m, target) for m, edges in _EDGES.items() for target, inside in edges if inside}
  assert inner == set(_INNER_IMPORTS), f"unlisted: {sorted(inner - set(_INNER_IMPORTS))}"


def test_the_cycle_finder_finds_a_cycle():
  saved = dict(_EDGES)
  try:
    _EDGES["vectorize.values"] = _EDGES["vectorize.values"] + [("vectorize.walker", False)]
    assert _cycle() is not None
  finally:
    _EDGES.clear()
    _EDGES.update(saved)


_ASKS_OPTIONS = re.compile(r"\bfrom vectorize import options\b|\bvectorize\.options\b|"
                           r"GraphOrParentsInXlaContext")
_OLD_FLAGS = re.compile(r"\bctx\.(static_shapes|partitioned|active_set)\b|"
                        r"\bactive_set\.static_shapes\b")


@pytest.mark.parametrize("module", sorted(set(_MODULES) - _READ_OPTIONS))
def test_converters_and_constructs_read_the_target_not_the_options(module):
  text = open(_MODULES[module]).read()
  assert not _ASKS_OPTIONS.search(text), f"{module} reads the options; read op.ctx.target"
  assert not _OLD_FLAGS.search(text), f"{module} reads a context flag; read ctx.target"
