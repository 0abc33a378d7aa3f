"""Hyper-parameter tuning: ``rl-lightning tune`` runs an Optuna study whose trials are ordinary fits.

``space`` reads the search space, ``config`` resolves and writes fit configs, ``trial`` runs one trial's seeds as
subprocesses, ``study`` runs workers on a shared storage, ``report`` is the callback a trial's fit reports with.
"""
