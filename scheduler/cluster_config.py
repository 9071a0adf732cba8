"""The cluster config file: budget defaults and user budget tiers.

The file is TOML (``.toml``) or YAML (``.yaml``/``.yml``); its path comes from
``IRIS_CLUSTER_CONFIG``. With no file, the defaults are Iris's: limit 1000, max band INTERACTIVE.
Parsing is strict: an invalid tier raises :class:`ClusterConfigError` naming the tier and the
field, and start-up stops there rather than run with a budget nobody meant.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml
from django.conf import settings

from scheduler.core.bands import Band
from scheduler.core.types import BudgetDefaults


class ClusterConfigError(ValueError):
    """The cluster config is invalid; the message names where."""


@dataclass(frozen=True)
class BudgetTier:
    user_ids: tuple[str, ...]
    budget_limit: int
    max_band: Band


@dataclass(frozen=True)
class ClusterConfig:
    budget_defaults: BudgetDefaults = field(default_factory=BudgetDefaults)
    user_budgets: tuple[BudgetTier, ...] = ()
    source: str = "built-in defaults"


def _limit(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ClusterConfigError(f"{where}.budget_limit: expected a non-negative integer, got {value!r}")
    return value


def _band(value: object, where: str) -> Band:
    try:
        return Band.parse(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ClusterConfigError(f"{where}.max_band: {exc}") from None


def parse_cluster_config(data: object, source: str = "<memory>") -> ClusterConfig:
    """Validate a parsed config document."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ClusterConfigError(f"{source}: expected a mapping at the top level")
    raw_defaults = data.get("budget_defaults") or {}
    if not isinstance(raw_defaults, dict):
        raise ClusterConfigError("budget_defaults: expected a mapping")
    defaults = BudgetDefaults(
        budget_limit=_limit(raw_defaults.get("budget_limit", 1000), "budget_defaults"),
        max_band=_band(raw_defaults.get("max_band", "interactive"), "budget_defaults"),
    )
    tiers = []
    raw_tiers = data.get("user_budgets") or []
    if not isinstance(raw_tiers, list):
        raise ClusterConfigError("user_budgets: expected a list of tiers")
    for i, raw in enumerate(raw_tiers):
        where = f"user_budgets[{i}]"
        if not isinstance(raw, dict):
            raise ClusterConfigError(f"{where}: expected a mapping")
        user_ids = raw.get("user_ids")
        if not isinstance(user_ids, list) or not user_ids:
            raise ClusterConfigError(f"{where}.user_ids: expected a non-empty list of user ids")
        for j, user in enumerate(user_ids):
            if not isinstance(user, str) or not user.strip():
                raise ClusterConfigError(f"{where}.user_ids[{j}]: empty user id")
        if "budget_limit" not in raw:
            raise ClusterConfigError(f"{where}.budget_limit: missing")
        if "max_band" not in raw:
            raise ClusterConfigError(f"{where}.max_band: missing")
        tiers.append(
            BudgetTier(
                user_ids=tuple(u.strip() for u in user_ids),
                budget_limit=_limit(raw["budget_limit"], where),
                max_band=_band(raw["max_band"], where),
            )
        )
    return ClusterConfig(budget_defaults=defaults, user_budgets=tuple(tiers), source=source)


def read_cluster_config(path: str | Path) -> ClusterConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterConfigError(f"cannot read cluster config {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(text)
        else:
            raise ClusterConfigError(f"{path}: cluster config must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ClusterConfigError(f"{path}: {exc}") from None
    return parse_cluster_config(data, source=str(path))


@lru_cache(maxsize=1)
def _cached(path: str) -> ClusterConfig:
    return read_cluster_config(path) if path else ClusterConfig()


def cluster_config() -> ClusterConfig:
    """The configured cluster config, read once per process."""
    return _cached(settings.CLUSTER_CONFIG)
