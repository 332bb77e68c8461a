"""The benchmarks a clone can get: the five annotation files ship in data/ as the original release's, and
``download_benchmarks`` fetches images (and O3-Bench) from each benchmark's Hub repository with ``huggingface_hub``
— here from a local stand-in of the Hub's file API (``tests/support/hub_server.py``, ``HF_ENDPOINT`` pointed at
it): pinned commit, every file's sha256 checked, resumed after a kill, ``HF_HUB_OFFLINE`` respected, tables and
archives unpacked, then the evaluation loader's check."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from insight_o3.evaluation.benchmark_download import RECORD_NAME
from insight_o3.evaluation.benchmark_files import SHIPPED_DATA, shipped_annotation
from insight_o3.evaluation.benchmarks import BENCHMARKS, HubKind
from insight_o3.evaluation.samples import load_samples
from tests.support.hub_server import HubServer
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
#: The original release's annotation files (m-Just/InSight-o3, data/), by sha256.
ORIGINAL_SHA256 = {
    "vstar": "9e5f192d2b2b68674c51240b2e6cdcc69c4c6badfd61dfdfc68f312178141ad2",
    "hr_bench_4k": "96836df1fe04b07433f3932572c4800d117ae041e24f48f4f24c0a9f34c6b457",
    "treebench": "9e4d86f201489bd6922cc00c4d3aaafae84dc4aa757ea8cc2e2eadd7da10a6ec",
    "visual_probe_hard": "bb6eb20dea56b77bcba0af447927767f5ba194f2ff423753a16577a8eae13533",
    "mme_realworld_lite": "1fee2989f26ddce28499d58bc7176623015eb6006153e82e9bf621098311bd76",
}
SIZES = {"vstar": 191, "hr_bench_4k": 800, "treebench": 405, "visual_probe_hard": 106, "mme_realworld_lite": 1919}


def jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16 + seed % 7, 12), (seed * 37 % 256, 90, 200)).save(buf, "JPEG")
    return buf.getvalue()


def few_lines(name: str, n: int, folder: Path) -> list[dict]:
    """The first ``n`` lines of the shipped annotation of ``name``, written to ``folder`` under its own file name
    (a small benchmark for ``--source_dir``)."""
    src = shipped_annotation(name)
    assert src is not None
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()[:n]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / src.name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def run(hub: HubServer | None, *args: str, offline: bool = False, wait: bool = True):
    # huggingface_hub also reads TRANSFORMERS_OFFLINE as HF_HUB_OFFLINE: neither may come from the caller
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "TRANSFORMERS_OFFLINE"}
    env["HF_HOME"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"hf-home-{os.getpid()}")
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    cmd = [sys.executable, "-m", "insight_o3.scripts.download_benchmarks", "--no_progress", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------------------------------------ shipped annotations
@pytest.mark.smoke
@pytest.mark.parametrize("name", sorted(ORIGINAL_SHA256))
def test_the_five_annotation_files_ship_in_the_original_layout(name):
    path = REPO / BENCHMARKS[name].ann_file
    assert shipped_annotation(name) == path and path.parent.parent == SHIPPED_DATA
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ORIGINAL_SHA256[name]
    assert len(load_samples(path, "/nowhere", check_images=False)) == SIZES[name]
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=REPO, capture_output=True)
    assert tracked.returncode == 0, f"{path} is not tracked by git"


def test_the_data_readme_names_each_hub_repository_and_its_commit():
    text = (REPO / "data" / "README.md").read_text(encoding="utf-8")
    for b in BENCHMARKS.values():
        assert f"`{b.source.repo}`" in text, b.name
        assert b.source.revision is None or b.source.revision[:12] in text, b.name
    assert "download_benchmarks" in text and "HF_HUB_OFFLINE" in text


# ------------------------------------------------------------------------------------------------ files
def vstar_hub(hub: HubServer, rows: list[dict]) -> dict[str, bytes]:
    files = {r["image"]: jpeg(i) for i, r in enumerate(rows)}
    hub.repo("craigwu/vstar_bench").add({**files, "README.md": b"# V*"}, commit=BENCHMARKS["vstar"].source.revision)
    return files


def test_a_fresh_data_root_gets_a_benchmark_ready_and_a_rerun_fetches_nothing(tmp_path):
    rows = few_lines("vstar", 3, tmp_path / "ann")
    root = tmp_path / "data"
    with HubServer() as hub:
        files = vstar_hub(hub, rows)
        r = run(hub, "vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "vstar: craigwu/vstar_bench@d9ae62c903da: 3 file(s) fetched" in r.stdout
        assert "vstar: ready: 3 samples, 3 images" in r.stdout
        for name, data in files.items():
            assert (root / "vstar_bench" / name).read_bytes() == data
        record = json.loads((root / "vstar_bench" / RECORD_NAME).read_text())
        assert record["revision"] == BENCHMARKS["vstar"].source.revision
        assert record["files"] == {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
        assert all(f"/resolve/{record['revision']}/" in p for m, p, _ in hub.requests if "/resolve/" in p)
        hub.requests.clear()
        r = run(hub, "vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
        assert r.returncode == 0 and "0 file(s) fetched, 3 already there and checked" in r.stdout
        assert [m for m, _, _ in hub.requests] == ["GET"]  # the tree only: every file checked locally


def test_a_file_that_is_not_what_the_hub_lists_is_removed_and_reported(tmp_path):
    rows = few_lines("vstar", 2, tmp_path / "ann")
    root = tmp_path / "data"
    with HubServer() as hub:
        vstar_hub(hub, rows)
        hub.corrupt.add(rows[0]["image"])
        r = run(hub, "vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
        assert r.returncode == 1
        assert "vstar: NOT READY" in r.stdout and "sha256" in r.stdout and rows[0]["image"] in r.stdout
        assert not (root / "vstar_bench" / rows[0]["image"]).exists()
        assert (root / "vstar_bench" / rows[1]["image"]).is_file()  # the good one is kept
        hub.corrupt.clear()
        r = run(hub, "vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
        assert r.returncode == 0 and "1 file(s) fetched, 1 already there" in r.stdout


def test_offline_checks_the_record_and_asks_nothing(tmp_path):
    rows = few_lines("vstar", 2, tmp_path / "ann")
    root = tmp_path / "data"
    args = ("vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
    with HubServer() as hub:
        vstar_hub(hub, rows)
        r = run(hub, *args, offline=True)
        assert r.returncode == 1 and "HF_HUB_OFFLINE is set" in r.stdout and not hub.requests
        assert run(hub, *args).returncode == 0
        hub.requests.clear()
        r = run(hub, *args, offline=True)
        assert r.returncode == 0 and "ready: 2 samples" in r.stdout and not hub.requests
        (root / "vstar_bench" / rows[1]["image"]).unlink()
        r = run(hub, *args, offline=True)
        assert r.returncode == 1 and "1 file(s) are missing" in r.stdout and not hub.requests


def test_a_download_killed_mid_file_resumes_where_it_stopped(tmp_path):
    """SIGKILL while the one large file is on the wire; the rerun asks only for the bytes not yet on disk."""
    rows = few_lines("vstar", 1, tmp_path / "ann")
    root = tmp_path / "data"
    big = os.urandom(12 * 2**20)  # more than huggingface_hub's 10 MiB write chunk
    image = rows[0]["image"]
    args = ("vstar", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
    with HubServer() as hub:
        hub.repo("craigwu/vstar_bench").add({image: big}, commit=BENCHMARKS["vstar"].source.revision)
        hub.stall[image] = 11 * 2**20
        proc = run(hub, *args, wait=False)

        def partial() -> list[Path]:
            return [p for p in (root / "vstar_bench").rglob("*.incomplete") if p.stat().st_size >= 10 * 2**20]

        wait_until(lambda: partial() or proc.poll() is not None, 120, "10 MiB of the file on disk")
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert partial(), "no partial file appeared"
        hub.release()
        hub.requests.clear()
        r = run(hub, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        ranges = [rng for m, p, rng in hub.requests if m == "GET" and p.endswith(image)]
        assert ranges and ranges[0] is not None and int(ranges[0].split("=")[1].split("-")[0]) >= 10 * 2**20
        assert hashlib.sha256((root / "vstar_bench" / image).read_bytes()).digest() == hashlib.sha256(big).digest()


def test_o3_bench_comes_whole_from_its_repository(tmp_path):
    """O3-Bench's annotation is not shipped: the repository's test/ folder is fetched (metadata.jsonl and images)."""
    meta = [
        {
            "file_name": f"images/chart/{i}.png",
            "subset": "chart",
            "question": "q?",
            "options": "A. x\nB. y",
            "answer": "A",
        }
        for i in range(2)
    ]
    png = io.BytesIO()
    Image.new("RGB", (20, 20), "white").save(png, "PNG")
    files = {"test/metadata.jsonl": "".join(json.dumps(m) + "\n" for m in meta).encode(), "README.md": b"# O3-Bench"}
    files.update({f"test/{m['file_name']}": png.getvalue() for m in meta})
    root = tmp_path / "data"
    with HubServer() as hub:
        hub.repo("m-Just/O3-Bench").add(files, commit=BENCHMARKS["o3_bench"].source.revision)
        r = run(hub, "O3-Bench", "--data_root", str(root))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "o3_bench: ready: 2 samples, 2 images, 1 categories" in r.stdout
        assert not (root / "O3-Bench" / "README.md").exists()  # only test/


# ------------------------------------------------------------------------------------------------ tables and archives
def test_a_table_release_is_unpacked_and_an_unpinned_repository_keeps_its_first_commit(tmp_path):
    """HR-Bench: images in a parquet table; no commit pinned in the code, so main's is recorded at the first
    download and used afterwards even when main moves on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = few_lines("hr_bench_4k", 3, tmp_path / "ann")
    table = io.BytesIO()
    pq.write_table(
        pa.table(
            {"index": [r["question_id"] for r in rows], "image": [base64.b64encode(jpeg(i)).decode() for i in range(3)]}
        ),
        table,
    )
    root = tmp_path / "data"
    args = ("hr_bench_4k", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
    assert BENCHMARKS["hr_bench_4k"].source.kind is HubKind.TABLE and BENCHMARKS["hr_bench_4k"].source.revision is None
    with HubServer() as hub:
        first = hub.repo("DreamMr/HR-Bench").add({"hr_bench_4k.parquet": table.getvalue(), "hr_bench_8k.parquet": b"x"})
        r = run(hub, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"main is {first}" in r.stderr and "3 image(s) unpacked" in r.stdout
        assert (root / "HR-Bench" / "images_4k" / "0.jpg").read_bytes() == jpeg(0)
        record = json.loads((root / "HR-Bench" / RECORD_NAME).read_text())
        assert record["revision"] == first and "images_4k/0.jpg" in record["files"]
        hub.repo("DreamMr/HR-Bench").add({"hr_bench_4k.parquet": b"changed"})  # main moves on
        hub.requests.clear()
        r = run(hub, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert all(first in p for _, p, _ in hub.requests) and "0 file(s) fetched" in r.stdout


def test_an_archive_release_is_unpacked_by_file_name(tmp_path):
    rows = few_lines("mme_realworld_lite", 3, tmp_path / "ann")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("data/MME-RealWorld-Lite.json", "[]")
        for i, r in enumerate(rows):
            z.writestr(f"data/imgs/{r['image']}", jpeg(i))
    root = tmp_path / "data"
    with HubServer() as hub:
        hub.repo("yifanzhang114/MME-RealWorld-Lite").add({"data.zip": archive.getvalue()})
        r = run(hub, "mme_realworld_lite", "--data_root", str(root), "--source_dir", str(tmp_path / "ann"))
        assert r.returncode == 0, r.stdout + r.stderr
        n = len({r["image"] for r in rows})
        assert f"{n} image(s) unpacked" in r.stdout and f"ready: 3 samples, {n} images" in r.stdout


def test_check_only_places_the_shipped_annotation_and_asks_nothing(tmp_path):
    root = tmp_path / "data"
    with HubServer() as hub:
        r = run(hub, "treebench", "--check_only", "--data_root", str(root))
        assert not hub.requests
    assert r.returncode == 1 and "treebench: annotation copied from" in r.stdout
    assert "image directory not found" in r.stdout and "download_benchmarks treebench" in r.stdout
    assert (root / "TreeBench" / "treebench.jsonl").read_bytes() == (
        REPO / "data/TreeBench/treebench.jsonl"
    ).read_bytes()


def test_evaluate_on_a_benchmark_without_its_images_names_the_download_command(tmp_path, capsys):
    from insight_o3.scripts import evaluate

    root = tmp_path / "data"
    (root / "TreeBench").mkdir(parents=True)
    (root / "TreeBench" / "treebench.jsonl").write_bytes((REPO / "data/TreeBench/treebench.jsonl").read_bytes())
    argv = ["--benchmark", "TreeBench", "--model", "m", "--data_root", str(root), "--skip_endpoint_check"]
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert "image" in err and "python -m insight_o3.scripts.download_benchmarks treebench" in err
    assert evaluate.main(["--benchmark", "vstar", "--model", "m", "--data_root", str(root)]) == 2
    assert "download_benchmarks vstar fetches it" in capsys.readouterr().err
