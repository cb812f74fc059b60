#!/usr/bin/env python3
"""ptxas's report on vlanode's kernels, compiled as the cuda backend compiles them.

A developer's tool for the GPU machine (Python and the CUDA toolkit's NVRTC,
outside vlanode): it assembles cuda/kernels as cuda/kernels.go does (common.cuh,
then every .cu file in name order, each after a #line directive), compiles the
program with NVRTC for an architecture (sm_90a unless --arch says otherwise)
and --ptxas-options=-v, and prints what ptxas says of the kernels whose name
holds --match: registers, spills, and warnings such as wgmma serialization
(bench/results/cuda-kernels.md, run 17).

    python3 scripts/ptxas/report.py --match vla_flash_wg [--arch sm_90a] [--log FILE]
"""
import argparse
import ctypes
import glob
import os
import sys


def find_nvrtc():
    """The newest libnvrtc.so under /usr/local/cuda* (or $VLA_NVRTC)."""
    if os.environ.get("VLA_NVRTC"):
        return os.environ["VLA_NVRTC"]
    libs = sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*") +
                  glob.glob("/usr/local/cuda*/targets/*/lib/libnvrtc.so*"))
    libs = [p for p in libs if "builtins" not in p]
    if not libs:
        sys.exit("ptxas report: no libnvrtc.so under /usr/local/cuda* (set VLA_NVRTC)")
    return libs[-1]


def kernel_source(root):
    """The program as cuda/kernels.go's kernelSource assembles it."""
    kdir = os.path.join(root, "cuda", "kernels")
    names = ["common.cuh"] + sorted(os.path.basename(p) for p in glob.glob(os.path.join(kdir, "*.cu")))
    parts = []
    for n in names:
        with open(os.path.join(kdir, n)) as f:
            parts.append('#line 1 "%s"\n%s\n' % (n, f.read()))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--match", default="", help="report the kernels whose name holds this")
    ap.add_argument("--log", help="write NVRTC's whole log here")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lib = ctypes.CDLL(find_nvrtc())
    prog = ctypes.c_void_p()
    src = kernel_source(root).encode()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"vlanode_kernels.cu", 0, None, None) != 0:
        sys.exit("ptxas report: nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=" + args.arch.encode(), b"--std=c++17", b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if args.log:
        with open(args.log, "w") as f:
            f.write(log)
    if rc != 0:
        sys.exit("ptxas report: compilation failed (status %d):\n%s" % (rc, log[:4000]))
    # ptxas reports a function as "Compiling entry function 'NAME'" then its
    # properties; warnings name it inline.
    current, seen = None, set()
    for line in log.splitlines():
        if "Compiling entry function" in line:
            current = line.split("'")[1] if "'" in line else None
            continue
        inline = args.match and args.match in line and "C75" in line
        ours = current is not None and args.match in current and ("Used" in line or "spill" in line)
        if (inline or ours) and line not in seen:
            seen.add(line)
            print(("%s: " % current if ours else "") + line.strip())


if __name__ == "__main__":
    main()
