"""Rehearsal stand-in: cuML's NearestNeighbors interface, computed by scikit-learn on the CPU."""

from sklearn.neighbors import NearestNeighbors

__all__ = ["NearestNeighbors"]
