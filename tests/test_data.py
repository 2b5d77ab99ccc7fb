"""Tests of the data layer: loaders, validation errors, dataset helpers, BEIR round trip.

Fixtures are written by the tests themselves into ``tmp_path``, small enough to check by hand.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from xenbench.data.beir import load_beir, save_beir
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.sources import load_dataset, load_wordnet_el, wordnet_el_domains
from xenbench.data.zeshel import load_zeshel
from xenbench.errors import DataError, ParameterError

# ------------------------------------------------------------------------------------------------
# fixture writers
# ------------------------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[object | str]) -> Path:
    """Write one line per row: dicts as JSON, strings verbatim (to plant malformed lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


CORPUS = [
    {"_id": "d1", "title": "Apple", "text": "A fruit."},
    {"_id": 2, "title": "Banana", "text": "A yellow fruit."},  # int id -> "2"
    {"_id": "d3", "text": "No title here."},  # title is optional -> ""
]
QUERIES = [
    {"_id": "q1", "text": "I ate an apple", "mention": [9, 14]},
    {"_id": "q2", "text": "bananas are yellow"},
    {"_id": "q3", "text": "nothing relevant", "mention": None},
    {"_id": 4, "text": "which fruit"},
]
HEADER = "query-id\tcorpus-id\tscore\n"
TRAIN_QRELS = f"{HEADER}q1\td1\t1\nq2\t2\t2\nq2\td3\t0\n"
TEST_QRELS = f"{HEADER}4\td1\t1\n4\t2\t1\nq3\td3\t0\n"


def make_beir(folder: Path, corpus=CORPUS, queries=QUERIES, qrels=None) -> Path:
    write_jsonl(folder / "corpus.jsonl", corpus)
    write_jsonl(folder / "queries.jsonl", queries)
    for split, text in (qrels or {"train": TRAIN_QRELS, "test": TEST_QRELS}).items():
        write_text(folder / "qrels" / f"{split}.tsv", text)
    return folder


# ZESHEL world "w": the context document c1 has tokens
#   0:a 1:b 2:c 3:d 4:e
DOCS = [
    {"title": "Ctx", "text": "a b  c\nd e", "document_id": "c1"},  # irregular whitespace on purpose
    {"title": "Bee", "text": "the letter b", "document_id": "L1"},
    {"title": "Dee", "text": "the letter d", "document_id": "L2"},
]


_TOKENS = {d["document_id"]: d["text"].split() for d in DOCS} | {"x1": ["x"]}


def mention(mid, start, end, label="L1", context="c1", corpus="w", text=None):
    surface = " ".join(_TOKENS.get(context, [])[start : end + 1]) if text is None else text
    return {
        "mention_id": mid,
        "context_document_id": context,
        "corpus": corpus,
        "start_index": start,
        "end_index": end,
        "text": surface,  # ZESHEL's mention surface: the span's tokens
        "label_document_id": label,
        "category": "LOW_OVERLAP",
    }


def make_zeshel(root: Path, train=None, val=None, test=None, docs=DOCS) -> Path:
    write_jsonl(root / "documents" / "w.json", docs)
    write_jsonl(root / "documents" / "other.json", [{"title": "X", "text": "x", "document_id": "x1"}])
    write_jsonl(root / "mentions" / "train.json", train if train is not None else [
        mention("m1", 1, 2),  # "b c" with one token of context -> "a b c d"
        mention("mx", 0, 0, label="x1", context="x1", corpus="other"),  # other world: skipped
        mention("m2", 0, 0, label="L2"),  # at the left edge: "a b"
    ])
    write_jsonl(root / "mentions" / "val.json", val if val is not None else [])
    write_jsonl(root / "mentions" / "test.json", test if test is not None else [
        mention("m3", 4, 4, label="L2"),  # at the right edge: "d e"
    ])
    return root


def pinned(path_tail: str, line: int | None, problem: str) -> str:
    """Regex matching '.../path_tail:line: problem' exactly at the end of the message."""
    where = re.escape(path_tail) + (f":{line}" if line is not None else "")
    return rf"{where}: {re.escape(problem)}$"


# ------------------------------------------------------------------------------------------------
# BEIR loading
# ------------------------------------------------------------------------------------------------


def test_load_beir_contents(tmp_path):
    ds = load_beir(make_beir(tmp_path / "mini"))
    assert ds.name == "mini"
    assert ds.items == [
        Item("d1", "Apple", "A fruit."),
        Item("2", "Banana", "A yellow fruit."),
        Item("d3", "", "No title here."),
    ]
    assert ds.queries == [
        Query("q1", "I ate an apple", (9, 14)),
        Query("q2", "bananas are yellow", None),
        Query("q3", "nothing relevant", None),
        Query("4", "which fruit", None),
    ]
    assert ds.queries[0].text[9:14] == "apple"
    # score 0 rows are judged negatives: not gold, and q3 (only negatives) is in no split.
    assert ds.gold == {"q1": ["d1"], "q2": ["2"], "4": ["d1", "2"]}
    assert ds.splits == {"test": ["4"], "train": ["q1", "q2"]}
    assert all(isinstance(i, str) for i in ds.item_ids + ds.query_ids)


def test_load_beir_name_and_gold_merged_across_splits(tmp_path):
    qrels = {"a": f"{HEADER}q1\td1\t1\n", "b": f"{HEADER}q1\td3\t1\nq1\td1\t1\n"}
    ds = load_beir(make_beir(tmp_path / "f", qrels=qrels), name="custom")
    assert ds.name == "custom"
    assert ds.gold == {"q1": ["d1", "d3"]}
    assert ds.splits == {"a": ["q1"], "b": ["q1"]}


def test_dataset_helpers(tmp_path):
    ds = load_beir(make_beir(tmp_path / "mini"))
    assert ds.item_ids == ["d1", "2", "d3"]
    assert ds.query_ids == ["q1", "q2", "q3", "4"]
    assert ds.item_index == {"d1": 0, "2": 1, "d3": 2}
    assert ds.query_index == {"q1": 0, "q2": 1, "q3": 2, "4": 3}
    assert ds.query("q2") == Query("q2", "bananas are yellow")
    assert ds.item("2").title == "Banana"
    with pytest.raises(ParameterError, match="'nope'"):
        ds.query("nope")
    assert repr(ds) == "Dataset(name='mini', items=3, queries=4, gold=3, splits={'test': 1, 'train': 2})"


def test_subset_keeps_gold_consistent(tmp_path):
    ds = load_beir(make_beir(tmp_path / "mini"))
    sub = ds.subset(query_ids=["4", "q1", "q3"], item_ids=["2", "d3"])
    assert sub.query_ids == ["q1", "q3", "4"]  # dataset order, not argument order
    assert sub.item_ids == ["2", "d3"]
    assert sub.gold == {"4": ["2"]}  # q1's only gold d1 is gone, so q1 has no gold left
    assert sub.splits == {"test": ["4"], "train": []}  # q1 is no longer judged: it leaves its split
    assert load_beir(save_beir(sub, tmp_path / "sub"), name=sub.name) == sub  # so the subset can be saved
    assert ds.subset() == ds
    with pytest.raises(ParameterError, match="zz"):
        ds.subset(item_ids=["d1", "zz"])


def test_save_load_round_trip(tmp_path):
    ds = load_beir(make_beir(tmp_path / "src"), name="rt")
    out = save_beir(ds, tmp_path / "dst")
    assert load_beir(out, name="rt") == ds
    # Saving again over the same folder is fine, and leaves no temporary files behind.
    save_beir(ds, out)
    names = sorted(p.name for p in out.rglob("*"))
    assert names == ["corpus.jsonl", "qrels", "queries.jsonl", "test.tsv", "train.tsv"]
    assert (out / "qrels" / "test.tsv").read_text() == f"{HEADER}4\td1\t1\n4\t2\t1\n"
    first_query = (out / "queries.jsonl").read_text().splitlines()[0]
    assert first_query == '{"_id": "q1", "text": "I ate an apple", "mention": [9, 14]}'
    # Written like any other file (umask honoured), not with a temp file's private 0600 mode.
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "corpus.jsonl").stat().st_mode & 0o777 == 0o666 & ~umask


