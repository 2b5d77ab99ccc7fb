"""The benchmark table: docs/BENCHMARKS.md's block is the committed bench.json rendered, fragments are validated with
one clear error, failing or missing benchmarks are listed without stopping the others. Nothing here times anything."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
run_all = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("run_all", run_all)
_spec.loader.exec_module(run_all)


def _row(**kw):
    row = {"comparison": "ours vs theirs", "metric": "latency ms", "ours": 2.0, "baseline": 10.0, "ratio": 5.0,
           "higher_is_better": False, "at": "Recall@1000 0.912 vs 0.905, 12 B/item"}
    return {**row, **kw}


def _fragment(name="bench_x", rows=None, **kw):
    doc = {"benchmark": name, "title": f"{name} title", "command": f"python benchmarks/{name}.py --n 3",
           "rows": [_row()] if rows is None else rows, "notes": ["a note"]}
    return {**doc, **kw}


def _doc(*benchmarks):
    return {"machine": {"cpu": "Test CPU", "logical_cpus": 2, "torch_threads": 2, "ram_gib": 8.0, "gpu": "none",
                        "versions": {"python": "3.11.7", "numpy": "2.0"}},
            "date": "2025-01-01", "benchmarks": list(benchmarks)}


# --- docs/BENCHMARKS.md ----------------------------------------------------------------------------


def test_docs_block_is_the_committed_bench_json_rendered():
    text = run_all.DOC.read_text(encoding="utf-8")
    assert run_all.DOC == ROOT / "docs" / "BENCHMARKS.md"
    assert text.count(run_all.BEGIN) == 1 and text.count(run_all.END) == 1
    block = text.split(run_all.BEGIN, 1)[1].split(run_all.END, 1)[0].strip("\n")
    assert block == run_all.docs_block(run_all.COMMITTED), (
        "docs/BENCHMARKS.md's table disagrees with benchmarks/results/bench.json: "
        "run `python benchmarks/run_all.py --docs`")
    assert text.startswith("# Benchmarks\n")


def test_committed_bench_json_has_a_valid_fragment_per_benchmark_that_ran():
    doc = run_all.load_document(run_all.COMMITTED)
    assert {"cpu", "logical_cpus", "torch_threads", "ram_gib", "gpu", "versions"} <= doc["machine"].keys()
    assert {"python", "torch", "numpy", "faiss", "scipy"} <= doc["machine"]["versions"].keys()
    ran = [b for b in doc["benchmarks"] if b["status"] == "ok"]
    assert any(b["benchmark"] == "bench_ccsa" for b in ran)
    for b in doc["benchmarks"]:
        assert b["status"] == "ok" or b["status"].startswith("failed: ")


def test_update_docs_rewrites_only_the_block(tmp_path):
    results = tmp_path / "bench.json"
    results.write_text(json.dumps(_doc({**_fragment(), "status": "ok"})), encoding="utf-8")
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"# Benchmarks\n\nintro\n\n{run_all.BEGIN}\nold\n{run_all.END}\n\n## After\n", encoding="utf-8")
    assert run_all.update_docs(doc, results)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith(f"{run_all.END}\n\n## After\n")
    assert run_all.docs_block(results) in text and "old" not in text
    assert not run_all.update_docs(doc, results)  # already up to date
    assert not list(tmp_path.glob(".*.tmp"))  # written by a temp file and a rename
    doc.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(run_all.FragmentError, match="no <!-- bench:start -->"):
        run_all.update_docs(doc, results)


def test_docs_flag_and_its_former_name_rerender_the_committed_table(monkeypatch, tmp_path, capsys):
    doc = tmp_path / "BENCHMARKS.md"
    monkeypatch.setattr(run_all, "DOC", doc)
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    monkeypatch.setattr(run_all, "COMMITTED", tmp_path / "bench.json")
    (tmp_path / "bench.json").write_text(json.dumps(_doc({**_fragment(), "status": "ok"})), encoding="utf-8")
    for flag in ("--docs", "--readme"):
        doc.write_text(f"# Benchmarks\n{run_all.BEGIN}\nold\n{run_all.END}\n", encoding="utf-8")
        assert run_all.main([flag]) == 0
        assert run_all.docs_block(tmp_path / "bench.json") in doc.read_text(encoding="utf-8")
        assert "BENCHMARKS.md updated from bench.json" in capsys.readouterr().out


def test_render_one_table_row_per_comparison_and_failed_benchmarks():
    ok = {**_fragment("bench_a", rows=[_row(), _row(comparison="batch | 1000", metric="throughput q/s", ours=1234.5,
                                                   baseline=617.25, ratio=2.0, higher_is_better=True)]),
          "status": "ok"}
    bad = {**_fragment("bench_b", rows=[]), "status": "failed: missing benchmarks/bench_b.py"}
    text = run_all.render(_doc(ok, bad))
    lines = text.splitlines()
    assert lines[0] == ("Measured 2025-01-01 on Test CPU (2 logical CPUs, 2 torch threads, 8.0 GiB RAM, GPU: none); "
                        "python 3.11.7, numpy 2.0.")
    assert lines[2] == "| benchmark | comparison | metric | ours | baseline | ratio | at |"
    assert lines[4] == ("| bench_a | ours vs theirs | latency ms (lower is better) | 2.00 | 10.00 | **5.00×** | "
                        "Recall@1000 0.912 vs 0.905, 12 B/item |")
    assert lines[5] == ("| bench_a | batch \\| 1000 | throughput q/s (higher is better) | 1,234 | 617 | **2.00×** | "
                        "Recall@1000 0.912 vs 0.905, 12 B/item |")
    assert lines[6] == "| bench_b | failed: missing benchmarks/bench_b.py | | | | | |"
    assert "**bench_a** — bench_a title (`python benchmarks/bench_a.py --n 3`):" in text and "* a note" in text
    assert "bench_b title" not in text  # a failed benchmark has its row only
    assert [run_all.fmt(v) for v in (0.01234, 0.5, 3.14159, 99.5, 100, 123456.7)] == \
        ["0.0123", "0.5", "3.14", "99.50", "100", "123,457"]


# --- fragments ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("drop", ["benchmark", "title", "command", "rows", "notes"])
def test_a_fragment_without_a_key_names_the_file_and_the_key(tmp_path, drop):
    doc = _fragment()
    del doc[drop]
    path = tmp_path / "bench_x.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(run_all.FragmentError) as err:
        run_all.load_fragment(path)
    assert str(err.value) == f"{path}: missing key '{drop}'"


@pytest.mark.parametrize("drop", list(run_all.ROW_KEYS))
def test_a_row_without_a_key_names_the_file_the_row_and_the_key(tmp_path, drop):
    row = _row()
    del row[drop]
    doc = _fragment(rows=[_row(), row])
    with pytest.raises(run_all.FragmentError) as err:
        run_all.validate_fragment(doc, tmp_path / "f.json")
    assert str(err.value) == f"{tmp_path / 'f.json'}: rows[1] is missing key '{drop}'"


def test_fragment_types_are_checked(tmp_path):
    for bad, msg in ((_fragment(rows=[_row(ratio="5x")]), "'ratio' of rows[0] must be a finite number, got '5x'"),
                     (_fragment(rows=[_row(ours=float("nan"))]), "'ours' of rows[0] must be a finite number"),
                     (_fragment(rows=[_row(higher_is_better=1)]), "'higher_is_better' of rows[0] must be true or false"),
                     (_fragment(rows=[_row(ours=True)]), "'ours' of rows[0] must be a finite number"),
                     (_fragment(notes="one"), "'notes' must be a list"),
                     (_fragment(notes=[3]), "notes[0] must be a string"),
                     ([1, 2], "must be a JSON object")):
        with pytest.raises(run_all.FragmentError, match="^" + str(tmp_path / "f.json").replace("\\", "\\\\")) as err:
            run_all.validate_fragment(bad, tmp_path / "f.json")
        assert msg in str(err.value)
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(run_all.FragmentError, match="broken.json: not JSON"):
        run_all.load_fragment(path)
    assert run_all.validate_fragment(_fragment(rows=[_row(ours=3)]), "x")["rows"][0]["ours"] == 3  # ints are numbers


def test_write_fragment_validates_and_round_trips(tmp_path):
    import numpy as np

    path = run_all.write_fragment(tmp_path / "sub" / "bench_x.json", _fragment(rows=[_row(ours=np.float64(2.5))]))
    assert run_all.load_fragment(path)["rows"][0]["ours"] == 2.5
    with pytest.raises(run_all.FragmentError, match="missing key 'notes'"):
        run_all.write_fragment(tmp_path / "y.json", {k: v for k, v in _fragment().items() if k != "notes"})
    assert not (tmp_path / "y.json").exists()


def test_command_line_drops_the_json_option():
    assert run_all.command_line("/x/benchmarks/bench_a.py", ["--n", "3", "--json", "out.json", "--k", "5"]) == \
        "python benchmarks/bench_a.py --n 3 --k 5"
    assert run_all.command_line("bench_a.py", ["--json=out.json"]) == "python benchmarks/bench_a.py"


# --- running --------------------------------------------------------------------------------------------


def test_missing_and_failing_benchmarks_are_reported_and_the_others_still_run(tmp_path, monkeypatch):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_ok.py").write_text(
        "import json, sys\n"
        f"doc = {json.dumps(_fragment('bench_ok'))!r}\n"
        "open(sys.argv[sys.argv.index('--json') + 1], 'w').write(doc)\n", encoding="utf-8")
    (bench / "bench_crash.py").write_text("raise SystemExit('no model at models/cls-ce')\n", encoding="utf-8")
    (bench / "bench_nojson.py").write_text("print('forgot the fragment')\n", encoding="utf-8")
    (bench / "bench_badjson.py").write_text(
        "import json, sys\nopen(sys.argv[-1], 'w').write(json.dumps({'benchmark': 'bench_badjson'}))\n",
        encoding="utf-8")
    monkeypatch.setattr(run_all, "BENCH_DIR", bench)
    frags = tmp_path / "fragments"
    frags.mkdir()
    got = {name: run_all.run_one(name, ["--n", "1"], frags)
           for name in ("bench_missing", "bench_crash", "bench_ok", "bench_nojson", "bench_badjson")}
    assert got["bench_missing"]["status"] == "failed: missing benchmarks/bench_missing.py"
    assert got["bench_crash"]["status"] == "failed: exit status 1: no model at models/cls-ce"
    assert got["bench_nojson"]["status"].startswith("failed: ") and "no such fragment" in got["bench_nojson"]["status"]
    assert got["bench_badjson"]["status"] == f"failed: {frags / 'bench_badjson.json'}: missing key 'title'"
    assert got["bench_ok"]["status"] == "ok" and got["bench_ok"]["rows"] == [_row()]
    # someone else's fragment is picked up; a broken one is listed as failed
    run_all.write_fragment(frags / "bench_other.json", _fragment("bench_other"))
    (frags / "zz_broken.json").write_text("[]", encoding="utf-8")
    listed = run_all.collect(list(got.values()), frags)
    by_name = {b["benchmark"]: b for b in listed}
    assert by_name["bench_other"]["status"] == "ok"
    assert by_name["zz_broken"]["status"] == f"failed: {frags / 'zz_broken.json'}: a benchmark fragment must be a " \
                                             "JSON object, got list"
    table = run_all.render(_doc(*listed))
    assert "| bench_crash | failed: exit status 1: no model at models/cls-ce |" in table
    assert table.count("| bench_ok | ours vs theirs |") == 1 and "| bench_other | ours vs theirs |" in table


def test_every_listed_benchmark_writes_json_when_asked():
    # Each listed script that exists takes --json (the runner passes it); the list names bench_scoring and
    # bench_pefa_pecos even before their scripts write fragments (they then show as failed).
    names = [n for n, _ in run_all.BENCHMARKS]
    assert {"bench_scoring", "bench_adacur", "bench_openmp_wait", "bench_ccsa", "bench_pefa_pecos",
            "bench_packed", "bench_compile"} <= set(names)
    for name in ("bench_adacur", "bench_openmp_wait", "bench_ccsa", "bench_packed", "bench_compile"):
        assert '"--json"' in (ROOT / "benchmarks" / f"{name}.py").read_text(encoding="utf-8")


def test_interleaved_rotates_the_order_each_round_and_reports_rates():
    """Round r starts at pass r mod n (two passes: the order flips); each rate is the work over the pass's own
    seconds, and the outputs are the last round's."""
    calls = []

    def pass_(name, secs):
        def run():
            calls.append(name)
            return secs, f"{name}{len(calls)}"
        return run

    runs, outputs = run_all.interleaved({"a": pass_("a", 2.0), "b": pass_("b", 4.0), "c": pass_("c", 8.0)},
                                        repeats=4, n_work=8)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert runs == {"a": [4.0] * 4, "b": [2.0] * 4, "c": [1.0] * 4}
    assert outputs == {"a": "a10", "b": "b11", "c": "c12"}
    calls.clear()
    run_all.interleaved({"x": pass_("x", 1.0), "y": pass_("y", 1.0)}, repeats=3, n_work=1)
    assert calls == ["x", "y", "y", "x", "x", "y"]
    seconds, out = run_all.wall_timed(lambda: "done")()
    assert out == "done" and seconds >= 0


