"""C++ (and gRPC) code generation from .proto files with the system protoc.

Bazel 4's native proto rules want @com_google_protobuf, which is not available
offline; this macro runs /usr/bin/protoc (and /usr/bin/grpc_cpp_plugin) in a
genrule and compiles the result against the system libprotobuf / libgrpc++.
Imports are resolved from the workspace root: `import "proto/quilt/v1/x.proto"`.
"""

PROTOC = "/usr/bin/protoc"
GRPC_CPP_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def quilt_cc_proto_library(name, srcs, deps = [], proto_deps = [], grpc = False, visibility = None):
    """Generates *.pb.{h,cc} (and *.grpc.pb.{h,cc} with grpc = True).

    Args:
      name: the cc_library target.
      srcs: .proto files in this package.
      deps: cc_library targets of the imported protos.
      proto_deps: the imported .proto files (filegroups named <dep>_protos).
      grpc: also generate gRPC service code.
      visibility: of the cc_library and the _protos filegroup.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]

    cmd = PROTOC + " --proto_path=. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=" + GRPC_CPP_PLUGIN
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])

    native.genrule(
        name = name + "_codegen",
        srcs = srcs + proto_deps,
        outs = outs,
        cmd = cmd,
        message = "protoc " + native.package_name(),
    )
    native.filegroup(
        name = name + "_protos",
        srcs = srcs + proto_deps,
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc++"] if grpc else []),
        visibility = visibility,
    )
