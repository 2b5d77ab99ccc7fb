"""Conclusions are generated from results: docs/FINDINGS.md (and every other generated block) agrees with the
committed run, and each notebook's findings say what its numbers say."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from xenbench import findings, provenance
from xenbench.cli import main
from xenbench.errors import DataError, ParameterError
from xenbench._io import REPO_ROOT
from xenbench.harness import NOTEBOOKS_DIR, list_notebooks
from xenbench.studies.findings import checkpoints, claims

DOC = REPO_ROOT / "docs" / "FINDINGS.md"
COMMITTED = sorted(p for p in findings.RESULTS_DIR.glob("*.results.json")
                   if p.name.split(".")[-3] in findings.README_PROFILES)


def _doc_block() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert text.count(findings.BEGIN) == 1 and text.count(findings.END) == 1
    start = text.index(findings.BEGIN) + len(findings.BEGIN)
    return text[start : text.index(findings.END)].strip("\n")


# --- claims: docs/FINDINGS.md is the committed results, rendered ------------------------------------


def test_docs_findings_agree_with_committed_results():
    assert _doc_block() == findings.block(DOC).body.strip("\n"), (
        "docs/FINDINGS.md's findings disagree with notebooks/results/: run `xenbench findings --write`")


def test_every_generated_block_of_the_checkout_agrees_with_its_sources():
    """README.md's claims table, docs/FINDINGS.md and docs/MODELS.md: each block is what the committed results and
    model folders render today (what `xenbench findings --write` would write), and each file holds it once."""
    blocks = findings.write_docs(write=False)
    assert [(b.path.relative_to(REPO_ROOT).as_posix(), b.what) for b, _ in blocks] == [
        ("docs/FINDINGS.md", "findings section"), ("README.md", "claims table"), ("docs/MODELS.md", "models table")]
    assert [b.what for b, stale in blocks if stale] == [], "run `xenbench findings --write`"
    for b, _ in blocks:
        text = b.path.read_text(encoding="utf-8")
        assert text.count(b.begin) == 1 and text.count(b.end) == 1, b.path


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_results_are_reference_runs_of_existing_notebooks(path):
    doc = findings.load_results(path)
    assert path.name == f"{doc['notebook']}.{doc['profile']}.results.json"
    assert doc["profile"] in findings.README_PROFILES
    assert doc["notebook"] in list_notebooks()
    assert findings.lines(doc["notebook"], doc["results"])  # states something


def test_every_docs_number_comes_from_a_results_file():
    # Each number in the block appears in the text rendered from the committed JSON (same test, other angle:
    # guards against a hand edit that happens to keep the block's first and last lines).
    rendered = findings.block(DOC).body  # the claims table's paper numbers come from its cited paper_values.json
    for number in re.findall(r"\d+\.\d+", _doc_block()):
        assert number in rendered


def test_every_notebook_shows_generated_findings():
    registered = findings.registered()
    for name in list_notebooks():
        nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert name in registered, f"{name} has no findings function"
        assert any("xb.findings.show(" in src and "save_results" in src for src in code), name


def test_closing_markdown_states_no_numbers():
    # Typed conclusions drift from the results: the last markdown cells explain, the generated lines state.
    for name in list_notebooks():
        nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
        for cell in [c for c in nb.cells if c.cell_type == "markdown"][-3:]:
            numbers = re.findall(r"(?<![\w.])\d*\.\d{2,}", cell.source)
            assert len(numbers) < 3, f"{name}: closing markdown states numbers {numbers[:5]}"


# --- the machinery ---------------------------------------------------------------------------------


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_load_results_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match=r"nope\.json: no such results file"):
        findings.load_results(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json: not valid JSON \(.*\): expected a results JSON"):
        findings.load_results(bad)
    with pytest.raises(DataError, match=r"list\.json: expected an object with 'notebook'"):
        findings.load_results(_write(tmp_path / "list.json", [1, 2]))


def test_unknown_notebook_is_refused():
    with pytest.raises(ParameterError, match="'notebook' parameter of findings.lines"):
        findings.lines("99_nothing", {})


def _baselines(de1: float, tf1: float, n: int = 400) -> dict:
    rows = []
    for ds in ("a", "b"):
        rows += [
            {"dataset": ds, "retriever": "DE", "n_queries": n, "n_items": 50, "k": 1, "accuracy": de1},
            {"dataset": ds, "retriever": "DE", "n_queries": n, "n_items": 50, "k": 8, "accuracy": 0.9},
            {"dataset": ds, "retriever": "TF-IDF", "n_queries": n, "n_items": 50, "k": 1, "accuracy": tf1},
            {"dataset": ds, "retriever": "TF-IDF", "n_queries": n, "n_items": 50, "k": 8, "accuracy": 0.7},
        ]
    return {"baselines": rows, "domain": {"name": "a", "items": 50, "queries": n, "unambiguous_share": 0.25}}


def test_data_findings_follow_the_numbers():
    text = "\n".join(findings.lines("00_data", _baselines(0.40, 0.20)))
    # SE of each accuracy at n=400 is at most 0.025: a 0.20 gap is far beyond 2 SE
    assert "DE vs TF-IDF at accuracy@1: DE higher on 2, lower on 0, level (within 2 binomial SE) on 0" in text
    assert "mean difference +20.0 points" in text
    assert "DE accuracy@1 0.400, accuracy@8 0.900" in text
    assert "exceed accuracy 0.900" in text and "10.0% of queries" in text

    flipped = "\n".join(findings.lines("00_data", _baselines(0.20, 0.40)))
    assert "DE higher on 0, lower on 2" in flipped
    level = "\n".join(findings.lines("00_data", _baselines(0.41, 0.40)))
    assert "level (within 2 binomial SE) on 2 of 2" in level


def test_score_findings_follow_the_numbers():
    results = {
        "throughput": [{"model": "cls", "n_pairs": 1000, "wall_s": 2.0, "pairs_per_s": 500.0, "device": "cpu",
                        "precision": "fp32", "n_threads": 2}],
        "agreement": [{"fresh": "cls", "store": "x", "n_pairs": 30, "max_abs_diff": 2e-5}],
        "score_summary": [{"matrix": "emb", "median_query_skew": 0.5, "median_top1_z": 3.0},
                          {"matrix": "cls", "median_query_skew": 8.0, "median_top1_z": 9.0}],
    }
    text = findings.lines("01_score_matrices", results)
    assert "30 shared pairs: max |difference| 2.0e-05" in text[0]
    assert text[1].index("cls 8.00") < text[1].index("emb 0.50")  # most skewed first
    assert "not checked" in findings.lines("01_score_matrices", {**results, "agreement": []})[0]
    assert not any("pairs/s" in line for line in text)  # speed depends on the machine's load: make bench


def _docs_tree(root: Path, models: Path | None = None) -> dict[str, str]:
    """A checkout's three generated files, each with text around a stale block; their texts by relative path."""
    texts = {"README.md": f"# x\n\nbefore\n{claims.BEGIN}\nold\n{claims.END}\nafter\n",
             "docs/FINDINGS.md": f"# F\n{findings.BEGIN}\nold\n{findings.END}\n",
             "docs/MODELS.md": f"# M\n{checkpoints.BEGIN}\nold\n{checkpoints.END}\nend\n"}
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return texts


