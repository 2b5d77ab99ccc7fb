"""The README and docs/ hold together: every internal link and anchor resolves, every command they show exists (make
targets, `xenbench` subcommands, flags and notebook parameters, benchmark scripts and their flags), and the README
stays a front door."""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import unicodedata
from pathlib import Path

import pytest

from xenbench.cli import build_parser
from xenbench._io import REPO_ROOT
from xenbench.harness import list_notebooks, load_spec, parse_cli_params

PAGES = [REPO_ROOT / "README.md", REPO_ROOT / "ARCHITECTURE.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
IDS = [p.relative_to(REPO_ROOT).as_posix() for p in PAGES]
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)  # indented too (inside a list)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (a link inside code is not a link)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, ``_``, ``-`` and spaces kept),
    spaces to hyphens."""
    text = unicodedata.normalize("NFC", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeated headings numbered as GitHub numbers them (``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_follows_github():
    assert slug("Your own data, step by step") == "your-own-data-step-by-step"
    assert slug("Cross-encoders (bundled, trained here)") == "cross-encoders-bundled-trained-here"
    assert slug("Many machines: Ray") == "many-machines-ray"
    assert slug("The `xenbench` command") == "the-xenbench-command"


def broken_links(page: Path, root: Path = REPO_ROOT) -> list[str]:
    """Each link of ``page`` (outside code) to a file missing under ``root`` or to a heading its file lacks."""
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check offline
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists() or root.resolve() not in dest.parents:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_internal_link_and_anchor_resolves(page):
    broken = broken_links(page)
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_check_catches_a_missing_file_or_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A\n\n## Set-up\n\n```bash\n## not a heading\n```\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/A.md#set-up) [top](#r) `[code](nowhere.md)` [web](https://example.org/x)\n\n# R\n"
                    "[gone](docs/B.md) [bad](docs/A.md#not-a-heading) [self](#nope)\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["docs/B.md: no such file in the repository",
                                            "docs/A.md#not-a-heading: no heading #not-a-heading in A.md",
                                            "#nope: no heading #nope in README.md"]


# --- commands -----------------------------------------------------------------------------------------------------


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO_ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def _shell_commands(text: str) -> list[list[str]]:
    """The commands of every ```bash block: continuation lines joined, comments dropped, one token list each."""
    out = []
    for m in re.finditer(r"^[ \t]*```(?:bash|sh|shell)\n(.*?)^[ \t]*```", text, re.S | re.M):
        block = re.sub(r"\\\n\s*", " ", m.group(1))
        out += [tokens for line in block.splitlines() if (tokens := shlex.split(line, comments=True))]
    return out


def _inline_commands(text: str) -> list[list[str]]:
    """Inline code spans that start with a command: `xenbench ...`, `make ...`, `python benchmarks/...`."""
    spans = re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    return [_words(s) for s in spans if re.match(r"(\.venv/bin/)?xenbench |make [a-z]|python benchmarks/", s)]


def _words(span: str) -> list[str]:
    """A span's words as a shell reads them (``make lab LAB_ARGS="--port 9999"`` is three), or split on spaces when
    it is not shell syntax (a placeholder such as ``quick|full``)."""
    try:
        return shlex.split(span)
    except ValueError:
        return span.split()


def _subparser(parser: argparse.ArgumentParser, tokens: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser that ``tokens`` (after the program name) reach, and the command path taken."""
    path = []
    while tokens:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or tokens[0].startswith("-"):
            break
        assert tokens[0] in subs[0].choices, f"`xenbench {' '.join(path + tokens[:1])}`: no such command"
        path.append(tokens[0])
        parser, tokens = subs[0].choices[tokens[0]], tokens[1:]
    return parser, path


def _flags(tokens: list[str]) -> list[str]:
    """Every ``--flag`` of an inline span, with placeholders' brackets and alternatives (``--a\\|--b``) taken apart."""
    out = []
    for token in tokens:
        for part in re.split(r"\\?\||/", token):
            part = part.strip("[](),.;:")
            if part.startswith("--"):
                out.append(part.split("=", 1)[0])
    return out


def _check_xenbench(tokens: list[str], shown: str, *, full: bool) -> None:
    parser = build_parser()
    if full:  # a whole command line: argparse itself must accept it
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                args = parser.parse_args(tokens)
            except SystemExit:
                pytest.fail(f"{shown}: {err.getvalue().strip().splitlines()[-1]}")
        if args.cmd in ("run", "sweep"):
            assert args.notebook in [*list_notebooks(), "all"], f"{shown}: no notebook {args.notebook}"
            pairs = [(p[0], p[1]) for p in args.param] if args.cmd == "run" else []
            # every -p names a parameter of that notebook, with a valid value
            parse_cli_params(load_spec(args.notebook), pairs)
        return
    sub, _ = _subparser(parser, tokens)
    known = {s for a in sub._actions for s in a.option_strings}
    for flag in _flags(tokens):
        assert flag in known, f"{shown}: {flag} is not an option of that command"


def _check_script(tokens: list[str], shown: str) -> None:
    script = REPO_ROOT / tokens[0]
    assert script.is_file(), f"{shown}: no {tokens[0]}"
    source = script.read_text(encoding="utf-8")
    for flag in _flags(tokens[1:]):
        assert f'"{flag}"' in source, f"{shown}: {tokens[0]} has no option {flag}"


def _check(tokens: list[str], shown: str, *, full: bool) -> bool:
    """Check one command; False when it is not one of ours (cp, ray, pip, ...)."""
    if tokens[0] in ("xenbench", ".venv/bin/xenbench"):
        _check_xenbench(tokens[1:], shown, full=full)
    elif tokens[0] == "make":
        targets = [t for t in tokens[1:] if "=" not in t]
        assert targets and set(targets) <= _make_targets(), f"{shown}: no such make target"
    elif tokens[0] == "python" and len(tokens) > 1 and tokens[1].startswith("benchmarks/"):
        _check_script(tokens[1:], shown)
    else:
        return False
    return True


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_command_shown_exists(page):
    text = page.read_text(encoding="utf-8")
    checked = 0
    for tokens in _shell_commands(text):
        checked += _check(tokens, f"{page.name}: `{shlex.join(tokens)}`", full=True)
    for tokens in _inline_commands(text):
        checked += _check(tokens, f"{page.name}: `{' '.join(tokens)}`", full=False)
    if page.name in ("README.md", "USAGE.md"):
        assert checked >= 5, f"{page.name}: the command check found only {checked} commands"


def test_the_command_check_catches_what_does_not_exist():
    with pytest.raises(AssertionError, match="no such command"):
        _check(["xenbench", "frobnicate"], "x", full=False)
    with pytest.raises(AssertionError, match="--no-such-flag is not an option"):
        _check(["xenbench", "score", "MODEL", "[--no-such-flag]"], "x", full=False)
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --nope"):
        _check(["xenbench", "findings", "--nope"], "x", full=True)
    with pytest.raises(Exception, match="no_such_param"):
        _check(["xenbench", "run", "03_adacur_rounds", "-p", "no_such_param", "1"], "x", full=True)
    with pytest.raises(AssertionError, match="no such make target"):
        _check(["make", "deploy"], "x", full=False)
    with pytest.raises(AssertionError, match="has no option --nope"):
        _check(["python", "benchmarks/run_all.py", "--nope"], "x", full=True)
    assert _check(["xenbench", "data", "build-wordnet", "--wordnet-dir", "/x"], "x", full=True)
    assert not _check(["ray", "start", "--head"], "x", full=True)


# --- the README is a front door -----------------------------------------------------------------------------------


def test_readme_is_short_and_in_the_order_a_newcomer_needs():
    readme = REPO_ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert readme.stat().st_size <= 20_000, f"README.md is {readme.stat().st_size} bytes: move detail to docs/"
    first = text.split("\n## ", 1)[0]
    assert "**xenbench** is a workbench" in first  # what it is comes first ...
    commands = _shell_commands(first)
    # ... then the commands: the set-up every .venv/bin command below needs, the demo and the tests
    assert commands[:3] == [["make", "setup"], ["make", "demo"], ["make", "test"]]
    headings = re.findall(r"^## (.+)$", text, re.M)
    order = ["The venv and JupyterLab", "Your data and your CE: a first run", "Notebooks",
             "What we found on the bundled data", "Documentation"]
    assert headings == order
    for page in sorted((REPO_ROOT / "docs").glob("*.md")):  # every docs page is reachable from the README
        assert f"(docs/{page.name})" in text, page.name
