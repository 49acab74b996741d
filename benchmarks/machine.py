"""Facts about the machine a benchmark ran on, for its JSON output."""
import os
import platform

import torch


# the flags that decide which matrix kernels a CPU can run (bf16 autocast uses AMX / AVX512-BF16)
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def machine_info() -> dict:
    cpu_model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not cpu_model:
                    cpu_model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(), "cpu_model": cpu_model,
            "cpu_kernel_flags": [flag for flag in KERNEL_FLAGS if flag in flags],
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}