def _tiny_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    _write(results / "00_data.full.results.json",
           {"notebook": "00_data", "profile": "full", "results": _baselines(0.4, 0.2),
            "provenance": {"git": {"commit": provenance.git_state()["commit"], "dirty": False}}})
    return results


def test_write_docs_rewrites_only_the_blocks_of_every_file(tmp_path):
    results = _tiny_results(tmp_path)
    root = tmp_path / "checkout"
    before = _docs_tree(root)
    stale = findings.write_docs(results, root=root, write=False)
    assert [changed for _, changed in stale] == [True, True, True]
    assert {rel: (root / rel).read_text(encoding="utf-8") for rel in before} == before  # a check writes nothing
    assert all(changed for _, changed in findings.write_docs(results, root=root))
    readme, found, models = (root / rel for rel in before)
    text = found.read_text(encoding="utf-8")
    assert text.startswith(f"# F\n{findings.BEGIN}\n## The claims table in full\n") and text.endswith(f"\n{findings.END}\n")
    assert "\n## Each notebook's findings\n\n**00_data**" in text
    assert "DE higher on 2" in text and "\nold\n" not in text
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{claims.END}\nafter\n")
    assert claims.claims_table(results) in text and "**not tested**" in text  # only 00_data: no claim is tested
    assert checkpoints.models_section() in models.read_text(encoding="utf-8")
    assert not any(changed for _, changed in findings.write_docs(results, root=root))  # idempotent
    assert not list(root.rglob(".*.tmp"))  # no temp file left behind


