"""A repository of Debian's system libraries (and the CUDA toolkit) as cc_library targets.

Link lines come from pkg-config at fetch time, so the ~75 Abseil libraries that gRPC needs are not
kept by hand. Headers under /usr/include are the compiler's builtin directories; headers elsewhere
(CUDA, OpenMPI) are symlinked into the repository so Bazel can track them.
"""

def _pkg_config_libs(ctx, packages):
    result = ctx.execute(["pkg-config", "--libs"] + packages)
    if result.return_code != 0:
        fail("pkg-config --libs %s failed (run scripts/setup.sh): %s" % (" ".join(packages), result.stderr))
    return [flag for flag in result.stdout.strip().split(" ") if flag]

def _starlark_list(items):
    return "[" + ", ".join(['"%s"' % item for item in items]) + "]"

def _system_libs_impl(ctx):
    grpc_libs = _pkg_config_libs(ctx, ["grpc++", "protobuf"])
    protobuf_libs = _pkg_config_libs(ctx, ["protobuf"])
    prometheus_libs = _pkg_config_libs(ctx, ["prometheus-cpp-pull", "prometheus-cpp-core"])

    # Abseil alone (for targets that use it without gRPC, e.g. the trainer and kernels).
    absl_result = ctx.execute(["sh", "-c", "pkg-config --list-all | awk '{print $1}' | grep '^absl_'"])
    absl_packages = [p for p in absl_result.stdout.strip().split("\n") if p]
    absl_libs = _pkg_config_libs(ctx, absl_packages) if absl_packages else []

    cuda_root = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    has_cuda = ctx.path(cuda_root + "/include/cuda_runtime.h").exists
    if has_cuda:
        ctx.symlink(cuda_root + "/include", "cuda/include")
    else:
        ctx.file("cuda/include/.empty", "")
    mpi_include = "/usr/lib/x86_64-linux-gnu/openmpi/include"
    if ctx.path(mpi_include).exists:
        ctx.symlink(mpi_include, "mpi/include")
    else:
        ctx.file("mpi/include/.empty", "")

    build = """package(default_visibility = ["//visibility:public"])

cc_library(name = "grpc", linkopts = {grpc} + ["-lgrpc++_reflection"], defines = ["NOMINMAX"])

cc_library(name = "protobuf", linkopts = {protobuf})

cc_library(name = "absl", linkopts = {absl})

cc_library(name = "prometheus", linkopts = {prometheus})

cc_library(name = "sqlite3", linkopts = ["-lsqlite3"])

# libpq-dev: headers under /usr/include/postgresql (included as <postgresql/libpq-fe.h>).
cc_library(name = "libpq", linkopts = ["-lpq"])

cc_library(name = "yaml_cpp", linkopts = ["-lyaml-cpp"])

cc_library(name = "nlohmann_json")

# Header-only (libcli11-dev): /usr/include/CLI.
cc_library(name = "cli11")

cc_library(name = "openblas", linkopts = ["-lopenblas"])

cc_library(name = "re2", linkopts = ["-lre2"])

cc_library(name = "pthread", linkopts = ["-lpthread"])

cc_library(name = "zlib", linkopts = ["-lz"])

cc_library(name = "zstd", linkopts = ["-lzstd"])

cc_library(name = "crypto", linkopts = ["-lcrypto"])

cc_library(name = "curl", linkopts = ["-lcurl"])

# cpp-httplib (libcpp-httplib-dev), Debian's split build: the header declares, the library holds the
# code, built with these features (the header's classes must be compiled with the same defines).
cc_library(
    name = "httplib",
    defines = ["CPPHTTPLIB_OPENSSL_SUPPORT", "CPPHTTPLIB_ZLIB_SUPPORT", "CPPHTTPLIB_BROTLI_SUPPORT"],
    linkopts = ["-lcpp-httplib", "-lssl", "-lcrypto", "-lz", "-lpthread"],
)

cc_library(name = "sentencepiece", linkopts = ["-lsentencepiece"])

# Unicode normalisation (NFC) for tokenizer.json files that ask for it (libutf8proc-dev).
cc_library(name = "utf8proc", linkopts = ["-lutf8proc"])

cc_library(name = "sentencepiece_train", linkopts = ["-lsentencepiece_train", "-lsentencepiece"])

cc_library(name = "gtest", linkopts = ["-lgtest", "-lgmock", "-lpthread"])

cc_library(name = "gtest_main", linkopts = ["-lgtest_main", "-lgtest", "-lgmock", "-lpthread"])

cc_library(name = "benchmark", linkopts = ["-lbenchmark", "-lpthread"])

cc_library(
    name = "mpi",
    hdrs = glob(["mpi/include/**"]),
    includes = ["mpi/include", "mpi/include/openmpi"],
    linkopts = ["-L/usr/lib/x86_64-linux-gnu/openmpi/lib", "-lmpi"],
)

cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**"]),
    includes = ["cuda/include"],
)

# The CUDA runtime and libraries are linked dynamically; the GPU machine supplies them.
cc_library(
    name = "cuda",
    linkopts = ["-L{cuda_root}/lib64", "-Wl,-rpath,{cuda_root}/lib64", "-lcudart", "-lcublasLt", "-lcublas"],
    deps = [":cuda_headers"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{cuda_root}/lib64", "-Wl,-rpath,{cuda_root}/lib64", "-lnccl"],
    deps = [":cuda"],
)
""".format(
        grpc = _starlark_list(grpc_libs),
        protobuf = _starlark_list(protobuf_libs),
        absl = _starlark_list(absl_libs),
        prometheus = _starlark_list(prometheus_libs),
        cuda_root = cuda_root,
    )
    ctx.file("BUILD", build)
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

system_libs = repository_rule(
    implementation = _system_libs_impl,
    environ = ["CUDA_HOME", "PKG_CONFIG_PATH"],
    local = True,
)
