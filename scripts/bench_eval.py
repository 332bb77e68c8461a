"""O3-Bench-scale benchmark of the evaluate CLI against local scripted OpenAI-compatible servers.

    .venv/bin/python scripts/bench_eval.py                       # 204 images 4600x3967, 345 Qs, 3 trials
    .venv/bin/python scripts/bench_eval.py --num_images 20 --num_questions 34 --latency 0.2   # quick

Generates (once, cached in ``--work_dir``) a demo benchmark with ``make_demo_bench``, then runs the
real ``python -m insight_o3.scripts.evaluate`` in a subprocess (single-model: with ``--separate_trial_requests``)
against (1) a zero-latency server and (2) one that delays every reply by ``--latency`` seconds.
The server answers each question right or wrong by a fixed rule (a hash of the question + options text decides, so
its true accuracy is known exactly) in the ``<answer>X</answer>`` form the rule-based checker reads.

Reported per run: wall time, images decoded/encoded (the CLI's log line) and distinct image payloads
seen by the server (hash of each data URL), requests, requests lost (critical failures in the
records), accuracy vs the server's true accuracy, bytes written under the output dir, peak RSS of
the evaluate process (``os.wait4`` rusage: the largest single process of its tree) and of its whole
process tree (image worker processes included: the sum of their RSS, sampled every 50 ms), the CPU seconds of that
tree (``tree_cpu_s``; ``workers_cpu_s`` of the image workers alone) — on a shared machine the number to compare two
versions by, since wall time follows the other users' load —, the load average around the run, and whether the API
key appears anywhere on disk.

The prepared-image cache (``--image_cache``, shared across runs) is measured too: the zero-latency run is a **first
run** (the cache emptied before it, so it renders every image and stores it), then ``second_run`` evaluates the same
benchmark as another model would (a new run directory, zero latency) with the cache the first run filled:
``workers_cpu_s`` and ``tree_cpu_s`` of the two say what the cache saves, and ``image_cache`` (from the run card) its
hits, misses and bytes; ``same_image_payloads_as_first`` compares a digest of every distinct image payload the
server saw in each run. The latency run has the cache off, so it renders every image as a run without one.

``--agent insight_o3`` evaluates the InSight-o3 agent instead (:class:`AgentScript`, one scripted server for the
vReasoner, the vSearcher and the judge): every episode asks the vSearcher for a region, the vSearcher zooms in once
and answers a box, so each episode cuts two crops from the original (each search its own boxes), as the agents do.
Each run then also reports the benchmark's ``distinct_images``, ``decodes_per_image`` (``images_decoded`` over
them: 1.0 when every view and crop of an image reused its decoded original) and ``distinct_crops_at_server``::

    .venv/bin/python scripts/bench_eval.py --agent insight_o3 --num_images 40 --num_questions 68 --skip_second \
        --skip_floor

The **encode-once floor** is measured in the same sitting, before the runs: decode + resize + encode
(+ base64) of every distinct image of the benchmark once, one after the other on one core, through
the same ``ImageStore`` code the CLI uses. Each run's ``wall / floor`` says how close the whole
evaluation (HTTP, JSON, records, the scripted server itself) gets to that single-core image work; on 2
cores the goal is <= 0.6.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from insight_o3.endpoints.scripted_server import (
    Call,
    Reply,
    ScriptedOpenAIServer,
    chat,
    last_user_text,
    request_text,
    user_message_text,
)
from insight_o3.evaluation.run_dir import RunDir
from insight_o3.evaluation.samples import load_samples
from insight_o3.imaging.images import ImageStore, Resize
from insight_o3.protocol.questions import insight_o3_question

ROOT = Path(__file__).resolve().parents[1]

API_KEY = "sk-bench-" + "7f3a9c1e5b2d4680"  # fake key, used to check nothing writes it to disk
LETTERS = "ABCDEF"


def is_right(question: str, accuracy: float) -> bool:
    h = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big")
    return h / 2**64 < accuracy


class AnswerScript:
    """Server-side script: right/wrong by question hash; counts requests and distinct images."""

    def __init__(self, metadata: Path, accuracy: float, latency: float):
        # keyed by the exact user text the CLI sends (question + options block): question texts
        # alone repeat across images (e.g. counting questions), question + options do not here
        samples = load_samples(metadata, metadata.parent, check_images=False)
        self.records = [(s.prompt(), s.answer) for s in samples]
        self.answers: dict[str, str] = {}
        for prompt, answer in self.records:
            self.answers.setdefault(prompt, answer)
        self.accuracy, self.latency = accuracy, latency
        self.lock = threading.Lock()
        self.image_hashes: set[str] = set()
        self.image_requests = 0
        self.judge_requests = 0

    def reply_letter(self, prompt: str, truth: str) -> str:
        return truth if is_right(prompt, self.accuracy) else LETTERS[(LETTERS.index(truth) + 1) % 6]

    def true_accuracy(self) -> float:
        """Share of samples the server's policy answers right (what a lossless run must report)."""
        right = sum(self.reply_letter(p, self.answers[p]) == a for p, a in self.records)
        return right / len(self.records)

    def note_images(self, req: dict) -> list[str]:
        """Count the request's images; the digest of each, in order."""
        urls = [
            p["image_url"]["url"]
            for m in req.get("messages", [])
            if isinstance(m.get("content"), list)
            for p in m["content"]
            if isinstance(p, dict) and p.get("type") == "image_url"
        ]
        digests = [hashlib.blake2b(u.encode(), digest_size=16).hexdigest() for u in urls]
        with self.lock:
            self.image_hashes.update(digests)
            self.image_requests += bool(urls)
        return digests

    def __call__(self, req: dict, call: Call) -> Reply:
        self.note_images(req)
        text = last_user_text(req).strip()
        prompt = text if text in self.answers else next((p for p in self.answers if p in text), None)
        if prompt is None:  # a judge call: the released flow asks the judge to extract the option letter
            with self.lock:
                self.judge_requests += 1
            found = re.findall(r"<answer>([A-F])</answer>", text)
            reply = chat(found[-1] if found else "Z")  # the letter the model answered (as a faithful judge would)
        else:
            letter = self.reply_letter(prompt, self.answers[prompt])
            reply = chat([f"The evidence points to option {letter}.\n<answer>{letter}</answer>"] * call.n)
        reply.delay = self.latency
        return reply


