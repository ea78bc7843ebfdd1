#!/usr/bin/python3
"""Batch norm's precision against PyTorch on inputs far from 0.

For each offset R: BatchNorm1d(8) then Linear(8, 4), 64 samples of 8
features R + N(0, 1), trained with SGD (lr 0.01, momentum 0.9, batch 16)
for 300 steps by PyTorch and by `quiltctl train-local` on the same ONNX
export and data. Prints one JSON line per R: the largest loss difference
in the first 20 steps and in steps 200-300, or the error quiltctl stopped
with. Needs Debian's python3-torch and python3-onnx.

  bazel build //src/cli:quiltctl
  /usr/bin/python3 bench/batch_norm_precision.py bazel-bin/src/cli/quiltctl
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

STEPS, BATCH, SAMPLES = 300, 16, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.bn(x))


def main():
    quiltctl = os.path.abspath(sys.argv[1])
    offsets = [float(r) for r in sys.argv[2:]] or [100, 1000, 3000, 10000]
    work = tempfile.mkdtemp(prefix="bn-precision-")
    for offset in offsets:
        torch.manual_seed(0)
        model = Model().train()
        x = (offset + torch.randn(SAMPLES, 8)).float()
        y = torch.randint(0, 4, (SAMPLES,))
        xf, yf, mf = (os.path.join(work, f) for f in ("x.npy", "y.npy", "m.onnx"))
        np.save(xf, x.numpy())
        np.save(yf, y.numpy().astype(np.int64))
        torch.onnx.export(copy.deepcopy(model), x[:BATCH], mf,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}}, opset_version=13)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        want = []
        for step in range(STEPS):
            i = (step * BATCH) % SAMPLES
            loss = nn.functional.cross_entropy(model(x[i:i + BATCH]), y[i:i + BATCH])
            opt.zero_grad()
            loss.backward()
            opt.step()
            want.append(loss.item())
        run = subprocess.run(
            [quiltctl, "train-local", mf, "--loss", "softmax_cross_entropy", "--data",
             f"{xf},{yf}", "--batch", str(BATCH), "--steps", str(STEPS), "--lr", "0.01",
             "--momentum", "0.9", "--threads", "1", "-o", "json"],
            capture_output=True, text=True)
        line = {"offset": offset}
        if run.returncode != 0:
            line["error"] = run.stderr.strip().splitlines()[-1]
        else:
            got = json.loads(run.stdout)["losses"]
            diff = [abs(a - b) for a, b in zip(want, got)]
            line["max_loss_diff_first_20"] = max(diff[:20])
            line["max_loss_diff_steps_200_300"] = max(diff[200:])
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