def test_round_trip_after_split_queries(tmp_path):
    ds = load_beir(make_beir(tmp_path / "src"), name="rt").split_queries(3, {"train": 0.5, "test": 0.5})
    assert load_beir(save_beir(ds, tmp_path / "dst"), name="rt") == ds


def test_save_refuses_lossy_datasets(tmp_path):
    items = [Item("i", "", "t")]
    queries = [Query("q", "x")]
    with pytest.raises(ParameterError, match="every query with gold in some split"):
        save_beir(Dataset("d", items, queries, {"q": ["i"]}), tmp_path / "a")
    with pytest.raises(ParameterError, match="only queries with gold"):
        save_beir(Dataset("d", items, queries, {}, {"test": ["q"]}), tmp_path / "b")
    write_text(tmp_path / "c" / "qrels" / "old.tsv", HEADER)
    with pytest.raises(ParameterError, match="old.tsv"):
        save_beir(Dataset("d", items, queries, {"q": ["i"]}, {"test": ["q"]}), tmp_path / "c")


# ------------------------------------------------------------------------------------------------
# split_queries
# ------------------------------------------------------------------------------------------------


def big_dataset(n: int = 50) -> Dataset:
    items = [Item("i", "", "t")]
    queries = [Query(f"q{k}", "x") for k in range(n)]
    return Dataset("big", items, queries, {q.id: ["i"] for q in queries})


