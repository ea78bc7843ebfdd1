"""C++ (and gRPC) code generation from .proto files with the system protoc.

Bazel 4's native proto rules want @com_google_protobuf, which is not available
offline; this macro runs /usr/bin/protoc (and /usr/bin/grpc_cpp_plugin) in a
genrule and compiles the result against the system libprotobuf / libgrpc++.
Imports are resolved from the workspace root: `import "proto/quilt/v1/x.proto"`.
"""

PROTOC = "/usr/bin/protoc"
GRPC_CPP_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def quilt_cc_proto_library(name, srcs, deps = [], proto_deps = [], grpc = False, visibility = None):
    """Generates *.pb.{h,cc}, or with grpc = True only the *.grpc.pb.{h,cc}.

    Message code and gRPC stubs are separate targets so that domain code can
    use request/response messages without depending on gRPC.

    Args:
      name: the cc_library target.
      srcs: .proto files in this package.
      deps: cc_library targets of the imported protos (with grpc = True: the
        message library of the same srcs).
      proto_deps: the imported .proto files (filegroups named <dep>_protos).
      grpc: generate gRPC service code instead of message code.
      visibility: of the cc_library and the _protos filegroup.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        else:
            outs += [base + ".pb.h", base + ".pb.cc"]

    cmd = PROTOC + " --proto_path=."
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=" + GRPC_CPP_PLUGIN
    else:
        cmd += " --cpp_out=$(GENDIR)"
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
