"""Facts about the machine a benchmark ran on, for its JSON output."""
import os
import platform

import torch


def machine_info() -> dict:
    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(), "cpu_model": cpu_model,
            "torch_threads": torch.get_num_threads()}
