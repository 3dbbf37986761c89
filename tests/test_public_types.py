"""The public API's signatures name real types: no bare ``Any`` where a union or protocol says what
is taken, and the ``py.typed`` marker ships so type checkers read them."""
from __future__ import annotations

import inspect
from pathlib import Path

import halter

# (callable, parameter) where Any is the honest type: any Python type form, free keyword
# arguments forwarded to a documented dataclass, or a parsed value of any type
HONEST_ANY = {"output_type", "sampling_kwargs", "kwargs", "sampling_fields", "return"}


def _bare_any(fn) -> list[str]:
    sig = inspect.signature(fn)
    found = [p.name for p in sig.parameters.values() if p.annotation in ("Any", "'Any'")]
    if sig.return_annotation in ("Any", "'Any'"):
        found.append("return")
    return [n for n in found if n not in HONEST_ANY]


def test_generation_api_has_no_bare_any() -> None:
    from halter.engine.generation import Request, generate, generate_batch
    from halter.engine.scheduler import Scheduler

    fns = [halter.generate, halter.generate_batch, halter.Model.generate, halter.Model.generate_batch,
           halter.Model.__call__, halter.Model.load, halter.Model.set_decode, halter.Model.decode,
           generate, generate_batch, Scheduler.__init__, Scheduler.submit, halter.CompletionStream.__init__,
           halter.Completion.__init__, Request.__init__, halter.pull]
    assert {f.__qualname__: _bare_any(f) for f in fns if _bare_any(f)} == {}


def test_completion_and_model_properties_are_typed() -> None:
    hints = {"tokenizer": "Tokenizer", "vocab": "Vocabulary"}
    for name, want in hints.items():
        assert want in str(inspect.signature(getattr(halter.Model, name).fget).return_annotation)
    fields = {f.name: f.type for f in __import__("dataclasses").fields(halter.Completion)}
    assert fields["timings"] == "Timings" and fields["seed"] == "int | None"


def test_py_typed_marker_ships() -> None:
    assert (Path(halter.__file__).parent / "py.typed").is_file()
