"""Pydantic is optional: with ``import pydantic`` failing, every constraint that does not need it
works through ``halter.generate`` (json_schema=, response_format=, regex=, grammar=), and
``output_type=`` says clearly that it needs Pydantic."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = '''
import sys
class _NoPydantic:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic" or name.startswith(("pydantic.", "pydantic_core")):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _NoPydantic())
'''

SCRIPT = textwrap.dedent('''
    import json, re, sys
    try:
        import pydantic
    except ImportError:
        pass
    else:
        raise SystemExit("pydantic is importable: the blocker did not work")
    import jsonschema
    import halter
    from halter.engine import build_tiny_gguf
    from halter.constraints import MissingDependencyError

    path = build_tiny_gguf(sys.argv[1], seed=3)
    model = halter.Model.load(path, device="cpu", n_ctx=128, progress=False)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    compact = {"whitespace": "compact"}
    results = {}
    c = halter.generate(model, "x", json_schema=schema, max_tokens=40, seed=1, schema_options=compact)
    jsonschema.validate(c.value, schema); results["json_schema"] = c.text
    c = halter.generate(model, "x", response_format={"type": "json_schema", "json_schema": {"schema": schema}},
                        max_tokens=40, seed=1, schema_options=compact)
    jsonschema.validate(c.value, schema); results["response_format"] = c.text
    c = halter.generate(model, "x", regex="[ab]{3}", max_tokens=10, seed=1)
    assert re.fullmatch("[ab]{3}", c.value); results["regex"] = c.text
    c = halter.generate(model, "x", grammar='root ::= "y" [0-9]', max_tokens=10, seed=1)
    assert re.fullmatch("y[0-9]", c.value); results["grammar"] = c.text
    try:
        halter.generate(model, "x", output_type=int, max_tokens=5)
    except MissingDependencyError as err:
        results["output_type"] = str(err)
    assert "pydantic" not in sys.modules
    print(json.dumps(results))
''')


@pytest.mark.slow
def test_the_api_works_without_pydantic(tmp_path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "tiny.gguf")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {"json_schema", "response_format", "regex", "grammar", "output_type"}
    assert "needs pydantic" in results["output_type"]
