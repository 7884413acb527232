"""What one job's training leaves for the launching process: its final evaluation and
checkpoints. Rank 0 of a distributed job writes it to ``<run dir>/result.json``."""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Optional

RESULT_FILE = "result.json"


@dataclass
class JobResult:
    run_dir: Path
    run_id: Optional[str]
    final_eval: Dict[str, float]
    best_value: Optional[float]  # of best_metric, the eval metric best.ckpt maximises
    last_checkpoint: Optional[Path]
    best_checkpoint: Optional[Path]
    best_metric: str = "accuracy"
    pruned_epoch: Optional[int] = None  # the epoch after which an Optuna study pruned it

    def save(self) -> None:
        """Rank 0 of a distributed job hands its result to the launching process."""
        fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        partial = self.run_dir / (RESULT_FILE + ".partial")
        partial.write_text(json.dumps(fields, indent=2))
        os.replace(partial, self.run_dir / RESULT_FILE)

    @classmethod
    def load(cls, run_dir: Path) -> "JobResult":
        fields = json.loads((Path(run_dir) / RESULT_FILE).read_text())
        for key in ("run_dir", "last_checkpoint", "best_checkpoint"):
            fields[key] = Path(fields[key]) if fields[key] else None
        return cls(**fields)