def test_machine_description_has_every_field():
    m = run_all.machine()
    assert {"cpu", "logical_cpus", "torch_threads", "ram_gib", "gpu", "versions"} <= m.keys()
    assert m["logical_cpus"] >= 1 and {"python", "torch", "numpy", "faiss", "scipy"} <= m["versions"].keys()


def test_a_fragment_named_unlike_its_script_is_listed_once(tmp_path):
    """A listed benchmark whose fragment calls itself otherwise (bench_pefa_pecos writes "pefa_pecos") is not picked
    up a second time from its file; another fragment still is."""
    (tmp_path / "bench_y.json").write_text(json.dumps(_fragment("y_named_otherwise")), encoding="utf-8")
    (tmp_path / "bench_z.json").write_text(json.dumps(_fragment("bench_z")), encoding="utf-8")
    results = [{**_fragment("y_named_otherwise"), "status": "ok", "fragment": "bench_y"}]
    assert [r["benchmark"] for r in run_all.collect(results, tmp_path)] == ["y_named_otherwise", "bench_z"]


@pytest.mark.parametrize("script, args", [
    ("bench_scoring", ["--ce", "models/cls-ce", "--n-queries", "2", "--n-items", "3", "--repeats", "1"]),
    ("bench_packed", ["--ce", "models/cls-ce", "--n-queries", "2", "--n-items", "3", "--repeats", "1"]),
    ("bench_rerankers", ["--families", "bert", "qwen3", "--n-queries", "1", "--n-items", "3", "--repeats", "1",
                         "--hidden", "128", "--layers", "2"]),
    ("bench_scorers", ["--n-queries", "1", "--n-items", "3", "--repeats", "1"]),
])
def test_scorer_benchmarks_still_run_against_the_package(tmp_path, script, args):
    """The scorer benchmarks call the package's internals (PairAssembler, packed_forward, the loaders); a refactor
    once left bench_scoring crashing unseen until `make bench`. A tiny run must still write a valid fragment."""
    import subprocess

    out = tmp_path / f"{script}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *args, "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    frag = run_all.load_fragment(out)
    assert frag["benchmark"] == script and frag["rows"]
    assert all(r["ours"] > 0 and r["baseline"] > 0 for r in frag["rows"])
