#!/usr/bin/env python3
"""llamacpp_compare.py — mamba2c against llama.cpp on the same GGUF files, same machine, same
threads, alternating runs:

    .venv/bin/python bench/llamacpp_compare.py --llama-bench /path/to/llama-bench
    .venv/bin/python bench/llamacpp_compare.py --llama-bench B --dtypes q8_0 --layers 8 --reps 2

A random-weight Mamba-2 shaped like mamba2-370m (48 layers, d_model 1024, N 128, vocabulary
50288; bench/generate.py's `build`, seed 0) is written once per weight type with
mamba2c.models.save_gguf (f32, bf16, q8_0: the four weight matrices in that type, the rest
float32, as llama.cpp's converter writes them). Each file then runs, round after round,
alternately in

  mamba2c    bench/generate.py --gguf FILE --paths mamba2c (models.from_gguf; Q8_0 tensors
             stay Q8_0 for the decode GEMV; the bf16 file as a bfloat16 model, the others
             float32; --dtypes q8_0x: the q8_0 file with activations="q8_0", x rounded to
             Q8_0 in our GEMVs as llama.cpp does): prefill tok/s = prompt / time to the first new
             token, decode tok/s = 1 / the median interval between new tokens
  llama.cpp  llama-bench -m FILE -p PROMPT -n DECODE -t THREADS -r 1 (its pp and tg tests:
             prefill of PROMPT tokens, generation of DECODE tokens from an empty context; a
             Mamba-2 token costs the same at any position)

each in a fresh process, and the table gives the medians over rounds, the ratios (mamba2c /
llama.cpp) and the STREAM triad that generate.py measured before each of its runs, with the
load average. llama.cpp is not part of this project: build it yourself (e.g. from the
llama-cpp-python sdist on PyPI, whose vendor/llama.cpp holds its sources) and pass the
llama-bench binary; nothing is downloaded here.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write_models(dtypes, layers, d_model, vocab, d_state, out_dir):
    sys.path.insert(0, HERE)
    import torch
    from generate import build
    from mamba2c.models import save_gguf
    torch.manual_seed(0)
    _, ours = build(dict(layers=layers, d_model=d_model), torch.float32, vocab, d_state)
    files = {}
    for d in dtypes:
        fd = "q8_0" if d == "q8_0x" else d  # q8_0x: the q8_0 file, x rounded in our GEMVs
        f = os.path.join(out_dir, f"mamba2-{layers}L-{d_model}-{fd}.gguf")
        if not os.path.exists(f):
            save_gguf(ours, f, dtype=fd)
        files[d] = f
    return files


def run_ours(a, f, d):
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        cmd = [sys.executable, os.path.join(HERE, "generate.py"), "--gguf", f, "--paths",
               "mamba2c", "--prefill", str(a.prefill), "--decode", str(a.decode), "--reps", "1",
               "--threads", str(a.t), "--json", j.name]
        if f.endswith("-bf16.gguf"):  # a bf16 model (from_gguf's default is float32)
            cmd += ["--gguf-dtype", "bfloat16"]
        if d == "q8_0x":  # llama.cpp's Q8_0 arithmetic: x rounded to Q8_0 blocks as well
            cmd += ["--gguf-activations", "q8_0"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        r = json.load(open(j.name))[0]
    return r["prefill_tok_s"], r["decode_tok_s"], r["stream_gbs"], r["load"]


def run_llama(a, f):
    cmd = [a.llama_bench, "-m", f, "-p", str(a.prefill), "-n", str(a.decode), "-t",
           str(a.t), "-r", "1", "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pp = tg = None
    for t in json.loads(out):
        if t.get("n_prompt") and not t.get("n_gen"):
            pp = t["avg_ts"]
        if t.get("n_gen") and not t.get("n_prompt"):
            tg = t["avg_ts"]
    return pp, tg, out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bench", required=True, help="path of llama.cpp's llama-bench")
    p.add_argument("--dtypes", default="f32,bf16,q8_0")
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50288)
    p.add_argument("--d-state", type=int, default=128)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--reps", type=int, default=3, help="alternating rounds (medians)")
    p.add_argument("--dir", default=None, help="where the GGUF files go (default: a temp dir)")
    p.add_argument("--json", default=None, help="write the rows as JSON")
    a = p.parse_args()
    out_dir = a.dir or tempfile.mkdtemp(prefix="mamba2c-gguf-")
    dtypes = a.dtypes.split(",")
    files = write_models(dtypes, a.layers, a.d_model, a.vocab, a.d_state, out_dir)
    ver = subprocess.run([a.llama_bench, "--version"], capture_output=True, text=True)
    print(f"# llama-bench: {(ver.stdout + ver.stderr).strip().splitlines()[:1]}")
    print(f"# model: {a.layers} layers, d_model {a.d_model}, N {a.d_state}, vocab {a.vocab}; "
          f"prompt {a.prefill}, decode {a.decode}, threads {a.threads}, {a.reps} rounds; "
          f"files in {out_dir}", flush=True)
    rows = []
    for d, th in [(d, int(t)) for t in a.threads.split(",") for d in dtypes]:
        a.t = th
        ours, theirs = [], []
        for r in range(a.reps):
            ours.append(run_ours(a, files[d], d))
            pp, tg, _ = run_llama(a, files[d])
            theirs.append((pp, tg))
            print(f"# {d}, {th} threads, round {r}: mamba2c prefill {ours[-1][0]:.1f} decode "
                  f"{ours[-1][1]:.2f} (triad {ours[-1][2]:.1f} GB/s, load {ours[-1][3]:.1f}); "
                  f"llama.cpp prefill {pp:.1f} decode {tg:.2f}", flush=True)
        med = lambda xs: statistics.median(xs)  # noqa: E731
        row = dict(dtype=d, threads=th, ours_prefill=med([o[0] for o in ours]),
                   ours_decode=med([o[1] for o in ours]),
                   llama_prefill=med([t[0] for t in theirs]),
                   llama_decode=med([t[1] for t in theirs]),
                   triad_gbs=med([o[2] for o in ours]), load=med([o[3] for o in ours]),
                   rounds=a.reps)
        rows.append(row)
    print("\n| weights | threads | prefill mamba2c / llama.cpp | x | decode mamba2c / llama.cpp "
          "| x | triad | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['dtype']} | {r['threads']} | {r['ours_prefill']:.1f} / {r['llama_prefill']:.1f} | "
              f"{r['ours_prefill'] / r['llama_prefill']:.2f} | {r['ours_decode']:.2f} / "
              f"{r['llama_decode']:.2f} | {r['ours_decode'] / r['llama_decode']:.2f} | "
              f"{r['triad_gbs']:.1f} GB/s | {r['load']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
