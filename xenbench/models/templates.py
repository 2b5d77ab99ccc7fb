"""A model folder's chat template rendered under bounds: what a folder from the hub runs is limited in time and size.

transformers renders a chat template in jinja2's immutable sandbox (no file, import or attribute escape; ``range`` is
capped at 100,000 items), but a template may still loop without end (two nested loops of 100,000 are 10^10 steps)
or build a huge text. :func:`render_chat` renders through the tokenizer's own ``apply_chat_template`` (so the text is
exactly what sentence-transformers feeds the model) with three bounds, each refused in one line naming the file that
holds the template:

* the template text is at most :data:`MAX_TEMPLATE_CHARS` characters;
* one render runs at most :data:`RENDER_SECONDS` seconds: a trace function on the template's own code (jinja2 compiles
  it to Python code named ``<template>``) stops it at the first step past the deadline; real templates render in
  well under a millisecond;
* the rendered text is at most :data:`MAX_RENDER_CHARS` characters longer than the texts it was given.

Any error the template raises (``raise_exception``, an undefined name, a type error) becomes one line naming the file.
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from xenbench.errors import DataError

__all__ = ["MAX_TEMPLATE_CHARS", "RENDER_SECONDS", "MAX_RENDER_CHARS", "render_chat", "template_file"]

#: The longest chat template rendered (characters); published templates are a few KB.
MAX_TEMPLATE_CHARS = 2**18
#: Seconds one render may run.
RENDER_SECONDS = 2.0
#: Characters a rendered text may add to the messages' texts.
MAX_RENDER_CHARS = 2**20


class _Deadline(BaseException):
    """Raised inside a template's code past its deadline (a BaseException: no ``except Exception`` swallows it)."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Stop code compiled from a jinja2 template (file name ``<template>``) at its first line or call past
    ``seconds`` from now; other frames run untraced (one check per call), so the cost is a few µs per render."""
    stop = time.monotonic() + seconds

    def in_template(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > stop:
            raise _Deadline
        return in_template

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != "<template>":
            return None
        return in_template(frame, event, arg)

    before = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(before)


def template_file(where: str | Path) -> Path:
    """The file of folder ``where`` that holds its chat template: ``chat_template.jinja`` if there is one, else
    ``tokenizer_config.json`` (a ``where`` that is not a folder is returned as it is)."""
    folder = Path(where)
    if not folder.is_dir():
        return folder
    jinja = folder / "chat_template.jinja"
    return jinja if jinja.is_file() else folder / "tokenizer_config.json"


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, Any]], where: str | Path, **kwargs: Any) -> str:
    """``tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)`` under the bounds of the module docstring.

    Raises
    ------
    DataError
        Naming the template's file (:func:`template_file` of ``where``): a template too long, a render past
        :data:`RENDER_SECONDS` or :data:`MAX_RENDER_CHARS`, any error the template raises, or a result that is not text.
    """
    file = template_file(where)
    template = getattr(tokenizer, "chat_template", None)
    texts = [template] if isinstance(template, str) else list((template or {}).values()) if isinstance(
        template, Mapping) else []
    longest = max((len(t) for t in texts if isinstance(t, str)), default=0)
    if longest > MAX_TEMPLATE_CHARS:
        raise DataError(file, f"the chat template has {longest:,} characters: at most {MAX_TEMPLATE_CHARS:,} are "
                              "rendered (a published template has a few thousand)")
    given = sum(len(str(m.get("content", ""))) for m in messages)
    try:
        with _deadline(RENDER_SECONDS):
            text = tokenizer.apply_chat_template(list(messages), tokenize=False, **kwargs)
    except _Deadline:
        raise DataError(file, f"the chat template renders for more than {RENDER_SECONDS:g} s (a loop without end?): "
                              "expected a template that renders in milliseconds") from None
    except MemoryError:
        raise DataError(file, "the chat template exhausts memory while rendering") from None
    except Exception as err:  # whatever the template raises: jinja2's errors, raise_exception, a TypeError, ...
        first = (str(err).splitlines() or [""])[0][:300]
        raise DataError(file, f"the chat template fails to render sentence-transformers' query/document messages "
                              f"({type(err).__name__}: {first})") from None
    if not isinstance(text, str):
        raise DataError(file, f"the chat template renders a {type(text).__name__}, not text")
    if len(text) > given + MAX_RENDER_CHARS:
        raise DataError(file, f"the chat template renders {len(text):,} characters around {given:,} of text: at most "
                              f"{MAX_RENDER_CHARS:,} more are accepted")
    return text
