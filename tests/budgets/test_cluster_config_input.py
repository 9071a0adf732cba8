"""Hostile or mistyped cluster configs: a clear ClusterConfigError naming the key, never a
traceback, and the start-up check refuses them (issue 13, section 5)."""

from __future__ import annotations

import pytest

from scheduler.checks import INVALID_CLUSTER_CONFIG, check_cluster_config
from scheduler.foundation.cluster_config import ClusterConfigError, parse_cluster_config, read_cluster_config

TIER = {"user_ids": ["alice"], "budget_limit": 10, "max_band": "batch"}


@pytest.mark.parametrize(
    "document, key, nearest",
    [
        ({"user_budget": [TIER]}, "user_budget", "user_budgets"),
        ({"user_budgets": [{**TIER, "budget_limt": 5}]}, "user_budgets[0].budget_limt", "budget_limit"),
        ({"budget_defaults": {"max_bnad": "batch"}}, "budget_defaults.max_bnad", "max_band"),
        ({"tpu": {"enabeld": True}}, "tpu.enabeld", "enabled"),
    ],
)
def test_an_unknown_key_is_an_error_naming_it_and_the_nearest_known_key(document, key, nearest):
    with pytest.raises(ClusterConfigError) as caught:
        parse_cluster_config(document)
    assert str(caught.value).startswith(f"{key}: unknown key")
    assert f"did you mean {nearest!r}" in str(caught.value)


def test_the_toml_spelling_of_a_mistyped_table_is_refused(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('[[user_budget]]\nuser_ids = ["alice"]\nbudget_limit = 5\nmax_band = "batch"\n')
    with pytest.raises(ClusterConfigError, match="user_budget: unknown key; did you mean 'user_budgets'"):
        read_cluster_config(path)


@pytest.mark.parametrize("limit", [2**63, 10**30])
def test_a_budget_limit_above_the_columns_range_is_a_clear_error(limit):
    with pytest.raises(
        ClusterConfigError, match=r"user_budgets\[0\].budget_limit: at most 1,000,000,000,000,000 points"
    ):
        parse_cluster_config({"user_budgets": [{**TIER, "budget_limit": limit}]})


@pytest.mark.parametrize(
    "user, message",
    [("al\x00ice", "must not contain a NUL"), ("a" * 151, "at most 150 characters"), ("al ice", "is not a user id")],
)
def test_a_user_id_no_account_could_have_is_a_clear_error(user, message):
    with pytest.raises(ClusterConfigError, match=message) as caught:
        parse_cluster_config({"user_budgets": [{**TIER, "user_ids": ["bob", user]}]})
    assert str(caught.value).startswith("user_budgets[0].user_ids[1]:")


@pytest.mark.parametrize(
    "name, text",
    [
        ("deep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n"),
        ("deep.yaml", "x: " + "[" * 5000 + "]" * 5000 + "\n"),
        ("deep_values.toml", "[budget_defaults]\nmax_band = " + "[" * 200 + "]" * 200 + "\n"),
        ("digits.toml", "[budget_defaults]\nbudget_limit = " + "9" * 5000 + "\n"),
    ],
)
def test_deeply_nested_or_absurd_documents_give_a_message_not_a_traceback(tmp_path, name, text, settings):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ClusterConfigError):
        read_cluster_config(path)
    settings.CLUSTER_CONFIG = str(path)
    errors = check_cluster_config()
    assert [e.id for e in errors] == [INVALID_CLUSTER_CONFIG]


@pytest.mark.parametrize("rank", [0, 1, 3, True, "0"])
@pytest.mark.parametrize("name", ["cluster.yaml", "cluster.toml"])
def test_a_band_given_as_a_number_is_refused_as_the_api_refuses_it(tmp_path, name, rank):
    path = tmp_path / name
    value = f'"{rank}"' if isinstance(rank, str) else str(rank).lower()
    if name.endswith(".yaml"):
        path.write_text(f"user_budgets:\n  - user_ids: [alice]\n    budget_limit: 10\n    max_band: {value}\n")
    else:
        path.write_text(f'[[user_budgets]]\nuser_ids = ["alice"]\nbudget_limit = 10\nmax_band = {value}\n')

    with pytest.raises(ClusterConfigError, match=r"user_budgets\[0\].max_band: expected a band name"):
        read_cluster_config(path)
