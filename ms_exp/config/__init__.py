"""The bottom layer every stage reads: the typed schemas of the config groups, the
one-line config errors, and a run's saved config read back. No Hydra composing, no
MindSpore."""
