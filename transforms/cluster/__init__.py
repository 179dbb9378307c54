"""Clustering of label strings: k-means sweeps with an elbow choice (sklearn or cuML) and the stages
that cluster a category's labels and gather each cluster into one row (issue 13, step 2)."""
