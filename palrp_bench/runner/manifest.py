"""What a run was made with: git commit, library versions, hardware (docs/design.md section 6, "Tidy CSV": the
manifest)."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

#: distributions whose versions every manifest records (missing ones are recorded as None)
TRACKED_PACKAGES = ("palrp-bench", "torch", "transformers", "timm", "bitsandbytes", "accelerate", "numpy", "pandas",
                    "scipy", "datasets", "hydra-core", "omegaconf", "submitit", "hydra-submitit-launcher")


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(path: Path | None = None) -> dict:
    """Commit and dirtiness of the source checkout the package was imported from (None outside git)."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    commit = run("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def hardware() -> dict:
    info = {"host": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "cuda_devices": []}
    try:
        import torch

        if torch.cuda.is_available():
            info["cuda_devices"] = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]
            info["cuda"] = torch.version.cuda
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        pass
    return info


def environment() -> dict:
    """Everything above in one record, plus the command line."""
    return {"git": git_state(), "versions": library_versions(), "hardware": hardware(), "argv": list(sys.argv)}
