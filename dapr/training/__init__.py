"""Training retrievers with document context: examples from a dataset's judgements (positives,
same-document and mined negatives) and sentence-transformers' trainers to fit them.

This package holds no orchestration: :mod:`dapr.experiment.training` gives it contextualized
passage texts and mining runs, computed and cached like any other step.
"""