def test_write_docs_writes_no_file_when_one_lacks_its_block(tmp_path):
    """All files or none: a missing marker in the last file leaves the first two as they were."""
    root = tmp_path / "checkout"
    before = _docs_tree(root)
    (root / "docs" / "MODELS.md").write_text("no block\n", encoding="utf-8")
    results = _tiny_results(tmp_path)
    with pytest.raises(DataError, match=r"MODELS\.md: no generated block .*models:begin"):
        findings.write_docs(results, root=root)
    assert (root / "README.md").read_text(encoding="utf-8") == before["README.md"]
    assert (root / "docs" / "FINDINGS.md").read_text(encoding="utf-8") == before["docs/FINDINGS.md"]
    (root / "docs" / "MODELS.md").unlink()
    with pytest.raises(DataError, match=r"MODELS\.md: no such file \(it holds the models table\)"):
        findings.write_docs(results, root=root)
    assert not list(root.rglob(".*.tmp"))


def test_write_docs_changes_no_file_when_a_write_fails(tmp_path, monkeypatch):
    """A failure while writing the temp files (a full disk) renames none of them over its file."""
    import xenbench._io as io

    root = tmp_path / "checkout"
    before = _docs_tree(root)
    real, calls = io._write_temp, []

    def fail_on_the_second(tmp, text, fsync):
        calls.append(tmp)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(tmp, text, fsync)

    monkeypatch.setattr(io, "_write_temp", fail_on_the_second)
    with pytest.raises(OSError, match="No space left"):
        findings.write_docs(_tiny_results(tmp_path), root=root)
    assert {rel: (root / rel).read_text(encoding="utf-8") for rel in before} == before
    assert not list(root.rglob(".*.tmp"))


def test_cli_findings_check(capsys):
    assert main(["findings", "--check"]) == 0
    out = capsys.readouterr().out
    assert "FINDINGS.md: findings section agrees" in out and "README.md: claims table agrees" in out
    assert "MODELS.md: models table agrees" in out
    assert main(["findings"]) == 0
    assert capsys.readouterr().out.strip() == (claims.claims_table(findings.RESULTS_DIR) + "\n\n"
                                              + findings.findings_section()).strip()


def test_cost_line_comes_from_the_resources_of_the_run():
    assert findings.cost_line({"resources": {"seconds": 1530.0, "peak_rss_mb": 3225.6}}) == (
        "This run took 25.5 min in its kernel, with 3.15 GB peak resident memory.")
    assert findings.cost_line({"results": {}}) is None  # files written before resources were recorded


