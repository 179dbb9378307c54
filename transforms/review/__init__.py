"""Human review: export batches, Label Studio round trip, import + consensus, agreement statistics.

Nothing heavy is imported here: statsmodels, scikit-learn, krippendorff and label-studio-sdk load
inside the functions that need them.
"""
