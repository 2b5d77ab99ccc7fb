"""WordNet-EL: a ZESHEL-shaped zero-shot entity-linking benchmark derived from WordNet 3.0.

Each noun or verb lexicographer file (``noun.food``, ``verb.contact``, ...) is a *domain*.

* **Items** are the domain's synsets: ``_id`` is ``f"{offset:08d}-{pos}"`` (e.g. ``05650329-n``),
  ``title`` the synset's lemmas (underscores as spaces) joined by ``", "`` in file order, and
  ``text`` the definition part of the gloss (quoted examples and trailing separators dropped).
* **Queries** are the gloss's quoted example sentences that mention one of the synset's lemmas.
  ``_id`` is ``f"{item_id}:{k}"`` with ``k`` the 0-based index of the example in the gloss,
  ``mention`` the ``[start, end)`` character span of the occurrence, and the gold item is the
  source synset. Examples with no mention are dropped.

Matching rule (deterministic, case-insensitive, whole word: no letter, digit or ``_`` on
either side of the match). A lemma matches as itself or as one of these forms:

* every form that WordNet's exception list (``noun.exc`` / ``verb.exc``) maps to the lemma;
* regular inflections of the *head word* -- the last word of a noun lemma, the first word of a
  verb lemma (``attorney general`` -> ``attorney generals``, ``take a breath`` ->
  ``takes a breath``); the head word also takes its own exception-list forms
  (``took a breath``):

  - nouns and verbs: ``+s``, ``+es``, ``y -> ies``;
  - verbs only: ``+ed``, ``+d`` (after ``e``), ``y -> ied``, ``+ing``, ``e -> ing`` (e-drop),
    and consonant doubling before ``ed``/``ing`` when the word ends consonant-vowel-consonant
    (``run`` -> ``running``, ``stop`` -> ``stopped``; not after ``w``, ``x``, ``y``).

The suffixes are added without checking spelling rules further: a spurious form such as
``runed`` is harmless because it must still occur in the sentence. When several forms of
several lemmas match, the longest match wins, then the earliest.

The benchmark is written in BEIR layout, one folder per domain (``corpus.jsonl``,
``queries.jsonl`` with a ``mention`` field, ``qrels/test.tsv``), plus ``domains.tsv``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from xenbench._io import REPO_ROOT, write_text_atomic
from xenbench.errors import DataError, ParameterError

DEFAULT_WORDNET_DIR = Path("/usr/share/wordnet")
BUNDLED_DIR = REPO_ROOT / "data" / "wordnet-el"

#: Domains held out of training and used for zero-shot evaluation (role ``test``).
HELD_OUT_DOMAINS: tuple[str, ...] = ("noun.cognition", "noun.food", "verb.contact", "verb.cognition")

#: Domains with fewer queries than this are not built: too few to evaluate anything.
MIN_QUERIES = 20

# Debian's wordnet-base ships no ``lexnames`` file, so the table from lexnames(5WN) is built in;
# a ``lexnames`` file in the WordNet folder takes precedence when present.
_LEXNAMES: dict[int, str] = dict(enumerate(
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl".split()
))

_POS_FILES = {"noun": ("data.noun", "noun.exc", "n"), "verb": ("data.verb", "verb.exc", "v")}
_EXAMPLE = re.compile(r'"([^"]*)"')
_VOWELS = set("aeiou")


@dataclass(frozen=True)
class Synset:
    """One synset as read from a WordNet data file."""

    item_id: str
    lexfile_id: int
    lemmas: tuple[str, ...]  # underscores already replaced by spaces
    definition: str
    examples: tuple[str, ...]


def split_gloss(gloss: str) -> tuple[str, list[str]]:
    """Split a WordNet gloss into its definition and its quoted example sentences.

    Parameters
    ----------
    gloss : str
        Text after ``|`` in a data line, e.g. ``'a run; "she runs daily"; "go"'``.

    Returns
    -------
    definition : str
        Everything before the first example, without trailing ``;`` and spaces.
    examples : list of str
        The quoted strings from the first example on, stripped, in gloss order.
    """
    gloss = gloss.strip()
    # Examples start at the first quote that opens a "; "-separated part; quotes inside the
    # definition itself (rare) must not cut it short.
    start = 0 if gloss.startswith('"') else gloss.find('; "')
    if start < 0:
        return gloss.rstrip("; "), []
    examples = [m.strip() for m in _EXAMPLE.findall(gloss[start:])]
    return gloss[:start].rstrip("; "), examples


def parse_data_file(path: Path) -> list[Synset]:
    """Read every synset of a WordNet ``data.noun`` / ``data.verb`` file, in file order.

    Parameters
    ----------
    path : Path
        The data file (format described in wndb(5WN)).

    Returns
    -------
    list of Synset

    Raises
    ------
    DataError
        If a data line is malformed; the error names the file and the 1-based line.
    """
    synsets = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.startswith("  "):  # licence header
                continue
            try:
                synsets.append(_parse_line(line))
            except (ValueError, IndexError) as exc:
                raise DataError(path, f"malformed synset line ({exc})", line=number) from None
    return synsets


def _parse_line(line: str) -> Synset:
    # wndb(5WN): offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt ... | gloss
    head, sep, gloss = line.partition(" | ")
    if not sep:
        raise ValueError("no ' | ' before the gloss")
    fields = head.split()
    offset, lexfile_id, pos, count = int(fields[0]), int(fields[1]), fields[2], int(fields[3], 16)
    if len(fields[0]) != 8 or pos not in {"n", "v", "a", "s", "r"} or count < 1:
        raise ValueError(f"bad synset header {' '.join(fields[:4])!r}")
    words = fields[4:4 + 2 * count:2]
    if len(words) != count or not fields[4 + 2 * count].isdigit():
        raise ValueError(f"expected {count} word/lex_id pairs then a pointer count")
    definition, examples = split_gloss(gloss)
    return Synset(
        item_id=f"{offset:08d}-{pos}",
        lexfile_id=lexfile_id,
        lemmas=tuple(w.replace("_", " ") for w in words),
        definition=definition,
        examples=tuple(examples),
    )


def read_exceptions(path: Path) -> dict[str, set[str]]:
    """Invert a WordNet exception list: base form -> its irregular inflected forms.

    Parameters
    ----------
    path : Path
        ``noun.exc`` or ``verb.exc``; each line is ``inflected base [base ...]``.

    Returns
    -------
    dict of str to set of str
        Lower-case, underscores as spaces.
    """
    forms: dict[str, set[str]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            words = [w.replace("_", " ") for w in line.lower().split()]
            if len(words) < 2:
                raise DataError(path, "expected 'inflected base [base ...]'", line=number)
            for base in words[1:]:
                forms.setdefault(base, set()).add(words[0])
    return forms


def regular_inflections(word: str, pos: str) -> set[str]:
    """Regular inflections of one word (see the module docstring for the rule).

    Parameters
    ----------
    word : str
        Lower-case word.
    pos : {"n", "v"}
        Part of speech; only verbs get ``-ed`` and ``-ing`` forms.

    Returns
    -------
    set of str
        The word's regular inflections, not including the word itself.
    """
    forms = {word + "s", word + "es"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ies")
    if pos != "v":
        return forms
    forms |= {word + "ed", word + "ing"}
    if word.endswith("e"):
        forms |= {word + "d", word[:-1] + "ing"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ied")
    if (len(word) >= 3 and word[-1] not in _VOWELS | set("wxy") and word[-2] in _VOWELS
            and word[-3] not in _VOWELS):
        forms |= {word + word[-1] + "ed", word + word[-1] + "ing"}
    return forms


def lemma_forms(lemma: str, pos: str, exceptions: dict[str, set[str]]) -> set[str]:
    """Every lower-case surface form a lemma may take in an example sentence.

    Parameters
    ----------
    lemma : str
        Lemma with spaces (not underscores).
    pos : {"n", "v"}
        Part of speech; decides the head word (last for nouns, first for verbs).
    exceptions : dict of str to set of str
        Output of :func:`read_exceptions` for that part of speech.

    Returns
    -------
    set of str
    """
    lemma = lemma.lower()
    words = lemma.split(" ")
    head = len(words) - 1 if pos == "n" else 0
    forms = {lemma} | exceptions.get(lemma, set())
    for form in regular_inflections(words[head], pos) | exceptions.get(words[head], set()):
        forms.add(" ".join(words[:head] + [form] + words[head + 1:]))
    return forms


def find_mention(text: str, lemmas: tuple[str, ...], pos: str,
                 exceptions: dict[str, set[str]]) -> tuple[int, int] | None:
    """Locate the mention of a synset in an example sentence.

    Parameters
    ----------
    text : str
        Example sentence.
    lemmas : tuple of str
        The synset's lemmas (spaces, not underscores).
    pos : {"n", "v"}
        Part of speech of the synset.
    exceptions : dict of str to set of str
        Exception forms for that part of speech.

    Returns
    -------
    tuple of int or None
        ``(start, end)`` with ``end`` exclusive: the longest match, then the earliest;
        ``None`` when no form of any lemma occurs as a whole word.
    """
    forms = set().union(*(lemma_forms(lemma, pos, exceptions) for lemma in lemmas))
    # One alternation, longest form first, scanned at every start position: finds every
    # (start, longest form there) pair; sorted() makes the pattern independent of set order.
    pattern = "|".join(re.escape(f) for f in sorted(forms, key=lambda f: (-len(f), f)))
    best = None
    lowered = text.lower()
    for match in re.finditer(rf"(?<![\w])(?=({pattern})(?![\w]))", lowered):
        span = (match.start(1), match.end(1))
        if best is None or span[1] - span[0] > best[1] - best[0]:
            best = span
    return best


def _lexnames(wordnet_dir: Path) -> dict[int, str]:
    path = wordnet_dir / "lexnames"
    if not path.exists():
        return _LEXNAMES
    names = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if len(fields) != 3 or not fields[0].isdigit():
                raise DataError(path, "expected 'number<TAB>name<TAB>category'", line=number)
            names[int(fields[0])] = fields[1]
    return names


def _write_lines(path: Path, lines: list[str]) -> None:
    write_text_atomic(path, (line + "\n" for line in lines))


def _domain_records(synsets: list[Synset], pos: str, exceptions: dict[str, set[str]]
                    ) -> tuple[list[str], list[str], list[str]]:
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for synset in synsets:
        corpus.append(json.dumps({"_id": synset.item_id, "title": ", ".join(synset.lemmas),
                                  "text": synset.definition}, ensure_ascii=False))
        for k, example in enumerate(synset.examples):
            span = find_mention(example, synset.lemmas, pos, exceptions)
            if span is None:
                continue
            query_id = f"{synset.item_id}:{k}"
            queries.append(json.dumps({"_id": query_id, "text": example, "mention": list(span)},
                                      ensure_ascii=False))
            qrels.append(f"{query_id}\t{synset.item_id}\t1")
    return corpus, queries, qrels


def build_wordnet_el(wordnet_dir: Path = DEFAULT_WORDNET_DIR, out_dir: Path = BUNDLED_DIR,
                     domains: list[str] | None = None) -> pd.DataFrame:
    """Derive the WordNet-EL benchmark from a WordNet 3.0 installation and write it to disk.

    Parameters
    ----------
    wordnet_dir : Path
        Folder holding ``data.noun``, ``data.verb``, ``noun.exc`` and ``verb.exc``
        (``apt-get install wordnet-base`` puts them in ``/usr/share/wordnet``).
    out_dir : Path
        Output root; one BEIR folder per domain plus ``domains.tsv`` are written there.
        Files are replaced atomically and regeneration is byte-identical.
    domains : list of str, optional
        Lexicographer file names to build (e.g. ``["verb.weather"]``). Default: every noun and
        verb domain with at least :data:`MIN_QUERIES` queries. Requested domains are written
        regardless of their query count.

    Returns
    -------
    pandas.DataFrame
        One row per written domain: ``domain``, ``role``, ``items``, ``queries``,
        ``source_lexfile_id`` (also written to ``domains.tsv``).

    Raises
    ------
    DataError
        If a WordNet file is missing or malformed.
    ParameterError
        If ``domains`` names something that is not a noun or verb lexicographer file.
    """
    wordnet_dir, out_dir = Path(wordnet_dir), Path(out_dir)
    lexnames = _lexnames(wordnet_dir)
    ids = {name: number for number, name in lexnames.items() if name.split(".")[0] in _POS_FILES}
    wanted = sorted(ids, key=ids.get) if domains is None else list(domains)
    unknown = [d for d in wanted if d not in ids]
    if unknown:
        raise ParameterError("domains", f"noun or verb lexicographer file names {sorted(ids)}",
                             unknown, owner="build_wordnet_el")

    by_domain: dict[str, list[Synset]] = {d: [] for d in wanted}
    exceptions: dict[str, dict[str, set[str]]] = {}
    for kind in sorted({d.split(".")[0] for d in wanted}):
        data_name, exc_name, _ = _POS_FILES[kind]
        for name in (data_name, exc_name):
            if not (wordnet_dir / name).is_file():
                raise DataError(wordnet_dir / name, "expected a WordNet 3.0 database file "
                                "(apt-get install wordnet-base puts them in /usr/share/wordnet)")
        exceptions[kind] = read_exceptions(wordnet_dir / exc_name)
        for synset in parse_data_file(wordnet_dir / data_name):
            name = lexnames.get(synset.lexfile_id)
            if name in by_domain:
                by_domain[name].append(synset)

    rows = []
    for domain in tqdm(wanted, desc="WordNet-EL domains", unit="domain"):
        kind = domain.split(".")[0]
        corpus, queries, qrels = _domain_records(by_domain[domain], _POS_FILES[kind][2],
                                                 exceptions[kind])
        if domains is None and len(queries) < MIN_QUERIES:
            continue
        folder = out_dir / domain
        _write_lines(folder / "corpus.jsonl", corpus)
        _write_lines(folder / "queries.jsonl", queries)
        _write_lines(folder / "qrels" / "test.tsv", qrels)
        rows.append({"domain": domain, "role": "test" if domain in HELD_OUT_DOMAINS else "train",
                     "items": len(corpus), "queries": len(queries),
                     "source_lexfile_id": ids[domain]})
    table = pd.DataFrame(rows, columns=["domain", "role", "items", "queries", "source_lexfile_id"])
    _write_lines(out_dir / "domains.tsv", table.to_csv(sep="\t", index=False).splitlines())
    return table


def list_domains(root: Path = BUNDLED_DIR) -> pd.DataFrame:
    """Read the domain table of a built WordNet-EL benchmark.

    Parameters
    ----------
    root : Path
        Benchmark root holding ``domains.tsv`` (default: the bundled copy).

    Returns
    -------
    pandas.DataFrame
        Columns ``domain``, ``role``, ``items``, ``queries``, ``source_lexfile_id``.

    Raises
    ------
    DataError
        If ``domains.tsv`` is missing or lacks a column.
    """
    path = Path(root) / "domains.tsv"
    if not path.is_file():
        raise DataError(path, "expected the WordNet-EL domain table; run build_wordnet_el first")
    table = pd.read_csv(path, sep="\t", dtype={"domain": str, "role": str})
    missing = {"domain", "role", "items", "queries", "source_lexfile_id"} - set(table.columns)
    if missing:
        raise DataError(path, f"missing columns {sorted(missing)}", line=1)
    return table