def test_03_findings_state_the_budget_rule_difference_when_the_run_measured_it():
    from xenbench.studies.protocol import query_splits
    from xenbench.studies.adacur import METHODS, adacur_protocol_runs, budget_rule_gap

    rng = np.random.default_rng(0)
    M = (rng.standard_normal((120, 6)) @ rng.standard_normal((6, 300))
         + 0.3 * rng.standard_normal((120, 300))).astype(np.float32)
    splits = query_splits(M.shape[0], 40, 20, [0, 1])
    gap = budget_rule_gap(M, splits, [0, 1], [40], [1, 10])
    assert gap[["budget", "k"]].values.tolist() == [[40, 1], [40, 10]]
    assert (gap["min"] >= 0).all()  # the authors' re-ranked items are a subset of the free-anchor ones
    assert (gap["cells"] == 2 * 2 * 4).all()  # 2 splits x 2 seeds x the 4 k_i of the split grid
    assert (gap["max"] > 0).any()  # on this matrix anchors do take slots under the authors' rule
    # the free-anchor cells are ANNCUR exactly as the protocol runs it (AnnCur + anncur_with_budget)
    runs = adacur_protocol_runs(M, splits, [0, 1], [40], methods=["anncur"], k_values=[1, 10], device="cpu")
    test = runs[(runs["part"] == "test") & (runs["method"] == METHODS["anncur"])]
    np.testing.assert_allclose(test.groupby("k")["recall"].mean().to_numpy(), gap["recall_free_anchors"], atol=1e-12)

    results = json.loads((findings.RESULTS_DIR / "03_adacur_rounds.full.results.json").read_text(encoding="utf-8"))
    results["results"].pop("budget_rules", None)
    before = findings.lines("03_adacur_rounds", results["results"])
    assert not any("budget rule" in line for line in before)  # a run that did not measure it says nothing
    results["results"]["budget_rules"] = gap.to_dict(orient="records")
    line = next(line for line in findings.lines("03_adacur_rounds", results["results"])
                if line.startswith("ANNCUR's budget rule"))
    r = gap.iloc[1]
    assert (f"Top-10 at B_CE = 40: {100 * r['mean']:+.2f} points on average ({r['recall_free_anchors']:.3f} vs "
            f"{r['recall_authors_code']:.3f}; from {100 * r['min']:+.2f} to {100 * r['max']:+.2f} over 16 split × seed "
            f"× k_i cells)") in line


# --- the one verdict rule of 03, 04 and 05 (xenbench.studies.protocol.verdict), through the findings -------------


def _axn_results(p: list[float], seeds_of: dict[str, int], gains: dict[str, list[float]]) -> dict:
    """04's results by hand: cells (budget 50, k = 1, 10, 100, 200 ...) of AXN DE vs DE re-rank with per-query p-values
    ``p``; ``gains[method]`` is the recall gain of each split's run over 0.5 (DE re-rank), ``seeds_of`` the seeds each
    method ran per split."""
    ks = [1, 10, 100, 200][: len(p)]
    comp = [{"challenger": "AXN DE, tuned λ", "baseline": "DE re-rank", "budget": 50, "k": k, "mean": 0.05,
             "lo": 0.04, "hi": 0.06, "p": pk, "p_wilcoxon": pk, "n_queries": 300} for k, pk in zip(ks, p)]
    runs = [{"split_seed": s, "anchor_seed": seed, "method": m, "budget": 50, "k": k,
             "value": 0.5 + (gains[m][s] if m in gains else 0.0)}
            for m, n_seeds in seeds_of.items() for s in range(3) for seed in range(n_seeds) for k in ks]
    return {"ce": "cls-ce", "n_items": 900, "comparisons": comp, "runs": runs,
            "summary": [{"method": "DE re-rank", "budget": 50, "k": 1, "lams": ""}],
            "n_queries": {"training": 500, "dev": 150, "test": 351},
            "protocol": {"split_seeds": [0, 1, 2], "first_round_seeds": [0, 1, 2, 3, 4]}}