def test_split_queries_deterministic_disjoint_covering():
    ds = big_dataset()
    a = ds.split_queries(7)
    assert a.split_queries(7).splits == a.splits
    assert ds.split_queries(7).splits == a.splits
    assert ds.split_queries(8).splits != a.splits
    assert list(a.splits) == ["train", "dev", "test"]
    assert [len(v) for v in a.splits.values()] == [30, 10, 10]
    members = [q for ids in a.splits.values() for q in ids]
    assert sorted(members) == sorted(ds.query_ids) and len(set(members)) == len(members)
    assert ds.splits == {}  # the original is untouched
    assert a.items == ds.items and a.queries == ds.queries and a.gold == ds.gold


def test_split_queries_ignores_input_order():
    ds = big_dataset()
    shuffled = Dataset("big", ds.items, ds.queries[::-1], dict(reversed(list(ds.gold.items()))))
    assert shuffled.split_queries(1).splits == ds.split_queries(1).splits


def test_split_queries_custom_fractions_and_gold_only():
    ds = big_dataset(10)
    ds.queries.append(Query("nogold", "y"))
    s = ds.split_queries(0, {"a": 0.25, "b": 0.75})
    assert [len(v) for v in s.splits.values()] == [2, 8]  # rint(2.5) == 2, remainder to b
    assert "nogold" not in s.splits["a"] + s.splits["b"]
    every = ds.split_queries(0, {"all": 1.0}, with_gold_only=False)
    assert sorted(every.splits["all"]) == sorted(ds.query_ids)


@pytest.mark.parametrize(
    ("fractions", "problem"),
    [
        ({"train": 0.5, "test": 0.4}, "summing to 1"),
        ({"train": 1.5, "test": -0.5}, "between 0 and 1"),
        ({}, "non-empty"),
    ],
)
def test_split_queries_bad_fractions(fractions, problem):
    with pytest.raises(ParameterError, match=f"'fractions' parameter of Dataset.split_queries must be .*{problem}"):
        big_dataset().split_queries(0, fractions)


def test_split_queries_bad_seed():
    with pytest.raises(ParameterError, match="'seed'"):
        big_dataset().split_queries("1")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# BEIR validation errors: one DataError naming file, line and problem
# ------------------------------------------------------------------------------------------------


def corpus_with(bad_line: object | str) -> list:
    return [CORPUS[0], CORPUS[1], bad_line]  # the bad line is line 3


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"_id": "d9", "text": ', "not valid JSON (Expecting value at column 23)"),
        ('["d9", "text"]', "expected a JSON object, got array"),
        ({"_id": "d9", "title": "t"}, "missing field 'text'"),
        ({"title": "t", "text": "x"}, "missing field '_id'"),
        ({"_id": "d9", "text": 5}, "field 'text' must be a string, got integer"),
        ({"_id": 1.5, "text": "x"}, "field '_id' must be a string or an integer, got number"),
        ({"_id": "d9", "title": None, "text": "x"}, "field 'title' must be a string, got null"),
        ({"_id": "d1", "text": "again"}, "duplicate _id 'd1' (first seen on line 1)"),
        ({"_id": "2", "text": "int and str ids collide"}, "duplicate _id '2' (first seen on line 2)"),
    ],
)
def test_corpus_line_errors(tmp_path, bad_line, problem):
    folder = make_beir(tmp_path / "f", corpus=corpus_with(bad_line))
    with pytest.raises(DataError, match=pinned("corpus.jsonl", 3, problem)) as err:
        load_beir(folder)
    assert err.value.line == 3 and err.value.path == folder / "corpus.jsonl"


