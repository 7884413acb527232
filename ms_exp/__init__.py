"""ms_exp: MindSpore training experiments as Hydra-configured, MLflow-tracked runs."""
__version__ = "0.1.0"
