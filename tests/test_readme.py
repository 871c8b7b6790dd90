"""Every code block of the README runs, or is the code it says it excerpts.

A README example that breaks silently is a user's first wrong impression. Python blocks run
in order in one namespace (a later block may use an earlier block's names, as a reader
would), in a process of their own; a block preceded by `<!-- excerpt: path -->` must appear
in that file as written. The shell blocks' test command is the one CI runs.
"""

import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```",
                    re.MULTILINE | re.DOTALL)
_EXCERPT = re.compile(r"<!-- excerpt: (?P<path>\S+) -->\s*$")


def _blocks():
  """(language, code, excerpted path or None, line) for every fenced block, in order."""
  text = open(README).read()
  blocks = []
  for match in _FENCE.finditer(text):
    before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
    excerpt = _EXCERPT.search(before)
    blocks.append((match.group("lang"), textwrap.dedent(match.group("body")),
                   excerpt.group("path") if excerpt else None,
                   text.count("\n", 0, match.start()) + 1))
  return blocks


def _normalized(code):
  return "\n".join(line.rstrip() for line in code.strip().splitlines())


def test_the_readme_has_the_blocks_these_tests_read():
  languages = [lang for lang, _, _, _ in _blocks()]
  assert languages.count("python") >= 4 and languages.count("sh") >= 2, languages


def test_excerpts_are_the_code_they_name():
  excerpts = [(code, path, line) for lang, code, path, line in _blocks() if path]
  assert excerpts, "the README's converter example is marked as an excerpt"
  for code, path, line in excerpts:
    source = _normalized(textwrap.dedent(open(os.path.join(ROOT, path)).read()))
    assert _normalized(code) in source, (
        f"README line {line}: the block is not in {path} as written; copy it again")


def test_python_blocks_run_in_order(tmp_path):
  code = [f"# README line {line}\n{block}" for lang, block, path, line in _blocks()
          if lang == "python" and not path]
  script = tmp_path / "readme_blocks.py"
  script.write_text("\n".join(code))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
  done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-4000:]


def test_the_test_command_is_what_ci_runs():
  shell = "\n".join(block for lang, block, _, _ in _blocks() if lang == "sh")
  command = re.search(r"pip install -e \"\.\[test\]\" && \.venv/bin/python (-m pytest.*)",
                      shell)
  assert command, "the README shows how to install and run the tests"
  ci = open(os.path.join(ROOT, ".ci", "run")).read()
  assert command.group(1).strip() in ci.replace("\"$venv/bin/python\" ", ""), (
      f"the README's test command {command.group(1)!r} is not what .ci/run runs")
