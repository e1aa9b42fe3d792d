"""The paper's published numbers (``results/paper/*.csv``: table, model, task, method, variant, metric, value,
higher_is_better), PROTOCOL.md section 6."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import BadInputError, MissingDataError

PUBLISHED_COLUMNS = ["table", "model", "task", "method", "variant", "metric", "value", "higher_is_better"]


def default_paper_dir() -> Path:
    """``results/paper`` of the source checkout the package runs from, else of the working directory."""
    checkout = Path(__file__).resolve().parents[2] / "results" / "paper"
    return checkout if checkout.is_dir() else Path.cwd() / "results" / "paper"


def load_published(paper_dir: str | Path | None = None) -> pd.DataFrame:
    """All published numbers in one frame (empty frame with a warning-free shape when the folder is absent)."""
    folder = Path(paper_dir) if paper_dir is not None else default_paper_dir()
    if not folder.is_dir():
        if paper_dir is not None:
            raise MissingDataError(f"published-results folder {folder} does not exist",
                                   "pass the results/paper folder of the palrp-bench checkout (--paper-dir)")
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)
    frames = []
    for path in sorted(folder.glob("*.csv")):
        df = pd.read_csv(path, dtype={"higher_is_better": "string"})
        missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
        if missing:
            raise BadInputError(f"{path} lacks columns {', '.join(missing)}",
                                f"published CSVs need the columns {', '.join(PUBLISHED_COLUMNS)}")
        frames.append(df[PUBLISHED_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    hib = out["higher_is_better"].str.lower()
    out["higher_is_better"] = hib.map({"true": True, "false": False}).astype(object)
    out["variant"] = out["variant"].astype(str)
    return out