def test_empty_corpus(tmp_path):
    folder = make_beir(tmp_path / "f", corpus=[])
    with pytest.raises(DataError, match=pinned("corpus.jsonl", None, "empty corpus: no items")):
        load_beir(folder)


SPAN_RULE = "out of range for text of length 3 (need 0 <= start < end <= 3)"
MENTION_TYPE = "field 'mention' must be [start, end] with two integers, got"


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ({"_id": "q9", "text": "abc", "mention": [0, 4]}, f"mention span [0, 4] {SPAN_RULE}"),
        ({"_id": "q9", "text": "abc", "mention": [2, 2]}, f"mention span [2, 2] {SPAN_RULE}"),
        ({"_id": "q9", "text": "abc", "mention": [-1, 2]}, f"mention span [-1, 2] {SPAN_RULE}"),
        ({"_id": "q9", "text": "abc", "mention": [0]}, f"{MENTION_TYPE} [0]"),
        ({"_id": "q9", "text": "abc", "mention": "0-2"}, f"{MENTION_TYPE} '0-2'"),
        ({"_id": "q9", "text": "abc", "mention": [0, True]}, f"{MENTION_TYPE} [0, True]"),
        ({"_id": "q1", "text": "dup"}, "duplicate _id 'q1' (first seen on line 1)"),
        ({"_id": "q9"}, "missing field 'text'"),
    ],
)
def test_query_line_errors(tmp_path, bad_line, problem):
    folder = make_beir(tmp_path / "f", queries=[QUERIES[0], bad_line])
    with pytest.raises(DataError, match=pinned("queries.jsonl", 2, problem)):
        load_beir(folder)


WANT_HEADER = "expected 'query-id<TAB>corpus-id<TAB>score' (BEIR) or TREC qrels lines 'query-id 0 doc-id grade'"
WANT_COLUMNS = "expected 3 tab-separated columns (query-id, corpus-id, score)"


GRADE = ("is not an integer of ASCII digits (relevance grades are integers, as trec_eval and ir-measures read them: "
         "e.g. 0, 1, 2)")


@pytest.mark.parametrize(
    ("qrels", "line", "problem"),
    [
        ("query-id\tcorpus-id\nq1\td1\n", 1, f"bad header 'query-id\\tcorpus-id', {WANT_HEADER}"),
        ("query-id corpus-id score\n", 1, f"bad header 'query-id corpus-id score', {WANT_HEADER}"),
        ("", 1, f"bad header '', {WANT_HEADER}"),
        (f"{HEADER}q1\td1\t1\nq2 2 1\n", 3, f"{WANT_COLUMNS}, got 1"),
        (f"{HEADER}q1\td1\t1\t9\n", 2, f"{WANT_COLUMNS}, got 4"),
        (f"{HEADER}q1\td1\thigh\n", 2, f"grade 'high' {GRADE}"),
        (f"{HEADER}q1\td1\tnan\n", 2, f"grade 'nan' {GRADE}"),
        (f"{HEADER}q1\td1\t1\n\nq7\td1\t1\n", 4, "unknown query id 'q7' (not in queries.jsonl)"),
        (f"{HEADER}q1\td7\t1\n", 2, "unknown corpus id 'd7' (not in corpus.jsonl)"),
    ],
)
def test_qrels_errors(tmp_path, qrels, line, problem):
    folder = make_beir(tmp_path / "f", qrels={"dev": qrels})
    with pytest.raises(DataError, match=pinned("qrels/dev.tsv", line, problem)):
        load_beir(folder)


@pytest.mark.parametrize(
    ("remove", "expected", "problem"),
    [
        ("corpus.jsonl", "f/corpus.jsonl", "no such file"),
        ("queries.jsonl", "f/queries.jsonl", "no such file"),
        ("qrels", "f/qrels", "no such folder"),
        ("qrels/train.tsv qrels/test.tsv", "f/qrels", "no qrels files: expected at least one <split>.tsv"),
        (".", "f", "no such folder"),
    ],
)
def test_missing_beir_files(tmp_path, remove, expected, problem):
    folder = make_beir(tmp_path / "f")
    for rel in remove.split():
        target = folder / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(DataError, match=pinned(expected, None, problem)):
        load_beir(folder)