class AgentScript(AnswerScript):
    """The server side of ``--agent insight_o3``, one server for the three models (told apart by the request's
    model): the vReasoner asks the vSearcher for a region (first turn), then boxes its letter (the same rule
    as :class:`AnswerScript`); the vSearcher zooms in once (a crop of the original) and then answers a box (the
    crop the vReasoner is shown); the judge reads the fork's verify prompt (a wrong letter: ``<wrong>``). Each
    search of a question gets boxes of its own (a model's boxes differ from trial to trial), so every episode
    cuts two crops from the original. Counts the distinct crops (every image after a conversation's first)."""

    def __init__(self, metadata: Path, accuracy: float, latency: float):
        super().__init__(metadata, accuracy, latency)
        samples = load_samples(metadata, metadata.parent, check_images=False)
        # the vReasoner is asked the fork's question text; the rule keys on the single-model prompt
        self.prompt_of = {insight_o3_question(s): s.prompt() for s in samples}
        self.searches: dict[str, int] = {}
        self.crop_hashes: set[str] = set()
        self.searcher_requests = 0

    def _question(self, req: dict) -> str | None:
        text = user_message_text(req, 0)
        return next((q for q in self.prompt_of if q in text), None)

    def __call__(self, req: dict, call: Call) -> Reply:
        digests = self.note_images(req)
        with self.lock:
            self.crop_hashes.update(digests[1:])
        first_turn = not any(m.get("role") == "assistant" for m in req.get("messages", []))
        if call.model == "judge":
            with self.lock:
                self.judge_requests += 1
            reply = chat("<wrong>")  # asked only when the boxed letter is not the ground truth
        elif call.model == "searcher":
            # the region description names the search: "<sha of the question> #k"
            found = re.search(r"search ([0-9a-f]{16} #\d+)", request_text(req))
            k = int(found.group(1).rsplit("#", 1)[1]) if found else 0
            with self.lock:
                self.searcher_requests += 1
            h = int(found.group(1)[:8], 16) if found else 0  # each search of each question its own boxes
            x, y = 40 + (h + 97 * k) % 600, 40 + (h // 7 + 61 * k) % 400  # inside any frame of the vSearcher's budget
            if first_turn:
                args = json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [x, y, x + 400, y + 300]}})
                reply = chat(f"<think>zoom in</think> <tool_call>{args}</tool_call>")
            else:
                reply = chat(f"<think>found it</think> <answer>[{x + 50}, {y + 40}, {x + 250}, {y + 200}]</answer>")
        else:
            question = self._question(req)
            if question is None:
                raise ValueError("a vReasoner request without a benchmark question")
            prompt = self.prompt_of[question]
            if first_turn:
                tag = hashlib.sha256(prompt.encode()).hexdigest()[:16]
                with self.lock:
                    k = self.searches[tag] = self.searches.get(tag, -1) + 1
                reply = chat(
                    f"<think>need a closer look</think><tool_call>region_description={{search {tag} #{k}}}</tool_call>"
                )
            else:
                letter = self.reply_letter(prompt, self.answers[prompt])
                reply = chat(f"The crop shows it: \\boxed{{{letter}}}")
        reply.delay = self.latency
        return reply


