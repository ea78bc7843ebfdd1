#!/usr/bin/python3
"""Plans models Quilt's own tests never see: torchvision's, exported to ONNX.

Exports each torchvision model (random weights, dynamic batch; Debian's
python3-torchvision) as a user would with torch.onnx.export: in training
mode, or with --export-mode eval as torch.onnx.export does by default
(batch norm folded into the convolutions, dropout left out), then runs `quiltctl plan MODEL --strategy all -o json` on
a cluster and prints one JSON object per model: the planner's step, the
best data-parallel baseline's, the speedup, whether any strategy failed
to plan, and the wall time of `plan`. Models PyTorch cannot export are
reported with PyTorch's reason. A summary line ends the output.

Usage (from the repository root, after
  bazel build --config=ci //src/cli:quiltctl):
  /usr/bin/python3 bench/torchvision_plans.py \\
      [--cluster config/clusters/heterog_testbed.textproto] [--batch 32] \\
      [--models resnet18,mobilenet_v2,...] [--export-mode training|eval]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torchvision.models as tvm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
QUILTCTL = os.path.join(ROOT, "bazel-bin", "src", "cli", "quiltctl")
MODELS = ("resnet18,mobilenet_v2,mobilenet_v3_small,squeezenet1_1,densenet121,"
          "shufflenet_v2_x1_0,efficientnet_b0,vit_b_16,googlenet,alexnet,mnasnet0_5,"
          "regnet_y_400mf,convnext_tiny,vgg11_bn,resnext50_32x4d,wide_resnet50_2,inception_v3")
BASELINES = ("single-device", "dp-even-ring", "dp-even-ps", "dp-proportional-ring",
             "dp-proportional-ps")


def export(name, path, mode):
    """Writes the model to `path`; None, or why PyTorch could not."""
    kwargs = {"aux_logits": False, "init_weights": False} if name in (
        "googlenet", "inception_v3") else {}
    model = getattr(tvm, name)(weights=None, **kwargs)
    size = 299 if name == "inception_v3" else 224
    training = mode == "training"
    if training:
        model.train()
    else:
        model.eval()
    try:
        torch.onnx.export(model, torch.randn(2, 3, size, size), path, opset_version=13,
                          training=(torch.onnx.TrainingMode.TRAINING
                                    if training else torch.onnx.TrainingMode.EVAL),
                          do_constant_folding=not training, input_names=["x"],
                          output_names=["out"], dynamic_axes={"x": {0: "batch"}})
    except Exception as e:  # PyTorch's exporter raises many kinds
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return None


def plan(path, cluster, batch):
    start = time.monotonic()
    run = subprocess.run([QUILTCTL, "plan", path, "--cluster", cluster, "--batch", str(batch),
                          "--strategy", "all", "-o", "json"],
                         capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1:] or ["(no message)"],
                "plan_wall_s": wall}
    out = json.loads(run.stdout)
    est = {e["name"]: e for e in out["estimates"]}
    feasible = {n: e["step_time_s"] for n, e in est.items()
                if e.get("feasible") and e.get("step_time_s", 0) > 0}
    base = [(feasible[n], n) for n in BASELINES if n in feasible]
    row = {"plan_wall_s": round(wall, 2), "heterog_s": feasible.get("heterog"),
           "failed": sorted(n for n, e in est.items() if not e.get("feasible"))}
    if base:
        row["best_baseline_s"], row["best_baseline"] = min(base)
        if row["heterog_s"]:
            row["speedup"] = row["best_baseline_s"] / row["heterog_s"]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default=os.path.join(ROOT, "config", "clusters",
                                                       "heterog_testbed.textproto"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--export-mode", choices=("training", "eval"), default="training")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")  # the exporter's notes on training-mode buffers
    if not os.path.exists(QUILTCTL):
        sys.exit(f"{QUILTCTL} is missing: bazel build --config=ci //src/cli:quiltctl first")
    speedups, errors = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = os.path.join(tmp, name + ".onnx")
            why = export(name, path, args.export_mode)
            row = {"model": name, "batch": args.batch, "export_mode": args.export_mode}
            if why is not None:
                row["export_failed"] = why
            else:
                row.update(plan(path, args.cluster, args.batch))
                os.remove(path)
                errors += "error" in row
                if "speedup" in row:
                    speedups.append(row["speedup"])
            print(json.dumps(row), flush=True)
    geo = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
    print(json.dumps({"summary": {"planned": len(speedups), "plan_errors": errors,
                                  "slower_than_baseline": sum(s < 1 for s in speedups),
                                  "geomean_speedup": geo}}))


if __name__ == "__main__":
    main()