# ------------------------------------------------------------------------------------------------
# ZESHEL
# ------------------------------------------------------------------------------------------------


def test_load_zeshel_contents(tmp_path):
    ds = load_zeshel(make_zeshel(tmp_path / "z"), "w", context_tokens=1)
    assert ds.name == "zeshel:w"
    assert ds.items == [
        Item("c1", "Ctx", "a b  c\nd e"),
        Item("L1", "Bee", "the letter b"),
        Item("L2", "Dee", "the letter d"),
    ]
    assert ds.queries == [Query("m1", "a b c d", (2, 5)), Query("m2", "a b", (0, 1)), Query("m3", "d e", (2, 3))]
    assert [q.text[slice(*q.mention)] for q in ds.queries] == ["b c", "a", "e"]
    assert ds.gold == {"m1": ["L1"], "m2": ["L2"], "m3": ["L2"]}
    assert ds.splits == {"train": ["m1", "m2"], "test": ["m3"]}  # "val" has no mention of w: left out


def test_load_zeshel_context_window_sizes(tmp_path):
    root = make_zeshel(tmp_path / "z")
    wide = load_zeshel(root, "w", splits=["train"])  # default 32 tokens: the whole document
    assert wide.query("m1") == Query("m1", "a b c d e", (2, 5))
    none = load_zeshel(root, "w", splits=["train"], context_tokens=0)
    assert none.query("m1") == Query("m1", "b c", (0, 3))
    assert none.splits == {"train": ["m1", "m2"]}


TOKEN_RULE = "out of range for context document 'c1' with 5 tokens (need 0 <= start_index <= end_index < 5)"
NO_KEY = {key: mention("m9", 0, 0) for key in ("label_document_id", "corpus")}
for _key, _row in NO_KEY.items():
    del _row[_key]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (mention("m9", 3, 5), f"mention token span [3, 5] {TOKEN_RULE}"),
        (mention("m9", 2, 1), f"mention token span [2, 1] {TOKEN_RULE}"),
        (mention("m9", -1, 0), f"mention token span [-1, 0] {TOKEN_RULE}"),
        (mention("m9", 0, 0, context="x1"), "context_document_id 'x1' is not a document of world 'w'"),
        (mention("m9", 0, 0, label="nope"), "label_document_id 'nope' is not a document of world 'w'"),
        (mention("m1", 0, 0), "duplicate mention_id 'm1' (first seen on line 1)"),
        ({**mention("m9", 0, 0), "start_index": "0"}, "field 'start_index' must be an integer, got string"),
        (NO_KEY["label_document_id"], "missing field 'label_document_id'"),
        (NO_KEY["corpus"], "missing field 'corpus'"),
        ("{not json}", "not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ],
)
def test_zeshel_mention_errors(tmp_path, bad, problem):
    root = make_zeshel(tmp_path / "z", train=[mention("m1", 1, 2), mention("m2", 0, 0), bad])
    with pytest.raises(DataError, match=pinned("mentions/train.json", 3, problem)):
        load_zeshel(root, "w")


def test_zeshel_duplicate_mention_across_splits(tmp_path):
    root = make_zeshel(tmp_path / "z", test=[mention("m2", 0, 0)])
    train = root / "mentions" / "train.json"
    problem = f"duplicate mention_id 'm2' (first seen on {train}:3)"
    with pytest.raises(DataError, match=pinned("mentions/test.json", 1, problem)):
        load_zeshel(root, "w")


def test_zeshel_document_errors(tmp_path):
    docs = [DOCS[0], {"title": "t", "document_id": "z"}]
    with pytest.raises(DataError, match=pinned("documents/w.json", 2, "missing field 'text'")):
        load_zeshel(make_zeshel(tmp_path / "a", docs=docs), "w")
    docs = [DOCS[0], {**DOCS[1], "document_id": "c1"}]
    problem = "duplicate document_id 'c1' (first seen on line 1)"
    with pytest.raises(DataError, match=pinned("documents/w.json", 2, problem)):
        load_zeshel(make_zeshel(tmp_path / "b", docs=docs), "w")
    with pytest.raises(DataError, match=pinned("documents/w.json", None, "empty corpus: no documents")):
        load_zeshel(make_zeshel(tmp_path / "c", docs=[]), "w")


