"""How far a run's curves already reach in MLflow, so that a resumed job logs every step once.

A job resumed at step S retrains steps the interrupted attempt may have logged already, so
the launching process reads the last step of each group of curves (:data:`GROUPS`) and the
callback leaves those out. An unreadable store gives no steps: twice is better than never.
"""

from typing import Dict

# Curves logged together, and the metric that says how far each group reaches.
GROUPS = {"step": "train/loss", "epoch": "train/epoch", "eval": "eval/loss"}


def last_logged_steps(tracking_uri: str, run_id: str) -> Dict[str, int]:
    """``{group: last step}`` for each group of :data:`GROUPS` the run has."""
    from mlflow import MlflowClient

    from ms_exp.tracking.recorder import detect_outages_quickly

    detect_outages_quickly()
    client = MlflowClient(tracking_uri)
    steps = {}
    try:
        for group, key in GROUPS.items():
            history = client.get_metric_history(run_id, key)
            if history:
                steps[group] = max(metric.step for metric in history)
    except Exception:  # noqa: BLE001 - see the module's docstring
        return {}
    return steps
