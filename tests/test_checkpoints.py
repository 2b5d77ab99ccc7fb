"""docs/MODELS.md's bundled-CE tables are generated from each model folder's own records, and agree with them."""
from __future__ import annotations

import json
import shutil

import pytest

from xenbench._io import replace_blocks
from xenbench.errors import DataError
from xenbench._io import REPO_ROOT
from xenbench.studies.findings import checkpoints

DOC = REPO_ROOT / "docs" / "MODELS.md"
MODELS = sorted(p.parent.name for p in checkpoints.MODELS_DIR.glob("*/xenbench_ce.json"))


def _block() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index(checkpoints.BEGIN) + len(checkpoints.BEGIN): text.index(checkpoints.END)].strip("\n")


def test_docs_models_table_agrees_with_the_model_folders():
    assert _block() == checkpoints.models_section(), (
        "docs/MODELS.md's models table is stale: run `xenbench findings --write`")


def _table_after(section: str, words: str) -> dict[str, dict[str, str]]:
    """The Markdown table that follows the paragraph containing ``words``: first cell -> {column: cell}."""
    lines = section.split(words, 1)[1].split("\n\n", 2)[1].splitlines()
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {r[columns[0]]: r for r in rows}


@pytest.mark.parametrize(("split", "words"), [("eval", "dev domains"), ("test", "held-out domains")])
def test_every_bundled_ce_has_both_records_and_the_table_shows_each_accuracy(split, words):
    table = _table_after(checkpoints.models_section(), words)
    for name in MODELS:
        for r in json.loads((checkpoints.MODELS_DIR / name / f"{split}.json").read_text(encoding="utf-8")):
            row = table[r["domain"]]
            assert row[f"`{name}`"] == f"{r['ce_acc@1']:.3f}" and row["DE alone"] == f"{r['de_acc@1']:.3f}"
            assert row["queries"] == f"{r['n_queries']:,}" and row["DE recall@64"] == f"{r['de_recall@64']:.3f}"


def test_the_dev_records_are_on_the_same_queries_for_every_ce():
    # The CEs re-rank the same DE candidates of the same sampled dev queries, or their accuracies are not comparable.
    de = {name: {r["domain"]: (r["n_queries"], r["de_acc@1"], r["de_recall@64"]) for r in
                 json.loads((checkpoints.MODELS_DIR / name / "eval.json").read_text(encoding="utf-8"))} for name in MODELS}
    assert len({json.dumps(v, sort_keys=True) for v in de.values()}) == 1, de


def _copy_models(tmp_path):
    folder = tmp_path / "models"
    for name in ("cls-ce", "emb-ce"):
        (folder / name).mkdir(parents=True)
        for f in ("xenbench_ce.json", "eval.json", "test.json"):
            shutil.copy(checkpoints.MODELS_DIR / name / f, folder / name / f)
    return folder


def test_a_ce_on_other_de_candidates_is_refused_naming_its_file(tmp_path):
    folder = _copy_models(tmp_path)
    path = folder / "emb-ce" / "test.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    rows[0]["de_acc@1"] += 0.01
    path.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"emb-ce/test\.json.*differs from another model's"):
        checkpoints.models_section(folder)


def test_a_ce_without_held_out_records_is_named_and_a_changed_record_changes_the_table(tmp_path):
    folder = _copy_models(tmp_path)
    (folder / "emb-ce" / "test.json").unlink()
    section = checkpoints.models_section(folder)
    assert "No `test.json` for `emb-ce`." in section and "`emb-ce` |" not in section.split("held-out")[1]
    path = folder / "cls-ce" / "eval.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    rows[0]["ce_acc@1"] = 0.1234
    path.write_text(json.dumps(rows), encoding="utf-8")
    assert "| 0.123 |" in checkpoints.models_section(folder)


def test_the_models_block_rewrites_only_itself(tmp_path):
    doc = tmp_path / "MODELS.md"
    doc.write_text(f"# x\nbefore\n{checkpoints.BEGIN}\nold\n{checkpoints.END}\nafter\n", encoding="utf-8")
    folder = _copy_models(tmp_path)
    assert replace_blocks([checkpoints.block(doc, folder)], write=False)  # stale, nothing written
    assert "\nold\n" in doc.read_text(encoding="utf-8")
    assert replace_blocks([checkpoints.block(doc, folder)])
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# x\nbefore\n") and text.endswith(f"{checkpoints.END}\nafter\n")
    assert checkpoints.models_section(folder) in text and not replace_blocks([checkpoints.block(doc, folder)])
