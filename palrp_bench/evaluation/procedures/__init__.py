"""The evaluation procedures a cell runs on every sample (config group ``metric``): each module drives a model through
one protocol and turns the outcomes into per-sample rows for the metric functions (docs/evaluation.md)."""
