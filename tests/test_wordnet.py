"""Tests of the WordNet-EL benchmark builder and of the committed data in data/wordnet-el."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xenbench.errors import DataError
from xenbench.data.wordnet import (
    BUNDLED_DIR,
    DEFAULT_WORDNET_DIR,
    HELD_OUT_DOMAINS,
    build_wordnet_el,
    lemma_forms,
    list_domains,
    read_exceptions,
    split_gloss,
)

HAVE_WORDNET = (DEFAULT_WORDNET_DIR / "data.verb").is_file()
NO_WORDNET = f"WordNet 3.0 is not installed in {DEFAULT_WORDNET_DIR} (apt-get install wordnet-base)"

# Lexicographer file ids (lexnames(5WN)): 03 noun.Tops, 05 noun.animal, 38 verb.motion.
DATA_NOUN = (
    "  1 licence header lines start with two spaces  \n"
    "00001740 03 n 02 physical_entity 0 thing 0 000 | an entity that exists; "
    '"every Physical Entity casts a shadow"; "things fall apart"  \n'
    "00002000 05 n 02 mouse 0 house_mouse 0 001 @ 00001740 n 0000 | a small rodent; "
    '"two mice ran; a house mouse too"; "a housemouse"  \n'
)
DATA_VERB = (
    "00003000 38 v 01 run 0 000 01 + 02 00 | move fast; "
    '"she runs daily"; "he ran home"; "the rerun aired"; "Running late"  \n'
)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def tiny_wordnet(tmp_path: Path) -> Path:
    folder = tmp_path / "wn"
    folder.mkdir()
    (folder / "data.noun").write_text(DATA_NOUN, encoding="utf-8")
    (folder / "data.verb").write_text(DATA_VERB, encoding="utf-8")
    (folder / "noun.exc").write_text("mice mouse\n", encoding="utf-8")
    (folder / "verb.exc").write_text("ran run\n", encoding="utf-8")
    return folder


@pytest.mark.skipif(not HAVE_WORDNET, reason=NO_WORDNET)
def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    build_wordnet_el(DEFAULT_WORDNET_DIR, tmp_path, domains=["verb.weather"])
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        fresh = (tmp_path / "verb.weather" / name).read_bytes()
        assert fresh == (BUNDLED_DIR / "verb.weather" / name).read_bytes(), name


def test_split_gloss() -> None:
    assert split_gloss('a run; "she runs"; "go"  ') == ("a run", ["she runs", "go"])
    assert split_gloss("no examples; just a definition;  ") == ("no examples; just a definition", [])
    # Only a quote opening a "; "-separated part starts the examples.
    assert split_gloss('a "quoted" word; "ex"') == ('a "quoted" word', ["ex"])


def test_lemma_forms() -> None:
    assert {"run", "runs", "running", "ran"} <= lemma_forms("run", "v", {"run": {"ran"}})
    assert "running" not in lemma_forms("run", "n", {})
    assert {"takes a breath", "took a breath"} <= lemma_forms("take a breath", "v", {"take": {"took"}})
    assert {"attorney generals", "attorneys general"} <= lemma_forms(
        "attorney general", "n", {"attorney general": {"attorneys general"}})
    assert {"making", "stopped", "carried", "carries"} <= (
        lemma_forms("make", "v", {}) | lemma_forms("stop", "v", {}) | lemma_forms("carry", "v", {}))


def test_build_on_synthetic_wordnet(tiny_wordnet: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    table = build_wordnet_el(tiny_wordnet, out, domains=["noun.Tops", "noun.animal", "verb.motion"])
    assert table[["domain", "items", "queries"]].values.tolist() == [
        ["noun.Tops", 1, 2], ["noun.animal", 1, 1], ["verb.motion", 1, 3]]

    assert _jsonl(out / "noun.Tops" / "corpus.jsonl") == [
        {"_id": "00001740-n", "title": "physical entity, thing", "text": "an entity that exists"}]
    assert _jsonl(out / "noun.Tops" / "queries.jsonl") == [
        {"_id": "00001740-n:0", "text": "every Physical Entity casts a shadow", "mention": [6, 21]},
        {"_id": "00001740-n:1", "text": "things fall apart", "mention": [0, 6]},
    ]
    # The longer "house mouse" beats the earlier exception form "mice"; "housemouse" is no match.
    assert _jsonl(out / "noun.animal" / "queries.jsonl") == [
        {"_id": "00002000-n:0", "text": "two mice ran; a house mouse too", "mention": [16, 27]}]
    # "rerun" is not a whole-word match, so example 2 is dropped.
    assert _jsonl(out / "verb.motion" / "queries.jsonl") == [
        {"_id": "00003000-v:0", "text": "she runs daily", "mention": [4, 8]},
        {"_id": "00003000-v:1", "text": "he ran home", "mention": [3, 6]},
        {"_id": "00003000-v:3", "text": "Running late", "mention": [0, 7]},
    ]
    assert (out / "verb.motion" / "qrels" / "test.tsv").read_text(encoding="utf-8") == (
        "query-id\tcorpus-id\tscore\n00003000-v:0\t00003000-v\t1\n"
        "00003000-v:1\t00003000-v\t1\n00003000-v:3\t00003000-v\t1\n")
    assert list_domains(out)["queries"].tolist() == [2, 1, 3]
    assert not list(out.rglob("*.tmp"))


def test_malformed_line_names_file_and_line(tiny_wordnet: Path, tmp_path: Path) -> None:
    path = tiny_wordnet / "data.noun"
    path.write_text(DATA_NOUN + "00009999 05 n zz broken | gloss\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        build_wordnet_el(tiny_wordnet, tmp_path / "out", domains=["noun.animal"])
    assert info.value.path == path and info.value.line == 4
    assert f"{path}:4" in str(info.value)


def test_missing_wordnet_names_expected_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data\.verb"):
        build_wordnet_el(tmp_path / "nowhere", tmp_path / "out", domains=["verb.weather"])
    with pytest.raises(DataError, match="domains.tsv"):
        list_domains(tmp_path)


def _committed_queries():
    """Yield (domain, query, gold item) for every committed query."""
    for domain in list_domains()["domain"]:
        folder = BUNDLED_DIR / domain
        items = {item["_id"]: item for item in _jsonl(folder / "corpus.jsonl")}
        gold = dict(line.split("\t")[:2] for line in
                    (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:])
        for query in _jsonl(folder / "queries.jsonl"):
            yield domain, query, items[gold[query["_id"]]]


def test_committed_mentions_are_whole_words_within_text() -> None:
    count = 0
    for _, query, item in _committed_queries():
        text, (start, end) = query["text"], query["mention"]
        assert 0 <= start < end <= len(text), query
        before, after = text[start - 1:start], text[end:end + 1]
        assert not (before.isalnum() or before == "_" or after.isalnum() or after == "_"), query
        assert query["_id"].rsplit(":", 1)[0] == item["_id"]
        count += 1
    assert count > 10_000


@pytest.mark.skipif(not HAVE_WORDNET, reason=f"{NO_WORDNET}; the exception lists are needed")
def test_committed_mentions_match_a_gold_lemma() -> None:
    exceptions = {pos: read_exceptions(DEFAULT_WORDNET_DIR / f"{kind}.exc")
                  for pos, kind in (("n", "noun"), ("v", "verb"))}
    for domain, query, item in _committed_queries():
        pos = domain[0]
        forms = set().union(*(lemma_forms(lemma, pos, exceptions[pos])
                              for lemma in item["title"].split(", ")))
        start, end = query["mention"]
        assert query["text"][start:end].lower() in forms, (query, item["title"])


def test_domains_table_matches_files() -> None:
    table = list_domains()
    assert sorted(table.loc[table["role"] == "test", "domain"]) == sorted(HELD_OUT_DOMAINS)
    assert set(table["role"]) == {"train", "test"}
    assert (table["queries"] >= 20).all()
    assert sorted(p.name for p in BUNDLED_DIR.iterdir() if p.is_dir()) == sorted(table["domain"])
    for row in table.itertuples():
        folder = BUNDLED_DIR / row.domain
        lines = {name: len((folder / name).read_text(encoding="utf-8").splitlines())
                 for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")}
        assert lines == {"corpus.jsonl": row.items, "queries.jsonl": row.queries,
                         "qrels/test.tsv": row.queries + 1}, row.domain
