#!/usr/bin/python3
"""Training through the whole service beside PyTorch DDP, in one run.

Starts a coordinator and two workers on this machine (one CPU device on one
core each, no emulated slowdown), then for each fixture model:
  - submits a job (data parallel, even split, ring all-reduce, SGD with
    momentum) reading NumPy files, and measures submit-to-first-step latency
    (from the start of `quiltctl submit` until the job reports step 1; the
    status is polled every 10 ms until then, and followed with `quiltctl
    watch` after) and the steady-state samples/s the
    coordinator reports (global batch / mean step time of the last 20 steps);
  - runs PyTorch DistributedDataParallel (gloo, 2 processes, one thread each)
    on the same model, global batch, data and optimizer, and measures its
    samples/s the same way (mean step time after 5 warm-up steps).
Prints one JSON object per model and a summary table.

Usage (from the repository root, after
  bazel build -c opt //src/coordinator:quilt-coordinator //src/worker:quilt-worker //src/cli:quiltctl):
  /usr/bin/python3 bench/service_bench.py [--steps 100] [--models mlp:1024,cnn:256,transformer:256]
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
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "bazel-bin", "src")
spec = importlib.util.spec_from_file_location(
    "fixtures", os.path.join(ROOT, "tools", "fixtures", "export_fixtures.py"))
fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixtures)
MODELS = {"mlp": fixtures.Mlp, "cnn": fixtures.Cnn, "transformer": fixtures.Block}


def write_data(name, samples, out_dir):
    d = os.path.join(ROOT, "test", "fixtures", name)
    x, y = np.load(os.path.join(d, "x.npy")), np.load(os.path.join(d, "y.npy"))
    reps = (samples + len(x) - 1) // len(x)
    x = np.concatenate([x] * reps)[:samples]
    y = np.concatenate([y] * reps)[:samples]
    xp, yp = os.path.join(out_dir, name + "_x.npy"), os.path.join(out_dir, name + "_y.npy")
    np.save(xp, x)
    np.save(yp, y)
    return xp, yp


def quiltctl(addr, *args, check=True):
    r = subprocess.run([os.path.join(BIN, "cli", "quiltctl"), "--coordinator", addr, *args],
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("quiltctl %s: %s" % (" ".join(args), r.stderr))
    return r


def start_cluster(tmp):
    procs = []
    addr_file = os.path.join(tmp, "coordinator.addr")
    log = open(os.path.join(tmp, "coordinator.log"), "w")
    procs.append(subprocess.Popen(
        [os.path.join(BIN, "coordinator", "quilt-coordinator"), "--listen_address", "127.0.0.1:0",
         "--state_dir", os.path.join(tmp, "state"), "--ready_file", addr_file,
         "--heartbeat_period_ms", "200"], stdout=log, stderr=log))
    for _ in range(300):
        if os.path.exists(addr_file) and open(addr_file).read().strip():
            break
        time.sleep(0.1)
    addr = open(addr_file).read().strip()
    for node in ("worker-a", "worker-b"):
        ready = os.path.join(tmp, node + ".ready")
        wlog = open(os.path.join(tmp, node + ".log"), "w")
        procs.append(subprocess.Popen(
            [os.path.join(BIN, "worker", "quilt-worker"), "--coordinator_address", addr,
             "--node_id", node, "--cpu_cores", "1", "--ready_file", ready,
             "--work_dir", os.path.join(tmp, node)], stdout=wlog, stderr=wlog))
        for _ in range(600):
            if os.path.exists(ready):
                break
            time.sleep(0.1)
    return addr, procs


def job(addr, job_id):
    return json.loads(quiltctl(addr, "describe", "job", job_id, "-o", "json").stdout)


def quilt_run(addr, name, batch, steps, xp, yp):
    model = os.path.join(ROOT, "test", "fixtures", name, "model.onnx")
    t0 = time.perf_counter()
    job_id = quiltctl(addr, "submit", model, "--loss", "softmax_cross_entropy", "--batch",
                      str(batch), "--steps", str(steps), "--strategy", "dp-even-ring", "--lr",
                      "0.05", "--momentum", "0.9", "--data", xp + "," + yp).stdout.strip()
    # Poll (every 10 ms) only until the first step: polling costs CPU the
    # executors need. Then follow the job's stream until it ends.
    first = None
    while first is None:
        s = job(addr, job_id)
        if int(s.get("step", "0")) >= 1:
            first = time.perf_counter() - t0
        elif s["state"] in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
            break
        else:
            time.sleep(0.01)
    quiltctl(addr, "watch", job_id, check=False)
    s = job(addr, job_id)
    if s["state"] != "JOB_STATE_SUCCEEDED":
        raise RuntimeError("job %s: %s" % (s["state"], s.get("message")))
    return {"submit_to_first_step_s": first, "samples_per_s": s["samples_per_s"],
            "step_s": s["measured_step_time_s"], "predicted_step_s": s["predicted_step_time_s"],
            "strategy": s["strategy"]}


def ddp_worker(rank, name, batch, steps, xp, yp, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(MODELS[name]())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.from_numpy(np.load(xp)), torch.from_numpy(np.load(yp))
    half = batch // 2
    times = []
    for step in range(steps):
        begin = step * batch + rank * half
        xb, yb = x[begin:begin + half], y[begin:begin + half]
        t0 = time.perf_counter()
        o = model(xb)
        loss = F.cross_entropy(o.reshape(-1, o.shape[-1]), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def ddp_run(name, batch, steps, xp, yp, tmp):
    out = os.path.join(tmp, name + "_ddp.json")
    port = 29500 + os.getpid() % 1000
    mp.spawn(ddp_worker, args=(name, batch, steps, xp, yp, port, out), nprocs=2, join=True)
    times = json.load(open(out))[5:]
    step = sum(times) / len(times)
    return {"samples_per_s": batch / step, "step_s": step}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--models", default="mlp:1024,cnn:256,transformer:256")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="quilt-service-bench-")
    addr, procs = start_cluster(tmp)
    rows = []
    try:
        for item in a.models.split(","):
            name, batch = item.split(":")
            batch = int(batch)
            xp, yp = write_data(name, batch * a.steps, tmp)
            q = quilt_run(addr, name, batch, a.steps, xp, yp)
            d = ddp_run(name, batch, a.steps, xp, yp, tmp)
            row = {"bench": "service_vs_ddp", "model": name, "global_batch": batch,
                   "steps": a.steps, "quilt": q, "ddp_gloo": d,
                   "quilt_vs_ddp": q["samples_per_s"] / d["samples_per_s"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    print("\n%-12s %6s %12s %14s %14s %8s" % ("model", "batch", "first step", "Quilt samp/s",
                                             "DDP samp/s", "Q/DDP"))
    for r in rows:
        print("%-12s %6d %10.3f s %14.0f %14.0f %7.2fx" % (
            r["model"], r["global_batch"], r["quilt"]["submit_to_first_step_s"],
            r["quilt"]["samples_per_s"], r["ddp_gloo"]["samples_per_s"], r["quilt_vs_ddp"]))


if __name__ == "__main__":
    sys.exit(main())
