"""ortx.tune.cost_model: the boosted trees learn a non-linear cost a linear model cannot, respect row weights,
and are deterministic."""
import numpy as np

from ortx.tune.cost_model import BoostedTreesCostModel, RidgeCostModel


def spearman(first, second) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(first)), np.argsort(np.argsort(second)))[0, 1])


def cost(features):
    # A bowl in one feature, an interaction (a kink that only matters past a threshold) and a step: the shapes of
    # cache-footprint and register-pressure effects.
    return (4 * (features[:, 0] - 0.6) ** 2 + 2 * (features[:, 1] > 0.5) * features[:, 2]
            + 0.5 * (features[:, 3] > 0.3))


def test_trees_rank_a_non_linear_cost_better_than_ridge():
    rng = np.random.default_rng(0)
    train, test = rng.uniform(0, 1, (300, 12)), rng.uniform(0, 1, (1000, 12))
    trees, ridge = BoostedTreesCostModel(), RidgeCostModel()
    trees.fit(train, cost(train))
    ridge.fit(train, cost(train))
    assert spearman(trees.predict(test), cost(test)) > 0.9
    assert spearman(trees.predict(test), cost(test)) > spearman(ridge.predict(test), cost(test)) + 0.1


def test_rows_of_weight_zero_teach_nothing():
    rng = np.random.default_rng(1)
    features = rng.uniform(0, 1, (200, 4))
    noise = rng.uniform(-5, 5, 200)
    weights = np.r_[np.ones(100), np.zeros(100)]
    weighted = BoostedTreesCostModel(min_leaf=1.0)
    weighted.fit(features, np.r_[cost(features[:100]), noise[100:]], weights)
    clean = BoostedTreesCostModel(min_leaf=1.0)
    clean.fit(features[:100], cost(features[:100]))
    probe = rng.uniform(0, 1, (300, 4))
    assert spearman(weighted.predict(probe), cost(probe)) > 0.8
    assert abs(spearman(weighted.predict(probe), cost(probe)) - spearman(clean.predict(probe), cost(probe))) < 0.1


def test_fitting_is_deterministic_and_constant_features_are_harmless():
    rng = np.random.default_rng(2)
    features = np.c_[rng.uniform(0, 1, (50, 3)), np.ones(50)]
    first, second = BoostedTreesCostModel(), BoostedTreesCostModel()
    first.fit(features, cost(features))
    second.fit(features, cost(features))
    assert np.array_equal(first.predict(features), second.predict(features))
    assert np.all(np.isfinite(first.predict(features)))
