"""quilt_cuda_library: CUDA sources compiled by the toolkit's nvcc.

Each .cu file is compiled in a genrule (Bazel 4 has no CUDA rules) into an
object that a cc_library links, with the static CUDA runtime. Only use inside
`if CUDA_AVAILABLE:` (see @local_cuda//:defs.bzl).
"""

load("@local_cuda//:defs.bzl", "NVCC")
load("//bazel:quilt.bzl", "quilt_cc_library")

# Turing, Ampere, Hopper, Blackwell SASS, plus PTX for newer GPUs. CUDA 13
# dropped Volta and older; build against a CUDA 12 toolkit (QUILT_CUDA_PATH)
# for V100 / P100 nodes.
CUDA_ARCH_FLAGS = [
    "-gencode arch=compute_75,code=sm_75",
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_100,code=sm_100",
    "-gencode arch=compute_100,code=compute_100",
]

def quilt_cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    objs = []
    for src in srcs:
        obj = src + ".o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-c -O3 -std=c++17 -Xcompiler -fPIC",
                "-I.",
                " ".join(CUDA_ARCH_FLAGS),
                "-o $@ $(location %s)" % src,
            ]),
            message = "nvcc " + src,
        )
        objs.append(obj)
    quilt_cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        linkstatic = True,
        deps = deps + ["@local_cuda//:cudart_static"],
        **kwargs
    )
