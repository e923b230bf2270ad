"""Cost models for the guided search: schedule features -> predicted log time (per unit of work).

BoostedTreesCostModel (the default, as TVM's XGBoost tuner and Ansor's cost model are tree ensembles), in numpy:
1. Each feature is cut into at most `bins` quantile bins of the training rows (a histogram split finder: a split
   is "bin <= b", so fitting never sorts per node).
2. Gradient boosting on squared error: start from the weighted mean; each of `trees` rounds fits a depth-`depth`
   regression tree to the residuals, choosing at every node the (feature, bin) split with the largest gain
   G_left^2 / (W_left + lambda) + G_right^2 / (W_right + lambda) - G^2 / (W + lambda) (G: weighted residual sums,
   W: weight sums, lambda = `regularisation`), with at least `min_leaf` weight per side; leaves predict
   G / (W + lambda); the ensemble adds `learning_rate` x each tree.
3. Rows carry weights (a caller may weight some rows up or down; the guided search stacks a prior and a residual
   model instead, ortx.tune.search).
RidgeCostModel: a linear model (closed-form ridge regression) over standardised features, for comparison.
Limits: squared error, not a ranking loss; trees only split on thresholds seen in training (no extrapolation).
"""
from __future__ import annotations

import numpy as np


class RidgeCostModel:
    """Predicted = standardised features . weights + bias, fitted by ridge regression (closed form)."""

    def __init__(self, regularisation: float = 1.0):
        self.regularisation = regularisation
        self._fit = None

    def fit(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None) -> None:
        row_weights = np.ones(len(targets)) if weights is None else np.asarray(weights, np.float64)
        mean = np.average(features, axis=0, weights=row_weights)
        scale = np.sqrt(np.average((features - mean) ** 2, axis=0, weights=row_weights))
        scale[scale == 0] = 1.0
        standard = (features - mean) / scale
        bias = float(np.average(targets, weights=row_weights))
        weighted = standard * row_weights[:, None]
        gram = weighted.T @ standard + self.regularisation * np.eye(standard.shape[1])
        coefficients = np.linalg.solve(gram, weighted.T @ (targets - bias))
        self._fit = (mean, scale, coefficients, bias)

    def predict(self, features: np.ndarray) -> np.ndarray:
        mean, scale, coefficients, bias = self._fit
        return ((features - mean) / scale) @ coefficients + bias


class BoostedTreesCostModel:
    """Gradient-boosted regression trees on binned features (see the module docstring)."""

    def __init__(self, trees: int = 48, depth: int = 4, learning_rate: float = 0.2, min_leaf: float = 2.0,
                 regularisation: float = 1.0, bins: int = 32):
        self.trees = trees
        self.depth = depth
        self.learning_rate = learning_rate
        self.min_leaf = min_leaf
        self.regularisation = regularisation
        self.bins = bins
        self._edges: list[np.ndarray] = []
        self._base = 0.0
        self._forest: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per tree: feature, bin, leaf values

    def _binned(self, features: np.ndarray) -> np.ndarray:
        return np.stack([np.searchsorted(edges, features[:, column], side="left")
                         for column, edges in enumerate(self._edges)], axis=1) if self._edges else \
            np.zeros((len(features), 0), np.int64)

    def fit(self, features: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None) -> None:
        features = np.asarray(features, np.float64)
        targets = np.asarray(targets, np.float64)
        row_weights = np.ones(len(targets)) if weights is None else np.asarray(weights, np.float64)
        quantiles = np.linspace(0, 1, self.bins + 1)[1:-1]
        self._edges = []
        for column in features.T:
            edges = np.unique(np.quantile(column, quantiles, method="lower"))
            self._edges.append(edges[edges < column.max()])  # "bin <= b" splits, each leaving rows on both sides
        binned = self._binned(features)
        self._base = float(np.average(targets, weights=row_weights))
        predicted = np.full(len(targets), self._base)
        self._forest = []
        for _ in range(self.trees):
            tree, fitted = self._grow(binned, targets - predicted, row_weights)
            self._forest.append(tree)
            predicted += self.learning_rate * fitted

    def _grow(self, binned: np.ndarray, residuals: np.ndarray, weights: np.ndarray):
        """One complete tree and its training rows' leaf values, grown a level at a time (one histogram for all
        nodes of a level): node i's children are 2i+1 and 2i+2; a node without a useful split gets feature -1 and
        passes all its rows to its left child, so every tree evaluates in `depth` vector steps."""
        nodes = 2 ** self.depth - 1
        split_feature = np.full(nodes, -1)
        split_bin = np.zeros(nodes, np.int64)
        count, features = binned.shape
        width = self.bins
        cell = (binned + np.arange(features) * width).ravel()  # (feature, bin) per row and feature
        node_of_row = np.zeros(count, np.int64)
        lam = self.regularisation
        for level in range(self.depth):
            first = 2 ** level - 1
            level_nodes = 2 ** level
            keys = np.repeat((node_of_row - first) * features * width, features) + cell
            size = level_nodes * features * width
            gradient = np.bincount(keys, np.repeat(weights * residuals, features), minlength=size)
            mass = np.bincount(keys, np.repeat(weights, features), minlength=size)
            shape = (level_nodes, features, width)
            left_gradient = np.cumsum(gradient.reshape(shape), axis=2)
            left_mass = np.cumsum(mass.reshape(shape), axis=2)
            total_gradient, total_mass = left_gradient[:, :1, -1:], left_mass[:, :1, -1:]
            right_gradient, right_mass = total_gradient - left_gradient, total_mass - left_mass
            gain = (left_gradient ** 2 / (left_mass + lam) + right_gradient ** 2 / (right_mass + lam)
                    - total_gradient ** 2 / (total_mass + lam))  # lam > 0: no division by zero
            gain[(left_mass < self.min_leaf) | (right_mass < self.min_leaf)] = -np.inf
            gain = gain.reshape(level_nodes, -1)
            best = np.argmax(gain, axis=1)
            useful = gain[np.arange(level_nodes), best] > 1e-12
            feature, chosen_bin = np.divmod(best, width)
            split_feature[first:first + level_nodes] = np.where(useful, feature, -1)
            split_bin[first:first + level_nodes] = chosen_bin
            row_feature = split_feature[node_of_row]
            goes_right = (row_feature >= 0) & (binned[np.arange(count), np.maximum(row_feature, 0)]
                                               > split_bin[node_of_row])
            node_of_row = 2 * node_of_row + 1 + goes_right
        leaf_index = node_of_row - nodes
        gradient = np.bincount(leaf_index, weights * residuals, minlength=nodes + 1)
        mass = np.bincount(leaf_index, weights, minlength=nodes + 1)
        values = gradient / (mass + self.regularisation)
        return (split_feature, split_bin, values), values[leaf_index]

    def _apply(self, tree, binned: np.ndarray) -> np.ndarray:
        split_feature, split_bin, values = tree
        node = np.zeros(len(binned), np.int64)
        rows = np.arange(len(binned))
        for _ in range(self.depth):
            feature = split_feature[node]
            goes_right = (feature >= 0) & (binned[rows, np.maximum(feature, 0)] > split_bin[node])
            node = 2 * node + 1 + goes_right
        return values[node - len(split_feature)]

    def predict(self, features: np.ndarray) -> np.ndarray:
        binned = self._binned(np.asarray(features, np.float64))
        predicted = np.full(len(binned), self._base)
        for tree in self._forest:
            predicted += self.learning_rate * self._apply(tree, binned)
        return predicted
