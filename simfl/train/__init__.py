"""Numerics (torch only, never SimPy): models, local training, evaluation."""

from simfl.train.batched import CohortResult, TrainHParams, train_cohort
from simfl.train.evaluate import CohortEval, evaluate_cohort
from simfl.train.models import ParamLayout, build_model, initial_params

__all__ = [
    "CohortEval",
    "CohortResult",
    "ParamLayout",
    "TrainHParams",
    "build_model",
    "evaluate_cohort",
    "initial_params",
    "train_cohort",
]
