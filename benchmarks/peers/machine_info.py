#!/usr/bin/env python3
"""What a measurement ran on, for scripts/compare.sh's machine.json: the CPU
model, cores and vector flags, Strata's build line, and the paths PyTorch
takes on this machine: its build (torch.__config__), the BLAS library it
loads, and the oneDNN kernels one convolution step runs (ONEDNN_VERBOSE=1).

    machine_info.py [--strata-train PATH] [--json OUT]    (prints JSON)
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys

FLAGS = ["avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "amx_tile", "amx_bf16"]

# One step of W4's second convolution (32 -> 64 channels, 3x3, 14x14) and of a
# Linear layer, in a process of its own with oneDNN's log on: its "exec" lines
# name the kernel each primitive ran.
ONEDNN_PROBE = r"""
import torch
torch.manual_seed(0)
conv = torch.nn.Conv2d(32, 64, 3, padding=1)
x = torch.randn(16, 32, 14, 14, requires_grad=True)
conv(x).sum().backward()
lin = torch.nn.Linear(256, 256)
lin(torch.randn(16, 256)).sum().backward()
"""


def cpu():
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model in ("", "unknown", platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, [f for f in FLAGS if f in flags]


def strata_build(train):
    if not train or not os.path.exists(train):
        return None
    r = subprocess.run([train, "--version"], capture_output=True, text=True)
    lines = [line.strip() for line in r.stdout.splitlines()]
    return {"version": lines[0] if lines else None,
            "gemm": next((line for line in lines if line.startswith("GEMM")), None),
            "kokkos": next((line for line in lines if line.startswith("Kokkos")), None)}


def torch_paths():
    try:
        import torch
    except Exception as e:  # no peer here
        return {"error": f"no PyTorch: {e}"}
    cfg = torch.__config__.show()
    out = {"version": torch.__version__,
           "onednn": (re.search(r"MKL-DNN v(\S+)", cfg) or re.search(r"oneDNN v(\S+)", cfg) or [None, None])[1],
           "cpu_capability": (re.search(r"CPU capability usage: (\S+)", cfg) or [None, None])[1],
           "blas_info": (re.search(r"BLAS_INFO=([^,]+)", cfg) or [None, None])[1],
           "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
           "threads": torch.get_num_threads()}
    # The BLAS library torch_cpu loads (Debian: the libblas.so.3 alternative).
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
        blas = [line.split("=>")[1].split("(")[0].strip() for line in ldd.splitlines()
                if "=>" in line and re.search(r"lib(open)?blas|mkl", line)]
        out["blas_library"] = sorted({os.path.realpath(b) for b in blas if b})
    except OSError:
        out["blas_library"] = None
    # The oneDNN kernels of one convolution step.
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", ONEDNN_PROBE], capture_output=True, text=True, env=env)
    kernels = set()
    for line in r.stdout.splitlines():
        parts = line.split(",")
        if len(parts) > 6 and parts[0].endswith("_verbose") and parts[1] == "exec":
            kernels.add(f"{parts[3]}:{parts[4]}")  # primitive:implementation
    out["onednn_kernels"] = sorted(kernels) if kernels else "none logged (oneDNN not used for these layers)"
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata-train", help="the strata-train whose build to name")
    p.add_argument("--json", help="write the JSON here too")
    a = p.parse_args()
    model, flags = cpu()
    info = {"cpu": model, "host_cores": os.cpu_count(), "cpu_flags": flags,
            "kernel": platform.release(), "python": platform.python_version(),
            "strata": strata_build(a.strata_train), "torch": torch_paths()}
    text = json.dumps(info, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
