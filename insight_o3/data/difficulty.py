"""Collage difficulty filter (C.1): a vReasoner answers each collage question *without* vSearcher
``--attempts`` times (pass@3 in the paper); any correct attempt removes the collage.

    python -m insight_o3.scripts.generate_collages filter --out_dir data/collages --model gpt-5-mini

Reads ``<out_dir>/collages.jsonl``; one record per collage is appended to ``difficulty.jsonl``
(``attempts``: the extracted answers, ``solved``) as it finishes, so a rerun only asks the rest;
``collages_hard.jsonl`` (the unsolved rows, same schema as ``collages.jsonl``) is rewritten at the end.
Collages whose requests failed are recorded with ``error`` and retried on the next run.

Correctness: multiple choice compares option letters; open answers compare normalised text
(exact match, or the ground truth contained in the answer as a whole word/phrase). With
``--judge_model`` an OpenAI-compatible judge decides open answers with the paper's judge prompt.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re

from tqdm import tqdm

from ..api import ENV_KEYS, Redactor, make_client, resolve
from ..evaluation.records import RecordLog
from ..images import ImageStore, Resize
from ..parsing import extract_answer_span, format_options, mcq_letter, option_letters
from ..prompts import JUDGE_PROMPT, THINK_SYSTEM_PROMPT, fill


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^0-9a-z. ]", " ", s.lower())).strip().rstrip(".")


def open_answer_matches(pred: str | None, gt: str) -> bool:
    if not pred:
        return False
    p, g = _norm(pred), _norm(gt)
    return bool(g) and (p == g or re.search(rf"(^| ){re.escape(g)}( |$)", p) is not None)


def user_text(row: dict) -> str:
    opts = format_options(row.get("options"))
    text = row["question"]
    if opts:
        text += "\nOptions:\n" + opts + "\nAnswer with the option letter."
    return text + "\nPut your final answer in \\boxed{}."


async def _judge(client, model: str, row: dict, pred: str) -> bool:
    prompt = fill(JUDGE_PROMPT, question=row["question"], gt_answer=row["answer"], model_answer=pred)
    resp = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
    return "<correct>" in (resp.choices[0].message.content or "")


async def check_row(row: dict, out_dir: str, client, judge, a, store: ImageStore) -> dict:
    enc = await store.aget(os.path.join(out_dir, row["image"]), Resize(max_pixels=a.max_pixels or None))
    msgs = [{"role": "system", "content": THINK_SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": enc.data_url, "detail": "high"}},
                                         {"type": "text", "text": user_text(row)}]}]
    letters = option_letters(row.get("options")) if row.get("options") else ""
    answers, solved = [], False
    for _ in range(a.attempts):
        resp = await client.chat.completions.create(model=a.model, messages=msgs)
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        span = extract_answer_span(text)
        if letters:
            pred = mcq_letter(span, letters)
            ok = pred is not None and pred == str(row["answer"]).strip().upper()[:1]
        else:
            pred = span
            ok = open_answer_matches(pred, row["answer"])
            if not ok and judge is not None and pred:
                ok = await _judge(judge, a.judge_model, row, pred)
        answers.append(pred)
        if ok:
            solved = True
            break   # any success removes the item
    return {"sample_key": row["sample_key"], "answers": answers, "solved": solved}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m insight_o3.scripts.generate_collages filter")
    ap.add_argument("--out_dir", required=True, help="a generate_collages output directory")
    ap.add_argument("--model", required=True)
    ap.add_argument("--attempts", type=int, default=3, help="pass@k (paper: 3)")
    ap.add_argument("--api_key", default=None)
    ap.add_argument("--base_url", default=None)
    ap.add_argument("--judge_model", default=None, help="judge open answers with this model (default: text match)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max_retries", type=int, default=5)
    ap.add_argument("--max_pixels", type=int, default=1280 * 1280)
    ap.add_argument("--no_progress", action="store_true")
    a = ap.parse_args(argv)
    rows_path = os.path.join(a.out_dir, "collages.jsonl")
    if not os.path.isfile(rows_path):
        raise SystemExit(f"not found: {rows_path}")
    rows = []
    with open(rows_path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{rows_path}:{i}: malformed JSON line ({e})")
    keys, urls = ENV_KEYS["main"]
    key, base = resolve(a.api_key, keys), resolve(a.base_url, urls)
    redact = Redactor(key)
    rec_log = RecordLog.open(os.path.join(a.out_dir, "difficulty.jsonl"))
    todo = [r for r in rows if "solved" not in rec_log.records.get(r["sample_key"], {})]

    async def run():
        client = make_client(key, base, max_retries=a.max_retries, max_connections=a.concurrency)
        store = ImageStore()
        sem = asyncio.Semaphore(a.concurrency)
        bar = tqdm(total=len(rows), initial=len(rows) - len(todo), desc="pass@k", disable=a.no_progress)

        async def one(row):
            async with sem:
                try:
                    rec = await check_row(row, a.out_dir, client, client if a.judge_model else None, a, store)
                except Exception as e:
                    rec = {"sample_key": row["sample_key"], "error": redact(f"{type(e).__name__}: {e}")[:2000]}
                await asyncio.to_thread(rec_log.append, rec)
                bar.update(1)
        try:
            await asyncio.gather(*(one(r) for r in todo))
        finally:
            bar.close()
            store.close()
            await client.close()

    try:
        asyncio.run(run())
        rec_log.compact([r["sample_key"] for r in rows])
    finally:
        rec_log.close()
    hard = [r for r in rows if rec_log.records.get(r["sample_key"], {}).get("solved") is False]
    errors = sum(1 for r in rows if "error" in rec_log.records.get(r["sample_key"], {}))
    tmp = os.path.join(a.out_dir, f"collages_hard.jsonl.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in hard:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(a.out_dir, "collages_hard.jsonl"))
    print(json.dumps({"collages": len(rows), "hard": len(hard), "errors": errors}))