def test_verdict_rule_a_cell_that_wins_alone_ties_after_holm_over_the_family():
    seeds = {"AXN DE, tuned λ": 1, "DE re-rank": 1, "AXN, tuned λ": 5}
    gains = {"AXN DE, tuned λ": [0.04, 0.05, 0.06]}
    alone = findings.lines("04_axn_lambda", _axn_results([0.02], seeds, gains))
    assert "family of 1 declared" in alone[1] and "beats DE re-rank in all 1" in alone[2]
    # the same cell (p = .02) declared with three more cells whose p-values are .5: Holm makes it 4 · .02 = .08
    family = findings.lines("04_axn_lambda", _axn_results([0.02, 0.5, 0.5, 0.5], seeds, gains))
    assert "family of 4 declared" in family[1] and "is level with DE re-rank in all 4" in family[2]


def test_verdict_rule_a_deterministic_method_counts_one_run_per_split():
    # the random AXN ran 5 seeds per split, AXN DE and DE re-rank one run per split: the pair has 3 runs, not 15
    seeds = {"AXN DE, tuned λ": 1, "DE re-rank": 1, "AXN, tuned λ": 5}
    text = findings.lines("04_axn_lambda", _axn_results([0.001], seeds, {"AXN DE, tuned λ": [0.04, 0.05, 0.06]}))
    assert "3 query splits × 5 seeds = 15 runs" in text[0]
    assert '"AXN DE" and "DE re-rank" ran once per split (no draw of their own given the split)' in text[0]
    assert "(300 test queries, paired; 3 independent runs)" in text[2]
    # 3 runs of +4, +5, +6 points: 5 ± t(.975, 2) · 1 / √3 = [+2.5, +7.5]; as 15 copies it would be [+4.6, +5.4]
    assert "across runs [+2.5, +7.5]" in text[2]


def test_verdict_rule_needs_the_interval_across_runs_as_well():
    # the per-query test is overwhelming (p = 1e-9), but the three splits disagree in sign: level
    seeds = {"AXN DE, tuned λ": 1, "DE re-rank": 1}
    text = findings.lines("04_axn_lambda", _axn_results([1e-9], seeds, {"AXN DE, tuned λ": [0.10, 0.08, -0.06]}))
    assert "is level with DE re-rank in all 1" in text[2] and "beats" not in text[2].split(":", 1)[1]


def test_outside_methods_stand_against_each_seed_rival_across_query_splits():
    """07's line for a method from outside the seeds (GAR, yours): per budget, its mean and its difference from each
    DE-started rival, the runs of one split averaged first, a t interval across the splits (by hand with scipy), and
    the wall times; the label currency alike."""
    from scipy import stats

    from xenbench.studies.findings.compare import outside_lines

    gar = {0: [0.40, 0.42], 1: [0.50, 0.50], 2: [0.45, 0.47]}  # split -> its anchor seeds' runs
    ada = {0: [0.60], 1: [0.65], 2: [0.70]}
    runs = [{"split_seed": s, "anchor_seed": a, "method": m, "budget": 50, "k": 10, "value": v}
            for m, table in (("GAR DE", gar), ("ADACUR DE+TopK No-Split", ada)) for s, vals in table.items()
            for a, v in enumerate(vals)]
    summary = [{"method": m, "budget": 50, "k": 10, "wall_ms": w} for m, w in (("GAR DE", 600.0),
                                                                               ("ADACUR DE+TopK No-Split", 500.0))]
    results = {"protocol": {"extra_methods": [{"label": "GAR DE"}]}, "runs": runs, "summary": summary}
    (line,) = outside_lines(results)
    d = np.array([np.mean(gar[s]) - np.mean(ada[s]) for s in range(3)])
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    mean_gar = np.mean([v for vals in gar.values() for v in vals])
    assert f"B_CE = 50, k = 10: {mean_gar:.3f} (600 ms per query)" in line
    assert (f"vs ADACUR DE+TopK No-Split {100 * d.mean():+.1f} [{100 * (d.mean() - half):+.1f}, "
            f"{100 * (d.mean() + half):+.1f}] (500 ms)") in line
    assert "across 3 query splits" in line and "AXN" not in line  # a rival without runs is left out
    assert outside_lines({"protocol": {}, "runs": runs, "summary": summary}) == []  # no method from outside