def ensure_bench(a) -> Path:
    bench = Path(a.work_dir) / f"bench_{a.num_images}x{a.num_questions}_{a.size}"
    cmd = [
        sys.executable,
        "-m",
        "insight_o3.scripts.make_demo_bench",
        "--out",
        str(bench),
        "--num_images",
        str(a.num_images),
        "--num_questions",
        str(a.num_questions),
        "--size",
        a.size,
        "--seed",
        "0",
        "--workers",
        str(a.gen_workers),
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"[bench] benchmark ready in {time.perf_counter() - t0:.1f}s: {bench}", flush=True)
    return bench


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def key_on_disk(path: Path) -> bool:
    needle = API_KEY.encode()
    return any(needle in f.read_bytes() for f in path.rglob("*") if f.is_file())


def encode_floor(a, bench: Path) -> dict:
    """Seconds to decode + resize + encode every distinct image once, sequentially on one core
    (the evaluate CLI's single-model view: ``--img_max_pixels``, the store's format and quality)."""
    paths = sorted({s.image_path for s in load_samples(bench / "metadata.jsonl", bench)})
    store = ImageStore(originals_cached=0, processes=False, workers=1)
    resize = Resize.fit(a.img_max_pixels)
    try:
        cpu = min(os.sched_getaffinity(0))
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})  # one core, whatever the interpreter would do otherwise
    except (AttributeError, OSError):
        before = None
    try:
        t0 = time.perf_counter()
        payload = sum(store.get(p, resize).nbytes for p in paths)
        floor = time.perf_counter() - t0
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
        store.close()
    return {"images": len(paths), "floor_s": round(floor, 1), "payload_mb": round(payload / 1e6, 1)}