def test_zeshel_missing_files_and_world(tmp_path):
    root = make_zeshel(tmp_path / "z")
    problem = "no such file (unknown world 'nowhere'; worlds found: ['other', 'w'])"
    with pytest.raises(DataError, match=pinned("documents/nowhere.json", None, problem)):
        load_zeshel(root, "nowhere")
    (root / "mentions" / "val.json").unlink()
    with pytest.raises(DataError, match=pinned("mentions/val.json", None, "no such file")):
        load_zeshel(root, "w", splits=["train", "val"])  # a split asked for by name must exist
    # By default every mention file that exists is read: a folder with only mentions/test.json loads.
    (root / "mentions" / "train.json").unlink()
    only_test = load_zeshel(root, "w")
    assert only_test.splits == {"test": ["m3"]} and only_test.query_ids == ["m3"]
    assert load_dataset(f"zeshel:{root}:w@test").query_ids == ["m3"]
    (root / "mentions" / "test.json").unlink()
    with pytest.raises(DataError, match=pinned("z/mentions", None, "no mention files: expected mentions/<split>.json (e.g. test.json)")):
        load_zeshel(root, "w")
    with pytest.raises(DataError, match=pinned("z2/mentions", None, "no mention of world 'w' in ['train.json']")):
        load_zeshel(make_zeshel(tmp_path / "z2", train=[]), "w", splits=["train"])
    with pytest.raises(DataError, match=pinned("missing", None, "no such folder")):
        load_zeshel(tmp_path / "missing", "w")


def test_zeshel_bad_parameters(tmp_path):
    root = make_zeshel(tmp_path / "z")
    with pytest.raises(ParameterError, match="'context_tokens'"):
        load_zeshel(root, "w", context_tokens=-1)
    with pytest.raises(ParameterError, match="'splits'"):
        load_zeshel(root, "w", splits="test")


# ------------------------------------------------------------------------------------------------
# WordNet-EL and load_dataset
# ------------------------------------------------------------------------------------------------


def test_wordnet_el_with_custom_root(tmp_path):
    make_beir(tmp_path / "wn" / "noun.fake")
    (tmp_path / "wn" / "not-a-domain").mkdir()
    assert wordnet_el_domains(tmp_path / "wn") == ["noun.fake"]
    ds = load_wordnet_el("noun.fake", root=tmp_path / "wn")
    assert ds.name == "wordnet-el:noun.fake" and ds.item_ids == ["d1", "2", "d3"]
    with pytest.raises(ParameterError, match=re.escape("must be one of ['noun.fake']. Got 'noun.nope' instead.")):
        load_wordnet_el("noun.nope", root=tmp_path / "wn")
    with pytest.raises(DataError, match=pinned("absent", None, "no such folder")):
        load_wordnet_el("noun.fake", root=tmp_path / "absent")


def test_load_dataset_specs(tmp_path):
    folder = make_beir(tmp_path / "mini")
    assert load_dataset(f"beir:{folder}") == load_beir(folder)
    root = make_zeshel(tmp_path / "z")
    assert load_dataset(f"zeshel:{root}:w") == load_zeshel(root, "w")
    for bad in ["", "mini", "beir:", "zeshel:/only/root", "hf:foo"]:
        with pytest.raises(ParameterError, match="'spec' parameter of load_dataset"):
            load_dataset(bad)
    with pytest.raises(ParameterError, match="'domain'"):
        load_dataset("wordnet-el:no.such.domain")


@pytest.mark.skipif(not wordnet_el_domains(), reason="bundled data/wordnet-el/ is not present in this checkout")
def test_bundled_wordnet_el_domain_loads_and_round_trips(tmp_path):
    domains = wordnet_el_domains()
    domain = "noun.cognition" if "noun.cognition" in domains else domains[0]
    ds = load_dataset(f"wordnet-el:{domain}")
    assert ds.name == f"wordnet-el:{domain}"
    assert ds.items and ds.queries and "test" in ds.splits
    # Every bundled query is a mention query with gold pointing at a real item.
    assert all(q.mention is not None and q.text[slice(*q.mention)].strip() for q in ds.queries)
    assert all(ds.gold.get(q) for q in ds.splits["test"])
    assert all(g in ds.item_index for golds in ds.gold.values() for g in golds)
    assert load_beir(save_beir(ds, tmp_path / domain), name=ds.name) == ds
