"""nvcc rules: compile .cu files into a static archive that cc_library/cc_binary can link.

Bazel 4.2.3 has no CUDA rules and we build offline, so this is a genrule macro calling
/usr/local/cuda/bin/nvcc. It needs no GPU (CI compiles it). One genrule per .cu so that the two
cores here compile in parallel; one more genrule archives the objects.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90a for Hopper (mma.sync today, wgmma later) plus a portable sm_80 build.
NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=sm_80",
    "-Xcompiler",
    "-fPIC",
    "--expt-relaxed-constexpr",
    "-Xptxas=-warn-spills",
    "-I.",
    "-isystem",
    "/usr/local/cuda/include",
]

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files.
      hdrs: C++ headers exported to dependants (must not need nvcc).
      cuda_hdrs: headers only the .cu files include (.cuh).
      deps: cc deps of the resulting library.
      copts: extra nvcc flags.
      **kwargs: passed to cc_library (visibility, tags, ...).
    """
    objs = []
    for src in srcs:
        obj = "_%s_objs/%s.o" % (name, src.replace("/", "_").rsplit(".", 1)[0])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            # A private TMPDIR: in Bazel's sandbox every nvcc runs as pid 2, so its /tmp/tmpxft_00000002_*
            # files from parallel actions collide ("cannot open module id file").
            cmd = "tmp=$$(mktemp -d) && TMPDIR=$$tmp " + " ".join([NVCC] + NVCC_FLAGS + copts + ["-c", "$(location %s)" % src, "-o", "$@"]) +
                  "; rc=$$?; rm -rf $$tmp; exit $$rc",
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.genrule(
        name = name + "_archive",
        srcs = objs,
        outs = ["lib%s_cuda.a" % name],
        cmd = "ar rcs $@ $(SRCS)",
    )
    native.cc_library(
        name = name,
        srcs = ["lib%s_cuda.a" % name],
        hdrs = hdrs,
        deps = deps + ["@system//:cuda"],
        **kwargs
    )
