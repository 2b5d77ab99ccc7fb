"""The GPU check (benchmarks/gpu_check.py) and what it carries (benchmarks/gpu_payload.py), kept from rotting between
GPU runs: its CPU dry run, on a tiny payload, is the device call's code path end to end; no timing is asserted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
import gpu_payload  # noqa: E402
import gpu_speed  # noqa: E402
import run_all  # noqa: E402


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("payload") / "p"
    gpu_payload.build(out, "tiny")
    return out


@pytest.fixture(scope="module")
def dry_run(payload, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``gpu_check.py --device cpu --tiny --payload P``: the lent machine's command on this CPU."""
    out = tmp_path_factory.mktemp("gpu_check")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--tiny",
                           "--payload", str(payload), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    return proc, out


def test_the_dry_run_passes_and_its_summary_names_every_check(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = run_all.load_gpu_document(out / "gpu_check.json")
    summary = (out / "gpu_check.md").read_text(encoding="utf-8")
    names = [c["name"] for c in gpu_check.planned_checks()]
    assert [c["name"] for c in doc["checks"]] == names and len(names) == len(set(names)) == 23
    for name in names:
        assert f"| {name} |" in summary and f"| {name} |" in proc.stdout
    assert doc["status"] == "pass" and summary.startswith("**PASS**")
    assert [s["name"] for s in doc["sections"]] == list(gpu_check.SECTIONS)
    assert all(s["status"] == "ok" for s in doc["sections"]), doc["sections"]
    status = {c["name"]: c for c in doc["checks"]}
    cuda_only = [n for n in names if "varlen" in n or n.startswith("cuda tests")]
    assert all(status[n]["status"] == "skipped" and "needs CUDA" in status[n]["detail"] for n in cuda_only)
    assert all(c["status"] == "pass" for n, c in status.items() if n not in cuda_only)
    assert all(c["value"] <= gpu_check.EXACT_BAR for n, c in status.items() if n.split()[1] == "fp32")
    # The measured comparisons are table rows (sentence-transformers fp32/bf16, ADACUR, one per speed cell; varlen
    # needs CUDA).
    assert [r["comparison"].split(":")[0] for r in doc["rows"]][:2] == ["cls-ce", "cls-ce"]
    assert doc["rows"][2]["comparison"].startswith("ADACUR batched (cpu)")
    cells = [gpu_speed.cell_name(m, n) for m in gpu_speed.MODELS for n in gpu_speed.LENGTHS]
    assert [r["comparison"].split(":")[0] for r in doc["rows"][3:]] == cells


def test_the_dry_run_measures_every_size_and_length(dry_run):
    """Each model x length: forward only, end to end and both sentence-transformers loadings, with their spread and
    share of the GEMM rate; the long pairs cut to exactly their length."""
    _, out = dry_run
    doc = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    speed, gemm = doc["detail"]["speed"], doc["detail"]["gemm_tflops"]["bf16"] * 1e12
    assert set(speed["models"]) == set(gpu_speed.MODELS)
    assert speed["models"]["qwen-0.5b"]["architecture"] == "Qwen2ForCausalLM"
    assert speed["models"]["qwen-0.5b"]["layout"] == "chat"
    assert speed["models"]["bert-base"]["architecture"] == "BertForSequenceClassification"
    for model in gpu_speed.MODELS:
        for length in gpu_speed.LENGTHS:
            c = speed["cells"][gpu_speed.cell_key(model, length)]
            assert c["status"] == "ok", c
            assert c["n_pairs"] == c["queries"] * c["items"] == 2
            if length != 30:  # every pair truncated to exactly its length, the chat template's included
                assert c["mean_tokens"] == c["max_tokens"] == length
            assert list(c["measures"]) == ["forward only", "end to end", "st autocast", "st bf16"]
            for m in c["measures"].values():
                r = m["pairs_per_s"]
                assert r["min"] <= r["median"] <= r["max"] and len(m["runs"]) == 1
                assert m["share_of_bf16_gemm"] == pytest.approx(r["median"] * c["flops_per_pair"] / gemm)
    first = gpu_speed.cell_key(*gpu_speed.VARIANT_CELLS[0])
    variants = speed["variants"][first]["variants"]
    assert list(variants) == list(gpu_speed.VARIANTS)
    assert variants["cuda graphs"]["status"] == "skipped: needs CUDA"
    assert variants["compile"]["status"].startswith("skipped: not tried on a CPU")
    for name in ("bf16-weights", "batch x4", "token budget", "packed"):
        assert variants[name]["status"] == "ok", variants[name]
    assert variants["packed"]["attention"] == "re-padded SDPA"
    assert all(v["status"].startswith("not run: this mode tries the first 1 cells")
               for k, v in speed["variants"].items() if k != first)


def test_flops_per_pair_counts_bert_and_qwen2():
    """BERT: the count bench_scoring.py uses; Qwen2-0.5B: 2 FLOPs per non-embedding weight per token (its
    published 0.36B non-embedding parameters, without biases and norms) plus causal attention."""
    from transformers import BertConfig, Qwen2Config

    from bench_scoring import pair_flops

    bert = BertConfig(**gpu_speed.CONFIGS["full"]["bert-base"])
    lengths = np.array([30, 128, 256])
    assert gpu_speed.flops_per_pair(bert, lengths) == pytest.approx(pair_flops(bert, lengths))
    qwen = Qwen2Config(**gpu_speed.CONFIGS["full"]["qwen-0.5b"])
    weights = 24 * (896 * 896 + 2 * 896 * 128 + 896 * 896 + 3 * 896 * 4864)
    assert weights == 357_826_560
    assert gpu_speed.flops_per_pair(qwen, np.array([256])) == pytest.approx(
        256 * (2 * weights + 24 * 2 * 256 * 896))


def test_pair_sets_are_seeded_and_long_documents_hold_their_length():
    from xenbench.data.sources import load_dataset

    ds = load_dataset("wordnet-el:noun.cognition")
    q, it = gpu_speed.pair_set(ds, 128, 3, 4)
    assert gpu_speed.pair_set(ds, 128, 3, 4) == (q, it)
    assert gpu_speed.pair_set(ds, 128, 3, 4, seed=1) != (q, it)
    assert all(len(x.text.split()) >= 128 and x.title == "" for x in it)
    q30, it30 = gpu_speed.pair_set(ds, 30, 3, 4)
    assert [x.text for x in q30] == [x.text for x in q] and all(x in ds.items for x in it30)


def test_token_budget_batches_cover_every_pair_once_within_the_budget(tmp_path):
    import torch

    from xenbench.data.sources import load_dataset
    from xenbench.models.loading import load_cross_encoder

    ds = load_dataset("wordnet-el:noun.cognition")
    folder = gpu_speed.build_folder("bert-base", "tiny", tmp_path / "bert", torch.device("cpu"), [])
    ce = load_cross_encoder(folder)
    queries, items = gpu_speed.pair_set(ds, 30, 3, 7)
    batches, order, lens = gpu_speed.sorted_batches(ce, queries, items, torch.device("cpu"), token_budget=120)
    assert sorted(order.tolist()) == list(range(21))
    assert all(b["input_ids"].numel() <= 120 or len(b["input_ids"]) == 1 for b in batches)
    assert [int(n) for b in batches for n in b["attention_mask"].sum(1)] == lens[order].tolist()
    assert sum(len(b["input_ids"]) for b in batches) == 21


def test_the_dry_run_imports_nothing_that_the_gpu_machines_lack(dry_run):
    proc, out = dry_run
    doc = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    assert doc["detail"]["imported_absent_on_device"] == []
    assert doc["machine"]["payload_built"]["mode"] == "tiny"


def test_the_payload_holds_the_committed_scores_of_the_rows(payload):
    from xenbench.data.sources import load_dataset
    from xenbench.data.store import ScoreStore

    manifest = gpu_payload.read_manifest(payload)
    ds = load_dataset("wordnet-el:noun.cognition")
    rows = gpu_payload.query_rows(len(ds.queries), "tiny")
    assert manifest["rows"] == rows.tolist() and manifest["query_ids"] == [ds.queries[r].id for r in rows]
    for ce in gpu_payload.CES:
        store = ScoreStore.open(ROOT / "data" / "scores" / "noun.cognition" / ce)
        np.testing.assert_array_equal(gpu_payload.load_reference(payload, ce, rows[::-1]),
                                      store.to_numpy()[rows[::-1]])
        assert manifest["stores"][ce]["model_sha256"] == store.attrs["model_sha256"]
    with pytest.raises(gpu_payload.PayloadError, match=r"built for other query rows \(lacks \[0\]\)"):
        gpu_payload.load_reference(payload, "cls-ce", np.array([0]))


def test_the_rebuilt_backbone_gives_the_ces_bit_identical_scores(payload, tmp_path, monkeypatch):
    """Left out: rows of tokens the domain never uses and the layers every CE replaces; on the domain's texts the
    scores are the same bits as with the whole backbone."""
    from xenbench import integrity
    from xenbench.data.sources import load_dataset
    from xenbench.models.loading import load_cross_encoder
    from xenbench.models.scoring import score_matrix

    ds = load_dataset("wordnet-el:noun.cognition")
    queries, items = [ds.queries[5], ds.queries[900]], [ds.items[i] for i in (0, 17, 2963)]

    def scores(ce_name: str) -> np.ndarray:
        ce = load_cross_encoder(ROOT / "models" / ce_name)
        return score_matrix(ce, queries, items, device="cpu", progress=False).scores

    whole = {name: scores(name) for name in gpu_payload.CES}
    rebuilt = gpu_payload.rebuild_backbone(payload, tmp_path / "backbone")
    monkeypatch.setenv("XENBENCH_BACKBONE", str(rebuilt))
    with pytest.raises(Exception, match="differs from the backbone this model was trained on"):
        scores("cls-ce")  # its digest is not the original's: the check skips that one verification, says why
    verify = integrity.verify
    monkeypatch.setattr(integrity, "verify", lambda folder, backbone: verify(folder, None))
    for name in gpu_payload.CES:
        np.testing.assert_array_equal(scores(name), whole[name])


def test_a_damaged_payload_is_refused(payload, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(gpu_payload.PayloadError, match="not a GPU payload"):
        gpu_payload.read_manifest(bad)
    (bad / "payload.json").write_text(json.dumps({"format": "other/0"}), encoding="utf-8")
    with pytest.raises(gpu_payload.PayloadError, match="format 'other/0', expected 'xenbench-gpu-payload/1'"):
        gpu_payload.read_manifest(bad)


def test_replaced_tensors_are_those_every_ce_trains():
    trained = [["bert.encoder.layer.0.a.weight", "bert.pooler.dense.weight", "classifier.weight"],
               ["encoder.layer.0.a.weight"]]
    names = ["encoder.layer.0.a.weight", "pooler.dense.weight", "embeddings.word_embeddings.weight"]
    assert gpu_payload.replaced_by_every_ce(names, trained) == ["encoder.layer.0.a.weight"]


# -- sections, checks and the exit status (no model) ----------------------------------------------------------------
def _ctx(box: float) -> SimpleNamespace:
    return SimpleNamespace(sizes=gpu_check.Sizes(1, 1, 1, 1, 1, 1, 1, 1, boxes=dict.fromkeys(gpu_check.SECTIONS, box),
                                                 total_s=10 * box))


@pytest.mark.parametrize("raised,section_status,check_status", [
    (gpu_check.SectionTimeout("130 s box spent before x"), "timeout: 130 s box spent before x", "not run"),
    (gpu_check.Missing("sentence-transformers"), "skipped: missing sentence-transformers", "skipped"),
    (ValueError("boom"), "error: ValueError: boom", "error"),
])
def test_a_section_that_stops_closes_its_pending_checks(tmp_path, raised, section_status, check_status):
    report = gpu_check.Report(tmp_path, "tiny", "cpu", [])

    def step(report, ctx, box):
        report.check("cls-ce fp32 scorer vs committed fp32 store", "pass", 1e-6, gpu_check.EXACT_BAR)
        raise raised

    gpu_check.run_section(report, _ctx(60), "exactness", step)
    checks = {c["name"]: c for c in report.doc["checks"]}
    assert report.section("exactness")["status"] == section_status
    assert checks["cls-ce fp32 scorer vs committed fp32 store"]["status"] == "pass"
    assert {c["status"] for c in report.doc["checks"] if c["section"] == "exactness"} == {"pass", check_status}
    assert checks["cuda tests: pytest -m cuda"]["status"] == "pending"  # other sections untouched
    saved = run_all.load_gpu_document(tmp_path / "gpu_check.json")  # written at once
    assert saved["status"] == "running" and report.exit_status() == 1


def test_a_failed_check_fails_the_run(tmp_path):
    report = gpu_check.Report(tmp_path, "tiny", "cpu", [])
    for s in report.doc["sections"]:
        s["status"] = "ok"
    for c in report.doc["checks"]:
        c["status"] = "skipped"
    report.save()
    assert report.exit_status() == 0
    report.check("emb-ce bf16 varlen vs padded", "fail", 0.3, gpu_check.LOW_BAR, "mean 3.00e-01 std")
    report.save()
    assert report.exit_status() == 1
    short = run_all.render_gpu(report.doc, full=False)
    assert "| emb-ce bf16 varlen vs padded | fail | 3.00e-01 | ≤ 5e-02 |" in short


def test_an_empty_box_runs_nothing(tmp_path):
    report = gpu_check.Report(tmp_path, "tiny", "cpu", [])
    ran = []
    gpu_check.run_section(report, _ctx(0), "adacur", lambda *a: ran.append(1))
    assert not ran and report.section("adacur")["status"].startswith("timeout: the total time budget was spent")


def test_pytest_output_is_read_for_counts_and_files_it_could_not_import():
    assert gpu_check.pytest_counts("1 failed, 12 passed, 3 skipped, 2 deselected, 1 error in 4.20s") == {
        "failed": 1, "passed": 12, "skipped": 3, "deselected": 2, "error": 1}
    assert gpu_check.pytest_counts("no tests ran in 0.01s") == {}
    output = """==================================== ERRORS ====================================
______________________ ERROR collecting tests/test_axn.py ______________________
tests/test_axn.py:11: in <module>
    from xenbench import plots as xb_plots
E   ModuleNotFoundError: No module named 'plotly'
______________________ ERROR collecting tests/test_mf.py _______________________
tests/test_mf.py:3: in <module>
    raise RuntimeError("boom")
E   RuntimeError: boom
=========================== short test summary info ============================
ERROR tests/test_axn.py
ERROR tests/test_mf.py
5 passed, 84 deselected, 2 errors in 5.05s"""
    assert gpu_check.collection_errors(output) == {"tests/test_axn.py": "missing plotly",
                                                   "tests/test_mf.py": "RuntimeError: boom"}


def test_cuda_marked_tests_exist_and_the_deselected_ones_are_there():
    files = gpu_check.cuda_test_files()
    assert "tests/test_packed.py" in files and "tests/test_adacur.py" in files
    for node in gpu_check.NEEDS_BACKBONE_WEIGHTS:
        path, test = node.split("::")
        assert gpu_check._defines(ROOT / path, test)


# -- docs/BENCHMARKS.md ---------------------------------------------------------------------------------------------
def test_the_docs_gpu_block_is_the_committed_gpu_check_rendered():
    text = run_all.DOC.read_text(encoding="utf-8")
    assert text.count(run_all.GPU_BEGIN) == 1 and text.count(run_all.GPU_END) == 1
    block = text.split(run_all.GPU_BEGIN, 1)[1].split(run_all.GPU_END, 1)[0].strip("\n")
    assert block == run_all.gpu_block(run_all.GPU_COMMITTED), (
        "docs/BENCHMARKS.md's GPU block disagrees with benchmarks/results/gpu_check.json: run "
        "`python benchmarks/run_all.py --docs`")
    heading = text.split(run_all.GPU_BEGIN, 1)[0].rsplit("\n## ", 1)[-1].splitlines()[0]
    assert heading == "GPU check"


def test_gpu_block_renders_a_run_or_says_there_is_none(dry_run, tmp_path):
    _, out = dry_run
    assert run_all.gpu_block(tmp_path / "none.json").startswith("Not run on a GPU yet")
    block = run_all.gpu_block(out / "gpu_check.json")
    assert block.startswith("**PASS**") and "on **no GPU (cpu)**" in block and "23 checks: " in block
    assert "| cls-ce: scorer vs CrossEncoder.predict, fp32 |" in block
    speed = block.split("Speed by model size and pair length")[1]
    cells = speed.split("Forward-only variants")[0]
    assert "not run" not in cells and cells.count("| bert-base @ 128 tokens |") == 4
    never = [line for line in speed.splitlines() if line.count("not run") == len(gpu_speed.VARIANTS) + 1]
    assert len(never) == len(gpu_speed.VARIANT_CELLS) - 1  # the dry run tries the variants on one cell
    page = tmp_path / "BENCHMARKS.md"
    page.write_text(f"# Benchmarks\n\n{run_all.BEGIN}\n{run_all.END}\n\n## GPU check\n\n"
                    f"{run_all.GPU_BEGIN}\nOLD-GPU-BLOCK\n{run_all.GPU_END}\n", encoding="utf-8")
    assert run_all.update_docs(page, run_all.COMMITTED, out / "gpu_check.json")
    assert block in page.read_text(encoding="utf-8") and "OLD-GPU-BLOCK" not in page.read_text(encoding="utf-8")
    assert not run_all.update_docs(page, run_all.COMMITTED, out / "gpu_check.json")  # already up to date


def test_the_committed_run_shows_every_speed_cell_as_not_run():
    """The H200 run predates the speed sections: each of their cells reads "not run"."""
    lines = run_all.render_speed(run_all.load_gpu_document())
    for model in gpu_speed.MODELS:
        for length in gpu_speed.LENGTHS:
            assert f"| {gpu_speed.cell_name(model, length)} | | | | not run | | | |" in lines
    never = [line for line in lines if line.count("not run") == len(gpu_speed.VARIANTS) + 1]
    assert len(never) == len(gpu_speed.VARIANT_CELLS)
