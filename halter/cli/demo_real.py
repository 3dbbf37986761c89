"""The real-model part of ``halter demo``: three constrained tasks answered by SmolLM2-135M-Instruct.

Each task is a chat prompt plus a constraint — a JSON Schema (a person extracted from a
sentence), a regex (a phone number) and a GBNF grammar (yes/no with a reason) — generated
greedily, validated independently of the generation loop (``jsonschema``, ``re.fullmatch``, the
grammar's own matcher) and printed with its speed.
"""
from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "occupation": {"type": "string", "minLength": 1, "maxLength": 40},
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
    },
    "required": ["name", "age", "occupation", "city"],
    "additionalProperties": False,
}
PHONE_REGEX = r"[0-9]{3}-[0-9]{3}-[0-9]{4}"
YES_NO_GBNF = r'''root   ::= answer ", because " reason "."
answer ::= "yes" | "no"
reason ::= [a-zA-Z0-9 ,']{10,120}
'''


@dataclass(frozen=True)
class Task:
    title: str
    messages: list[dict[str, str]]
    kind: str                                   # json_schema | regex | grammar
    constraint: Any
    max_tokens: int


TASKS = (
    Task("extract a person into a JSON schema",
         [{"role": "user", "content": "Extract the person as JSON with name, age, occupation and "
                                      "city.\nText: Maria Lopez, 34, is a nurse in Madrid."}],
         "json_schema", PERSON_SCHEMA, 60),
    Task("a phone number, by regex",
         [{"role": "system", "content": "You copy phone numbers exactly as written."},
          {"role": "user", "content": "Call Bob at 555-867-5309 after six. What is Bob's number?"}],
         "regex", PHONE_REGEX, 16),
    Task("yes or no with a reason, by GBNF",
         [{"role": "user", "content": "Is the sun hotter than the moon? Answer yes or no, then "
                                      "give a short reason."}],
         "grammar", YES_NO_GBNF, 40),
)


def _checker(task: Task) -> Callable[[str], None]:
    """An independent check of a finished output; raises ``ValueError`` when it fails."""
    if task.kind == "json_schema":
        import jsonschema

        def check(text: str) -> None:
            try:
                jsonschema.validate(json.loads(text), task.constraint)
            except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
                raise ValueError(str(exc).splitlines()[0]) from None
        return check
    if task.kind == "regex":
        def check(text: str) -> None:
            if not re.fullmatch(task.constraint, text):
                raise ValueError(f"{text!r} does not match {task.constraint}")
        return check
    from halter.grammar import Grammar
    grammar = Grammar.from_gbnf(task.constraint)

    def check(text: str) -> None:
        if not grammar.matches(text):
            raise ValueError(f"{text!r} is not in the grammar")
    return check


def run_real(model: Any, *, out: Any = sys.stdout, err: Any = sys.stderr) -> int:
    """Run the three tasks greedily; prints each validated answer; returns how many passed."""
    from halter.api import generate

    passed = 0
    for i, task in enumerate(TASKS, 1):
        question = task.messages[-1]["content"]
        print(f"\n[{i}/{len(TASKS)}] {task.title}\n  prompt: {question}", file=err)
        kwargs: dict[str, Any] = {task.kind: task.constraint}
        if task.kind == "json_schema":
            kwargs["schema_options"] = {"whitespace": "compact",
                                        "prop_order": list(PERSON_SCHEMA["properties"])}
        t0 = time.perf_counter()
        c = generate(model, task.messages, max_tokens=task.max_tokens, temperature=0.0, **kwargs)
        seconds = time.perf_counter() - t0
        print(c.text, file=out, flush=True)
        rate = f"{len(c.tokens)} tokens, {len(c.tokens) / max(c.timings.decode_ms / 1000, 1e-9):.1f} tokens/s"
        if not c.complete:
            print(f"  -> incomplete after {task.max_tokens} tokens ({rate})", file=err)
            continue
        try:
            _checker(task)(c.text)
        except ValueError as exc:
            print(f"  -> FAILED the independent check: {exc}", file=err)
            continue
        passed += 1
        how = {"json_schema": "valid JSON, passes the schema (jsonschema)",
               "regex": "matches the regex (re.fullmatch)",
               "grammar": "in the grammar (halter's GBNF matcher)"}[task.kind]
        print(f"  -> {how}; {rate}, {seconds:.1f} s with the prompt", file=err)
    return passed
