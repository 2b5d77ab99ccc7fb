"""Weights checksums: recorded at save, verified at load; a changed byte or another backbone is refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xenbench import integrity
from xenbench.models.crossencoder import bundled_backbone
from xenbench.models.loading import load_cross_encoder
from xenbench.errors import DataError

MODELS = Path(__file__).resolve().parent.parent / "models"


def test_file_sha256_matches_hashlib(tmp_path):
    import hashlib

    data = bytes(range(256)) * 9000  # > 1 MiB: several reads
    (tmp_path / "f").write_bytes(data)
    assert integrity.file_sha256(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_record_then_verify_round_trip_and_one_flipped_byte(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"weights" * 100)
    backbone = tmp_path / "bb"
    backbone.mkdir()
    (backbone / "model.safetensors").write_bytes(b"backbone")
    integrity.record(tmp_path, ["w.bin"], backbone, "bundled")
    doc = json.loads((tmp_path / "checksums.json").read_text())
    assert doc["backbone"]["path"] == "bundled" and set(doc["backbone"]["files"]) == {"model.safetensors"}
    integrity.verify(tmp_path, backbone)  # intact: no error

    data = bytearray((tmp_path / "w.bin").read_bytes())
    data[350] ^= 1
    (tmp_path / "w.bin").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"w\.bin: is corrupted or was replaced"):
        integrity.verify(tmp_path, backbone)
    integrity.record(tmp_path, ["w.bin"], backbone)
    (backbone / "model.safetensors").write_bytes(b"another backbone")
    with pytest.raises(DataError, match=r"model\.safetensors: differs from the backbone this model was trained on"):
        integrity.verify(tmp_path, backbone)


def test_bundled_models_verify_and_a_saved_model_records_its_checksums(tmp_path):
    for name in ("cls-ce", "emb-ce", "emb-ce-marker"):
        integrity.verify(MODELS / name, bundled_backbone())
    ce = load_cross_encoder(MODELS / "emb-ce")
    out = ce.save(tmp_path / "copy")
    assert json.loads((out / "checksums.json").read_text())["files"].keys() == {"trained.safetensors", "xenbench_ce.json"}
    load_cross_encoder(out)  # verifies
    shutil.copy(MODELS / "cls-ce" / "trained.safetensors", out / "trained.safetensors")  # another model's weights
    with pytest.raises(DataError, match=r"trained\.safetensors: is corrupted or was replaced"):
        load_cross_encoder(out)
