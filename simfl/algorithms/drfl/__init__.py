"""DRFL: distributionally robust federated learning by ADMM (Bai, Wong, Qiao, Ho 2025).

losses (linear models, Wasserstein worst case), projections (ℓp ball, prox of a norm),
problem (problem (4) and its direct convex solution), lpmm (the paper's Algorithm 1 as
printed), admm (simfl's linearised ADMM, which the study runs), baselines
(ERM, AFL, DRFA, WAFL), engine (iterations on the device population) and experiment
(the breast-cancer noise study; its figures are simfl/plots/drfl.py). Needs the ``drfl``
extra (cvxpy, scikit-learn).
"""
