"""The server's engine side: a loaded model, its ``Scheduler``, and requests turned into jobs.

``Backend.submit(spec, sink)`` resolves the constraint with halter's own ``resolve_constraint``
(compiled grammars are kept per model), renders chat messages with the model's template
(``halter.api._prompt_args``), tokenizes, checks the context, builds each choice's sampler from
``SamplingParams`` and queues one scheduler job per choice. It runs on a worker thread, so a slow
grammar compile never blocks the event loop or the decode loop; every failure becomes an
``ApiError`` with OpenAI's status code.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from halter.api import _prompt_args, resolve_constraint
from halter.chat import ChatTemplateError, chat_template_of
from halter.completion import Completion
from halter.constraints import Constraint
from halter.engine.generation import Request
from halter.engine.scheduler import Job, QueueFullError, Scheduler
from halter.errors import GrammarError, HalterError, LimitError, SchemaError
from halter.sampling import SamplingParams
from halter.server.protocol import ApiError, GenSpec
from halter.server.tools import tool_constraint, tools_system_message

__all__ = ["Backend", "CHATML", "Submitted"]

# Used when neither the GGUF file nor --chat-template gives one (llama-server falls back to ChatML too).
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass
class Submitted:
    """The jobs of one request (one per choice) and what is needed to report on them."""

    jobs: list[Job]
    constraint: Constraint
    prompt_tokens: int
    tools: bool
    created: int

    def completion(self, job: Job) -> Completion:
        """The job's ``Completion`` (``complete`` says whether the grammar accepted the whole output)."""
        assert job.result is not None
        return job.result

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()


class Backend:
    """A model served by a scheduler; ``name`` is what ``/v1/models`` lists."""

    def __init__(self, model: Any, *, n_parallel: int, max_queue: int = 64, name: str | None = None,
                 chat_template: str | None = None, n_predict: int = -1) -> None:
        self.model = model
        self.name = name or os.path.basename(getattr(model, "path", "model"))
        self.n_predict = n_predict
        self.scheduler = Scheduler(model, n_parallel=n_parallel, max_queue=max_queue).start()
        self.created = int(time.time())
        self._compile_lock = threading.Lock()
        self.dispatch: Any = None                       # the app's event carrier (halter.server.app)
        self._template = chat_template
        if self._template is None:
            try:
                self._template = chat_template_of(model)
            except (ChatTemplateError, HalterError, OSError):
                self._template = CHATML

    def close(self) -> None:
        self.scheduler.close()

    # -- requests -----------------------------------------------------------------------------
    def submit(self, spec: GenSpec, sink: Callable[[int, Any], None]) -> Submitted:
        """Queue ``spec``'s choices; events reach ``sink(choice_index, event)`` from the decode thread."""
        constraint = self._constraint(spec)
        tokens = self._tokens(spec)
        n_ctx = self.model.n_ctx
        if len(tokens) > n_ctx - 4:
            raise ApiError(413, f"the prompt has {len(tokens)} tokens; a sequence's context ({n_ctx} tokens: "
                           f"--ctx-size / --parallel) holds at most {n_ctx - 4}", param="messages" if spec.chat else "prompt",
                           code="context_length_exceeded")
        max_tokens = spec.max_tokens
        if max_tokens is None:
            room = n_ctx - len(tokens)
            max_tokens = room if self.n_predict < 0 else min(self.n_predict, room)
        params = SamplingParams(**spec.sampling)
        jobs: list[Job] = []
        try:
            for i in range(spec.n):
                seed = None if spec.seed is None else (spec.seed + i) % 2**32
                req = Request(tokens, max_tokens=max_tokens, sampling=params, seed=seed,
                              grammar=constraint.compiled, parse=constraint.parse, stop=spec.stop,
                              grammar_first=spec.grammar_first)
                jobs.append(self.scheduler.submit(req, logprobs=spec.logprobs,
                                                  sink=lambda ev, i=i: sink(i, ev)))
        except QueueFullError as err:
            for job in jobs:
                job.cancel()
            raise ApiError(429, f"the server is busy: {err}", code="queue_full") from None
        except (ValueError, TypeError) as err:
            for job in jobs:
                job.cancel()
            raise ApiError(400, str(err), param=next((f for f in ("logit_bias", "stop", "max_tokens")
                                                      if f in str(err)), None)) from None
        return Submitted(jobs, constraint, len(tokens), spec.tool_choice is not None, int(time.time()))

    def _constraint(self, spec: GenSpec) -> Constraint:
        param = spec.constraint_param
        try:
            with self._compile_lock:
                if spec.tool_choice is not None:
                    return tool_constraint(self.model, spec.tools, spec.tool_choice)
                return resolve_constraint(self.model, schema_options=spec.schema_options or None,
                                          **spec.constraint)
        except GrammarError as err:
            raise ApiError(400, f"invalid grammar: {err}", param=param, code="invalid_grammar") from None
        except LimitError as err:
            raise ApiError(400, str(err), param=param, code="limit_exceeded") from None
        except SchemaError as err:
            keyword = f" (keyword '{err.keyword}')" if getattr(err, "keyword", None) else ""
            raise ApiError(400, f"invalid JSON schema: {err}{keyword}", param=param, code="invalid_schema") from None
        except (HalterError, ValueError, TypeError, RecursionError) as err:
            raise ApiError(400, f"invalid constraint: {err}", param=param) from None

    def _tokens(self, spec: GenSpec) -> list[int]:
        prompt = spec.prompt
        extra: dict[str, Any] = {}
        if spec.chat and spec.tools:
            if "tools" in (self._template or ""):
                extra["tools"] = [{"type": "function", "function": f} for f in spec.tools]
            elif spec.tool_choice is not None:
                note = {"role": "system", "content": tools_system_message(spec.tools, spec.tool_choice)}
                if prompt and prompt[0].get("role") == "system":
                    prompt = [{**prompt[0], "content": prompt[0]["content"] + "\n\n" + note["content"]}, *prompt[1:]]
                else:
                    prompt = [note, *prompt]
        try:
            text, kw = _prompt_args(self.model, prompt, self._template if spec.chat else None, **extra)
            if isinstance(text, list):
                if any(not 0 <= t < self.model.n_vocab for t in text):
                    raise ValueError(f"token ids must be in 0..{self.model.n_vocab - 1}")
                return text
            tokens = list(self.model.tokenizer.encode(text, **kw))
        except ChatTemplateError as err:
            raise ApiError(400, str(err), param="messages") from None
        except (HalterError, ValueError, TypeError) as err:
            raise ApiError(400, str(err), param="messages" if spec.chat else "prompt") from None
        if not tokens:
            raise ApiError(400, "the prompt is empty", param="prompt")
        return tokens
