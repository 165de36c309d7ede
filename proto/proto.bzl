"""C++ code generation for .proto files with the system protoc and grpc_cpp_plugin."""

def cc_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """Generates <file>.pb.{h,cc} (and .grpc.pb.{h,cc} with grpc) and wraps them in a cc_library.

    Proto import paths are relative to this package, e.g. "mesa/v1/job.proto".
    """
    stems = [src[:-len(".proto")] for src in srcs]
    outs = [s + ".pb.h" for s in stems] + [s + ".pb.cc" for s in stems]
    if grpc:
        outs += [s + ".grpc.pb.h" for s in stems] + [s + ".grpc.pb.cc" for s in stems]
    package = native.package_name()
    cmd = "/usr/bin/protoc -I{pkg} -I/usr/include --cpp_out=$(GENDIR)/{pkg}".format(pkg = package)
    if grpc:
        cmd += " --grpc_out=$(GENDIR)/{pkg} --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin".format(pkg = package)
    cmd += " " + " ".join(["{}/{}".format(package, src) for src in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd,
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + (["@system//:grpc"] if grpc else ["@system//:protobuf"]),
        visibility = visibility,
    )