class TreeRSS(threading.Thread):
    """Peak of the summed RSS of a process and all its descendants, and the CPU seconds (user + system) each of
    them used (the last sample of each; a process gone between two samples loses at most one period), sampled
    from /proc. On a shared machine CPU seconds compare two versions where wall time cannot."""

    def __init__(self, pid: int, every: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak_kb, self.max_procs = pid, every, 0, 0
        self.cpu: dict[tuple[int, str], float] = {}  # (pid, start time) -> CPU seconds
        self.worker_keys: set[tuple[int, str]] = set()  # processes that are not the command itself
        self._halt = threading.Event()

    @staticmethod
    def _cpu_s(pid: int) -> tuple[str, float] | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        return fields[19], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def tree_cpu_s(self) -> float:
        return sum(self.cpu.values())

    @property
    def workers_cpu_s(self) -> float:
        return sum(v for k, v in self.cpu.items() if k in self.worker_keys)

    @staticmethod
    def _children(pid: int) -> list[int]:
        out = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
        except OSError:
            pass
        return out

    @staticmethod
    def _rss_kb(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def run(self):
        while not self._halt.is_set():
            tree, todo = [], [self.pid]
            while todo:
                p = todo.pop()
                tree.append(p)
                todo += self._children(p)
            self.peak_kb = max(self.peak_kb, sum(self._rss_kb(p) for p in tree))
            self.max_procs = max(self.max_procs, len(tree))
            for p in tree:
                got = self._cpu_s(p)
                if got is not None:
                    key = (p, got[0])
                    self.cpu[key] = max(self.cpu.get(key, 0.0), got[1])
                    if p != self.pid:
                        self.worker_keys.add(key)
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()


def run_once(a, bench: Path, label: str, latency: float, image_cache: str) -> dict:
    agent = a.agent == "insight_o3"
    script = (AgentScript if agent else AnswerScript)(bench / "metadata.jsonl", a.accuracy, latency)
    out_dir = Path(a.work_dir) / "runs" / label
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    with ScriptedOpenAIServer(script, keep_bodies=False) as srv:
        cmd = [
            sys.executable,
            "-m",
            "insight_o3.scripts.evaluate",
            "--eval_name",
            "bench",
            "--model",
            "scripted",
            "--api_base_url",
            srv.base_url,
            "--judge_model",
            "judge",
            "--judge_api_base_url",
            srv.base_url,
            "--ann_file",
            str(bench / "metadata.jsonl"),
            "--img_dir",
            str(bench),
            "--num_trials",
            str(a.num_trials),
            "--output_dir",
            str(out_dir),
            "--no_progress",
            "--concurrency",
            str(a.concurrency),
            "--img_max_pixels",
            str(a.img_max_pixels),
            "--image_cache",
            image_cache,
        ]
        if agent:
            cmd += ["--agent", "insight_o3", "--vsearcher_model", "searcher", "--vsearcher_api_base_url", srv.base_url]
            cmd += ["--vsearcher_api_key", API_KEY]
        else:
            cmd += ["--separate_trial_requests"]
        if a.image_workers is not None:
            cmd += ["--image_workers", str(a.image_workers)]
        env = {**os.environ, "OPENAI_API_KEY": API_KEY, "JUDGE_API_KEY": API_KEY}
        log_path = out_dir.parent / f"{label}.log"
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            sampler = TreeRSS(proc.pid)
            sampler.start()
            _, status, usage = os.wait4(proc.pid, 0)
            sampler.stop()
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        proc.returncode = os.waitstatus_to_exitcode(status)
        n_requests = srv.count
    log_text = log_path.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"[bench] evaluate exited with {proc.returncode}; see {log_path}:\n{log_text[-3000:]}")
    m = re.search(r"images decoded (\d+), encoded (\d+), cache hits (\d+)", log_text)
    run_dir = RunDir(out_dir / "bench")
    card = json.loads((out_dir / "bench" / "run_card.json").read_text())
    summary = run_dir.summary() or {}
    lost = total = 0
    for k in range(a.num_trials):
        stats = (run_dir.trial_metrics(k) or {})["overall_stats"]
        lost += stats.get("failed", 0)
        total += stats["total"]
    decoded = int(m.group(1)) if m else None
    images = len({s.image_path for s in load_samples(bench / "metadata.jsonl", bench, check_images=False)})
    return {
        "run": label,
        "agent": a.agent,
        "latency_s": latency,
        "wall_s": round(wall, 1),
        "distinct_images": images,
        "images_decoded": decoded,
        "decodes_per_image": None if decoded is None else round(decoded / images, 2),
        "images_encoded": int(m.group(2)) if m else None,
        "distinct_image_payloads_at_server": len(script.image_hashes),
        # the crops the vReasoner and the vSearcher were shown (every image after a conversation's first)
        "distinct_crops_at_server": len(script.crop_hashes) if isinstance(script, AgentScript) else 0,
        # one digest of every distinct image payload the server saw: equal digests = the same bytes were sent
        "image_payloads_sha256": hashlib.sha256("\n".join(sorted(script.image_hashes)).encode()).hexdigest(),
        "requests": n_requests,
        "judge_requests": script.judge_requests,
        "queries": total,
        "requests_lost": lost,
        "accuracy": round(summary["overall_accuracy"]["mean"], 4),
        "true_accuracy": round(script.true_accuracy(), 4),
        "bytes_written": dir_bytes(out_dir),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "peak_tree_rss_mb": round(sampler.peak_kb / 1024, 1),
        "processes": sampler.max_procs,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "tree_cpu_s": round(sampler.tree_cpu_s, 1),  # the command and its image workers (forkserver included)
        "workers_cpu_s": round(sampler.workers_cpu_s, 1),
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "api_key_on_disk": key_on_disk(out_dir),
        "image_cache": card["history"][-1].get("image_cache"),
    }


def _hits(r: dict) -> str:
    c = r.get("image_cache")
    return "off" if not c else f"{c['hits']}/{c['misses']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--work_dir", default=str(ROOT / "outputs" / "bench_eval"))
    ap.add_argument("--num_images", type=int, default=204)
    ap.add_argument("--num_questions", type=int, default=345)
    ap.add_argument("--num_trials", type=int, default=3)
    ap.add_argument(
        "--agent",
        choices=("single_model", "insight_o3"),
        default="single_model",
        help="insight_o3: the vReasoner + vSearcher agent, whose crops are cut from the originals (AgentScript)",
    )
    ap.add_argument("--size", default="4600x3967")
    ap.add_argument("--accuracy", type=float, default=0.6, help="share of questions the server answers right")
    ap.add_argument("--latency", type=float, default=1.0, help="reply delay (s) of the second server; <0 skips it")
    ap.add_argument("--skip_zero", action="store_true", help="skip the zero-latency run")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--gen_workers", type=int, default=1, help="processes drawing the benchmark images")
    ap.add_argument("--img_max_pixels", type=int, default=3500 * 3500, help="the CLI's resize budget")
    ap.add_argument(
        "--image_workers",
        type=int,
        default=None,
        help="passed to the CLI (default: its own, one process per usable CPU; 0 = threads)",
    )
    ap.add_argument(
        "--image_cache_dir",
        default=None,
        help="the prepared-image cache of the first and second runs (default: <work_dir>/image_cache; emptied first)",
    )
    ap.add_argument("--skip_second", action="store_true", help="skip the second (cached) run")
    ap.add_argument("--skip_floor", action="store_true", help="do not measure the single-core encode-once floor")
    a = ap.parse_args(argv)
    bench = ensure_bench(a)
    floor = None
    if not a.skip_floor:
        print(f"[bench] measuring the single-core encode-once floor (load {os.getloadavg()[0]:.2f})...", flush=True)
        floor = encode_floor(a, bench)
        print(f"[bench] floor: {json.dumps(floor)}", flush=True)
    results = []
    cache_dir = a.image_cache_dir or str(Path(a.work_dir) / "image_cache")
    shutil.rmtree(cache_dir, ignore_errors=True)
    runs = (
        ([] if a.skip_zero else [("zero_latency", 0.0, cache_dir)])
        + ([] if a.skip_second else [("second_run", 0.0, cache_dir)])
        + ([("latency", a.latency, "off")] if a.latency >= 0 else [])
    )
    for label, lat, image_cache in runs:
        print(f"[bench] running evaluate against the {label} server ({lat}s per reply)...", flush=True)
        res = run_once(a, bench, label, lat, image_cache)
        if floor is not None:
            res["floor_s"] = floor["floor_s"]
            res["wall_over_floor"] = round(res["wall_s"] / floor["floor_s"], 2)
        results.append(res)
        print(json.dumps(res, indent=1), flush=True)
    by_label = {r["run"]: r for r in results}
    if {"zero_latency", "second_run"} <= set(by_label):
        same = by_label["zero_latency"]["image_payloads_sha256"] == by_label["second_run"]["image_payloads_sha256"]
        by_label["second_run"]["same_image_payloads_as_first"] = same
        print(f"[bench] the second run sent {'the same' if same else 'DIFFERENT'} image bytes as the first", flush=True)
    out = Path(a.work_dir) / "results.json"
    out.write_text(
        json.dumps(
            {
                "num_images": a.num_images,
                "num_questions": a.num_questions,
                "num_trials": a.num_trials,
                "size": a.size,
                "cpus": os.cpu_count(),
                "usable_cpus": len(os.sched_getaffinity(0)),
                "floor": floor,
                "runs": results,
            },
            indent=1,
        )
    )
    if floor is not None:
        print(f"\nsingle-core encode-once floor: {floor['floor_s']} s for {floor['images']} images")
    print(
        f"\n{'run':<14}{'wall s':>8}{'CPU s':>7}{'img CPU s':>10}{'cache hit/miss':>15}{'wall/floor':>11}{'decoded':>8}{'dec/img':>8}{'encoded':>9}{'crops':>6}{'payloads':>9}{'lost':>6}{'acc':>8}"
        f"{'true':>8}{'MB written':>12}{'RSS MB':>8}{'tree RSS MB':>13}{'load':>12}"
    )
    for r in results:
        print(
            f"{r['run']:<14}{r['wall_s']:>8}{r['tree_cpu_s']:>7}{r['workers_cpu_s']:>10}{_hits(r):>15}"
            f"{str(r.get('wall_over_floor', '-')):>11}{str(r['images_decoded']):>8}{str(r['decodes_per_image']):>8}"
            f"{str(r['images_encoded']):>9}{r['distinct_crops_at_server']:>6}"
            f"{r['distinct_image_payloads_at_server']:>9}{r['requests_lost']:>6}{r['accuracy']:>8}"
            f"{r['true_accuracy']:>8}{r['bytes_written'] / 1e6:>12.2f}{r['peak_rss_mb']:>8}"
            f"{r['peak_tree_rss_mb']:>13}{r['load_before']:>6}/{r['load_after']:<5}"
        )
    print(
        f"(results in {out}; CPU s = CPU seconds of evaluate and its image workers, img CPU s of the workers alone; "
        f"load = 1-minute load average before/after the run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
