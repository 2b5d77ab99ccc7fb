"""The quick reports that make test keeps for make test-browser: reused only at the commit that made them."""
from __future__ import annotations

import subprocess

import _kept_reports as kr


def test_a_kept_report_is_reused_at_its_commit_only(tmp_path, monkeypatch):
    monkeypatch.setattr(kr, "KEPT", tmp_path / "kept")
    html = tmp_path / "01_score_matrices.quick.html"
    html.write_text("<html>report</html>", encoding="utf-8")
    monkeypatch.setattr(kr, "checkout_commit", lambda: "a" * 40)
    kr.keep(html)
    assert kr.kept(html.name).read_text(encoding="utf-8") == "<html>report</html>"
    assert kr.kept("02_rank_cls_vs_emb.quick.html") is None  # never kept
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [html.name, html.name + ".commit"]  # no temp
    monkeypatch.setattr(kr, "checkout_commit", lambda: "b" * 40)  # another commit: made by other code
    assert kr.kept(html.name) is None
    monkeypatch.setattr(kr, "checkout_commit", lambda: None)  # a changed checkout: nothing kept, nothing reused
    html.write_text("<html>changed</html>", encoding="utf-8")
    kr.keep(html)
    assert kr.kept(html.name) is None
    monkeypatch.setattr(kr, "checkout_commit", lambda: "a" * 40)
    assert kr.kept(html.name).read_text(encoding="utf-8") == "<html>report</html>"


def test_a_changed_checkout_has_no_commit(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    repo.mkdir()
    run("init", "-q")
    (repo / "a.txt").write_text("a", encoding="utf-8")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    monkeypatch.setattr(kr, "REPO", repo)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert kr.checkout_commit() == head
    (repo / "b.txt").write_text("b", encoding="utf-8")  # untracked
    assert kr.checkout_commit() is None
    (repo / "b.txt").unlink()
    (repo / "a.txt").write_text("changed", encoding="utf-8")
    assert kr.checkout_commit() is None
    monkeypatch.setattr(kr, "REPO", tmp_path / "not-a-repo")
    assert kr.checkout_commit() is None
