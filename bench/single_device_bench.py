#!/usr/bin/python3
"""Single-device training step time: Quilt (quiltctl train-local) beside
PyTorch on the same model, batch, data and thread count, in one run.

Usage (from the repository root, after `bazel build //src/cli:quiltctl`):
  /usr/bin/python3 bench/single_device_bench.py [--steps 30] [--json out.json]

Models are the test fixtures (test/fixtures/*), whose PyTorch definitions are
in tools/fixtures/export_fixtures.py. Each configuration runs both trainers
with SGD for --steps steps and reports the mean step time after the first
step (Quilt: as train-local reports it; PyTorch: timed the same way), the
minimum over --repeat runs (the machine is shared; minima are the least noisy). Prints
one JSON object per configuration and a summary table.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location(
    "fixtures", os.path.join(ROOT, "tools", "fixtures", "export_fixtures.py"))
fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixtures)

MODELS = {"mlp": fixtures.Mlp, "cnn": fixtures.Cnn, "transformer": fixtures.Block}


def torch_step_time(name, batch, threads, steps):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name]()
    model.train()
    d = os.path.join(ROOT, "test", "fixtures", name)
    x = torch.from_numpy(np.load(os.path.join(d, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(d, "y.npy")))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    n = x.shape[0]
    times = []
    for step in range(steps):
        idx = [(step * batch + i) % n for i in range(batch)]
        xb, yb = x[idx], y[idx]
        t0 = time.perf_counter()
        out = model(xb)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return sum(times[1:]) / (len(times) - 1)


TMP = tempfile.mkdtemp(prefix="single_device_bench_")


def data_files(name, batch):
    """The fixture's samples repeated to at least one batch (train-local
    refuses a dataset smaller than a batch; PyTorch above wraps around the
    same samples)."""
    d = os.path.join(ROOT, "test", "fixtures", name)
    paths = []
    for part in ("x", "y"):
        v = np.load(os.path.join(d, part + ".npy"))
        reps = -(-batch // v.shape[0])
        path = os.path.join(TMP, "%s_%d_%s.npy" % (name, batch, part))
        np.save(path, np.concatenate([v] * reps))
        paths.append(path)
    return ",".join(paths)


def quilt_step_time(name, batch, threads, steps):
    d = os.path.join(ROOT, "test", "fixtures", name)
    r = subprocess.run(
        [os.path.join(ROOT, "bazel-bin", "src", "cli", "quiltctl"), "train-local",
         os.path.join(d, "model.onnx"), "--loss", "softmax_cross_entropy", "--data",
         data_files(name, batch), "--batch", str(batch),
         "--steps", str(steps), "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
         "--threads", str(threads), "-o", "json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["mean_step_time_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", default="")
    ap.add_argument("--repeat", type=int, default=5, help="runs per configuration; the minimum counts")
    args = ap.parse_args()
    rows = []
    for name in ["mlp", "cnn", "transformer"]:
        for batch in [16, 128]:
            for threads in [1, 2]:
                q = min(quilt_step_time(name, batch, threads, args.steps) for _ in range(args.repeat))
                t = min(torch_step_time(name, batch, threads, args.steps) for _ in range(args.repeat))
                row = {"model": name, "batch": batch, "threads": threads,
                       "quilt_step_ms": round(q * 1e3, 3), "pytorch_step_ms": round(t * 1e3, 3),
                       "speedup_vs_pytorch": round(t / q, 2)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| model | batch | threads | Quilt step (ms) | PyTorch step (ms) | PyTorch/Quilt |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['quilt_step_ms']} | "
              f"{r['pytorch_step_ms']} | {r['speedup_vs_pytorch']}× |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
